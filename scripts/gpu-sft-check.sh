#!/usr/bin/env bash
# Supervised fine-tuning on packed documents with masked prompts, Kiln
# against PyTorch + PEFT (issue #19's acceptance), in two halves:
#
#   scripts/gpu-sft-check.sh prepare [OUT]   # CPU machine: a kiln build, torch,
#                                            # transformers, onnx, onnxscript
#   scripts/gpu-sft-check.sh run [OUT]       # GPU machine: CUDA toolkit, cmake,
#                                            # torch, transformers, peft, numpy
#
# `prepare` writes a small random Llama config (4 layers, hidden 256, 8
# heads / 4 kv, vocab 2048), exports it with scripts/export_hf.py
# --position-ids (packed documents attend only to themselves), makes
# synthetic SFT data (a random prompt, its reversal as the completion; the
# prompt carries no loss) as train/eval datasets (scripts/kiln_dataset.py),
# and compiles a bf16 LoRA step (r=16, alpha=32, no dropout, AdamW) into
# OUT (default build-sftcheck/, git-ignored, a few MiB: carry it).
#
# `prepare` also runs the step on the first packed micro-batch in `kiln
# interp` (OUT/batch0-interp.txt, when build-rt's kiln-run is there for the
# dump); `run` then prints step 1 on exactly that micro-batch three ways —
# kiln-run with it as --input, PyTorch+PEFT (sft_reference.py loss) and the
# interpreter — which must agree within bf16 noise (~1e-4) before the curves
# can (2026-12-01: kiln-run's step 1 from --data was 7.6354, PyTorch's on
# the dump 7.6587, the interpreter's 7.6588: see docs/gpu-validation.md).
#
# `run` builds the runtime, prints data-stats, dumps the 100 packed
# micro-batches kiln-run trains on (data-stats --dump: the same source,
# seed and order) and the eval set's, writes Kiln's initial adapters
# (--steps 0 --save-adapters), trains PyTorch + PEFT from them on exactly
# those batches (sft_reference.py pytorch: bf16 autocast, AdamW, cosine
# schedule with 10 warmup steps, eval every 20 on the first 8 eval
# micro-batches), then kiln-run for 100 steps
# with the same schedule and eval, and compares: every step's loss within
# 1% (and the eval losses and learning rates where kiln-run's --log-file
# records them). Results (logs, JSON, and the loss-curve picture kiln-run
# writes beside its log file) go to OUT/results and to $OUT when set.
#
# The loop flags (kiln compile --loop-programs; kiln-run train
# --lr-schedule/--warmup, --eval-data/--eval-every/--eval-batches,
# --log-file) belong to the loop half of issue #19 (branch sft-loop): on a
# tree without them set SFT_COMPILE_FLAGS= and SFT_LOOP_FLAGS= (and
# SFT_SCHEDULE=constant SFT_WARMUP=0, so PyTorch runs the same constant lr).
# Environment: KILN (build/bin/kiln), SFT_STEPS (100), SFT_LR (2e-4),
# SFT_WARMUP (10), SFT_EVAL_EVERY (20), SFT_EVAL_BATCHES (8), SFT_BATCH (4),
# SFT_SEQ (256), SFT_TOLERANCE (0.01), SFT_SCHEDULE (cosine | constant),
# SFT_COMPILE_FLAGS (--loop-programs), SFT_LOOP_FLAGS (the flags above),
# SFT_HIDDEN/SFT_INTERMEDIATE/SFT_LAYERS/SFT_HEADS/SFT_KV_HEADS (256/688/4/8/4),
# SFT_ATTENTION (kiln-run train --attention: sm90 runs the packed documents'
# masked attention on Kiln's sm_90a kernel; it needs head dim 64 or 128),
# KILN_RUN (run: a prebuilt kiln-run instead of building runtime/).
#
# Where the compiler machine has no torch: `export [OUT]` on the GPU
# machine writes OUT/config and OUT/export; carry OUT/export/model.onnx and
# OUT/config back, `prepare` keeps them, and `run` remakes the weights
# (model.safetensors: the same config and seed give the same bytes).
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
out=${2:-build-sftcheck}
steps=${SFT_STEPS:-100}
lr=${SFT_LR:-2e-4}
warmup=${SFT_WARMUP:-10}
eval_every=${SFT_EVAL_EVERY:-20}
eval_batches=${SFT_EVAL_BATCHES:-8}
compile_flags=${SFT_COMPILE_FLAGS---loop-programs}
batch=${SFT_BATCH:-4}
seq=${SFT_SEQ:-256}
tolerance=${SFT_TOLERANCE:-0.01}
schedule=${SFT_SCHEDULE:-cosine}
# The model: a random Llama (SFT_HIDDEN etc.; the default head dim 32, SFT_HIDDEN=512
# gives 64, which Kiln's sm_90a attention takes) exported with position ids.
export_model() {
  mkdir -p "$out/config"
  python3 - "$out/config" "${SFT_HIDDEN:-256}" "${SFT_INTERMEDIATE:-688}" "${SFT_LAYERS:-4}" \
    "${SFT_HEADS:-8}" "${SFT_KV_HEADS:-4}" <<'PY'
import sys
import transformers
hidden, inter, layers, heads, kv = (int(a) for a in sys.argv[2:])
transformers.LlamaConfig(vocab_size=2048, hidden_size=hidden, intermediate_size=inter,
                         num_hidden_layers=layers, num_attention_heads=heads,
                         num_key_value_heads=kv, max_position_embeddings=1024,
                         tie_word_embeddings=False).save_pretrained(sys.argv[1])
PY
  python3 scripts/export_hf.py "$out/config/config.json" --out "$out/export" --position-ids
  cp "$out/config/config.json" "$out/export/config.json"
  # Big initializers beside the graph: model.onnx alone (shapes, small
  # constants) is what kiln compile needs, and small enough to carry.
  python3 - "$out/export/model.onnx" <<'PY'
import os, sys, onnx
path = sys.argv[1]
graph = onnx.load(path)
for f in os.listdir(os.path.dirname(path)):
    if f.startswith("model.onnx") and f != "model.onnx":
        os.remove(os.path.join(os.path.dirname(path), f))
onnx.save(graph, path, save_as_external_data=True, all_tensors_to_one_file=True,
          location="model.onnx.data", size_threshold=4096)
PY
}
attention=()
[ -n "${SFT_ATTENTION:-}" ] && attention=(--attention "$SFT_ATTENTION")
case "$mode" in
export)
  export_model
  ;;
