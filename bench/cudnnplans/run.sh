#!/bin/bash
# Every cuDNN attention plan of the bench shapes, timed (plans.cu says how):
#   bash bench/cudnnplans/run.sh build DIR   # compiler machine: nvcc, cuDNN, the frontend headers
#   bash bench/cudnnplans/run.sh run DIR     # GPU machine: DIR/cudnnplans, log in $OUT
# Environment: PLANS_ONLY (small,1b,8b), PLANS_ITERS (20); run takes the
# newest libcudnn.so.9 of the loader's and PyTorch's (scripts/cudnn-path.sh).
set -euo pipefail
mode=${1:-}
dir=$(mkdir -p "${2:?usage: $0 build|run DIR}" && cd "$2" && pwd)
root=$(cd "$(dirname "$0")/../.." && pwd)
case "$mode" in
build)
  frontend=$(ls -d "$root"/build-deps/cudnn-frontend-*/include | tail -1)
  nvcc -O2 -std=c++17 -I "$frontend" -o "$dir/cudnnplans" "$root/bench/cudnnplans/plans.cu" \
    -L/usr/local/cuda/lib64 -lcudnn -lnvrtc
  ;;
run)
  source "$root/scripts/cudnn-path.sh"
  # The binary links libcudnn.so.9 (the script put the chosen one's folder
  # first) and the toolkit's libnvrtc.so.13 by name.
  export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}/usr/local/cuda/lib64
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  "$dir/cudnnplans" | tee "${OUT:-/tmp}/cudnnplans.txt"
  ;;
*)
  echo "usage: $0 build|run DIR" >&2
  exit 2
  ;;
esac
