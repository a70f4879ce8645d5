#!/usr/bin/env bash
# Builds and runs the fused NF4 GEMM check on the GPU machine (nvcc there):
#   bash bench/nf4gemm/run.sh [REPS]       from the repository root
# Prints one row per case (relative L2 errors, times) and exits 1 if a case fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-/tmp}
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80 \
  -Xptxas -v -I "$root/runtime/lib/kernels" "$here/nf4_gemm_check.cu" -lcublasLt \
  -o "$out/nf4_gemm_check" 2>"$out/ptxas.txt" || { cat "$out/ptxas.txt"; exit 2; }
grep -A2 "nf4Gemm" "$out/ptxas.txt" | grep -E "registers|spill" || true
if command -v cuobjdump >/dev/null; then
  echo "SASS (sm_90a): $(cuobjdump --dump-sass "$out/nf4_gemm_check" | grep -c HMMA) HMMA, $(cuobjdump --dump-sass "$out/nf4_gemm_check" | grep -c LDSM) LDSM, $(cuobjdump --dump-sass "$out/nf4_gemm_check" | grep -cE 'LDL|STL') LDL/STL"
fi
"$out/nf4_gemm_check" "${1:-20}"
