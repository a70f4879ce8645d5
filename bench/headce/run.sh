#!/usr/bin/env bash
# The fused LM head's chunk, fp32 logits (old) against bf16 logits (new), on
# the GPU machine, from the repository root:
#   bash bench/headce/run.sh [ROWS V H REPS LOGIT_STD]    (default 512 128256 2048 20 2)
# Builds bench/headce/head_ce_check.cu with nvcc unless HEAD_CE_BIN names a
# prebuilt one, runs it (errors against float64 and times of both paths),
# then, where PyTorch is installed, torch_ref.py (PyTorch bf16's error on the
# same inputs: the policy's bar). Exit status: the check's, then the policy's.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${OUT:-/tmp}
bin=${HEAD_CE_BIN:-$out/head_ce_check}
if [ -z "${HEAD_CE_BIN:-}" ]; then
  nvcc -O3 -std=c++17 -arch=sm_90 -I "$root/runtime/lib/kernels" "$here/head_ce_check.cu" \
    -lcublasLt -o "$bin"
fi
dump=$(mktemp -d /tmp/headce.XXXXXX)
trap 'rm -rf "$dump"' EXIT
rc=0
"$bin" "${1:-512}" "${2:-128256}" "${3:-2048}" "${4:-20}" "${5:-2}" "$dump" || rc=$?
if python3 -c "import torch" 2>/dev/null; then
  python3 "$here/torch_ref.py" "$dump" || rc=${rc/#0/1}
else
  echo "torch_ref.py skipped: no PyTorch here (the policy's bar is not checked)"
fi
exit "$rc"
