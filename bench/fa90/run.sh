#!/bin/bash
# Standalone check and timing of Kiln's sm_90a attention forward
# (lib/Codegen/cuda/FlashAttention90.cuh) on an H100/H200, PyTorch's flash
# and cuDNN backends beside it. Builds with nvcc unless a prebuilt fa90 sits
# next to this script. Logs to $OUT/log.txt.
set -o pipefail
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}
log=$OUT/log.txt
[ -x fa90 ] || nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o fa90 driver.cu || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $log
(cuobjdump --dump-sass fa90 | grep -c HGMMA | sed 's/^/HGMMA in SASS: /') 2>&1 | tee -a $log
timeout 60 ./fa90 2>&1 | tee -a $log
timeout 90 python3 torch_ref.py 2>&1 | grep -v Warning | tee -a $log
