#!/usr/bin/env bash
# Checks kiln-run train's loop on a GPU (docs/runtime.md, "The training
# loop"), in two halves:
#
#   scripts/gpu-loop-check.sh prepare [OUT]   # CPU machine with a kiln build
#   scripts/gpu-loop-check.sh run [OUT]       # GPU machine (CUDA toolkit, cmake,
#                                             # python3 + numpy + onnx)
#
# `prepare` compiles two fp32 AdamW artifacts with --loop-programs: the
# padded Llama fixture (masked labels) and the Llama fixture; writes their
# weights, the padded fixture's first row as --input files and the Llama
# fixture's ids as a token file; and runs `kiln interp --grad-accum 2 --steps 3`
# on that row twice (the reference). `run` builds runtime/ there and checks:
#   accum     kiln-run --grad-accum 2 on the fixed row: losses and gradient
#             norms of 3 steps within 1e-4 relative of kiln interp's
#   loop      8 steps on the token file with a cosine schedule, eval every 2
#             steps, --save-every 2 --keep-last 2, --log-file: the kept
#             checkpoints are steps 4 and 6, the log has 8 steps with lr
#             and grad_norm and 4 evaluations, the SVG exists
#   resume    --resume from the step-4 checkpoint for 4 steps: losses of
#             steps 5..8 equal the uninterrupted run's (rtol 1e-6)
# Everything lands in OUT (default build-loopcheck/, git-ignored).
# KILN=path/to/kiln overrides the compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-}
out=${2:-build-loopcheck}
padded=test/fixtures/onnx/hf_llama_padded_dynamo
llama=test/fixtures/onnx/llama_dynamo
adamw=adamw:lr=1e-3,weight_decay=0.01
case "$mode" in
prepare)
  kiln=${KILN:-build/bin/kiln}
  rm -rf "$out" && mkdir -p "$out/interp"
  python3 test/Autodiff/Inputs/split_micro_batches.py "$padded/test_data_set_0" 2 "$out/split"
  # The first row twice: the fixed --input files feed every micro-batch.
  mkdir -p "$out/row" "$out/twice"
  for k in 0 1 2; do
    cp "$out/split/input_$k.pb" "$out/row/input_$k.pb"
    cp "$out/split/input_$k.pb" "$out/twice/input_$k.pb"
    cp "$out/split/input_$k.pb" "$out/twice/input_$((k + 3)).pb"
  done
  # The fixture's input_K.pb tensors carry no names: write them under the
  # model's input names, in the graph's order.
  python3 - "$padded/model.onnx" "$out/row" "$out/inputs" <<'PY'
import os, sys
import numpy as np
import onnx
from onnx import numpy_helper
model, src, dst = sys.argv[1:]
names = [i.name for i in onnx.load(model, load_external_data=False).graph.input]
os.makedirs(dst, exist_ok=True)
for k, name in enumerate(names):
    t = onnx.TensorProto()
    with open(os.path.join(src, f"input_{k}.pb"), "rb") as f:
        t.ParseFromString(f.read())
    np.ascontiguousarray(numpy_helper.to_array(t)).tofile(os.path.join(dst, f"{name}.bin"))
PY
  python3 scripts/onnx_to_safetensors.py "$padded/model.onnx" "$out/padded.safetensors"
  python3 scripts/onnx_to_safetensors.py "$llama/model.onnx" "$out/llama.safetensors"
  python3 scripts/onnx_to_safetensors.py --pb-inputs "$llama/test_data_set_0" "$out/tokens"
  "$kiln" compile "$padded/model.onnx" --optimizer=$adamw --loop-programs --emit=artifact \
    --arch=sm_90,sm_80 -o "$out/padded.kiln" --quiet
  "$kiln" compile "$padded/model.onnx" --optimizer=$adamw --loop-programs --emit=step-mlir \
    -o "$out/interp/step.mlir"
  "$kiln" interp "$out/interp/step.mlir" --steps 3 --grad-accum 2 --inputs "$out/twice" \
    --outputs "$out/interp" > "$out/interp/log.txt"
  "$kiln" compile "$llama/model.onnx" --optimizer=$adamw --loop-programs --emit=artifact \
    --arch=sm_90,sm_80 -o "$out/llama.kiln" --quiet
  du -sh "$out"
  ;;
