#!/usr/bin/env bash
# The loss-curve comparison (issue #8), one command on the GPU machine:
# Kiln's bf16 + LoRA step against PyTorch (bench/model.py under bf16
# autocast) for 100 steps from the same base weights, the same LoRA init and
# the same token windows; passes when every step's loss is within 1%.
#
#   bench/curve.sh [STEP.kiln]        default $CURVE_DIR/step.kiln
#
# The artifact is compiled on the compiler machine (kiln needs MLIR):
#   kiln compile bench/out/curve/model.onnx --lora r=16,alpha=32,dropout=0 \
#     --precision=bf16 --optimizer adamw:lr=1e-3,weight_decay=0.01,betas=0.9/0.999,eps=1e-8 \
#     --emit=artifact -o bench/out/curve/step.kiln
# and travels with weights.safetensors (and model.onnx, or the
# kiln-weights.safetensors made from it) in $CURVE_DIR.
#
# QLoRA (issue #22): CURVE_QUANT=nf4 bench/curve.sh [STEP.kiln], default
# $CURVE_DIR/step-qlora.kiln, compiled the same way plus --quant nf4:
#   kiln compile bench/out/curve/model.onnx --lora r=16,alpha=32,dropout=0 \
#     --precision=bf16 --quant nf4 \
#     --optimizer adamw:lr=1e-3,weight_decay=0.01,betas=0.9/0.999,eps=1e-8 \
#     --emit=artifact -o bench/out/curve/step-qlora.kiln
# Kiln's init program quantizes every frozen linear weight (the LM head too,
# not the embedding) from its bf16 value; PyTorch gets --quant nf4: the same
# codes (bench/nf4.py, test/Quant/nf4-bench-codes.test), the same count
# (--nf4-weights: the artifact's .nf4_codes params). The results go to
# $CURVE_DIR/results-qlora. The first steps of either mode run on a machine
# without a GPU through kiln interp: bench/curve_interp.py.
#
# Steps: build kiln-run (build-rt); write the token stream (Markov, vocab
# 4096, 2^20 tokens, seed 0) unless present; the weights file for kiln-run
# (weights.safetensors plus model.onnx's inline initializers) unless present;
# kiln-run --steps 0 --save-adapters: Kiln's initial adapters; PyTorch from
# them (loss_curve.py pytorch); kiln-run for the steps; loss_curve.py compare.
#
# Environment (defaults): CURVE_DIR (bench/out/curve) holds the inputs;
# CURVE_RESULTS ($CURVE_DIR/results) gets the logs, JSON and adapters, and
# they are also copied to $OUT when that is a directory; CURVE_WEIGHTS,
# CURVE_ONNX, CURVE_KILN_WEIGHTS, CURVE_TOKENS (files in CURVE_DIR);
# CURVE_STEPS (100), CURVE_LR (1e-3), CURVE_SEED (0), CURVE_TOLERANCE (0.01),
# CURVE_DEVICE (cuda: PyTorch's device), CURVE_QUANT (empty: LoRA; nf4: QLoRA);
# KILN_RUN (kiln-run of CURVE_BUILD, build-rt, which is configured and built
# when KILN_RUN is not set).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${CURVE_DIR:-bench/out/curve}
quant=${CURVE_QUANT:-}
case $quant in
"") artifact=${1:-$dir/step.kiln}; results=${CURVE_RESULTS:-$dir/results} ;;
nf4) artifact=${1:-$dir/step-qlora.kiln}; results=${CURVE_RESULTS:-$dir/results-qlora} ;;
*) echo "curve.sh: CURVE_QUANT is '$quant'; it is empty (LoRA) or nf4 (QLoRA)" >&2; exit 2 ;;
esac
weights=${CURVE_WEIGHTS:-$dir/weights.safetensors}
onnx=${CURVE_ONNX:-$dir/model.onnx}
kiln_weights=${CURVE_KILN_WEIGHTS:-$dir/kiln-weights.safetensors}
tokens=${CURVE_TOKENS:-$dir/tokens.bin}
steps=${CURVE_STEPS:-100}
lr=${CURVE_LR:-1e-3}
seed=${CURVE_SEED:-0}
tolerance=${CURVE_TOLERANCE:-0.01}
device=${CURVE_DEVICE:-cuda}
build=${CURVE_BUILD:-build-rt}
kiln_run=${KILN_RUN:-$build/tools/kiln-run/kiln-run}

