#!/usr/bin/env bash
# Checks every generated kernel of the shared fixtures' train steps on a GPU
# against the reference interpreter, in two halves:
#
#   scripts/gpu-kernel-check.sh prepare [OUT]   # CPU machine with a kiln build
#   scripts/gpu-kernel-check.sh run [OUT]       # GPU machine (CUDA toolkit, cmake)
#
# `prepare` compiles each step with `--emit=cuda --kernel-check` (fresh random
# inputs every time, reference outputs from `kiln interp`'s interpreter) into
# OUT (default build-kcheck/, git-ignored so it can be carried). `run` builds
# the runtime there and runs kiln-kernel-check on every prepared directory
# through ctest (label gpu). KILN=path/to/kiln (and KILN_OPT) override the
# compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
out=${2:-build-kcheck}
sizes=${KILN_CHECK_SIZES:-batch=2,seq=16}
case "$mode" in
prepare)
  kiln=${KILN:-build/bin/kiln}
  rm -rf "$out"/data && mkdir -p "$out"/data
  for fixture in llama_dynamo bert_dynamo mlp_dynamo; do
    for precision in fp32 bf16; do
      "$kiln" compile "test/fixtures/onnx/$fixture/model.onnx" --precision=$precision \
        --emit=cuda --arch=sm_90,sm_80 --kernel-check="$sizes" \
        -o "$out/data/${fixture}_$precision"
    done
  done
  # K-concatenated LoRA (padded frozen weights): the adapter_block kernels
  # and the prologue casts writing into the padded weights at a row stride.
  "$kiln" compile test/fixtures/onnx/llama_dynamo/model.onnx --precision=bf16 \
    --lora r=8,alpha=16,dropout=0 --optimizer adamw:lr=1e-4 --lora-k-concat \
    --emit=cuda --arch=sm_90,sm_80 --kernel-check="$sizes" -o "$out/data/llama_dynamo_bf16_lora_kconcat"
  # Frozen weights grouped (--lora-group-frozen): the RoPE and SiLU
  # gradients writing into [dq | dk | dv | dT] and [dg | du | dT].
  "$kiln" compile test/fixtures/onnx/llama_dynamo/model.onnx --precision=bf16 \
    --lora r=8,alpha=16,dropout=0 --optimizer adamw:lr=1e-4 --lora-k-concat --lora-group-frozen \
    --emit=cuda --arch=sm_90,sm_80 --kernel-check="$sizes" -o "$out/data/llama_dynamo_bf16_lora_group"
  # The row kernels' vectorized layouts at the bench's row lengths (2048
  # columns: a block per row; 768: a warp per row; ragged, cross entropy,
  # scalar fallbacks), 37 rows (a last block of 5 warps' rows).
  "${KILN_OPT:-build/bin/kiln-opt}" test/Codegen/row-vector.mlir --kiln-fuse --kiln-lower-to-step \
    -o "$out/row-vector.mlir"
  "$kiln" compile "$out/row-vector.mlir" --emit=cuda --arch=sm_90,sm_80 --kernel-check=n=37,m=40 \
    -o "$out/data/row_vector"
  # kiln-row-dot: thin GEMMs in the loop kernel that made their rows ([K, n]
  # and trans_b [n, K] Bs, one to three n-tiles, a sum of two products, 16
  # and 32 rows per block), 37 rows (a partial last block), and a tiny
  # tiny64 LoRA step whose gate/up, down and q/k/v products the pass takes.
  "${KILN_OPT:-build/bin/kiln-opt}" test/Codegen/row-dot.mlir --kiln-fuse --kiln-lower-to-step \
    --kiln-row-dot -o "$out/row-dot.mlir"
  "$kiln" compile "$out/row-dot.mlir" --emit=cuda --arch=sm_90,sm_80 --kernel-check=n=37 \
    -o "$out/data/row_dot"
  python3 scripts/llama_mlir.py --config tiny64 > "$out/tiny64.mlir"
  "$kiln" compile "$out/tiny64.mlir" --precision=bf16 --lora r=16,alpha=32,dropout=0 \
    --optimizer adamw:lr=1e-4 --row-dot --emit=cuda --arch=sm_90,sm_80 --kernel-check="$sizes" \
    -o "$out/data/tiny64_bf16_lora_row_dot"
  ;;
run)
  dirs=$(find "$(cd "$out" && pwd)/data" -mindepth 1 -maxdepth 1 -type d | sort | tr '\n' ';')
  cmake -S runtime -B "$out/runtime" -G Ninja -DKILN_KERNEL_CHECK_DIRS="$dirs" > /dev/null
  cmake --build "$out/runtime"
  ctest --test-dir "$out/runtime" -L gpu -R kernel-check --output-on-failure
  ;;
*)
  echo "usage: $0 prepare|run [OUT]" >&2
  exit 2
  ;;
esac
