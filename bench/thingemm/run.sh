#!/usr/bin/env bash
# Builds and runs the thin-GEMM check on the GPU machine (nvcc there):
#   bash bench/thingemm/run.sh [REPS]     from the repository root
# Prints one row per LoRA GEMM of the 1b and small steps (errors against
# float64 for ours and cuBLASLt, times, floor) and the 1b step's totals;
# exits 1 if a case fails; each case also times Variants.h's other tilings.
# THIN_BIN/THIN_FATBIN/THIN_VARIANTS: use prebuilt ones.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-/tmp}
bin=${THIN_BIN:-$out/thin_gemm_check}
fatbin=${THIN_FATBIN:-$out/support.fatbin}
variants=${THIN_VARIANTS:-$out/variants.fatbin}
if [ -z "${THIN_BIN:-}" ]; then
  nvcc -O3 -std=c++17 -arch=sm_90 -I "$root/runtime/lib" -I "$here" "$here/thin_gemm_check.cu" \
    "$root/runtime/lib/ThinGemmPlan.cpp" -lcublasLt -lcuda -o "$bin"
fi
if [ -z "${THIN_FATBIN:-}" ]; then
  nvcc -fatbin -gencode arch=compute_90,code=sm_90 -Xptxas -v -o "$fatbin" \
    "$root/runtime/lib/kernels/SupportKernels.cu" 2>"$out/ptxas.txt"
  grep -A2 "kiln_thin_gemm" "$out/ptxas.txt" | grep -E "spill" | sort | uniq -c || true
fi
if [ -z "${THIN_VARIANTS:-}" ]; then
  nvcc -fatbin -gencode arch=compute_90,code=sm_90 -I "$root/runtime/lib/kernels" -o "$variants" \
    "$here/variants.cu"
fi
rc=0
"$bin" "$fatbin" "${1:-20}" -1 "$variants" || rc=$?
if [ "$rc" = 2 ]; then # a launch failed: each case alone, to name it
  n=$(grep -c '^    {"' "$here/thin_gemm_check.cu")
  for ((i = 0; i < n; ++i)); do "$bin" "$fatbin" 3 "$i" | sed -n 3p || echo "case $i: rc $?"; done
fi
exit "$rc"
