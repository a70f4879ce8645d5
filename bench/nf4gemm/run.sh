#!/usr/bin/env bash
# Builds and runs the fused NF4 GEMM check on the GPU machine (nvcc there):
#   bash bench/nf4gemm/run.sh [REPS] [wgmma|tma|all]     from the repository root
# Prints one row per case (relative L2 errors, times) and exits 1 if a case
# fails (3 if a kernel hangs). wgmma (default): the wgmma kernel
# (Nf4Gemm90.cuh); tma: also its form with the activations by TMA; all: also
# the mma.sync tilings (Nf4Gemm.cuh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-/tmp}
nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_80,code=sm_80 \
  -Xptxas -v -I "$root/runtime/lib/kernels" -I "$root/include" "$here/nf4_gemm_check.cu" -lcublasLt -lcuda \
  -o "$out/nf4_gemm_check" 2>"$out/ptxas.txt" || { cat "$out/ptxas.txt"; exit 2; }
grep -A2 "nf4Gemm" "$out/ptxas.txt" | grep -E "registers|spill" || true
grep -i "warning" "$out/ptxas.txt" || true
if command -v cuobjdump >/dev/null; then
  sass=$(cuobjdump --dump-sass "$out/nf4_gemm_check")
  echo "SASS: $(grep -c HGMMA <<<"$sass") HGMMA, $(grep -c HMMA <<<"$sass") HMMA, $(grep -c LDSM <<<"$sass") LDSM, $(grep -cE 'LDL|STL' <<<"$sass") LDL/STL"
fi
"$out/nf4_gemm_check" "${1:-20}" "${2:-wgmma}"
