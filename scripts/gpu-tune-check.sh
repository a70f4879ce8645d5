#!/usr/bin/env bash
# On the GPU machine: issue #20's acceptance for `kiln-run tune` on the bench
# artifacts (docs/tuning.md). For the small (8x1024) and 1b (4x2048) configs:
#  1. tune twice into two fresh databases, each under 3 minutes, printing
#     tune's table (changed ops, default and tuned step in the same run);
#  2. diff the two databases' choices (a difference must be a tie: its
#     measured gap within max(3%, 0.5 us per call) + 2%, tune's tie rule
#     widened by the close-call band);
#  3. time `kiln-run train` with --tuning off and on, alternately (off, on,
#     off, on), and print the step-time medians and the speedup (target on
#     1b: >= 5%), and the first losses of both (the numerics policy: same
#     loss to 1e-2 relative).
#
#   scripts/gpu-tune-check.sh [OUTDIR]    (TUNE_FLAGS="--tune-extra 0": the heuristic only;
#                                         TUNE_RUNS=1: tune once, no database comparison)
#
# Artifacts: $KILN_ARTIFACTS/<config>/step.kiln (default bench/out, compiled
# on the compiler machine as docs/benchmarks.md says), with the config's
# weights.safetensors and tokens.bin when bench/run.sh --export wrote them.
set -euo pipefail
cd "$(dirname "$0")/.."
arts=${KILN_ARTIFACTS:-bench/out}
out=${1:-${OUT:-/tmp/kiln-tune-check}}
kiln_run=${KILN_RUN:-build-rt/tools/kiln-run/kiln-run}
configs=${TUNE_CONFIGS:-small 1b}
steps=${TUNE_TRAIN_STEPS:-25}
runs=${TUNE_RUNS:-2}
case $runs in 1|2) ;; *) echo "TUNE_RUNS must be 1 or 2"; exit 2 ;; esac
if [ ! -x "$kiln_run" ]; then
  cmake -S runtime -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C build-rt kiln-run
