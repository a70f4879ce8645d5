#!/usr/bin/env bash
# The fused NF4 GEMM in the step (issue #22) on a GPU, in two halves:
#
#   scripts/gpu-nf4-check.sh prepare [OUT]   # CPU machine with a kiln build
#   scripts/gpu-nf4-check.sh run [OUT] [RESULTS]
#                                            # sm_90 GPU machine (CUDA toolkit,
#                                            # cmake, ninja, python3 + numpy)
#
# `prepare` compiles the bench's small config as bf16 QLoRA with double
# quantization (--memory-report batch=8,seq=1024, so that every NF4 weight's
# GEMM has its sizes) into OUT (default build-nf4check/, git-ignored, ~5 MiB)
# with a token file. `run` builds runtime/ alone, then
#   1. trains 20 steps (AdamW, lr 1e-3, --tuning off) with the fixed rule
#      (dequantize + cuBLASLt) and with KILN_NF4_GEMM=fused (every NF4 GEMM
#      the kernel can run on the codes, the dequantize launches skipped), from
#      the same init and data, and compares each step's loss (relative
#      1e-2); then one SGD step at lr 1 each way and twice the default way,
#      whose adapter changes are the gradients: fused against default within
#      max(1e-2, 2x what two default runs differ by) relative L2 per tensor
#      (the trained AdamW adapters are printed, not judged: Adam's
#      normalization magnifies differences of near-zero gradients);
#   2. profiles one step of each (--profile: which ran, and their times);
#   3. tunes the step (GEMM top-1 only, no launch variants: the NF4 sites are
#      what is measured) and trains from that database, printing its nf4
#      entries: the choice per signature.
# RESULTS (default OUT/results) receives the logs, profiles and compare.txt;
# the script exits 1 if a check fails. KILN=path/to/kiln overrides the
# compiler; NF4_MODEL and NF4_TOKENS the model and tokens.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
out=${2:-build-nf4check}
case "$mode" in
prepare)
  kiln=${KILN:-build/bin/kiln}
  model=${NF4_MODEL:-/work/bench-out/small/model.onnx}
  tokens=${NF4_TOKENS:-/work/main/bench/out/small/tokens.bin}
  rm -rf "$out" && mkdir -p "$out"
  "$kiln" compile "$model" --lora r=16,alpha=32,dropout=0 --precision=bf16 \
    --optimizer adamw:lr=1e-4 --quant nf4 --double-quant --memory-report batch=8,seq=1024 \
    --emit=artifact --quiet -o "$out/qlora.kiln" > "$out/compile.log"
  # SGD at lr 1: one step moves each adapter by minus its gradient.
  "$kiln" compile "$model" --lora r=16,alpha=32,dropout=0 --precision=bf16 \
    --optimizer sgd:lr=1 --quant nf4 --double-quant --memory-report batch=8,seq=1024 \
    --emit=artifact --quiet -o "$out/qlora-sgd.kiln" >> "$out/compile.log"
  cp "$tokens" "$out/tokens.bin"
  du -sh "$out"
  ;;
