#!/usr/bin/env bash
# README command (1): set up, import the bundled example (a tiny Llama
# exported by torch.onnx.export), print its graph-dialect IR, compile its
# training step (autodiff + AdamW) and train it for a few steps on the CPU
# reference interpreter. (On a GPU the runtime will run the same step.)
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
example=test/fixtures/onnx/llama_dynamo
out=$(mktemp -d)
build/bin/kiln import "$example/model.onnx"
build/bin/kiln compile "$example/model.onnx" --emit=step-mlir \
  --optimizer=adamw:lr=1e-3,weight_decay=0.01 -o "$out/step.mlir"
echo "compiled train step: $out/step.mlir"
build/bin/kiln interp "$out/step.mlir" --steps 5 \
  --inputs "$example/test_data_set_0" --outputs "$out/run"
python3 - "$example/test_data_set_0/output_0.pb" <<'PY'
import sys
import onnx, onnx.numpy_helper as nh
print(f"PyTorch's loss before training: {float(nh.to_array(onnx.load_tensor(sys.argv[1]))):.7f}")
PY