prepare)
  kiln=${KILN:-build/bin/kiln}
  if [ -f "$out/export/model.onnx" ] && [ -f "$out/config/config.json" ]; then
    # An export made where torch is (`export`): keep it, redo the rest.
    find "$out" -mindepth 1 -maxdepth 1 ! -name export ! -name config -exec rm -rf {} +
  else
    rm -rf "$out" && export_model
  fi
  python3 scripts/sft_reference.py make-data --out "$out/data" --vocab 2048
  python3 scripts/kiln_dataset.py "$out/data/train.jsonl" -o "$out/train.kdocs" --vocab-size 2048
  python3 scripts/kiln_dataset.py "$out/data/eval.jsonl" -o "$out/eval.kdocs" --vocab-size 2048
  "$kiln" compile "$out/export/model.onnx" --lora=r=16,alpha=32,dropout=0 --precision=bf16 \
    --optimizer=adamw:lr=$lr,weight_decay=0,betas=0.9/0.999,eps=1e-8 \
    $compile_flags --emit=artifact --arch=sm_90 -o "$out/step.kiln"
  # The CPU reference of step 1 on micro-batch 0 (packed, as kiln-run's
  # --batching pack --seed 0 draws it): the same step in the interpreter.
  kiln_run_cpu=${KILN_RUN:-build-rt/tools/kiln-run/kiln-run}
  if [ -x "$kiln_run_cpu" ]; then
    mkdir -p "$out/batch0"
    "$kiln_run_cpu" data-stats "$out/train.kdocs" --batch "$batch" --seq "$seq" --batching pack \
      --seed 0 --dump "$out/batch0" --count 1 >/dev/null
    python3 - "$out/batch0" "$batch" "$seq" <<'PY'
import sys, numpy as np, onnx
from onnx import numpy_helper
d, b, s = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for k, name in enumerate(["input_ids", "position_ids", "labels"]):  # the export's input order
    a = np.fromfile(f"{d}/0.{name}.bin", "<i8").reshape(b, s)
    onnx.save_tensor(numpy_helper.from_array(a), f"{d}/input_{k}.pb")
PY
    "$kiln" compile "$out/export/model.onnx" --lora=r=16,alpha=32,dropout=0 --precision=bf16 \
      --optimizer=adamw:lr=$lr,weight_decay=0,betas=0.9/0.999,eps=1e-8 \
      $compile_flags --emit=step-mlir -o "$out/step.mlir"
    "$kiln" interp "$out/step.mlir" --inputs "$out/batch0" --outputs "$out/batch0/out" --steps 1 \
      | sed 's/^/kiln interp (CPU) /' | tee "$out/batch0-interp.txt"
    rm -f "$out/step.mlir"
  fi
  du -sh "$out"
  ;;
