#!/usr/bin/env bash
# kiln-row-dot on the GPU, compiler half: kernel checks of the row-dot
# template and the bench artifacts of each variant, in one folder to carry.
#
#   bench/rowdot/prepare.sh EXPORTS STAGE     (then: tar cJf B.tar.xz -C STAGE/.. $(basename STAGE))
#
# EXPORTS: `bench/bench.py --config small --config 1b --export-onnx EXPORTS`.
# VARIANTS_1b / VARIANTS_small: "name=kiln compile flags;..." (default below).
# STAGE gets bin/ (kiln-run, kiln-kernel-check from build-rt), kc/ (kernel
# checks), art/<config>/<variant>/step.kiln, tokens and sizes, and run.sh.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 EXPORTS STAGE" >&2; exit 2; }
exports=$(cd "$1" && pwd) st=$2
cd "$(dirname "$0")/../.."
kiln=$PWD/build/bin/kiln
: "${VARIANTS_1b:=rdoff=--row-dot=false;rd=--row-dot;rdp=--row-dot --row-dot-prefetch;rdpk=--row-dot --row-dot-prefetch --row-dot-min-k=4096}"
: "${VARIANTS_small:=rdoff=--row-dot=false;rd=--row-dot;rdp=--row-dot --row-dot-prefetch}"
rm -rf "$st" && mkdir -p "$st"/bin "$st"/kc "$st"/art
st=$(cd "$st" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp build-rt/tools/kiln-run/kiln-run build-rt/tools/kiln-kernel-check/kiln-kernel-check "$st"/bin/
cp bench/rowdot/run.sh "$st"/
for pf in false true; do
  build/bin/kiln-opt test/Codegen/row-dot.mlir --kiln-fuse --kiln-lower-to-step \
    "--kiln-row-dot=prefetch=$pf" -o "$tmp/rowdot_$pf.mlir"
  for n in 1 37 64; do
    "$kiln" compile "$tmp/rowdot_$pf.mlir" --emit=cuda --arch=sm_90 --kernel-check=n=$n \
      -o "$st/kc/rowdot_${pf}_n$n" 2> /dev/null
  done
done
python3 scripts/llama_mlir.py --config tiny64 > "$tmp/tiny64.mlir"
"$kiln" compile "$tmp/tiny64.mlir" --precision=bf16 --lora r=16,alpha=32,dropout=0 \
  --optimizer adamw:lr=1e-4 --row-dot --emit=cuda --arch=sm_90 --kernel-check=batch=2,seq=16 \
  -o "$st/kc/tiny64_lora" 2> /dev/null
for cfg in 1b small; do
  var=VARIANTS_$cfg
  mkdir -p "$st/art/$cfg"
  python3 -c "import json,sys; c = json.load(open(sys.argv[1]))['config']
print(c['batch'], c['seq'])" "$exports/$cfg/meta.json" > "$st/art/$cfg/bs"
  cp "$exports/$cfg/tokens.bin" "$st/art/$cfg/"
  : > "$st/art/$cfg/variants"
  IFS=';' read -ra vs <<< "${!var}"
  for v in "${vs[@]}"; do
    name=${v%%=*} flags=${v#*=}
    KILN=$kiln KILN_FLAGS="$flags" bash bench/compile.sh "$exports" "$tmp/art" "$cfg" > /dev/null
    mkdir -p "$st/art/$cfg/$name" && mv "$tmp/art/$cfg/step.kiln" "$st/art/$cfg/$name/"
    echo -n "$name " >> "$st/art/$cfg/variants"
  done
done
echo "$st: $(du -sh "$st" | cut -f1)"
