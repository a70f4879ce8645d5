#!/usr/bin/env bash
# ctest entries for bench/ (test/CMakeLists.txt):
#   check.sh static    the scripts compile and parse their flags, the FLOP
#                      accounting matches hand-computed values, the loss
#                      curve judge (loss_curve.py compare) passes, fails and
#                      maps names as it should on synthetic data, hf_peft.py's
#                      configs and judge, lora_gemms.py's attribution of a
#                      profile to adapter roles, and scripts/compat_table.py's table
#                      (no torch needed; hf_peft's model tests run where torch,
#                      transformers and peft are installed)
#   check.sh dry-run   the whole benchmark on the tiny config on the CPU (its
#                      JAX/XLA column too where JAX is installed), the JAX
#                      model against PyTorch's (test_model_jax.py; skipped
#                      without JAX), and loss_curve.py pytorch + compare on it
#                      (synthetic weights and adapters), also with --quant nf4
#                      (the QLoRA curve's side); where peft is installed
#                      also the HF+PEFT rows (bench.py --model hf, eager) and
#                      hf_peft.py init/train/eval: PEFT's reload of adapters
#                      saved after step 2 reproduces the step-3 loss of a
#                      3-step run; exits 77 (ctest: skipped) where PyTorch is
#                      not installed
set -euo pipefail
cd "$(dirname "$0")"
export PYTHONDONTWRITEBYTECODE=1
case ${1:-} in
static)
  python3 - <<'PY'
import ast
for f in ("bench.py", "model.py", "model_jax.py", "params_npy.py", "configs.py", "tokens.py",
          "loss_curve.py", "curve_interp.py", "test_configs.py", "test_loss_curve.py", "test_model_jax.py",
          "attention.py", "nf4.py", "test_nf4.py", "lora_gemms.py", "test_lora_gemms.py", "hf_peft.py", "test_hf_peft.py", "../scripts/compat_table.py",
          "../scripts/test_compat_table.py"):
    ast.parse(open(f).read(), f)
PY
  python3 -m unittest -q test_configs test_loss_curve test_hf_peft test_lora_gemms
  python3 -m unittest discover -q -s ../scripts -p 'test_compat_table.py'
  bash -n run.sh
  bash -n nf4gemm/run.sh
  bash -n cudnnplans/run.sh
  bash -n curve.sh
  bash -n ../scripts/gpu-hf-peft-check.sh
  bash -n ../scripts/compat-table.sh
  python3 bench.py --help >/dev/null
  python3 attention.py --help >/dev/null
  for c in kiln-weights pytorch compare; do python3 loss_curve.py $c --help >/dev/null; done
  python3 curve_interp.py --help >/dev/null
  for c in config init weights train eval; do python3 hf_peft.py $c --help >/dev/null; done
  ;;
dry-run)
  if ! python3 -c "import torch" 2>/dev/null; then
    echo "PyTorch is not installed here: bench.py --dry-run skipped"
    exit 77
  fi
  python3 bench.py --dry-run
  # The QLoRA rows: NF4 frozen weights (bench/nf4.py) on the tiny config.
  python3 bench.py --dry-run --quant nf4 --modes eager
  python3 -m unittest -q test_nf4
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
  # The QLoRA curve's PyTorch side (--quant nf4): every linear weight of the
  # tiny model (2 layers x 7, the LM head) as NF4.
  python3 loss_curve.py pytorch --config tiny --device cpu --steps 3 --log-every 1 \
    --weights "$work/weights.safetensors" --adapters "$work/init" --data "$work/tokens.bin" \
    --quant nf4 --nf4-weights 15 --json "$work/pytorch-nf4.json" | tee "$work/kiln-nf4.log"
  python3 loss_curve.py compare --kiln "$work/kiln-nf4.log" --pytorch "$work/pytorch-nf4.json"
  if python3 -c "import peft, transformers" 2>/dev/null; then
    python3 bench.py --dry-run --model hf --modes eager
    # Which adapters a logged loss was computed with: step t's loss is the
    # forward before step t's update, so adapters saved after 2 steps give
    # the step-3 loss of a 3-step run (the reload check of
    # scripts/gpu-hf-peft-check.sh, here with PyTorch's log standing in).
    python3 hf_peft.py init --config tiny --out "$work/hf"
    python3 - "$work/hf/tokens.bin" <<'PY'
import sys
from tokens import markov_tokens, write_tokens
write_tokens(sys.argv[1], markov_tokens(256, 4096, 0), 256)
PY
    hf=(--config tiny --dir "$work/hf" --data "$work/hf/tokens.bin" --device cpu --log-every 1)
    python3 hf_peft.py train "${hf[@]}" --steps 3 --json "$work/hf/3.json" | tee "$work/hf/3.log"
    python3 hf_peft.py train "${hf[@]}" --steps 2 --save-adapters "$work/hf/after2" >/dev/null
    python3 hf_peft.py eval --config tiny --weights "$work/hf/model.safetensors" \
      --adapters "$work/hf/after2" --data "$work/hf/tokens.bin" --step 3 --kiln "$work/hf/3.log" \
      --tolerance 1e-5 --device cpu
  else
    echo "peft is not installed here: the HF+PEFT dry run is skipped"
  fi
  ;;
*)
  echo "usage: check.sh static|dry-run" >&2
  exit 2
  ;;
esac
