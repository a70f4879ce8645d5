#!/usr/bin/env python3
"""Kiln vs PyTorch and JAX on a Llama-style LoRA training step.

Runs PyTorch eager, torch.compile (default) and torch.compile
(mode="reduce-overhead"), the same step in JAX jit-compiled whole by XLA
(model_jax.py; attention through cuDNN and through XLA's own), each on the
same weights and the same, different batch each step, then Kiln through
`kiln-run train` when given an artifact, and prints one table: median step
time over --steps timed steps after --warmup steps (PyTorch: CUDA events;
JAX: wall clock to the loss being ready), tokens/s, model TFLOP/s
(configs.py), peak memory, and compile time (Kiln) or first step time
(PyTorch, JAX). JAX runs in a process of its own, with preallocation off,
so the two frameworks' allocators do not share one process; its modes read
"n/a" where JAX is not installed (cuDNN's also without a GPU).

  bench/bench.py --config small              # on the GPU machine
  bench/bench.py --modes jax-cudnn,jax-xla   # only the JAX columns
  bench/bench.py --dry-run                   # tiny config on the CPU
  bench/bench.py --config 1b --export-onnx out/   # ONNX + weights for Kiln
  bench/bench.py --model hf --config small   # transformers' LlamaForCausalLM + PEFT

--model hf runs the same configs as Hugging Face's LlamaForCausalLM (sdpa)
with PEFT's LoRA, as users run them (hf_peft.py: bf16 weights, fp32
adapters, bf16 autocast, fused AdamW; the model's own loss), and Kiln on
that model's export (scripts/export_hf.py; bench/run.sh --export-hf). JAX
has no HF column (model_jax.py is the hand-written model).
"""

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from configs import CONFIGS, step_flops, frozen_gemm_params, lora_params  # noqa: E402

