#!/usr/bin/env bash
# On the GPU machine: the two attention implementations of a compiled bf16
# step (docs/runtime.md, "Attention implementations") against each other.
# Runs the same steps (same init, data and seed) with --attention kernels and
# --attention cudnn, prints both loss curves and their largest relative
# difference (bf16 rounding differs between the two, so a small one is
# expected; a wrong implementation diverges at once), and profiles the last
# step of each (attention time per implementation).
#
#   scripts/gpu-attention-check.sh STEP.kiln TOKENS.bin BATCH SEQ [STEPS] [OUTDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
artifact=$1 data=$2 batch=$3 seq=$4 steps=${5:-20} out=${6:-${OUT:-/tmp}}
kiln_run=${KILN_RUN:-build-rt/tools/kiln-run/kiln-run}
source scripts/cudnn-path.sh
mkdir -p "$out"
token_dtype=uint16
[ "$(python3 -c "import json,sys; print(json.load(open(sys.argv[1])).get('vocab', 0) > 65535)" \
     "$(dirname "$data")/meta.json" 2>/dev/null)" = True ] && token_dtype=uint32
for mode in kernels cudnn; do
  "$kiln_run" train "$artifact" --data "$data" --token-dtype "$token_dtype" --steps "$steps" \
    --batch "$batch" --seq "$seq" --init random:0 --seed 0 --lr 1e-4 --log-every 1 \
    --attention "$mode" --profile "$out/profile-$mode.tsv" > "$out/train-$mode.log"
  grep -E "^attention:|^step $steps " "$out/train-$mode.log"
  awk -F'\t' 'NR > 1 && $2 ~ /attention/ {ms += $3} END {printf "  attention ops in the profiled step: %.3f ms\n", ms}' \
    "$out/profile-$mode.tsv"
done
python3 - "$out/train-kernels.log" "$out/train-cudnn.log" <<'PY'
import sys
def losses(path):
    return [float(l.split()[3]) for l in open(path)
            if l.startswith("step ") and l.split()[1].isdigit()]
a, b = losses(sys.argv[1]), losses(sys.argv[2])
assert len(a) == len(b) and a, "different step counts"
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("losses (kernels, cudnn):")
for i, (x, y) in enumerate(zip(a, b), 1):
    print(f"  step {i:3d}  {x:.6f}  {y:.6f}")
print(f"max relative difference {worst:.2e}")
sys.exit(0 if worst < 1e-2 else 1)
PY
