#!/usr/bin/env bash
# README command (1): set up, import the bundled example (a tiny Llama
# exported by torch.onnx.export), print its graph-dialect IR, and run it on
# the CPU reference interpreter against PyTorch's loss.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
example=test/fixtures/onnx/llama_dynamo
build/bin/kiln import "$example/model.onnx"
out=$(mktemp -d)
build/bin/kiln interp "$example/model.onnx" --inputs "$example/test_data_set_0" --outputs "$out"
python3 - "$out/output_0.pb" "$example/test_data_set_0/output_0.pb" <<'PY'
import sys
import onnx, onnx.numpy_helper as nh
got = float(nh.to_array(onnx.load_tensor(sys.argv[1])))
want = float(nh.to_array(onnx.load_tensor(sys.argv[2])))
print(f"loss: kiln interp {got:.7f}, PyTorch {want:.7f}")
PY
