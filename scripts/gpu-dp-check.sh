#!/usr/bin/env bash
# Checks data-parallel training (kiln-run train --gpus N, NCCL) on the GPU
# machine, in two halves like scripts/gpu-step-check.sh:
#
#   scripts/gpu-dp-check.sh prepare [OUT]   # CPU machine with a kiln build
#   scripts/gpu-dp-check.sh run [OUT]       # GPU machine (CUDA toolkit, cmake,
#                                           # python3; NCCL from PyTorch's wheel)
#
# `prepare` compiles the Llama fixture's step with --data-parallel (fp32
# AdamW, and bf16 + LoRA) for any batch, and writes a token file, into OUT
# (default build-dpcheck/, git-ignored, small enough to carry). With
# KILN_DP_MODEL=model.onnx (bench/out/1b/model.onnx from `bench/run.sh
# --export`) it also compiles that model's bf16 LoRA step (the bench's
# flags) as OUT/bench.kiln for the scaling measurement.
#
# `run` builds runtime/ there (or uses KILN_RUN), then:
#  1. world of one: the plain run and --gpus 1 (NCCL communicator of one,
#     the all-reduces on their own stream inside the CUDA graph) give the
#     same losses: fp32 exactly (relative 1e-6), bf16 within 1e-2;
#  2. with N >= 2 GPUs: N ranks of per-GPU batch B against one GPU with
#     batch N*B: the loss curves agree within 1e-3 relative (fp32) and 1e-2
#     (bf16); the step-time scaling efficiency (1 GPU at batch B over N GPUs
#     at B each; 100% = perfect weak scaling) and each GPU's peak memory are
#     printed; with OUT/bench.kiln the same on the bench model
#     (KILN_DP_BATCH, KILN_DP_SEQ: 4 and 2048).
# Exits non-zero if a comparison fails.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
out=${2:-build-dpcheck}
fixture=test/fixtures/onnx/llama_dynamo
case "$mode" in
prepare)
  kiln=${KILN:-build/bin/kiln}
  rm -rf "$out" && mkdir -p "$out"
  common=(--data-parallel --dynamic batch=1..64,seq=8..512:8 --emit=artifact --arch=sm_90,sm_80)
  "$kiln" compile "$fixture/model.onnx" --optimizer=adamw:lr=1e-3 "${common[@]}" \
    -o "$out/fp32.kiln"
  "$kiln" compile "$fixture/model.onnx" --precision=bf16 --lora=r=8,alpha=16,dropout=0 \
    --optimizer=adamw:lr=1e-3 "${common[@]}" -o "$out/bf16_lora.kiln"
  python3 -c "
import numpy as np
np.random.default_rng(0).integers(0, 256, 200000, dtype=np.uint16).tofile('$out/tokens.bin')"
  if [ -n "${KILN_DP_MODEL:-}" ]; then
    "$kiln" compile "$KILN_DP_MODEL" --lora r=16,alpha=32,dropout=0 --precision=bf16 \
      --optimizer adamw:lr=1e-4 --data-parallel --dynamic batch=1..64,seq=8..4096:8 \
      --kernel-cache=none --emit=artifact -o "$out/bench.kiln"
    tokens=$(dirname "$KILN_DP_MODEL")/tokens.bin
    [ -f "$tokens" ] && cp "$tokens" "$out/bench-tokens.bin" # KILN_DP_TOKEN_DTYPE: its width
  fi
  du -sh "$out"
  ;;
