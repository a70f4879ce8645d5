#!/usr/bin/env bash
# Writes the seed corpora of kiln-fuzz-artifact (artifact-corpus/) and
# kiln-fuzz-safetensors (safetensors-corpus/): kiln-run's own test fixtures
# and artifacts kiln compiles from the MLP fixture, their kernel images cut
# to a few bytes (the decoders never look inside them; small seeds fuzz
# faster). Re-run after changing a fixture:
#   test/Fuzz/make_artifact_corpus.sh build/bin/kiln build-rt/test/kiln-test-files
set -euo pipefail
kiln=$(realpath "$1") test_files=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
mlp=$(realpath "$here/../fixtures/onnx/mlp_dynamo/model.onnx")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

a=$here/artifact-corpus s=$here/safetensors-corpus
rm -rf "$a" "$s" && mkdir -p "$a" "$s"
"$test_files" artifact "$a/ok-sample.kiln"
"$test_files" artifact "$a/bad-memory-plan.kiln" --bad-memory-plan
"$test_files" gemm-step g && cp g.kiln "$a/ok-gemm-step.kiln"
"$test_files" gemm-step gs --with-state && cp gs.kiln "$a/ok-gemm-state.kiln"
"$test_files" lora-step l && cp l.kiln "$a/ok-lora-init.kiln"
compile() { # NAME FLAGS...: a compiled MLP step, kernel images shrunk
  local name=$1; shift
  "$kiln" compile "$mlp" --emit=artifact --kernel-cache=none -o "$name.kiln" "$@"
  "$test_files" list-sections "$name.kiln" | grep '^kernels/' | while read -r section; do
    "$test_files" set-section "$name.kiln" "$section" "${section##*/}"
  done
  cp "$name.kiln" "$a/ok-mlp-$name.kiln"
}
compile train --train=all
compile buckets --train=all --buckets batch=2,4 --dynamic batch=1..8
compile adamw --train=all --optimizer=adamw:lr=1e-3

"$test_files" weights "$s/ok-weights.safetensors"
"$test_files" weights "$s/ok-wrong-shape.safetensors" --wrong-shape
"$test_files" resume "$s/ok-resume.safetensors" --step 7
"$test_files" gemm-resume "$s/ok-gemm-resume.safetensors"
"$test_files" peft-adapters ad && cp ad/adapter_model.safetensors "$s/ok-peft.safetensors"
# Without Kiln's checksums (as other writers save them), several dtypes.
python3 - "$s/ok-plain.safetensors" <<'PY'
import json, struct, sys
tensors = {"a": ("F32", [2, 2], 16), "b": ("BF16", [3], 6), "c": ("I64", [], 8), "d": ("U8", [0, 5], 0)}
header, data, offset = {"__metadata__": {"format": "pt"}}, b"", 0
for name, (dtype, shape, size) in tensors.items():
    header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
    data += bytes(range(size)); offset += size
text = json.dumps(header, separators=(",", ":")).encode()
text += b" " * (-len(text) % 8)
open(sys.argv[1], "wb").write(struct.pack("<Q", len(text)) + text + data)
PY
ls -la "$a" "$s"
