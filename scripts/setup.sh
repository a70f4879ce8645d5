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

# The cuDNN frontend's headers (header-only, MIT; PyPI's nvidia-cudnn-frontend)
# let the runtime build cuDNN's fused attention; libcudnn itself is loaded at
# run time. Without them the runtime builds without it (docs/runtime.md).
frontend_version=1.32.0
frontend=build-deps/cudnn-frontend-$frontend_version
if [ ! -f "$frontend/include/cudnn_frontend.h" ]; then
  wheels=$(mktemp -d)
  if python3 -m pip download -q --no-deps --only-binary=:all: -d "$wheels" \
       "nvidia-cudnn-frontend==$frontend_version" 2>/dev/null; then
    python3 - "$wheels" "$frontend" <<'PY'
import pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("*.whl"))
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if name.startswith("include/"):
            z.extract(name, sys.argv[2])
PY
  else
    echo "setup: nvidia-cudnn-frontend not downloadable; the runtime builds without cuDNN attention" >&2
  fi
  rm -rf "$wheels"
fi
frontend_include=""
[ -f "$frontend/include/cudnn_frontend.h" ] && frontend_include=$PWD/$frontend/include
if [ ! -f build-rt/build.ninja ] ||
   ! grep -qx "KILN_CUDNN_FRONTEND_INCLUDE:PATH=$frontend_include" build-rt/CMakeCache.txt; then
  cmake -S runtime -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DKILN_CUDNN_FRONTEND_INCLUDE="$frontend_include"
fi
ninja -C build-rt
