#!/usr/bin/env bash
# kiln-row-dot on the GPU, device half (bench/rowdot/prepare.sh makes the
# folder): REPO=<the tree, for scripts/cudnn-path.sh> OUT=<results> bash STAGE/run.sh
# Kernel checks, the 1b variants once, profiles, the 1b variants again,
# small; OUT/summary.txt has medians of steps 6-25, losses and the
# profiles' costliest labels.
set -u
S=$(cd "$(dirname "$0")" && pwd)
cd "$REPO"
source scripts/cudnn-path.sh
export KILN_CUDNN_LIBRARY
sum=$OUT/summary.txt
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee -a "$sum"
for d in "$S"/kc/*/; do
  n=$(basename "$d")
  "$S/bin/kiln-kernel-check" "$d" > "$OUT/kc_$n.txt" 2>&1
  echo "kc $n rc=$? $(tail -1 "$OUT/kc_$n.txt") $(grep ^FAIL "$OUT/kc_$n.txt" | head -3)" | tee -a "$sum"
done
train() { # config variant run
  local cfg=$1 v=$2 r=$3
  read -r b s < "$S/art/$cfg/bs"
  "$S/bin/kiln-run" train "$S/art/$cfg/$v/step.kiln" --data "$S/art/$cfg/tokens.bin" \
    --steps 25 --batch "$b" --seq "$s" --init random:0 --log-every 1 --progress off "${@:4}" \
    > "$OUT/train_${cfg}_${v}_$r.txt" 2>&1
  python3 - "$OUT/train_${cfg}_${v}_$r.txt" "$cfg $v $r" >> "$sum" <<'PY'
import sys, statistics, re
ms, loss = [], {}
for l in open(sys.argv[1]):
    m = re.match(r"step (\d+) loss (\S+) step_ms (\S+).*peak_mem (\S+)", l)
    if m:
        t = int(m.group(1)); loss[t] = m.group(2)
        if t >= 6: ms.append(float(m.group(3)))
        peak = m.group(4)
if ms:
    print(f"{sys.argv[2]}: median {statistics.median(ms):.2f} ms loss1 {loss.get(1)} loss25 {loss.get(25)} peak {peak}")
else:
    print(f"{sys.argv[2]}: FAILED " + open(sys.argv[1]).read()[-300:].replace("\n", " | "))
PY
}
for v in $(cat "$S/art/1b/variants"); do train 1b "$v" 1; done
for v in rdoff rd rdp; do
  [ -d "$S/art/1b/$v" ] || continue
  train 1b "$v" p --profile "$OUT/prof_$v.tsv"
  python3 - "$OUT/prof_$v.tsv" "$v" >> "$sum" <<'PY'
import sys, collections
tot = collections.Counter(); cnt = collections.Counter()
for l in open(sys.argv[1]).read().splitlines()[1:]:
    p = l.split("\t")
    if len(p) < 3: continue
    try: ms = float(p[2])
    except ValueError: continue
    tot[p[1]] += ms; cnt[p[1]] += 1
print(f"profile {sys.argv[2]}: total {sum(tot.values()):.2f} ms, {sum(cnt.values())} ops")
for k, v in tot.most_common(40):
    print(f"  {v:8.3f} {cnt[k]:4d} {k}")
PY
done
for v in $(cat "$S/art/1b/variants"); do train 1b "$v" 2; done
for v in $(cat "$S/art/small/variants"); do train small "$v" 1; done
