#!/usr/bin/env bash
# ctest entries for bench/ (test/CMakeLists.txt):
#   check.sh static    the scripts compile and parse their flags, the FLOP
#                      accounting matches hand-computed values, and the loss
#                      curve judge (loss_curve.py compare) passes, fails and
#                      maps names as it should on synthetic data (no torch needed)
#   check.sh dry-run   the whole benchmark on the tiny config on the CPU; exits
#                      77 (ctest: skipped) where PyTorch is not installed
set -euo pipefail
cd "$(dirname "$0")"
export PYTHONDONTWRITEBYTECODE=1
case ${1:-} in
static)
  python3 - <<'PY'
import ast
for f in ("bench.py", "model.py", "configs.py", "tokens.py", "loss_curve.py",
          "test_configs.py", "test_loss_curve.py"):
    ast.parse(open(f).read(), f)
PY
  python3 -m unittest -q test_configs test_loss_curve
  bash -n run.sh
  bash -n curve.sh
  python3 bench.py --help >/dev/null
  for c in kiln-weights pytorch compare; do python3 loss_curve.py $c --help >/dev/null; done
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