TORCH_MODES = ("eager", "compile", "compile-ro")
JAX_MODES = {"jax-cudnn": "cudnn", "jax-xla": "xla"}  # mode -> attention implementation
MODES = TORCH_MODES + tuple(JAX_MODES)
LABELS = {"eager": "pytorch eager", "compile": "torch.compile",
          "compile-ro": "torch.compile reduce-overhead",
          "jax-cudnn": "jax/xla, cuDNN attention", "jax-xla": "jax/xla, XLA attention"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", choices=sorted(CONFIGS),
                   help="configuration(s) to run (default: small)")
    p.add_argument("--model", choices=("hand", "hf"), default="hand",
                   help="hand: bench/model.py (default); hf: transformers' "
                        "LlamaForCausalLM + PEFT LoRA (hf_peft.py)")
    p.add_argument("--modes", default=",".join(MODES),
                   help="comma-separated subset of " + ",".join(MODES))
    p.add_argument("--steps", type=int, default=20, help="timed steps (>= 20 for the report)")
    p.add_argument("--warmup", type=int, default=5, help="untimed steps first")
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dry-run", action="store_true",
                   help="tiny config on the CPU, 2 timed steps: checks the script runs")
    p.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    p.add_argument("--export-onnx", metavar="DIR",
                   help="export DIR/<config>/model.onnx (+ external weights), "
                        "weights.safetensors and tokens.bin, then exit")
    p.add_argument("--quant", choices=["nf4"],
                   help="QLoRA rows: the PyTorch models' frozen linear weights as NF4 "
                        "(bench/nf4.py; give Kiln a --quant nf4 artifact)")
    p.add_argument("--kiln-artifact", metavar="STEP.kiln",
                   help="run Kiln's column with kiln-run train on this artifact")
    p.add_argument("--kiln-run", default="build-rt/tools/kiln-run/kiln-run")
    p.add_argument("--kiln-weights", metavar="FILE")
    p.add_argument("--kiln-data", metavar="TOKENS.bin")
    p.add_argument("--kiln-compile-seconds", type=float,
                   help="Kiln's compile time for the table (bench/run.sh measures it)")
    # The JAX process bench.py starts for a JAX mode (not for the command line).
    p.add_argument("--jax-worker", choices=sorted(JAX_MODES), help=argparse.SUPPRESS)
    p.add_argument("--jax-params", help=argparse.SUPPRESS)
    p.add_argument("--jax-result", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.model == "hf" and args.export_onnx:
        p.error("--export-onnx writes the hand-written model; the HF model's export is "
                "bench/run.sh --export-hf (scripts/export_hf.py)")
    args.modes = [m for m in args.modes.split(",") if m]
    for m in args.modes:
        if m not in MODES:
            p.error(f"unknown mode '{m}'")
    if args.dry_run:
        args.config = ["tiny"]
        args.steps, args.warmup = 2, 1
    args.config = args.config or ["small"]
    return args


def run_pytorch(cfg, mode, args, device):
    import torch
    from model import build
    from tokens import step_batches

    torch.manual_seed(args.seed)
    if args.model == "hf":
        import hf_peft
        model = hf_peft.add_lora(hf_peft.build_model(cfg, args.seed, torch.bfloat16, device),
                                 cfg, args.seed)
        params = hf_peft.adapter_parameters(model)
        call = hf_peft.causal_lm_loss  # the model's own loss, labels already shifted
    else:
        model = build(cfg, device, seed=args.seed)
        params = model.adapter_parameters()
        call = lambda m, inputs, labels: m(inputs, labels)  # noqa: E731
    if args.quant == "nf4":
        from nf4 import quantize_model
        if args.model == "hf":
            raise SystemExit("bench.py: --quant nf4 applies to the hand-written model (--model hand)")
        quantize_model(model)
        if device.type == "cuda":
            torch.cuda.empty_cache()  # the bf16 weights are gone
    opt_kwargs = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW(params, lr=args.lr, **opt_kwargs)
    batches = []
    for b in step_batches(cfg.vocab, cfg.batch, cfg.seq, 1 + args.warmup + args.steps, args.seed):
        tokens = torch.from_numpy(b).to(device, torch.long)
        batches.append((tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()))
    batches = iter(batches)

    forward = model
    if mode == "compile":
        forward = torch.compile(model)
    elif mode == "compile-ro":
        forward = torch.compile(model, mode="reduce-overhead")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)

    def step():
        inputs, labels = next(batches)
        if mode == "compile-ro":
            torch.compiler.cudagraph_mark_step_begin()
        with autocast:
            loss = call(forward, inputs, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    loss = step()
    if cuda:
        torch.cuda.synchronize()
    first_step = time.perf_counter() - start
    # Said at once: a run cut off by a time limit still shows how far it got.
    print(f"{cfg.name} {mode}{', NF4' if args.quant else ''}: first step (compile) "
          f"{first_step:.1f} s", file=sys.stderr, flush=True)
    for _ in range(args.warmup):
        step()

    times = []
    for _ in range(args.steps):
        if cuda:
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            loss = step()
            end.record()
            end.synchronize()
            times.append(begin.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            loss = step()
            times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated() if cuda else None
    return {"median_s": statistics.median(times), "first_step_s": first_step,
            "peak_bytes": peak, "loss": float(loss), "versions": torch_versions(device)}


def torch_versions(device):
    import torch

    v = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if device.type == "cuda":
        v["cudnn"] = torch.backends.cudnn.version()
        v["device"] = torch.cuda.get_device_name()
    return v


def jax_unavailable(mode, device):
    """Why mode cannot run here (a note for the table), or None."""
    missing = [m for m in ("jax", "optax") if importlib.util.find_spec(m) is None]
    if missing:
        return "n/a (" + " and ".join(missing) + " not installed)"
    if JAX_MODES[mode] == "cudnn" and device.type != "cuda":
        return "n/a (cuDNN attention needs a GPU)"
    return None


def write_jax_params(cfg, args):
    """model.py's weights and LoRA init for args.seed (what run_pytorch
    trains), built on the CPU, as files for the JAX process."""
    import torch
    from model import build
    from params_npy import write_torch_params

    directory = tempfile.mkdtemp(prefix=f"kiln-bench-{cfg.name}-")
    write_torch_params(build(cfg, torch.device("cpu"), seed=args.seed), directory)
    return directory


def run_jax(cfg, mode, args, device, params_dir):
    """One JAX mode in a process of its own (XLA's allocator alone on the
    device, preallocation off so its peak is what the step uses)."""
    fd, result_file = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    env = dict(os.environ, XLA_PYTHON_CLIENT_PREALLOCATE="false")
    # No silent fallback to the CPU where the GPU was meant.
    env["JAX_PLATFORMS"] = "cuda" if device.type == "cuda" else "cpu"
    cmd = [sys.executable, os.path.abspath(__file__), "--jax-worker", mode,
           "--config", cfg.name, "--steps", str(args.steps), "--warmup", str(args.warmup),
           "--lr", str(args.lr), "--seed", str(args.seed),
           "--jax-params", params_dir, "--jax-result", result_file]
    print("+ " + " ".join(cmd), file=sys.stderr)
    try:
        proc = subprocess.run(cmd, env=env, stderr=subprocess.PIPE, text=True)
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            line = (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
            return {"note": "n/a (" + line[:160] + ")", "failed": True}
        with open(result_file) as f:
            return json.load(f)
    finally:
        os.remove(result_file)


def jax_versions():
    import importlib.metadata
    import jax
    import jaxlib

    device = jax.devices()[0]
    v = {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "backend": jax.default_backend(),
         "device": device.device_kind, "platform_version": device.client.platform_version}
    packages = ["optax"]
    if v["backend"] == "gpu":
        packages += ["jax-cuda13-plugin", "jax-cuda12-plugin", "nvidia-cudnn-cu13",
                     "nvidia-cudnn-cu12"]
    for package in packages:
        try:
            v[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    try:  # what the CUDA plugin loaded (jaxlib's own query; None without CUDA)
        from jax._src.lib import cuda_versions
        if cuda_versions is not None:
            v["cudnn"] = cuda_versions.cudnn_get_version()
            v["cuda_runtime"] = cuda_versions.cuda_runtime_get_version()
    except (ImportError, AttributeError, RuntimeError):
        pass
    return v


def jax_worker(args):
    """The JAX process; a failure ends in one line for the table's note."""
    try:
        return jax_measure(args)
    except Exception as e:  # noqa: BLE001 - the traceback, then the line run_jax shows
        import traceback
        traceback.print_exc()
        first = (str(e).strip().splitlines() or [""])[0]
        print(f"JAX failed: {type(e).__name__}: {first}".rstrip(": "),
              file=sys.stderr)
        return 1


def jax_measure(args):
    """model_jax.py's whole step under one jax.jit, timed as run_pytorch
    times PyTorch's; writes the result to args.jax_result."""
    import jax
    import model_jax
    from params_npy import read_params
    from tokens import step_batches

    cfg = CONFIGS[args.config[0]]
    implementation = JAX_MODES[args.jax_worker]
    device = jax.devices()[0]
    frozen, adapters = read_params(args.jax_params)
    frozen, adapters = jax.device_put(frozen, device), jax.device_put(adapters, device)
    init, step = model_jax.make_train_step(cfg, implementation, args.lr)
    state = init(adapters)
    batches = [jax.device_put(b, device) for b in
               step_batches(cfg.vocab, cfg.batch, cfg.seq, 1 + args.warmup + args.steps, args.seed)]
    jax.block_until_ready((frozen, adapters, state, batches))
    batches = iter(batches)

    def timed_step():
        nonlocal adapters, state
        start = time.perf_counter()
        adapters, state, loss = step(adapters, state, frozen, next(batches))
        loss.block_until_ready()
        return time.perf_counter() - start, loss

    first_step, loss = timed_step()  # includes tracing and XLA's compile
    for _ in range(args.warmup):
        timed_step()
    times = []
    for _ in range(args.steps):
        seconds, loss = timed_step()
        times.append(seconds)
    stats = device.memory_stats() or {}
    result = {"median_s": statistics.median(times), "first_step_s": first_step,
              "peak_bytes": stats.get("peak_bytes_in_use"), "loss": float(loss),
              "versions": jax_versions()}
    with open(args.jax_result, "w") as f:
        json.dump(result, f)
    return 0


def run_kiln(cfg, args):
    """kiln-run train on the artifact; parses its report lines."""
    if not args.kiln_artifact:
        return {"note": "n/a (runtime step execution pending)"}
    cmd = [args.kiln_run, "train", args.kiln_artifact,
           "--steps", str(args.warmup + args.steps), "--batch", str(cfg.batch),
           "--seq", str(cfg.seq), "--seed", str(args.seed), "--lr", str(args.lr),
           "--log-every", "1", "--token-dtype", "uint32" if cfg.vocab > 65535 else "uint16"]
    cmd += ["--weights", args.kiln_weights] if args.kiln_weights else ["--init", f"random:{args.seed}"]
    if args.kiln_data:
        cmd += ["--data", args.kiln_data]
    print("+ " + " ".join(cmd), file=sys.stderr)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        line = (proc.stderr.strip().splitlines() or ["exit %d" % proc.returncode])[-1]
        return {"note": "n/a (" + line.replace("kiln-run: error: ", "") + ")"}
    # Expected report lines: "step N loss L step_ms MS tokens/s TPS peak_mem BYTES".
    times, peak, loss = [], None, None
    for line in proc.stdout.splitlines():
        fields = line.split()
        if len(fields) >= 10 and fields[0] == "step" and fields[4] == "step_ms":
            step, loss = int(fields[1]), float(fields[3])
            if step > args.warmup:
                times.append(float(fields[5]) / 1e3)
            peak = int(fields[9])
    if not times:
        return {"note": "n/a (no step report from kiln-run)"}
    return {"median_s": statistics.median(times), "first_step_s": args.kiln_compile_seconds,
            "peak_bytes": peak, "loss": loss}


def format_row(cfg, name, result):
    flops = step_flops(cfg)["total"]
    if "median_s" not in result:
        return [cfg.name, name, result["note"], "", "", "", ""]
    s = result["median_s"]
    peak = result.get("peak_bytes")
    first = result.get("first_step_s")
    return [cfg.name, name, f"{s * 1e3:.2f}", f"{cfg.tokens / s:,.0f}",
            f"{flops / s / 1e12:.1f}", f"{peak / 2**30:.2f}" if peak else "-",
            f"{first:.1f}" if first is not None else "-"]


HEADER = ["config", "system", "step ms (median)", "tokens/s", "TFLOP/s",
          "peak GiB", "compile / first step s"]


def print_table(rows):
    widths = [max(len(str(r[i])) for r in [HEADER] + rows) for i in range(len(HEADER))]
    for r in [HEADER] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


def export(cfg, out_dir, args):
    """ONNX of the base model's loss (Kiln inserts LoRA itself), HF-named
    weights as safetensors, and a token file for kiln-run."""
    import numpy as np
    import torch
    from model import build

    d = os.path.join(out_dir, cfg.name)
    os.makedirs(d, exist_ok=True)
    model = build(cfg, torch.device("cpu"), lora=False, seed=args.seed).eval()
    ids = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq + 1))
    inputs, labels = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    batch, seq = torch.export.Dim("batch", min=1, max=1024), torch.export.Dim("seq", min=2, max=65536)
    path = os.path.join(d, "model.onnx")
    try:
        torch.onnx.export(model, (inputs, labels), path, dynamo=True, external_data=True,
                          input_names=["input_ids", "labels"], output_names=["loss"],
                          dynamic_shapes={"input_ids": {0: batch, 1: seq},
                                          "labels": {0: batch, 1: seq}})
        shapes = "dynamic batch, seq"
    except Exception as e:  # noqa: BLE001 - report and fall back, visibly
        print(f"warning: dynamic-shape export failed ({type(e).__name__}: {e}); "
              f"exporting static shapes {cfg.batch}x{cfg.seq}", file=sys.stderr)
        torch.onnx.export(model, (inputs, labels), path, dynamo=True, external_data=True,
                          input_names=["input_ids", "labels"], output_names=["loss"])
        shapes = f"static {cfg.batch}x{cfg.seq}"
    # Small initializers (shape constants) inline, big ones in model.onnx.data:
    # model.onnx alone is then enough for `kiln compile` (it reads shapes, not
    # weights), so it can travel to the compiler machine without the weights.
    import onnx
    graph = onnx.load(path)
    for f in os.listdir(d):
        if f.startswith("model.onnx") and f != "model.onnx":
            os.remove(os.path.join(d, f))
    onnx.save(graph, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="model.onnx.data", size_threshold=4096)
    from safetensors.torch import save_file
    save_file({n: p.detach().contiguous() for n, p in model.state_dict().items()},
              os.path.join(d, "weights.safetensors"), metadata={"format": "pt"})
    # kiln-run's token format: raw little-endian ids (docs/runtime.md); a
    # learnable stream (bench/tokens.py) so loss curves move.
    from tokens import markov_tokens, write_tokens
    dtype = write_tokens(os.path.join(d, "tokens.bin"),
                         markov_tokens(cfg.vocab, min(cfg.tokens * 64, 1 << 22), args.seed),
                         cfg.vocab)
    with open(os.path.join(d, "meta.json"), "w") as f:
        json.dump({"config": cfg.as_dict(), "shapes": shapes, "token_dtype": dtype,
                   "frozen_gemm_params": frozen_gemm_params(cfg),
                   "lora_params": lora_params(cfg)}, f, indent=2)
    print(f"exported {d}: model.onnx ({shapes}), weights.safetensors, tokens.bin")


def main(argv=None):
    args = parse_args(argv)
    if args.jax_worker:
        return jax_worker(args)
    import torch

    if args.export_onnx:
        for name in args.config:
            export(CONFIGS[name], args.export_onnx, args)
        return 0

    device = torch.device("cpu" if args.dry_run or not torch.cuda.is_available() else "cuda")
    if device.type == "cpu" and not args.dry_run:
        print("error: no CUDA device (use --dry-run for a CPU smoke test)", file=sys.stderr)
        return 1
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    rows, records, versions = [], [], {"pytorch": {}, "jax": {}}
    for name in args.config:
        cfg = CONFIGS[name]
        params_dir = None
        try:
            for mode in args.modes:
                if mode == "compile-ro" and device.type == "cpu":
                    result = {"note": "n/a (reduce-overhead needs CUDA graphs)"}
                elif mode in TORCH_MODES:
                    result = run_pytorch(cfg, mode, args, device)
                elif args.model == "hf":
                    result = {"note": "n/a (the JAX step is the hand-written model's)"}
                elif jax_unavailable(mode, device):
                    result = {"note": jax_unavailable(mode, device)}
                else:
                    if device.type == "cuda":  # the device as free as PyTorch can leave it
                        import gc
                        torch._dynamo.reset()  # drops compiled graphs and CUDA graph pools
                        gc.collect()
                        torch.cuda.empty_cache()
                    params_dir = params_dir or write_jax_params(cfg, args)
                    result = run_jax(cfg, mode, args, device, params_dir)
                label = (LABELS[mode] + (" (HF+PEFT)" if args.model == "hf" else "") +
                         (", NF4" if args.quant else ""))
                versions["pytorch" if mode in TORCH_MODES else "jax"].update(
                    result.get("versions", {}))
                rows.append(format_row(cfg, label, result))
                records.append({"config": name, "system": label, "model": args.model, **result})
                print(f"{name} {label}: {result}", file=sys.stderr)
        finally:
            if params_dir:
                shutil.rmtree(params_dir)
        result = run_kiln(cfg, args)
        label = ("kiln (HF export)" if args.model == "hf" else "kiln") + \
            (", NF4" if args.quant else "")
        rows.append(format_row(cfg, label, result))
        records.append({"config": name, "system": label, "model": args.model, **result})
    print_table(rows)
    for side, v in versions.items():
        if v:
            print(f"{side} columns: " + ", ".join(f"{k} {x}" for k, x in v.items()))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)
    failed = [r["system"] for r in records if r.get("failed")]
    if failed and args.dry_run:  # the smoke test's point: every path that can run here ran
        print("error: failed in the dry run: " + ", ".join(failed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