run)
  results=${3:-$out/results}
  mkdir -p "$results"
  build=${RT_BUILD:-/tmp/kiln-rt-nf4}
  cmake -S runtime -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    ${KILN_CUDNN_FRONTEND_INCLUDE:+-DKILN_CUDNN_FRONTEND_INCLUDE=$KILN_CUDNN_FRONTEND_INCLUDE} \
    > /dev/null
  ninja -C "$build" kiln-run Nf4GemmTest > "$build/ninja.log" || { tail -30 "$build/ninja.log"; exit 1; }
  "$build/test/Nf4GemmTest"
  # From here on every command runs and the compare step reports what failed.
  set +e
  run=$build/tools/kiln-run/kiln-run
  common=("$out/qlora.kiln" --batch 8 --seq 1024 --init random:0 --data "$out/tokens.bin"
          --lr 1e-3 --log-every 1 --progress off)
  step() { # LOG COMMAND...: runs it, its output to LOG, a line if it fails
    local log=$1; shift
    "$@" > "$log" 2>&1 || echo "FAILED (exit $?): $*" | tee -a "$log"
  }
  step "$results/train-default.log" "$run" train "${common[@]}" --steps 20 --tuning off \
    --save "$out/default.safetensors"
  step "$results/train-fused.log" env KILN_NF4_GEMM=fused "$run" train "${common[@]}" --steps 20 \
    --tuning off --save "$out/fused.safetensors"
  # The gradients: one SGD step (lr 1) from the same init, each way, and a
  # second default run (the run-to-run spread of the step itself).
  sgd=("$out/qlora-sgd.kiln" --batch 8 --seq 1024 --init random:0 --data "$out/tokens.bin"
       --progress off --tuning off)
  step "$out/sgd-init.log" "$run" train "${sgd[@]}" --steps 0 --save "$out/sgd-init.safetensors"
  step "$out/sgd-default.log" "$run" train "${sgd[@]}" --steps 1 --save "$out/sgd-default.safetensors"
  step "$out/sgd-default2.log" "$run" train "${sgd[@]}" --steps 1 \
    --save "$out/sgd-default2.safetensors"
  step "$out/sgd-fused.log" env KILN_NF4_GEMM=fused "$run" train "${sgd[@]}" --steps 1 \
    --save "$out/sgd-fused.safetensors"
  step "$out/profile-default.log" "$run" train "${common[@]}" --steps 2 --tuning off \
    --profile "$results/profile-default.tsv"
  step "$out/profile-fused.log" env KILN_NF4_GEMM=fused "$run" train "${common[@]}" --steps 2 \
    --tuning off --profile "$results/profile-fused.tsv"
  step "$results/tune.log" "$run" tune "$out/qlora.kiln" --batch 8 --seq 1024 --init random:0 \
    --data "$out/tokens.bin" --db "$out/tune.db" --tune-topk 1 --tune-extra 0 \
    --tune-launches off --attention kernels --progress off
  step "$results/train-tuned.log" "$run" train "${common[@]}" --steps 5 --db "$out/tune.db" \
    --attention kernels
  # The bench's 1b QLoRA step (NF4_1B: its artifact), tuned the same way.
  if [ -n "${NF4_1B:-}" ]; then
    step "$results/tune-1b.log" timeout "${NF4_1B_TIMEOUT:-90}" "$run" tune "$NF4_1B" --batch 4 \
      --seq 2048 --init random:0 --db "$out/tune-1b.db" --tune-topk 1 --tune-extra 0 \
      --tune-launches off --attention kernels --progress off
  fi
  python3 - "$out" "$results" <<'PY' | tee "$results/compare.txt"
import json, re, struct, sys
import numpy as np
out, results = sys.argv[1], sys.argv[2]
ok = True
def losses(path):
    return [float(m.group(1)) for m in re.finditer(r"^step \d+ loss ([-0-9.e]+)", open(path).read(), re.M)]
def nf4_line(path):
    return next((l.strip() for l in open(path) if l.startswith("nf4 gemms:")), "(no nf4 line)")
import os
for name in sorted(os.listdir(results)):
    if name.endswith(".log"):
        for line in open(os.path.join(results, name)):
            if line.startswith("FAILED") or "error:" in line:
                print("%s: %s" % (name, line.strip())); ok = False
d, f = losses(results + "/train-default.log"), losses(results + "/train-fused.log")
print("default:", nf4_line(results + "/train-default.log"))
print("fused:  ", nf4_line(results + "/train-fused.log"))
if len(d) != 20 or len(f) != 20:
    print("FAIL: expected 20 losses each, got", len(d), len(f)); ok = False
else:
    worst = max(abs(a - b) / abs(a) for a, b in zip(d, f))
    print("loss steps 1, 20: default %.6f %.6f, fused %.6f %.6f; worst relative difference %.2e"
          % (d[0], d[-1], f[0], f[-1], worst))
    ok &= worst <= 1e-2