for f in "$artifact" "$weights"; do
  [ -f "$f" ] || { echo "curve.sh: $f is missing (see the header of bench/curve.sh)" >&2; exit 2; }
done
if [ -z "${KILN_RUN:-}" ]; then
  # Incremental: a carried build-rt from an older tree is brought up to date.
  [ -f "$build/build.ninja" ] ||
    cmake -S runtime -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C "$build" kiln-run >/dev/null
fi
# batch, seq and vocab of the "curve" config.
read -r batch seq vocab < <(python3 -c 'import sys; sys.path.insert(0, "bench")
from configs import CONFIGS; c = CONFIGS["curve"]; print(c.batch, c.seq, c.vocab)')
mkdir -p "$results"
# The artifact stores NF4 weights exactly when CURVE_QUANT=nf4 asks for it.
inspect=$("$kiln_run" inspect "$artifact") ||
  { echo "curve.sh: kiln-run inspect $artifact failed" >&2; exit 2; }
nf4_weights=$(grep -c '\.nf4_codes ' <<<"$inspect" || true)
torch_quant=()
if [ -n "$quant" ]; then
  [ "$nf4_weights" -gt 0 ] || {
    echo "curve.sh: $artifact stores no NF4 weights; CURVE_QUANT=nf4 needs an artifact" \
      "compiled with --quant nf4 (see the header of bench/curve.sh)" >&2; exit 2; }
  torch_quant=(--quant "$quant" --nf4-weights "$nf4_weights")
elif [ "$nf4_weights" -gt 0 ]; then
  echo "curve.sh: $artifact stores $nf4_weights NF4 weights; run it with CURVE_QUANT=nf4" >&2
  exit 2
fi

if [ ! -f "$tokens" ]; then
  python3 - "$tokens" "$vocab" <<'PY'
import sys
sys.path.insert(0, "bench")
from tokens import markov_tokens, write_tokens
path, vocab = sys.argv[1], int(sys.argv[2])
write_tokens(path, markov_tokens(vocab, 1 << 20, 0), vocab)
print(f"wrote {path}: 1048576 Markov tokens, vocab {vocab}, seed 0")
PY
fi
if [ ! -f "$kiln_weights" ]; then
  python3 bench/loss_curve.py kiln-weights --onnx "$onnx" --weights "$weights" -o "$kiln_weights"
fi

common=(--weights "$kiln_weights" --data "$tokens" --token-dtype uint16
        --batch "$batch" --seq "$seq" --seed "$seed")
echo "== Kiln's initial adapters (kiln-run train --steps 0)"
rm -rf "$results/init_adapters"
"$kiln_run" train "$artifact" "${common[@]}" --steps 0 \
  --save-adapters "$results/init_adapters" | tee "$results/kiln-init.log"

echo "== PyTorch, $steps steps${quant:+, $quant frozen weights}"
python3 bench/loss_curve.py pytorch --weights "$weights" --adapters "$results/init_adapters" \
  --data "$tokens" --steps "$steps" --seed "$seed" --lr "$lr" --device "$device" \
  --json "$results/pytorch.json" --save-adapters "$results/pytorch_adapters" \
  ${torch_quant[@]+"${torch_quant[@]}"} |
  tee "$results/pytorch.log"

echo "== Kiln, $steps steps"
set +e
"$kiln_run" train "$artifact" "${common[@]}" --steps "$steps" --log-every 1 --lr "$lr" \
  --save-adapters "$results/kiln_adapters" 2>&1 | tee "$results/kiln.log"
kiln_rc=${PIPESTATUS[0]}

echo "== Compare (tolerance $tolerance)"
python3 bench/loss_curve.py compare --kiln "$results/kiln.log" --pytorch "$results/pytorch.json" \
  --tolerance "$tolerance" --steps "$steps" \
  --kiln-adapters "$results/kiln_adapters" --pytorch-adapters "$results/pytorch_adapters" |
  tee "$results/compare.txt"
compare_rc=${PIPESTATUS[0]}
set -e
if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
  cp "$results"/*.log "$results"/*.json "$results"/compare.txt "$OUT"/
fi
[ "$kiln_rc" = 0 ] || echo "curve.sh: kiln-run exited $kiln_rc" >&2
exit $((compare_rc != 0 || kiln_rc != 0))