run)
  kiln_run=${KILN_RUN:-}
  if [ -z "$kiln_run" ]; then
    build=$out/runtime
    [ -f "$build/build.ninja" ] ||
      cmake -S runtime -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    ninja -C "$build" kiln-run >/dev/null
    kiln_run=$build/tools/kiln-run/kiln-run
  fi
  # The weights stay where they were made (too big to carry): the same
  # config and seed make them again, byte for byte.
  if [ ! -f "$out/export/model.safetensors" ]; then
    python3 scripts/export_hf.py "$out/config/config.json" --out "$out/export.weights" \
      --position-ids >/dev/null
    cp "$out/export.weights/model.safetensors" "$out/export/"
  fi
  results=$out/results
  rm -rf "$results" && mkdir -p "$results/batches" "$results/eval_batches"
  shape=(--batch "$batch" --seq "$seq")
  "$kiln_run" data-stats "$out/train.kdocs" "${shape[@]}" | tee "$results/data-stats.txt"
  "$kiln_run" data-stats "$out/train.kdocs" "${shape[@]}" --batching pack --seed 0 \
    --dump "$results/batches" --count "$steps" >/dev/null
  "$kiln_run" data-stats "$out/eval.kdocs" "${shape[@]}" --batching pack --shuffle off \
    --dump "$results/eval_batches" --count "$eval_batches" >/dev/null
  common=(--weights "$out/export/model.safetensors" --data "$out/train.kdocs" --batching pack
          "${shape[@]}" --seed 0)
  echo "== Kiln's initial adapters"
  "$kiln_run" train "$out/step.kiln" "${common[@]}" "${attention[@]}" --steps 0 \
    --save-adapters "$results/init_adapters" | tee "$results/kiln-init.log"
  echo "== Step 1 on micro-batch 0, like with like (the same batch and adapters everywhere)"
  "$kiln_run" train "$out/step.kiln" --weights "$out/export/model.safetensors" "${shape[@]}" "${attention[@]}" \
    --seed 0 --steps 1 --lr "$lr" --log-every 1 --progress off --adapters "$results/init_adapters" \
    --input input_ids="$results/batches/0.input_ids.bin" \
    --input position_ids="$results/batches/0.position_ids.bin" \
    --input labels="$results/batches/0.labels.bin" 2>&1 | tee "$results/kiln-batch0.log"
  python3 scripts/sft_reference.py loss --model "$out/export" --adapters "$results/init_adapters" \
    --batches "$results/batches" | tee "$results/pytorch-batch0.txt"
  [ -f "$out/batch0-interp.txt" ] && cat "$out/batch0-interp.txt"
  warmup_ref=$warmup
  [ "$schedule" = cosine ] || warmup_ref=0
  echo "== PyTorch + PEFT, $steps steps"
  python3 scripts/sft_reference.py pytorch --model "$out/export" \
    --adapters "$results/init_adapters" --batches "$results/batches" \
    --eval-batches "$results/eval_batches" --eval-every "$eval_every" \
    --steps "$steps" --lr "$lr" --warmup "$warmup_ref" --schedule "$schedule" \
    --json "$results/pytorch.json" |
    tee "$results/pytorch.log"
  default_flags="--lr-schedule $schedule --warmup $warmup_ref --eval-data $out/eval.kdocs"
  default_flags+=" --eval-every $eval_every --eval-batches $eval_batches"
  default_flags+=" --log-file $results/kiln.jsonl"
  loop_flags=${SFT_LOOP_FLAGS-$default_flags}
  echo "== Kiln, $steps steps ($loop_flags)"
  set +e
  # shellcheck disable=SC2086
  "$kiln_run" train "$out/step.kiln" "${common[@]}" "${attention[@]}" --steps "$steps" --lr "$lr" \
    --log-every 1 --progress off $loop_flags 2>&1 | tee "$results/kiln.log"
  kiln_rc=${PIPESTATUS[0]}
  python3 scripts/sft_reference.py compare --kiln "$results/kiln.log" \
    --pytorch "$results/pytorch.json" --kiln-log-file "$results/kiln.jsonl" \
    --tolerance "$tolerance" | tee "$results/compare.txt"
  compare_rc=${PIPESTATUS[0]}
  set -e
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    cp "$results"/*.log "$results"/*.json "$results"/*.txt "$OUT"/
    cp "$results"/kiln.jsonl "$results"/*.svg "$results"/*.png "$OUT"/ 2>/dev/null || true
  fi
  [ "$kiln_rc" = 0 ] || echo "gpu-sft-check: kiln-run exited $kiln_rc" >&2
  exit $((compare_rc != 0 || kiln_rc != 0))
  ;;
*)
  echo "usage: scripts/gpu-sft-check.sh export|prepare|run [OUT]" >&2
  exit 2
  ;;
esac