run)
  cmake -S runtime -B "$out/runtime" -G Ninja -DCMAKE_BUILD_TYPE=Release > /dev/null
  cmake --build "$out/runtime"
  run="$out/runtime/tools/kiln-run/kiln-run"
  "$run" train "$out/padded.kiln" --weights "$out/padded.safetensors" --steps 3 --batch 1 \
    --seq 16 --grad-accum 2 --log-every 1 --progress off \
    --input input_ids="$out/inputs/input_ids.bin" \
    --input attention_mask="$out/inputs/attention_mask.bin" \
    --input labels="$out/inputs/labels.bin" > "$out/accum.txt"
  rm -rf "$out/ck" && mkdir -p "$out/ck"
  common=(train "$out/llama.kiln" --weights "$out/llama.safetensors" --data "$out/tokens/tokens.bin"
    --batch 2 --seq 8 --lr-schedule cosine --warmup 2 --log-every 1 --progress off
    --eval-data "$out/tokens/tokens.bin" --eval-every 2)
  "$run" "${common[@]}" --steps 8 --save-every 2 --keep-last 2 --save "$out/ck/ck.safetensors" \
    --log-file "$out/ck/log.jsonl" > "$out/loop.txt"
  "$run" "${common[@]}" --steps 4 --resume "$out/ck/ck-step4.safetensors" > "$out/resume.txt"
  python3 - "$out" <<'PY'
import json, os, re, sys
out = sys.argv[1]
def steps(path, pattern):
    return {int(m[1]): (float(m[2]), m[3] and float(m[3])) for m in
            re.finditer(pattern, open(path).read(), re.M)}
want = steps(f"{out}/interp/log.txt", r"^step (\d+): loss (\S+) grad_norm (\S+)")
got = steps(f"{out}/accum.txt", r"^step (\d+) loss (\S+) .*?(?:grad_norm (\S+))?$")
rel = max(max(abs(got[s][0] - want[s][0]) / want[s][0], abs(got[s][1] - want[s][1]) / want[s][1])
          for s in want)
ok = rel < 1e-4 and len(got) == 3
print(("OK" if ok else "FAIL"), f"accum: 3 steps, max rel err {rel:.2e} (loss and grad_norm vs kiln interp)")
kept = sorted(f for f in os.listdir(f"{out}/ck") if "-step" in f)
log = [json.loads(l) for l in open(f"{out}/ck/log.jsonl")]
evals = [l for l in log if "eval_loss" in l]
good = (kept == ["ck-step4.safetensors", "ck-step6.safetensors"] and len(log) == 8 and
        all("lr" in l and "grad_norm" in l for l in log) and len(evals) == 4 and
        log[0]["lr"] == 0 and os.path.exists(f"{out}/ck/log.svg"))
print(("OK" if good else "FAIL"), f"loop: kept {kept}, {len(log)} log lines, {len(evals)} evals, lr[0] {log[0]['lr']}")
ok &= good
whole = steps(f"{out}/loop.txt", r"^step (\d+) loss (\S+)()")
part = steps(f"{out}/resume.txt", r"^step (\d+) loss (\S+)()")
rel = max(abs(part[s][0] - whole[s][0]) / whole[s][0] for s in range(5, 9))
good = sorted(part) == [5, 6, 7, 8] and rel <= 1e-6
print(("OK" if good else "FAIL"), f"resume: steps {sorted(part)}, max rel err {rel:.2e} vs the uninterrupted run")
sys.exit(0 if ok and good else 1)
PY
  ;;
*)
  sed -n 2,22p "$0"
  exit 2
  ;;
esac