fi
source scripts/cudnn-path.sh
mkdir -p "$out"
status=0
for config in $configs; do
  case $config in
  small) batch=8 seq=1024 ;;
  1b) batch=4 seq=2048 ;;
  *) echo "unknown config $config"; exit 2 ;;
  esac
  artifact=$arts/$config/step.kiln
  [ -f "$artifact" ] || { echo "$config: no $artifact (compile it first: docs/benchmarks.md)"; status=1; continue; }
  inputs=(--batch "$batch" --seq "$seq" --seed 0)
  if [ -f "$arts/$config/weights.safetensors" ]; then
    inputs+=(--weights "$arts/$config/weights.safetensors")
  else
    inputs+=(--init random:0)
  fi
  if [ -f "$arts/$config/tokens.bin" ]; then
    # The token ids' width follows the artifact's vocabulary (meta
    # "vocab_size", recorded at compile time): ids of a vocabulary above
    # 65536 (the 1b config's 128256) need uint32.
    vocab=$("$kiln_run" inspect "$artifact" |
      python3 -c "import re,sys; m=re.search(r'\"vocab_size\": *([0-9]+)', sys.stdin.read()); print(m.group(1) if m else 0)") || vocab=0
    if [ "$vocab" -eq 0 ]; then
      echo "$config: $artifact records no vocab_size; assuming uint16 token ids" >&2
    fi
    token_dtype=uint16
    [ "$vocab" -gt 65536 ] && token_dtype=uint32
    inputs+=(--data "$arts/$config/tokens.bin" --token-dtype "$token_dtype")
  fi
  echo "== $config: $artifact ${inputs[*]}"

  # 1. Tune twice.
  for run in $(seq 1 "$runs"); do
    db=$out/$config-$run.db
    rm -f "$db"
    begin=$(date +%s.%N)
    "$kiln_run" tune "$artifact" "${inputs[@]}" --db "$db" --progress off ${TUNE_FLAGS:-} \
      >"$out/tune-$config-$run.log" 2>"$out/tune-$config-$run.err" || {
      cat "$out/tune-$config-$run.err"; echo "$config: tune run $run failed"; status=1; continue 2; }
    seconds=$(python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$begin" "$(date +%s.%N)")
    echo "-- tune run $run: $seconds s (target < 180 s)"
    cat "$out/tune-$config-$run.log"
    python3 -c "import sys; sys.exit(float(sys.argv[1]) >= 180)" "$seconds" || {
      echo "$config: tune took $seconds s, over 3 minutes"; status=1; }
  done

  # 2. The two databases' choices.
  if [ "$runs" = 2 ]; then
  python3 - "$out/$config-1.db" "$out/$config-2.db" <<'PY' || status=1
import json, sys
# The tie rule of kiln/runtime/TuningDb.h, widened by the close-call band:
# two medians are a tie within max(margin * time, floor per call) + band *
# time. tune takes any candidate within max(margin, floor) of the fastest
# as its equal (the lowest index wins), so two runs' choices may differ by
# that much and by the noise (the band) besides.
MARGIN = 0.03      # kTieMargin
BAND = 0.02        # kCloseCallBand: what tune re-measures as a close call
FLOOR_MS = 0.0005  # kTieFloorMs: 0.5 us per call, for the us-scale GEMMs
def entries(path):
    text = open(path).read()
    body = json.loads(text[text.index("\n") + 1:])
    assert len(body["devices"]) == 1, "one machine expected"
    return {(e["kind"], e["hash"], e["shape"]): e for e in body["devices"][0]["entries"]}
a, b = entries(sys.argv[1]), entries(sys.argv[2])
assert a.keys() == b.keys(), "the two runs measured different ops"
def tolerance(ms):
    return max(MARGIN * ms, FLOOR_MS) + BAND * ms
def gap(x, y):
    # Two runs chose differently: the gap between the two choices and the
    # tolerance it is judged by. A default against a candidate: the
    # candidate's gain over the default in its run. Two candidates: their
    # times, run 2's scaled to run 1's default.
    if x["default_ms"] <= 0 or y["default_ms"] <= 0:
        return float("inf"), 0.0
    if x["choice"] == 0 or y["choice"] == 0:
        other = y if x["choice"] == 0 else x
        return other["default_ms"] - other["tuned_ms"], tolerance(other["default_ms"])
    tx, ty = x["tuned_ms"], y["tuned_ms"] * x["default_ms"] / y["default_ms"]
    return abs(tx - ty), tolerance(min(tx, ty))
def tie(x, y):
    g, t = gap(x, y)
    return g <= t
# The choice itself, not its index: configurations beyond the heuristic
# (--tune-extra) are indexed among those a screening admitted, which may
# differ between runs; a launch's choice is its shape (config).
choice = lambda e: (e["impl"], e["algo"], e.get("config", ""))
diff = [k for k in a if choice(a[k]) != choice(b[k])]
bad = [k for k in diff if not tie(a[k], b[k])]
print(f"-- databases: {len(a)} ops, {len(diff)} choices differ ({len(diff) - len(bad)} at ties: "
      f"a gap within max({MARGIN * 100:.0f}%, {FLOOR_MS * 1000:.1f} us per call) + {BAND * 100:.0f}%)")
for k in diff:
    g, t = gap(a[k], b[k])
    print(f"   {a[k]['label']} {k[2]}: run 1 choice {a[k]['choice']} {a[k].get('config', '')} ({a[k]['default_ms']:.4f} -> {a[k]['tuned_ms']:.4f} ms), "
          f"run 2 choice {b[k]['choice']} {b[k].get('config', '')} ({b[k]['default_ms']:.4f} -> {b[k]['tuned_ms']:.4f} ms); "
          f"gap {g * 1000:.2f} us, tolerance {t * 1000:.2f} us"
          + ("" if k not in bad else "  NOT A TIE"))
    # Each run's default as its cuBLASLt heuristic gave it: when they differ,
    # the two runs did not measure the same default.
    da, db = a[k].get("default_config", ""), b[k].get("default_config", "")
    if da and db and da != db:
        print(f"      the defaults differ: run 1 {da}, run 2 {db}")
sys.exit(1 if bad else 0)
PY
  fi

  # 3. train with the database off and on, alternately.
  for round in 1 2; do
    for mode in off on; do
      "$kiln_run" train "$artifact" "${inputs[@]}" --steps "$steps" --log-every 1 \
        --db "$out/$config-1.db" --tuning "$mode" --progress off \
        >"$out/train-$config-$mode-$round.log" 2>&1 || {
        cat "$out/train-$config-$mode-$round.log"; echo "$config: train --tuning $mode failed"; status=1; continue 3; }
    done
  done
  grep -h '^tuning:' "$out/train-$config-on-1.log" || true
  python3 - "$out" "$config" <<'PY' || status=1
import statistics, sys
out, config = sys.argv[1], sys.argv[2]
def run(mode):
    ms, first = [], None
    for r in (1, 2):
        for line in open(f"{out}/train-{config}-{mode}-{r}.log"):
            f = line.split()
            if len(f) > 5 and f[0] == "step" and f[1].isdigit():
                if int(f[1]) == 1 and first is None:
                    first = float(f[3])
                if int(f[1]) > 5:  # after warm-up
                    ms.append(float(f[5]))
    return statistics.median(ms), first
off, loss_off = run("off")
on, loss_on = run("on")
gain = (off - on) / off * 100
err = abs(loss_on - loss_off) / abs(loss_off)
print(f"-- train {config}: step median {off:.2f} ms untuned, {on:.2f} ms tuned ({gain:+.1f}% faster); "
      f"first loss {loss_off:.6f} vs {loss_on:.6f} (rel. {err:.1e})")
sys.exit(0 if err <= 1e-2 else 1)
PY
done
exit $status
