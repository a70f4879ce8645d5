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
#   bench/run.sh --export-hf     compiler machine: the HF LlamaForCausalLM of each
#                                config (bench/hf_peft.py config), exported by
#                                scripts/export_hf.py and compiled by kiln into
#                                bench/out/hf-<config>/{step.kiln, compile_seconds}
#
# BENCH_CONFIGS="small" (or "1b") runs one config's table only; each config
# also gets a QLoRA table (NF4 frozen weights; BENCH_QLORA=0 skips it,
# BENCH_LORA=0 runs it alone: the 1b QLoRA table's torch.compile row compiles
# for minutes, so give it a device command of its own). Kiln's QLoRA column
# reads DIR/<config>q/step.kiln, compiled with `--quant nf4 --double-quant`
# (QLoRA's recipe; the PyTorch rows keep fp32 absmax, bench/nf4.py).
# BENCH_MODELS="hand hf" adds the Hugging Face rows (default "hand"): HF's
# LlamaForCausalLM + PEFT LoRA in PyTorch eager and torch.compile
# (bench.py --model hf) and Kiln on that model's export, from
# KILN_ARTIFACTS/hf-<config>/step.kiln with the same weights (seed 0, written
# here by bench/hf_peft.py weights into bench/out/hf-<config>/).
#
# Kiln's column needs an artifact per config compiled on the compiler machine
# (kiln compile needs MLIR, which the GPU machine lacks): set
# KILN_ARTIFACTS=DIR with DIR/<config>/step.kiln and, optionally,
# DIR/<config>/compile_seconds (and tokens.bin, used when the export's are
# not here: bench/compile.sh writes that layout). Without it the column
# reads "n/a". KILN_RUN=path/to/kiln-run uses a prebuilt runtime (a kiln-run
# built on the compiler machine runs here: docs/gpu-validation.md).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${BENCH_OUT:-bench/out}

if [ "${1:-}" = --export ]; then
  shift
  exec python3 bench/bench.py --config small --config 1b --export-onnx "$out" "$@"
fi
if [ "${1:-}" = --export-hf ]; then
  kiln=${KILN:-build/bin/kiln}
  for config in ${BENCH_CONFIGS:-small 1b}; do
    d=$out/hf-$config
    read -r batch seq < <(python3 -c "import sys; sys.path.insert(0, 'bench')
from configs import CONFIGS; c = CONFIGS['$config']; print(c.batch, c.seq)")
    python3 bench/hf_peft.py config --config "$config" -o "$d/config.json"
    python3 scripts/export_hf.py "$d/config.json" --out "$d/export"
    start=$(date +%s.%N)
    "$kiln" compile "$d/export/model.onnx" --lora r=16,alpha=32,dropout=0 --precision=bf16 \
      --optimizer adamw:lr=1e-4 --memory-report "batch=$batch,seq=$seq" --kernel-cache=none \
      --emit=artifact -o "$d/step.kiln" >"$d/compile.log"
    python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" \
      "$start" "$(date +%s.%N)" >"$d/compile_seconds"
    # The weights are made there: only the artifact travels (a model.onnx
    # holding its weights inline, under 1 GiB of them, goes too).
    rm -f "$d/export/model.onnx.data" "$d/export/model.safetensors"
    find "$d/export" -name model.onnx -size +4M -delete
    echo "bench/run.sh: $d/step.kiln ($(cat "$d/compile_seconds") s to compile)"
  done
  exit 0
fi

kiln_run=${KILN_RUN:-build-rt/tools/kiln-run/kiln-run}
if [ ! -x "$kiln_run" ]; then
  cmake -S runtime -B build-rt -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  ninja -C build-rt kiln-run
fi

# cuDNN's fused attention for Kiln's column: the libcudnn beside PyTorch.
source scripts/cudnn-path.sh

mkdir -p "$out"
for model in ${BENCH_MODELS:-hand}; do
  for config in ${BENCH_CONFIGS:-small 1b}; do
    kiln=(--kiln-run "$kiln_run")
    name=$config
    [ "$model" = hf ] && name=hf-$config
    artifact=${KILN_ARTIFACTS:-/nonexistent}/$name/step.kiln
    if [ -f "$artifact" ]; then
      kiln+=(--kiln-artifact "$artifact")
      if [ "$model" = hf ] && [ ! -f "$out/$name/weights.safetensors" ]; then
        python3 bench/hf_peft.py weights --config "$config" --seed 0 --out "$out/$name"
      fi
      [ -f "$out/$name/weights.safetensors" ] && kiln+=(--kiln-weights "$out/$name/weights.safetensors")
      # The export's tokens, else those bench/compile.sh put beside the artifact.
      if [ -f "$out/$name/tokens.bin" ]; then
        kiln+=(--kiln-data "$out/$name/tokens.bin")
      elif [ -f "$(dirname "$artifact")/tokens.bin" ]; then
        kiln+=(--kiln-data "$(dirname "$artifact")/tokens.bin")
      fi
      seconds=$(dirname "$artifact")/compile_seconds
      [ -f "$seconds" ] && kiln+=(--kiln-compile-seconds "$(cat "$seconds")")
    fi
    if [ "$model" = hf ] || [ "${BENCH_LORA:-1}" = 1 ]; then
      python3 bench/bench.py --model "$model" --config "$config" --json "$out/$name.json" \
        "${kiln[@]}" "$@"
    fi
    # The QLoRA table (BENCH_QLORA=0 skips it): PyTorch's rows with NF4 frozen
    # weights (bench/nf4.py), Kiln's from DIR/<config>q/step.kiln (--quant nf4
    # --double-quant).
    if [ "$model" = hand ] && [ "${BENCH_QLORA:-1}" = 1 ]; then
      qkiln=(--kiln-run "$kiln_run")
      qartifact=${KILN_ARTIFACTS:-/nonexistent}/${config}q/step.kiln
      if [ -f "$qartifact" ]; then
        qkiln+=(--kiln-artifact "$qartifact")
        [ -f "$out/$config/weights.safetensors" ] && qkiln+=(--kiln-weights "$out/$config/weights.safetensors")
        if [ -f "$out/$config/tokens.bin" ]; then
          qkiln+=(--kiln-data "$out/$config/tokens.bin")
        elif [ -f "$(dirname "$qartifact")/tokens.bin" ]; then
          qkiln+=(--kiln-data "$(dirname "$qartifact")/tokens.bin")
        fi
      fi
      python3 bench/bench.py --config "$config" --quant nf4 --modes eager,compile \
        --json "$out/${config}q.json" "${qkiln[@]}" "$@"
    fi
  done
done
