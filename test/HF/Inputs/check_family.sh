#!/usr/bin/env bash
# check_family.sh FIXTURE_DIR WORK_DIR: the acceptance checks of one Hugging
# Face family fixture (scripts/export_hf_fixtures.py), one report line each:
#   explain   kiln explain's summary (graphs, breaks)
#   attention the kiln.attention ops of the training step (causal or masked)
#   loss N    kiln interp's loss vs PyTorch's on test_data_set_N (rtol 1e-5)
#   grads     every reference gradient (max-abs normalized 1e-4; 1e-9
#             absolute for mathematically-zero ones), bad ones listed
#   artifact  a bf16 LoRA --emit=artifact compile (NVRTC, no GPU needed),
#             with its adapter count
# Any failing step prints FAIL and the script exits 1.
set -u
fixture=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../../.." && pwd)
compare="python3 $src/test/utils/compare_tensors.py"
rm -rf "$work" && mkdir -p "$work"
fail() { echo "FAIL $*"; exit 1; }

kiln explain "$fixture/model.onnx" | head -1 | sed 's/^.*: /explain: /'
kiln compile "$fixture/model.onnx" --emit=grads-mlir -o "$work/grads.mlir" || fail "compile grads"
# causal without a mask operand, causal with one (a mask that keeps no key
# after its query: a sliding window, padding, packed documents), the rest.
awk '/kiln.attention / { head = $0; sub(/\{.*/, "", head); masked = gsub(/,/, ",", head) > 2
  if (/causal/ && !masked) plain++; else if (/causal/) both++; else other++ }
  END { printf "attention: %d causal, %d causal and masked, %d other\n", plain, both, other }' \
  "$work/grads.mlir"
for s in 0 1; do
  kiln interp "$work/grads.mlir" --inputs "$fixture/test_data_set_$s" --outputs "$work/$s" \
    > /dev/null || fail "interp set $s"
  $compare "$work/$s/output_0.pb" "$fixture/test_data_set_$s/output_0.pb" --rtol 1e-5 \
    > "$work/loss$s.txt" && echo "loss $s: OK" || fail "loss $s: $(cat "$work/loss$s.txt")"
done
$compare "$work/0/grad" "$fixture/test_data_set_0/grad" --max-rel 1e-4 --atol 1e-9 > "$work/grads.txt"
rc=$?
echo "grads: $(grep -c '^OK' "$work/grads.txt") OK, $(grep -vc '^OK' "$work/grads.txt") bad"
[ $rc -eq 0 ] || { grep -v '^OK' "$work/grads.txt"; fail grads; }
kiln compile "$fixture/model.onnx" --lora=r=8,alpha=16 --precision=bf16 --emit=artifact \
  --kernel-cache="$work/cache" -o "$work/step.kiln" || fail "artifact"
echo "artifact: $(python3 "$src/test/Tools/Inputs/read_kiln.py" "$work/step.kiln" |
  grep -o '"name": "[^"]*lora_A[^"]*"' | wc -l) adapters"