def tensors(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    base = 8 + n
    got = {}
    for name, t in header.items():
        if name == "__metadata__" or "lora_" not in name or t["dtype"] != "F32":
            continue
        a, b = t["data_offsets"]
        got[name] = np.frombuffer(raw[base + a:base + b], dtype=np.float32).astype(np.float64)
    return got
def rel(x, y):
    return np.linalg.norm(x - y) / max(np.linalg.norm(y), 1e-30)
try:
    td, tf = tensors(out + "/default.safetensors"), tensors(out + "/fused.safetensors")
    print("AdamW adapters after 20 steps (%d tensors): worst relative L2 lora_B %.2e, lora_A "
          "%.2e (Adam's normalization magnifies differences of near-zero gradients; the "
          "gradients are checked below)"
          % (len(td), max(rel(tf[k], td[k]) for k in td if "lora_B" in k),
             max(rel(tf[k], td[k]) for k in td if "lora_A" in k)))
except (OSError, ValueError) as e:
    print("FAIL: AdamW checkpoints:", e); ok = False
try:
    init = tensors(out + "/sgd-init.safetensors")
    runs = {name: tensors(out + "/sgd-%s.safetensors" % name)
            for name in ("default", "default2", "fused")}
    # SGD at lr 1: gradient = init - after.
    grads = {name: {k: init[k] - t[k] for k in init if k in t} for name, t in runs.items()}
    names = sorted(grads["default"])
    fused = max(rel(grads["fused"][k], grads["default"][k]) for k in names)
    spread = max(rel(grads["default2"][k], grads["default"][k]) for k in names)
    total = rel(np.concatenate([grads["fused"][k] for k in names]),
                np.concatenate([grads["default"][k] for k in names]))
    print("gradients of one SGD step (%d adapter tensors): fused vs default worst tensor %.2e, "
          "all together %.2e; default vs default %.2e" % (len(names), fused, total, spread))
    # The default path is not bitwise repeatable (cuDNN's attention backward
    # accumulates dQ atomically): two default runs differ by `spread`. The
    # fused kernel sums the same products in another order, so it may differ
    # from one default run by about what two default runs differ by; 2x the
    # spread allows for both sides, 1e-2 is the floor.
    print("  bound: max(1e-2, 2 x default vs default) = %.2e" % max(1e-2, 2 * spread))
    ok &= len(names) > 0 and fused <= max(1e-2, 2 * spread)
except (OSError, ValueError) as e:
    print("FAIL: SGD checkpoints:", e); ok = False
def profile(path):
    rows = [l.rstrip("\n").split("\t") for l in open(path)][1:]
    nf4 = [float(r[2]) for r in rows if r[1].startswith("nf4 ")]
    skipped = sum(r[1].startswith("skipped ") for r in rows)
    total = sum(float(r[2]) for r in rows)
    return len(rows), len(nf4), sum(nf4), skipped, total
for name in ("default", "fused"):
    if not os.path.exists(results + "/profile-%s.tsv" % name):
        print("no profile", name); ok = False; continue
    n, k, ms, skipped, total = profile(results + "/profile-%s.tsv" % name)
    print("profile %s: %d ops, %d fused NF4 GEMMs (%.3f ms), %d launches skipped, %.3f ms in all"
          % (name, n, k, ms, skipped, total))
for log, dbfile in (("tune.log", "tune.db"), ("tune-1b.log", "tune-1b.db")):
    if not os.path.exists(results + "/" + log):
        continue
    print(log + ":")
    for line in open(results + "/" + log).read().splitlines():
        if line.startswith("nf4 ") or line.startswith("step ") or line.startswith("tune:"):
            print("  " + line)
    if not os.path.exists(out + "/" + dbfile):
        print("  no database written"); ok = False; continue
    raw = open(out + "/" + dbfile).read()
    db = json.loads(raw[raw.index("\n") + 1:])
    entries = [e for dev in db["devices"] for e in dev["entries"] if e["kind"] == "nf4"]
    for e in entries:
        print("  db %s: %s (default %.4f ms, tuned %.4f ms, error %.1e)"
              % (e["label"], e["impl"], e["default_ms"], e["tuned_ms"], e["error"]))
    ok &= len(entries) > 0
if os.path.exists(results + "/train-tuned.log"):
    print("tuned train:", nf4_line(results + "/train-tuned.log"))
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY
  ;;
*)
  echo "usage: scripts/gpu-nf4-check.sh prepare|run [OUT] [RESULTS]" >&2
  exit 2
  ;;
esac
