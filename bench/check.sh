#!/usr/bin/env bash
# ctest entries for bench/ (test/CMakeLists.txt):
#   check.sh static    the scripts compile and parse their flags, and the FLOP
#                      accounting matches hand-computed values (no torch needed)
#   check.sh dry-run   the whole benchmark on the tiny config on the CPU; exits
#                      77 (ctest: skipped) where PyTorch is not installed
set -euo pipefail
cd "$(dirname "$0")"
export PYTHONDONTWRITEBYTECODE=1
case ${1:-} in
static)
  python3 - <<'PY'
import ast
for f in ("bench.py", "model.py", "configs.py", "test_configs.py"):
    ast.parse(open(f).read(), f)
PY
  python3 -m unittest -q test_configs
  bash -n run.sh
  python3 bench.py --help >/dev/null
  ;;
dry-run)
  if ! python3 -c "import torch" 2>/dev/null; then
    echo "PyTorch is not installed here: bench.py --dry-run skipped"
    exit 77
  fi
  python3 bench.py --dry-run
  ;;
*)
  echo "usage: check.sh static|dry-run" >&2
  exit 2
  ;;
esac
