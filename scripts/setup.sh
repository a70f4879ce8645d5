#!/usr/bin/env bash
# Installs what Kiln needs (Debian packages; PyPI only for test tooling),
# then configures and builds the compiler (build/) and the runtime
# (build-rt/). Idempotent: a second run only rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(cmake ninja-build ccache clang-19 lld-19 libmlir-19-dev mlir-19-tools
  llvm-19-dev llvm-19-tools libabsl-dev libonnx-dev libprotobuf-dev
  protobuf-compiler googletest libonnx-testdata python3-pip)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi
if ! python3 -c "import onnx, numpy, onnxruntime" 2>/dev/null; then
  python3 -m pip install -q onnx numpy onnxruntime
fi
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
  { echo "setup: the CUDA toolkit (nvcc) is required" >&2; exit 1; }

if [ ! -f build/build.ninja ]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 \
    -DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache \
    -DLLVM_ENABLE_LLD=ON -DMLIR_DIR="$(llvm-config-19 --prefix)/lib/cmake/mlir"
fi
ninja -C build
if [ ! -f build-rt/build.ninja ]; then
  cmake -S runtime -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
fi
ninja -C build-rt
