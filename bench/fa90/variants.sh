#!/bin/bash
# A/B builds of Kiln's sm_90a attention (FlashAttention90*.cuh's -D switches)
# in one device call:
#   bench/fa90/variants.sh build DIR   # compiler machine: nvcc, one build at a time
#   bench/fa90/variants.sh run DIR     # GPU machine: every build, logs in $OUT
# Forward builds (driver.cu): base, ov128 (kOverlap at head dim 128).
# Backward builds (backward.cu, which runs the forward first and checks O
# too): base (the defaults: kSplitDq and kDqWarp), nosplit (kDqWarp alone),
# f2 (float2 atomics, no split: the defaults before 2026-12-03), v4
# (kDqV4: 16-byte atomics through a lane trade, no staging), splitmerge
# (+ kMergedDkDq), splitpipe (+ kPipelined), all (splitpipe + a 3-stage ring
# + ov128, float2 atomics: the staging does not fit beside 3 stages at 128), bulk (kBulkDq: dQ by bulk reductions at head dim 64), maskednc2
# (the harness's masked forwards on two consumer warpgroups: the forward
# times bwd_check.py prints for masked shapes), bshd (the defaults with v, o,
# dO, dV stored [B, S, H, D], the 1b step's layout: -DFA90_LAYOUT=156, its
# forward too). Each backward build runs on
# the same inputs and float64 reference (bwd_check.py --bin).
set -o pipefail
mode=$1
dir=$(cd "$2" 2>/dev/null && pwd) || { echo "usage: $0 build|run DIR" >&2; exit 2; }
cd "$(dirname "$0")"
NVCC="nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Xptxas -v"
FWD=("base:" "ov128:-DKILN_FA90_OVERLAP128=1")
BWD=("base:" "nosplit:-DKILN_FA90_BWD_SPLIT=0" "f2:-DKILN_FA90_BWD_DQWARP=0 -DKILN_FA90_BWD_SPLIT=0"
     "v4:-DKILN_FA90_BWD_DQWARP=0 -DKILN_FA90_BWD_DQV4=1 -DKILN_FA90_BWD_SPLIT=0"
     "splitmerge:-DKILN_FA90_BWD_MERGE=1" "splitpipe:-DKILN_FA90_BWD_PIPE=1"
     "all:-DKILN_FA90_BWD_PIPE=1 -DKILN_FA90_BWD_STAGES=3 -DKILN_FA90_OVERLAP128=1 -DKILN_FA90_BWD_DQWARP=0"
     "bulk:-DKILN_FA90_BWD_DQWARP=0 -DKILN_FA90_BWD_SPLIT=0 -DKILN_FA90_BWD_BULKDQ=1"
     "maskednc2:-DFA90_MASKED_NC=2" "bshd:-DFA90_LAYOUT=156")
if [ "$mode" = build ]; then
  for v in "${FWD[@]}"; do
    name=${v%%:*}; flags=${v#*:}
    echo "== fa90_$name $flags"
    $NVCC $flags -o "$dir/fa90_$name" driver.cu > "$dir/fa90_$name.ptxas" 2>&1 || { cat "$dir/fa90_$name.ptxas"; exit 1; }
    grep -E "C75|[1-9][0-9]* bytes spill" "$dir/fa90_$name.ptxas" | sort | uniq -c | cut -c1-160
  done
  for v in "${BWD[@]}"; do
    name=${v%%:*}; flags=${v#*:}
    echo "== fa90bwd_$name $flags"
    $NVCC $flags -o "$dir/fa90bwd_$name" backward.cu > "$dir/fa90bwd_$name.ptxas" 2>&1 || { cat "$dir/fa90bwd_$name.ptxas"; exit 1; }
    grep -E "C75|[1-9][0-9]* bytes spill" "$dir/fa90bwd_$name.ptxas" | sort | uniq -c | cut -c1-160
  done
  exit 0
fi
[ "$mode" = run ] || { echo "usage: $0 build|run DIR" >&2; exit 2; }
OUT=${OUT:-/tmp}
log=$OUT/variants-log.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $log
python3 -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda)" 2>&1 | tee -a $log
for v in "${FWD[@]}"; do
  name=${v%%:*}
  echo "== forward $name" | tee -a $log
  FA90_ONLY=${FA90_ONLY:-tail64,full64,tail128,full128,1b,8b,small,8b-full} timeout ${FWD_TIMEOUT:-30} "$dir/fa90_$name" 2>&1 | tee -a $log
done
bins=()
for v in "${BWD[@]}"; do bins+=(--bin "${v%%:*}=$dir/fa90bwd_${v%%:*}"); done
echo "== backward" | tee -a $log
timeout ${BWD_TIMEOUT:-280} python3 bwd_check.py "${bins[@]}" --iters ${ITERS:-10} \
  --shapes ${SHAPES:-tail64,full64,tail128,full128,1b,8b,small} \
  --masked ${MASKED:-elem64,elem128-causal,doc128,pad128-causal,1b-doc,1b-pad} 2>&1 | grep -v Warning | tee -a $log
