#!/usr/bin/env bash
# The real-family table of docs/compatibility.md (issue #23), regenerated:
#
#   scripts/compat-table.sh cpu [--only llama,gpt2]   # compiler machine (kiln,
#       torch, transformers, onnxscript): export each family cut to 2 layers,
#       kiln report, kiln compile --emit=artifact into bench/out/compat/<family>/
#       (git-ignored; the artifacts, about 2-4 MB each, are what travels), then
#       the table with the measured columns pending
#   scripts/compat-table.sh gpu                       # GPU machine, bench/out/compat
#       carried: kiln-run report on every artifact (random init and tokens) ->
#       bench/out/compat/measured.json, then the table with the measured columns
#       (docs/compatibility.md and measured.json also copied to $OUT when set)
#   scripts/compat-table.sh table                     # either machine: the table
#       from what bench/out/compat holds
#
# scripts/compat_table.py does the work (--help there); COMPAT_OUT overrides
# bench/out/compat, KILN / KILN_RUN the tools.
set -euo pipefail
cd "$(dirname "$0")/.."
phase=${1:-}
[ $# -gt 0 ] && shift
out=${COMPAT_OUT:-bench/out/compat}
case "$phase" in
cpu)
  python3 scripts/compat_table.py cpu --out "$out" --kiln "${KILN:-build/bin/kiln}" "$@"
  python3 scripts/compat_table.py table --out "$out"
  ;;
gpu)
  kiln_run=${KILN_RUN:-build-rt/tools/kiln-run/kiln-run}
  if [ -z "${KILN_RUN:-}" ] && ! "$kiln_run" --version >/dev/null 2>&1; then
    [ -f build-rt/build.ninja ] || cmake -S runtime -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    ninja -C build-rt kiln-run >/dev/null
  fi
  source scripts/cudnn-path.sh
  python3 scripts/compat_table.py gpu --out "$out" --kiln-run "$kiln_run" "$@"
  python3 scripts/compat_table.py table --out "$out"
  if [ -n "${OUT:-}" ] && [ -d "${OUT:-}" ]; then
    cp "$out/measured.json" docs/compatibility.md "$OUT"/
  fi
  ;;
table)
  python3 scripts/compat_table.py table --out "$out" "$@"
  ;;
*)
  echo "usage: scripts/compat-table.sh cpu|gpu|table [options]" >&2
  exit 2
  ;;
esac
