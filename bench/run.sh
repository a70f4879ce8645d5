#!/usr/bin/env bash
# The one benchmark command, on the GPU machine: PyTorch eager, torch.compile
# (default and reduce-overhead), JAX/XLA (the same step under one jax.jit,
# attention through cuDNN and through XLA's own; "n/a" where JAX is not
# installed) and Kiln on the "small" and "1b" Llama-style LoRA steps, one
# table per config (bench/bench.py does the work).
#
#   bench/run.sh                 run the benchmark (extra flags go to bench.py,
#                                e.g. --modes jax-cudnn,jax-xla for some columns)
#   bench/run.sh --export        write bench/out/<config>/{model.onnx + data,
#                                weights.safetensors, tokens.bin, meta.json}
#
# BENCH_CONFIGS="small" (or "1b") runs one config's table only; each config
# also gets a QLoRA table (NF4 frozen weights; BENCH_QLORA=0 skips it).
#
# Kiln's column needs an artifact per config compiled on the compiler machine
# (kiln compile needs MLIR, which the GPU machine lacks): set
# KILN_ARTIFACTS=DIR with DIR/<config>/step.kiln and, optionally,
# DIR/<config>/compile_seconds. Without it the column reads "n/a".
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_OUT:-bench/out}

if [ "${1:-}" = --export ]; then
  shift
  exec python3 bench/bench.py --config small --config 1b --export-onnx "$out" "$@"
fi

kiln_run=build-rt/tools/kiln-run/kiln-run
if [ ! -x "$kiln_run" ]; then
  cmake -S runtime -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C build-rt kiln-run
fi

# cuDNN's fused attention for Kiln's column: the libcudnn beside PyTorch.
source scripts/cudnn-path.sh

mkdir -p "$out"
for config in ${BENCH_CONFIGS:-small 1b}; do
  kiln=(--kiln-run "$kiln_run")
  artifact=${KILN_ARTIFACTS:-/nonexistent}/$config/step.kiln
  if [ -f "$artifact" ]; then
    kiln+=(--kiln-artifact "$artifact")
    [ -f "$out/$config/weights.safetensors" ] && kiln+=(--kiln-weights "$out/$config/weights.safetensors")
    [ -f "$out/$config/tokens.bin" ] && kiln+=(--kiln-data "$out/$config/tokens.bin")
    seconds=$(dirname "$artifact")/compile_seconds
    [ -f "$seconds" ] && kiln+=(--kiln-compile-seconds "$(cat "$seconds")")
  fi
  python3 bench/bench.py --config "$config" --json "$out/$config.json" "${kiln[@]}" "$@"
  # The QLoRA table (BENCH_QLORA=0 skips it): PyTorch's rows with NF4 frozen
  # weights (bench/nf4.py), Kiln's from DIR/<config>q/step.kiln (--quant nf4).
  if [ "${BENCH_QLORA:-1}" = 1 ]; then
    qkiln=(--kiln-run "$kiln_run")
    qartifact=${KILN_ARTIFACTS:-/nonexistent}/${config}q/step.kiln
    if [ -f "$qartifact" ]; then
      qkiln+=(--kiln-artifact "$qartifact")
      [ -f "$out/$config/weights.safetensors" ] && qkiln+=(--kiln-weights "$out/$config/weights.safetensors")
      [ -f "$out/$config/tokens.bin" ] && qkiln+=(--kiln-data "$out/$config/tokens.bin")
    fi
    python3 bench/bench.py --config "$config" --quant nf4 --modes eager,compile \
      --json "$out/${config}q.json" "${qkiln[@]}" "$@"
  fi
done
