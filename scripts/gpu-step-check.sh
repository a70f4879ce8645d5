#!/usr/bin/env bash
# Checks kiln-run's execution of compiled train steps on a GPU, in two halves:
#
#   scripts/gpu-step-check.sh prepare [OUT]   # CPU machine with a kiln build
#   scripts/gpu-step-check.sh run [OUT]       # GPU machine (CUDA toolkit, cmake,
#                                             # python3 + numpy + onnx)
#
# `prepare` compiles the Llama fixture's step into .kiln artifacts (fp32 SGD
# lr=1 to expose gradients, fp32 AdamW, the same with --dynamic and a
# --buckets copy, bf16 + LoRA, the same with --lora-k-concat, fp32 and bf16
# LoRA with SGD lr=1 plain and K-concatenated (gradients), bf16 + QLoRA,
# the same with --double-quant), writes
# its initializers as safetensors and its test_data_set_0 inputs as raw
# files and a token file, and runs `kiln interp --steps 3` for the AdamW
# reference; all into OUT (default build-stepcheck/, git-ignored, about 12
# MiB, so it can be carried). `run` builds runtime/ alone there and runs the
# step-check tests (ctest label gpu, runtime/test/step_check.py) and the
# compiler-free GEMM step test kiln-run.train-gemm-step-gpu.
# KILN=path/to/kiln overrides the compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
out=${2:-build-stepcheck}
fixture=test/fixtures/onnx/llama_dynamo
case "$mode" in
prepare)
  kiln=${KILN:-build/bin/kiln}
  rm -rf "$out" && mkdir -p "$out/fixture" "$out/interp"
  cp "$fixture/test_data_set_0/output_0.pb" "$out/fixture/"
  cp -r "$fixture/test_data_set_0/grad" "$out/fixture/"
  python3 scripts/onnx_to_safetensors.py "$fixture/model.onnx" "$out/weights.safetensors"
  python3 scripts/onnx_to_safetensors.py --pb-inputs "$fixture/test_data_set_0" "$out/inputs"
  # Exactly the parameters PyTorch trained (RoPE's buffer stays frozen).
  train=$(python3 test/utils/trained_params_regex.py "$fixture/meta.json")
  adamw=adamw:lr=1e-3,weight_decay=0.01,betas=0.9/0.999,eps=1e-8
  "$kiln" compile "$fixture/model.onnx" --train="$train" --optimizer=sgd:lr=1 \
    --emit=artifact --arch=sm_90,sm_80 -o "$out/llama_fp32_sgd.kiln"
  "$kiln" compile "$fixture/model.onnx" --train="$train" --optimizer=$adamw \
    --emit=artifact --arch=sm_90,sm_80 -o "$out/llama_fp32_adamw.kiln"
  # Several shapes in one run: seq 16 a bucket, other values the symbolic step.
  "$kiln" compile "$fixture/model.onnx" --train="$train" --optimizer=$adamw \
    --dynamic batch=1..4,seq=8..32:8 --buckets seq=16 \
    --emit=artifact --arch=sm_90,sm_80 -o "$out/llama_fp32_adamw_buckets.kiln"
  "$kiln" compile "$fixture/model.onnx" --train="$train" --optimizer=$adamw \
    --emit=step-mlir -o "$out/interp/step.mlir"
  "$kiln" interp "$out/interp/step.mlir" --steps 3 --inputs "$fixture/test_data_set_0" \
    --outputs "$out/interp" > "$out/interp/log.txt"
  rm "$out/interp/step.mlir"
  # The plain LoRA step: separate LoRA GEMMs (--lora-k-concat is the default).
  "$kiln" compile "$fixture/model.onnx" --precision=bf16 --lora=r=8 --lora-k-concat=false \
    --emit=artifact --arch=sm_90,sm_80 -o "$out/llama_bf16_lora.kiln"
  # The K-concatenated LoRA GEMMs (in-place concatenations: ld, column
  # views, kernels writing at a row stride) against the plain LoRA step.
  "$kiln" compile "$fixture/model.onnx" --precision=bf16 --lora=r=8 --lora-k-concat \
    --emit=artifact --arch=sm_90,sm_80 -o "$out/llama_bf16_lora_kconcat.kiln"
  # Gradients through the padded frozen weights: SGD lr=1 exposes them as
  # old - new adapters, the plain and the K-concatenated step from the
  # same nonzero adapters (fp32 and bf16).
  for precision in fp32 bf16; do
    "$kiln" compile "$fixture/model.onnx" --precision=$precision --lora=r=8,alpha=16,dropout=0 \
      --optimizer=sgd:lr=1 --lora-k-concat=false --emit=artifact --arch=sm_90,sm_80 \
      -o "$out/llama_${precision}_lora_sgd.kiln"
    "$kiln" compile "$fixture/model.onnx" --precision=$precision --lora=r=8,alpha=16,dropout=0 \
      --optimizer=sgd:lr=1 --lora-k-concat --emit=artifact --arch=sm_90,sm_80 \
      -o "$out/llama_${precision}_lora_kconcat_sgd.kiln"
    "$kiln" compile "$fixture/model.onnx" --precision=$precision --lora=r=8,alpha=16,dropout=0 \
      --optimizer=sgd:lr=1 --lora-k-concat --lora-group-frozen --emit=artifact \
      --arch=sm_90,sm_80 -o "$out/llama_${precision}_lora_group_sgd.kiln"
  done
  "$kiln" compile "$fixture/model.onnx" --precision=bf16 --lora=r=8 --quant=nf4 \
    --emit=artifact --arch=sm_90,sm_80 -o "$out/llama_bf16_qlora.kiln"
  "$kiln" compile "$fixture/model.onnx" --precision=bf16 --lora=r=8 --quant=nf4 --double-quant \
    --emit=artifact --arch=sm_90,sm_80 -o "$out/llama_bf16_qlora_dq.kiln"
  du -sh "$out"
  ;;
run)
  data=$(cd "$out" && pwd)
  cmake -S runtime -B "$out/runtime" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DKILN_STEP_CHECK_DIR="$data" > /dev/null
  cmake --build "$out/runtime"
  ctest --test-dir "$out/runtime" -L gpu -R 'step-check|train-gemm-step' --output-on-failure
  ;;
*)
  echo "usage: $0 prepare|run [OUT]" >&2
  exit 2
  ;;
esac