run)
  data=$(cd "$out" && pwd)
  kiln_run=${KILN_RUN:-}
  if [ -z "$kiln_run" ]; then
    cmake -S runtime -B "$out/runtime" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
    cmake --build "$out/runtime" --target kiln-run
    kiln_run=$out/runtime/tools/kiln-run/kiln-run
  fi
  source scripts/nccl-path.sh
  source scripts/cudnn-path.sh
  gpus=$("$kiln_run" devices | grep -c '^device ' || true)
  echo "gpu-dp-check: $gpus GPU(s), KILN_NCCL_LIBRARY=${KILN_NCCL_LIBRARY:-<loader path>}"
  # train NAME ARTIFACT TOKENS STEPS BATCH SEQ [FLAGS...]: log in $data/NAME.log
  train() {
    local name=$1 artifact=$2 tokens=$3 steps=$4 batch=$5 seq=$6
    shift 6
    "$kiln_run" train "$artifact" --data "$tokens" --init random:7 --seed 3 --steps "$steps" \
      --batch "$batch" --seq "$seq" --log-every 1 --progress off "$@" > "$data/$name.log" 2>&1 ||
      { cat "$data/$name.log"; echo "gpu-dp-check: FAIL: $name exited non-zero"; exit 1; }
  }
  # compare A B TOLERANCE LABEL: the per-step losses of two logs.
  compare() {
    python3 - "$data/$1.log" "$data/$2.log" "$3" "$4" <<'PY'
import re, statistics, sys
def read(path):
    steps = {}
    for line in open(path):
        m = re.match(r"step (\d+) loss (\S+) step_ms (\S+)", line)
        if m:
            steps[int(m.group(1))] = (float(m.group(2)), float(m.group(3)))
    return steps
a, b = read(sys.argv[1]), read(sys.argv[2])
tol, label = float(sys.argv[3]), sys.argv[4]
if not a or a.keys() != b.keys():
    sys.exit(f"gpu-dp-check: FAIL: {label}: the logs have different steps")
worst = max(abs(a[s][0] - b[s][0]) / max(abs(b[s][0]), 1e-12) for s in a)
ok = worst <= tol
print(f"gpu-dp-check: {'ok' if ok else 'FAIL'}: {label}: {len(a)} steps, largest relative "
      f"loss difference {worst:.3g} (limit {tol:g}); last losses {a[max(a)][0]:.6f} vs {b[max(b)][0]:.6f}")
sys.exit(0 if ok else 1)
PY
  }
  # efficiency ONE MANY N LABEL: median step times after 3 warm-up steps.
  efficiency() {
    python3 - "$data/$1.log" "$data/$2.log" "$3" "$4" <<'PY'
import re, statistics, sys
def ms(path):
    times = []
    for line in open(path):
        m = re.match(r"step (\d+) loss \S+ step_ms (\S+)", line)
        if m and int(m.group(1)) > 3:
            times.append(float(m.group(2)))
    return statistics.median(times)
one, many, n, label = ms(sys.argv[1]), ms(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
peak = [l.strip() for l in open(sys.argv[2]) if l.startswith("peak_mem per GPU")]
print(f"gpu-dp-check: {label}: 1 GPU {one:.2f} ms/step, {n} GPUs {many:.2f} ms/step at the same "
      f"per-GPU batch: scaling efficiency {100 * one / many:.1f}%; {peak[0] if peak else ''}")
PY
  }
  status=0
  for variant in fp32:1e-6:1e-3 bf16_lora:1e-2:1e-2; do
    IFS=: read -r name same close <<< "$variant"
    train "$name-plain" "$data/$name.kiln" "$data/tokens.bin" 20 4 32
    train "$name-gpus1" "$data/$name.kiln" "$data/tokens.bin" 20 4 32 --gpus 1
    grep -q '^nccl: ' "$data/$name-gpus1.log" || { echo "gpu-dp-check: FAIL: no nccl line"; status=1; }
    compare "$name-gpus1" "$name-plain" "$same" "$name: --gpus 1 vs the plain run" || status=1
    if [ "$gpus" -ge 2 ]; then
      train "$name-gpus$gpus" "$data/$name.kiln" "$data/tokens.bin" 20 2 32 --gpus "$gpus"
      train "$name-batch$((2 * gpus))" "$data/$name.kiln" "$data/tokens.bin" 20 $((2 * gpus)) 32
      compare "$name-gpus$gpus" "$name-batch$((2 * gpus))" "$close" \
        "$name: $gpus GPUs x batch 2 vs 1 GPU x batch $((2 * gpus))" || status=1
      train "$name-batch2" "$data/$name.kiln" "$data/tokens.bin" 20 2 32
      efficiency "$name-batch2" "$name-gpus$gpus" "$gpus" "$name fixture (launch-bound: not a scaling measure)"
    fi
  done
  if [ "$gpus" -ge 2 ] && [ -f "$data/bench.kiln" ]; then
    b=${KILN_DP_BATCH:-4} s=${KILN_DP_SEQ:-2048}
    tokens=$data/bench-tokens.bin dtype=(--token-dtype "${KILN_DP_TOKEN_DTYPE:-uint32}")
    [ -f "$tokens" ] || python3 -c "
import numpy as np
np.random.default_rng(0).integers(0, 32000, 4000000, dtype=np.uint32).tofile('$tokens')"
    train bench-1gpu "$data/bench.kiln" "$tokens" 20 "$b" "$s" "${dtype[@]}"
    train "bench-gpus$gpus" "$data/bench.kiln" "$tokens" 20 "$b" "$s" --gpus "$gpus" "${dtype[@]}"
    train "bench-batch$((b * gpus))" "$data/bench.kiln" "$tokens" 20 $((b * gpus)) "$s" "${dtype[@]}"
    compare "bench-gpus$gpus" "bench-batch$((b * gpus))" 1e-2 \
      "bench: $gpus GPUs x batch $b vs 1 GPU x batch $((b * gpus))" || status=1
    efficiency bench-1gpu "bench-gpus$gpus" "$gpus" "bench (batch $b, seq $s per GPU)"
  elif [ "$gpus" -lt 2 ]; then
    echo "gpu-dp-check: one GPU: the multi-GPU comparison and scaling were not run"
  fi
  exit $status
  ;;
*)
  echo "usage: $0 prepare|run [OUT]" >&2
  exit 2
  ;;
esac
