#!/usr/bin/env bash
# ctest entries for bench/ (test/CMakeLists.txt):
#   check.sh static    the scripts compile and parse their flags, the FLOP
#                      accounting matches hand-computed values, and the loss
#                      curve judge (loss_curve.py compare) passes, fails and
#                      maps names as it should on synthetic data (no torch needed)
#   check.sh dry-run   the whole benchmark on the tiny config on the CPU (its
#                      JAX/XLA column too where JAX is installed), the JAX
#                      model against PyTorch's (test_model_jax.py; skipped
#                      without JAX), and loss_curve.py pytorch + compare on it
#                      (synthetic weights and adapters); exits 77 (ctest:
#                      skipped) where PyTorch is not installed
set -euo pipefail
cd "$(dirname "$0")"
export PYTHONDONTWRITEBYTECODE=1
case ${1:-} in
static)
  python3 - <<'PY'
import ast
for f in ("bench.py", "model.py", "model_jax.py", "params_npy.py", "configs.py", "tokens.py",
          "loss_curve.py", "test_configs.py", "test_loss_curve.py", "test_model_jax.py",
          "attention.py"):
    ast.parse(open(f).read(), f)
PY
  python3 -m unittest -q test_configs test_loss_curve
  bash -n run.sh
  bash -n curve.sh
  python3 bench.py --help >/dev/null
  python3 attention.py --help >/dev/null
  for c in kiln-weights pytorch compare; do python3 loss_curve.py $c --help >/dev/null; done
  ;;
dry-run)
  if ! python3 -c "import torch" 2>/dev/null; then
    echo "PyTorch is not installed here: bench.py --dry-run skipped"
    exit 77
  fi
  python3 bench.py --dry-run
  python3 -m unittest -v test_model_jax
  # The PyTorch side of the loss curve on the tiny config: base weights and
  # PEFT-named initial adapters written here stand in for the export's and
  # kiln-run --steps 0's; its losses, written as a kiln-run log, must pass.
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  python3 - "$work" <<'PY'
import json, os, sys
import torch
from safetensors.torch import save_file
from configs import CONFIGS
from model import build
from tokens import markov_tokens, write_tokens
work, cfg = sys.argv[1], CONFIGS["tiny"]
model = build(cfg, torch.device("cpu"), lora=True, seed=1)
save_file({n: p.detach().contiguous() for n, p in model.named_parameters() if ".lora_" not in n},
          f"{work}/weights.safetensors")
os.makedirs(f"{work}/init")
save_file({"base_model.model." + n: p.detach().contiguous()
           for n, p in model.named_parameters() if ".lora_" in n},
          f"{work}/init/adapter_model.safetensors")
json.dump({"peft_type": "LORA", "r": cfg.lora_r, "lora_alpha": cfg.lora_alpha},
          open(f"{work}/init/adapter_config.json", "w"))
write_tokens(f"{work}/tokens.bin", markov_tokens(cfg.vocab, 4096, 0), cfg.vocab)
PY
  python3 loss_curve.py pytorch --config tiny --device cpu --steps 3 --log-every 1 \
    --weights "$work/weights.safetensors" --adapters "$work/init" --data "$work/tokens.bin" \
    --json "$work/pytorch.json" | tee "$work/kiln.log"
  python3 loss_curve.py compare --kiln "$work/kiln.log" --pytorch "$work/pytorch.json"
  ;;
*)
  echo "usage: check.sh static|dry-run" >&2
  exit 2
  ;;
esac
