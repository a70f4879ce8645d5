#!/usr/bin/env python3
"""Kiln vs PyTorch on a Llama-style LoRA training step.

Runs PyTorch eager, torch.compile (default) and torch.compile
(mode="reduce-overhead") on the same model and data, then Kiln through
`kiln-run train` when given an artifact, and prints one table: median step
time over --steps timed steps after --warmup steps (CUDA events), tokens/s,
model TFLOP/s (configs.py), peak memory, and compile time (Kiln) or first
step time (PyTorch).

  bench/bench.py --config small              # on the GPU machine
  bench/bench.py --dry-run                   # tiny config on the CPU
  bench/bench.py --config 1b --export-onnx out/   # ONNX + weights for Kiln
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from configs import CONFIGS, step_flops, frozen_gemm_params, lora_params  # noqa: E402

MODES = ("eager", "compile", "compile-ro")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", action="append", choices=sorted(CONFIGS),
                   help="configuration(s) to run (default: small)")
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
    p.add_argument("--kiln-artifact", metavar="STEP.kiln",
                   help="run Kiln's column with kiln-run train on this artifact")
    p.add_argument("--kiln-run", default="build-rt/tools/kiln-run/kiln-run")
    p.add_argument("--kiln-weights", metavar="FILE")
    p.add_argument("--kiln-data", metavar="TOKENS.bin")
    p.add_argument("--kiln-compile-seconds", type=float,
                   help="Kiln's compile time for the table (bench/run.sh measures it)")
    args = p.parse_args(argv)
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

    torch.manual_seed(args.seed)
    model = build(cfg, device, seed=args.seed)
    opt_kwargs = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW(model.adapter_parameters(), lr=args.lr, **opt_kwargs)
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    tokens = torch.randint(0, cfg.vocab, (cfg.batch, cfg.seq + 1), generator=gen).to(device)
    inputs, labels = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    forward = model
    if mode == "compile":
        forward = torch.compile(model)
    elif mode == "compile-ro":
        forward = torch.compile(model, mode="reduce-overhead")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16)

    def step():
        if mode == "compile-ro":
            torch.compiler.cudagraph_mark_step_begin()
        with autocast:
            loss = forward(inputs, labels)
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
            "peak_bytes": peak, "loss": float(loss)}


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
    rows, records = [], []
    for name in args.config:
        cfg = CONFIGS[name]
        for mode in args.modes:
            if mode == "compile-ro" and device.type == "cpu":
                result = {"note": "n/a (reduce-overhead needs CUDA graphs)"}
            else:
                result = run_pytorch(cfg, mode, args, device)
            label = {"eager": "pytorch eager", "compile": "torch.compile",
                     "compile-ro": "torch.compile reduce-overhead"}[mode]
            rows.append(format_row(cfg, label, result))
            records.append({"config": name, "system": label, **result})
            print(f"{name} {label}: {result}", file=sys.stderr)
        result = run_kiln(cfg, args)
        rows.append(format_row(cfg, "kiln", result))
        records.append({"config": name, "system": "kiln", **result})
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
