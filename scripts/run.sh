#!/usr/bin/env bash
# README command (1): set up, import the bundled example (a tiny Llama
# exported by torch.onnx.export), print its graph-dialect IR, compile its
# training step (autodiff + AdamW) and train it for a few steps: on the GPU
# through the CUDA runtime when `kiln-run devices` finds one, otherwise on
# the CPU reference interpreter, so it runs anywhere.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
example=test/fixtures/onnx/llama_dynamo
out=$(mktemp -d)
build/bin/kiln import "$example/model.onnx"
build/bin/kiln compile "$example/model.onnx" --emit=step-mlir \
  --optimizer=adamw:lr=1e-3,weight_decay=0.01 -o "$out/step.mlir"
echo "compiled train step: $out/step.mlir"
kiln_run=build-rt/tools/kiln-run/kiln-run
if "$kiln_run" devices > /dev/null 2>&1; then
  # The same step as a .kiln artifact (fused kernels, NVRTC cubins); the
  # weights travel apart, as safetensors.
  build/bin/kiln compile "$example/model.onnx" --emit=artifact \
    --optimizer=adamw:lr=1e-3,weight_decay=0.01 -o "$out/step.kiln"
  python3 scripts/onnx_to_safetensors.py "$example/model.onnx" "$out/weights.safetensors"
  python3 scripts/onnx_to_safetensors.py --pb-inputs "$example/test_data_set_0" "$out/inputs"
  "$kiln_run" train "$out/step.kiln" --weights "$out/weights.safetensors" \
    --batch 2 --seq 16 --steps 5 --log-every 1 \
    --input input_ids="$out/inputs/input_ids.bin" --input labels="$out/inputs/labels.bin"
else
  echo "no GPU: training on the reference interpreter"
  build/bin/kiln interp "$out/step.mlir" --steps 5 \
    --inputs "$example/test_data_set_0" --outputs "$out/run"
fi
python3 - "$example/test_data_set_0/output_0.pb" <<'PY'
import sys
import onnx, onnx.numpy_helper as nh
print(f"PyTorch's loss before training: {float(nh.to_array(onnx.load_tensor(sys.argv[1]))):.7f}")
PY
