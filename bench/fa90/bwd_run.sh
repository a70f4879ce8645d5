#!/bin/bash
# Check and time Kiln's sm_90a attention backward (FlashAttention90Backward.cuh)
# on an H100/H200 beside PyTorch's flash and cuDNN backends (bwd_check.py).
# Builds the harness with nvcc unless a prebuilt fa90bwd sits next to this
# script. Logs to $OUT/bwd-log.txt. Arguments go to bwd_check.py.
set -o pipefail
cd "$(dirname "$0")"
OUT=${OUT:-/tmp}
log=$OUT/bwd-log.txt
[ -x fa90bwd ] || nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -o fa90bwd backward.cu || exit 1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $log
(cuobjdump --dump-sass fa90bwd | grep -c HGMMA | sed 's/^/HGMMA in SASS: /') 2>&1 | tee -a $log
timeout 200 python3 bwd_check.py "$@" 2>&1 | grep -v Warning | tee -a $log
