#!/bin/bash
# kiln-run train on one artifact with --attention kernels, sm90 and cudnn,
# the same seed and data: the attention summary, the first losses (they
# agree to bf16 noise) and the steady step time of each (docs/benchmarks.md,
# "In the step"). GPU machine; the artifact compiled with --arch=sm_90.
#   bench/fa90/step-check.sh STEP.kiln TOKENS.bin BATCH SEQ [TOKEN_DTYPE]
set -o pipefail
[ $# -ge 4 ] || { echo "usage: $0 STEP.kiln TOKENS.bin BATCH SEQ [uint16|uint32]" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../.." && pwd)
kiln_run=${KILN_RUN:-$root/build-rt/tools/kiln-run/kiln-run}
source "$root/scripts/cudnn-path.sh"
for mode in kernels sm90 cudnn; do
  echo "== --attention $mode"
  timeout 300 "$kiln_run" train "$1" --init random:0 --data "$2" --steps 8 --batch "$3" --seq "$4" \
    --token-dtype "${5:-uint16}" --log-every 1 --attention "$mode" 2>&1 |
    grep -E "^step (1|2|7|8) |^attention|error"
done
