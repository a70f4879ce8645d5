#!/usr/bin/env bash
# Issue #17's acceptance on the GPU: a Hugging Face LlamaForCausalLM + PEFT
# LoRA trained 100 steps by Kiln and by PyTorch+PEFT from the same weights,
# the same adapter init (PEFT's own) and the same batches, bf16; the loss
# curves within 1%; then the adapter directory Kiln saves loads in PEFT and
# reproduces Kiln's loss computed with those adapters within 1e-3 (relative).
#
#   scripts/gpu-hf-peft-check.sh prepare [DIR]   # compiler machine (kiln, torch,
#                                                # transformers, onnxscript)
#   scripts/gpu-hf-peft-check.sh run [DIR]       # GPU machine (torch, transformers,
#                                                # peft; DIR/step.kiln carried)
#
# The model is bench/configs.py's "curve" config as transformers' Llama
# (bench/hf_peft.py: 4 layers, hidden 256, 8 heads / 4 kv, FFN 688, vocab
# 4096, sdpa; batch 8, seq 128), LoRA r 16, alpha 32 on q,k,v,o,gate,up,down,
# no dropout; AdamW lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01.
#
# prepare: DIR/config.json (hf_peft.py config), scripts/export_hf.py on it
#   (random init: only the graph is used), kiln compile --emit=artifact ->
#   DIR/step.kiln (about 2 MB; DIR defaults to bench/out/hf-peft, git-ignored).
# run: (1) hf_peft.py init: the weights from seed 0 (model.safetensors, HF
#   names) and PEFT's LoRA init (init_adapters/, save_pretrained) made there;
#   (2) the Markov token stream (vocab 4096, 2^20 tokens, seed 0);
#   (3) PyTorch+PEFT, 100 steps on kiln-run's windows (hf_peft.py train);
#   (4) kiln-run train --weights model.safetensors --adapters init_adapters,
#   100 steps, --save ckpt --save-adapters kiln_adapters;
#   (5) loss_curve.py compare: every step within 1%;
#   (6) kiln-run train --resume ckpt --steps 1: its step-101 loss is the
#   forward with the adapters after step 100, exactly what kiln_adapters
#   holds (a step's logged loss is computed before its update, so step
#   100's loss used the adapters after step 99);
#   (7) hf_peft.py eval: PeftModel.from_pretrained(base, kiln_adapters) on
#   step 101's windows reproduces that loss within 1e-3; it also checks that
#   kiln_adapters equals the checkpoint's params exactly, prints kiln-run's
#   loss of the same adapter files on the same batch (--adapters kiln_adapters
#   --input step 101's windows: like with like, no checkpoint involved) and
#   the bf16 noise floor (PEFT bf16 against PEFT fp32 on those adapters).
# Reading the reload lines: same-batch kiln == resumed kiln and PEFT far off
# -> Kiln's GPU forward of non-zero adapters differs from PEFT's (the CPU
# interpreter agrees with PEFT: test/HF/peft-roundtrip.test); same-batch
# kiln == PEFT but != resumed -> the checkpoint/resume path; a checkpoint
# MISMATCH -> --save-adapters wrote other tensors than the step trained.
# Prints PASS or FAIL per part and at the end; exit 0 only if all pass.
# About a minute on the H200 with kiln-run carried (plus ~2 min when it is
# built there). Logs and JSON go to DIR/results and to $OUT when set.
#
# Environment: KILN (build/bin/kiln), KILN_RUN (build-rt's kiln-run, built
# when missing or not runnable), HF_PEFT_STEPS (100), HF_PEFT_TOLERANCE
# (0.01), HF_PEFT_RELOAD_TOLERANCE (1e-3), HF_PEFT_DEVICE (cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
dir=${2:-bench/out/hf-peft}
config=curve
adamw=adamw:lr=1e-3,weight_decay=0.01,betas=0.9/0.999,eps=1e-8
case "$mode" in
prepare)
  kiln=${KILN:-build/bin/kiln}
  mkdir -p "$dir"
  python3 bench/hf_peft.py config --config $config -o "$dir/config.json"
  python3 scripts/export_hf.py "$dir/config.json" --out "$dir/export"
  lora=$(python3 -c 'import sys; sys.path.insert(0, "bench")
from configs import CONFIGS; from hf_peft import kiln_lora_spec; print(kiln_lora_spec(CONFIGS["curve"]))')
  "$kiln" compile "$dir/export/model.onnx" --lora "$lora" --precision=bf16 \
    --optimizer "$adamw" --arch=sm_90,sm_80 --emit=artifact -o "$dir/step.kiln"
  # The weights are made on the GPU machine from the same seed: they stay here.
  rm -f "$dir/export/model.safetensors" "$dir/export/model.onnx.data"
  find "$dir/export" -name model.onnx -size +4M -delete
  echo "prepared $dir/step.kiln: carry it (and build-rt/tools/kiln-run/kiln-run) to the GPU machine"
  ;;
run)
  steps=${HF_PEFT_STEPS:-100}
  tolerance=${HF_PEFT_TOLERANCE:-0.01}
  reload_tolerance=${HF_PEFT_RELOAD_TOLERANCE:-1e-3}
  device=${HF_PEFT_DEVICE:-cuda}
  [ -f "$dir/step.kiln" ] || { echo "gpu-hf-peft-check: $dir/step.kiln is missing (run 'prepare' on the compiler machine)" >&2; exit 2; }
  kiln_run=${KILN_RUN:-build-rt/tools/kiln-run/kiln-run}
  if [ -z "${KILN_RUN:-}" ] && ! "$kiln_run" --version >/dev/null 2>&1; then
    [ -f build-rt/build.ninja ] || cmake -S runtime -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    ninja -C build-rt kiln-run >/dev/null
  fi
  source scripts/cudnn-path.sh
  results=$dir/results
  rm -rf "$results" && mkdir -p "$results"
  read -r batch seq vocab < <(python3 -c 'import sys; sys.path.insert(0, "bench")
from configs import CONFIGS; c = CONFIGS["curve"]; print(c.batch, c.seq, c.vocab)')

  echo "== weights and PEFT's initial adapters (seed 0)"
  python3 bench/hf_peft.py init --config $config --seed 0 --out "$results"
  python3 - "$results/tokens.bin" "$vocab" <<'PY'
import sys
sys.path.insert(0, "bench")
from tokens import markov_tokens, write_tokens
write_tokens(sys.argv[1], markov_tokens(int(sys.argv[2]), 1 << 20, 0), int(sys.argv[2]))
PY
  common=(--weights "$results/model.safetensors" --data "$results/tokens.bin" --token-dtype uint16
          --batch "$batch" --seq "$seq" --seed 0 --lr 1e-3 --log-every 1 --progress off)

  echo "== PyTorch + PEFT, $steps steps"
  python3 bench/hf_peft.py train --config $config --dir "$results" --data "$results/tokens.bin" \
    --steps "$steps" --device "$device" --json "$results/pytorch.json" \
    --save-adapters "$results/pytorch_adapters" | tee "$results/pytorch.log"

  set +e
  echo "== Kiln from PEFT's init, $steps steps"
  "$kiln_run" train "$dir/step.kiln" "${common[@]}" --adapters "$results/init_adapters" \
    --steps "$steps" --save "$results/ckpt.safetensors" \
    --save-adapters "$results/kiln_adapters" 2>&1 | tee "$results/kiln.log"
  kiln_rc=${PIPESTATUS[0]}

  echo "== Loss curves (tolerance $tolerance)"
  python3 bench/loss_curve.py compare --kiln "$results/kiln.log" --pytorch "$results/pytorch.json" \
    --tolerance "$tolerance" --steps "$steps" \
    --kiln-adapters "$results/kiln_adapters" --pytorch-adapters "$results/pytorch_adapters" |
    tee "$results/compare.txt"
  curve_rc=${PIPESTATUS[0]}

  last=$((steps + 1))
  echo "== Kiln's loss with its saved adapters (step $last, resumed from step $steps)"
  "$kiln_run" train "$dir/step.kiln" "${common[@]}" --resume "$results/ckpt.safetensors" \
    --steps 1 2>&1 | tee "$results/kiln-eval.log"
  eval_rc=${PIPESTATUS[0]}

  echo "== The same adapter files and batch in kiln-run (--adapters kiln_adapters, --input: step $last's windows)"
  python3 bench/hf_peft.py window --config $config --data "$results/tokens.bin" --step "$last" \
    --out "$results/window"
  "$kiln_run" train "$dir/step.kiln" --weights "$results/model.safetensors" --batch "$batch" \
    --seq "$seq" --seed 0 --lr 1e-3 --log-every 1 --progress off --steps 1 \
    --adapters "$results/kiln_adapters" --input input_ids="$results/window/input_ids.bin" \
    --input labels="$results/window/labels.bin" 2>&1 | tee "$results/kiln-same-batch.log"

  echo "== PEFT loads Kiln's adapters (tolerance $reload_tolerance, relative)"
  python3 bench/hf_peft.py eval --config $config --weights "$results/model.safetensors" \
    --adapters "$results/kiln_adapters" --data "$results/tokens.bin" --step "$last" \
    --kiln "$results/kiln-eval.log" --tolerance "$reload_tolerance" --device "$device" \
    --checkpoint "$results/ckpt.safetensors" --same-batch-kiln "$results/kiln-same-batch.log" \
    --noise-floor | tee "$results/reload.txt"
  reload_rc=${PIPESTATUS[0]}
  set -e
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    cp "$results"/*.log "$results"/*.json "$results"/*.txt "$OUT"/
  fi
  verdict() { [ "$1" = 0 ] && echo PASS || echo "FAIL (exit $1)"; }
  echo "== Summary"
  echo "kiln-run $steps steps from PEFT's init: $(verdict "$kiln_rc")"
  echo "loss curve within $tolerance of PyTorch+PEFT: $(verdict "$curve_rc")"
  echo "kiln-run step $last from the checkpoint: $(verdict "$eval_rc")"
  echo "PEFT reloads Kiln's adapters, loss within $reload_tolerance: $(verdict "$reload_rc")"
  if [ "$kiln_rc$curve_rc$eval_rc$reload_rc" = 0000 ]; then echo PASS; else echo FAIL; exit 1; fi
  ;;
*)
  echo "usage: scripts/gpu-hf-peft-check.sh prepare|run [DIR]" >&2
  exit 2
  ;;
esac
