#!/usr/bin/env bash
# The SiLU·mul gradient kernel's launch shapes on the GPU machine, from the
# repository root:  bash bench/loopilp/run.sh [ROWS COLS REPS]  (8192 8192 20)
# LOOP_ILP_BIN: a prebuilt binary (nvcc -O3 -std=c++17 -arch=sm_90 ...).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${LOOP_ILP_BIN:-${OUT:-/tmp}/loop_ilp_check}
[ -n "${LOOP_ILP_BIN:-}" ] || nvcc -O3 -std=c++17 -arch=sm_90 "$here/loop_ilp_check.cu" -o "$bin"
exec "$bin" "${1:-8192}" "${2:-8192}" "${3:-20}"
