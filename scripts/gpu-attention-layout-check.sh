#!/usr/bin/env bash
# --attention-layout=bshd on the GPU, in two halves (helper bshd, issue #21):
#
#   scripts/gpu-attention-layout-check.sh prepare [OUT]   # CPU machine with a kiln build
#   scripts/gpu-attention-layout-check.sh run [OUT]       # GPU machine with build-rt/
#
# `prepare` compiles, with and without the flag, the bf16 LoRA step of the
# causal Llama fixture (test/fixtures/onnx/hf_llama_dynamo) and the bench's
# 1b LoRA step (/work/bench-out/1b/model.onnx, or BENCH_ONNX=...), into OUT
# (default build-layoutcheck/, git-ignored). Until the attention kernels,
# cuDNN's graph and kiln_fa90 take per-operand strides, kiln compile refuses
# the flag's artifacts with one line; prepare then stops with exit 2.
# `run` trains the fixture pair 20 steps from the same random init and data
# (first loss within 1e-3 relative, every loss within 2e-2: the same math
# with other memory strides, cuDNN/fa90 reduction orders aside), then times
# the 1b pair (3 warm-up + 10 steps, random init) and profiles one step of
# each (--profile): the plain step has 80 pure transpose launches
# (`*_reshape_transpose`, `*_transpose_reshape`: v, the backward's recomputed
# v, the output, dO, dV per layer x 16), the flag's none; RoPE's (q/k,
# `*_transpose_slice`) stay.
# KILN=path/to/kiln, KILN_RUN=path/to/kiln-run override the tools.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
out=${2:-build-layoutcheck}
fixture=test/fixtures/onnx/hf_llama_dynamo
onnx1b=${BENCH_ONNX:-/work/bench-out/1b/model.onnx}
case "$mode" in
prepare)
  kiln=${KILN:-build/bin/kiln}
  rm -rf "$out" && mkdir -p "$out"
  python3 scripts/onnx_to_safetensors.py "$fixture/model.onnx" "$out/weights.safetensors"
  python3 scripts/onnx_to_safetensors.py --pb-inputs "$fixture/test_data_set_0" "$out/inputs"
  for layout in bhsd bshd; do
    if ! "$kiln" compile "$fixture/model.onnx" --precision=bf16 --lora=r=8,alpha=16,dropout=0 \
        --attention-layout=$layout --emit=artifact --arch=sm_90,sm_80 \
        -o "$out/fixture_$layout.kiln" 2> "$out/compile_$layout.err"; then
      cat "$out/compile_$layout.err" >&2
      echo "prepare: --attention-layout=$layout has no artifact yet (the runtime half)" >&2
      exit 2
    fi
    "$kiln" compile "$onnx1b" --lora r=16,alpha=32,dropout=0 --precision=bf16 \
      --optimizer adamw:lr=1e-4 --memory-report batch=4,seq=2048 --attention-layout=$layout \
      --emit=artifact -o "$out/1b_$layout.kiln" > "$out/1b_$layout.memory.txt"
  done
  du -sh "$out"
  ;;
run)
  kiln_run=${KILN_RUN:-build-rt/tools/kiln-run/kiln-run}
  [ -f scripts/cudnn-path.sh ] && source scripts/cudnn-path.sh
  for layout in bhsd bshd; do
    "$kiln_run" train "$out/fixture_$layout.kiln" --weights "$out/weights.safetensors" \
      --data "$out/inputs/tokens.bin" --steps 20 --seed 1 --log-every 1 \
      > "$out/fixture_$layout.log"
  done
  python3 - "$out" <<'PY'
import re, sys
out = sys.argv[1]
def losses(path):
    return {int(m.group(1)): float(m.group(2))
            for m in re.finditer(r"^step (\d+) loss (\S+)", open(path).read(), re.M)}
a, b = losses(f"{out}/fixture_bhsd.log"), losses(f"{out}/fixture_bshd.log")
ok = len(a) == len(b) == 20
first = abs(a[1] - b[1]) / abs(a[1]) if ok else float("inf")
worst = max(abs(a[s] - b[s]) / abs(a[s]) for s in a) if ok else float("inf")
print(f"fixture: step 1 loss bhsd {a.get(1)} bshd {b.get(1)} (rel {first:.2e}); "
      f"worst of 20 steps rel {worst:.2e}")
print("PASS" if ok and first <= 1e-3 and worst <= 2e-2 else "FAIL")
PY
  for layout in bhsd bshd; do
    "$kiln_run" train "$out/1b_$layout.kiln" --init random:0 --batch 4 --seq 2048 \
      --steps 13 --seed 0 --log-every 1 --token-dtype uint32 > "$out/1b_$layout.log"
    echo "1b $layout: median step_ms of steps 4-13:" "$(awk '$1 == "step" && $2 > 3 \
      {print $6}' "$out/1b_$layout.log" | sort -n | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')"
    "$kiln_run" train "$out/1b_$layout.kiln" --init random:0 --batch 4 --seq 2048 \
      --steps 3 --profile "$out/1b_$layout.profile.tsv" > /dev/null
    echo "1b $layout: pure transpose launches:" \
      "$(grep -cE '_(reshape_transpose|transpose_reshape)\b' "$out/1b_$layout.profile.tsv" || true)"
  done
  ;;
*)
  echo "usage: $0 prepare|run [OUT]" >&2
  exit 2
  ;;
esac
