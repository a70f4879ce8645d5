#!/usr/bin/env bash
# Compiles the bench's Kiln artifacts on the compiler machine from the
# exports of `bench/run.sh --export` (model.onnx, meta.json, tokens.bin per
# config; the weights stay on the GPU machine):
#
#   bench/compile.sh EXPORTS OUTDIR [VARIANT...]    (default: small 1b smallq 1bq)
#
# VARIANT is a config (LoRA: the bench's flags) or a config with q
# (QLoRA: `--quant nf4 --double-quant`). KILN_FLAGS adds flags to every
# compile (e.g. --lora-k-concat). OUTDIR/<variant>/ gets step.kiln,
# compile_seconds and tokens.bin: the layout KILN_ARTIFACTS expects.
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 EXPORTS OUTDIR [VARIANT...]" >&2; exit 2; }
exports=$1 out=$2
shift 2
kiln=${KILN:-$(cd "$(dirname "$0")/.." && pwd)/build/bin/kiln}
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(small 1b smallq 1bq)
for variant in "${variants[@]}"; do
  config=${variant%q}
  flags=(--lora r=16,alpha=32,dropout=0 --precision=bf16 --optimizer adamw:lr=1e-4)
  [ "$variant" != "$config" ] && flags+=(--quant nf4 --double-quant)
  read -r batch seq < <(python3 -c "import json,sys; c = json.load(open(sys.argv[1]))['config']
print(c['batch'], c['seq'])" "$exports/$config/meta.json")
  mkdir -p "$out/$variant"
  start=$(date +%s.%N)
  # shellcheck disable=SC2086
  "$kiln" compile "$exports/$config/model.onnx" "${flags[@]}" ${KILN_FLAGS:-} \
    --memory-report "batch=$batch,seq=$seq" --emit=artifact -o "$out/$variant/step.kiln" \
    > "$out/$variant/compile.log"
  python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
    "$start" "$(date +%s.%N)" > "$out/$variant/compile_seconds"
  cp "$exports/$config/tokens.bin" "$out/$variant/"
  echo "$out/$variant/step.kiln ($(cat "$out/$variant/compile_seconds") s)"
done
