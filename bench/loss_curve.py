#!/usr/bin/env python3
"""Kiln vs PyTorch: bf16 + LoRA (and QLoRA) loss curves on the same data and init
(issues #8, #22).

The acceptance item: 100 steps of bf16 mixed precision with LoRA give a loss
curve within 1% of PyTorch's. Both sides train bench/configs.py's "curve"
model from the same base weights, the same LoRA init (Kiln's: `kiln-run
train --steps 0 --save-adapters DIR` writes the adapters its init program
makes) and the same token windows (bench/tokens.py reproduces kiln-run's
sampler), with AdamW at the same hyperparameters. bench/curve.sh runs it all.
QLoRA's item (issue #22) is the same comparison with `kiln compile --quant
nf4` on Kiln's side and `--quant nf4` here: every frozen linear weight (the
LM head too, not the embedding: what Kiln quantizes by default) replaced by
bench/nf4.py's codes of its bf16 value, which are Kiln's init program's
codes bit for bit (test/Quant/nf4-bench-codes.test).

  loss_curve.py kiln-weights --onnx model.onnx --weights weights.safetensors -o OUT
      the weights file for kiln-run: weights.safetensors plus the small
      floating-point initializers model.onnx holds inline (the RoPE inverse
      frequencies `mul_5`, scalars), which the artifact's params may name
      but bench.py's export does not write (needs onnx)
  loss_curve.py pytorch --weights W --adapters DIR --data tokens.bin --steps 100
      --seed 0 --lr 1e-3 --json OUT
      bench/model.py's model on CUDA from W and Kiln's adapters; fused AdamW
      on the adapters under bf16 autocast; per-step losses (the forward of
      step t, before its update: what kiln-run prints as `step t loss L`);
      --quant nf4 trains on NF4 frozen weights (bench/nf4.py) instead
  loss_curve.py compare --kiln LOG --pytorch JSON [--tolerance 0.01]
      every step's |kiln - pytorch| / |pytorch| <= tolerance, all steps
      present and finite; exit 1 otherwise (no torch needed)
"""

import argparse
import json
import math
import os
import re
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from configs import CONFIGS  # noqa: E402

# What `kiln compile --optimizer adamw:lr=1e-3,weight_decay=0.01` builds (its
# betas and eps are PyTorch's defaults, dialects/Graph/Passes.td); bench/curve.sh
# compiles with these spelled out.
ADAMW = {"lr": 1e-3, "betas": (0.9, 0.999), "eps": 1e-8, "weight_decay": 0.01}
PEFT_PREFIX = "base_model.model."


class CurveError(Exception):
    """A problem the caller reports as one message and exit code 1."""


# ---------------------------------------------------------------- safetensors
# Minimal reader/writer (8-byte header length, JSON header, raw data), so the
# weights merge and the tests need neither torch nor the safetensors package.

def read_safetensors(path):
    """{name: (dtype, shape, bytes)} and the metadata dict."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise CurveError(f"{path}: not a safetensors file ({len(data)} bytes)")
    (n,) = struct.unpack("<Q", data[:8])
    if 8 + n > len(data):
        raise CurveError(f"{path}: not a safetensors file (header of {n} bytes)")
    header = json.loads(data[8:8 + n])
    metadata = header.pop("__metadata__", {}) or {}
    tensors = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        tensors[name] = (info["dtype"], list(info["shape"]), data[8 + n + begin:8 + n + end])
    return tensors, metadata


def write_safetensors(path, tensors, metadata=None):
    """tensors: [(name, dtype, shape, bytes)]; written atomically."""
    header, offset = {}, 0
    if metadata:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape),
                        "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)
    os.replace(tmp, path)


# --------------------------------------------------------------- kiln-weights
# ONNX TensorProto data types of floating-point tensors: safetensors dtype,
# element size, and the repeated field that holds them without raw_data.
ONNX_FLOATS = {1: ("F32", 4, "float_data", "f"), 11: ("F64", 8, "double_data", "d"),
               10: ("F16", 2, "int32_data", "H"), 16: ("BF16", 2, "int32_data", "H")}


def inline_float_initializers(onnx_path):
    """[(name, dtype, shape, bytes)] of model.onnx's floating-point
    initializers stored in the file itself (not as external data)."""
    import onnx  # only this subcommand needs it

    model = onnx.load(onnx_path, load_external_data=False)
    out = []
    for t in model.graph.initializer:
        if t.data_location == onnx.TensorProto.EXTERNAL or len(t.external_data):
            continue
        if t.data_type not in ONNX_FLOATS:
            continue
        dtype, size, field, code = ONNX_FLOATS[t.data_type]
        count = math.prod(t.dims)
        raw = t.raw_data if t.raw_data else struct.pack(
            f"<{count}{code}", *getattr(t, field))
        if len(raw) != count * size:
            raise CurveError(f"{onnx_path}: initializer '{t.name}' holds {len(raw)} bytes, "
                             f"expected {count * size}")
        out.append((t.name, dtype, list(t.dims), bytes(raw)))
    return out


def merge_kiln_weights(weights_path, extra, out_path):
    """weights_path's tensors plus those of `extra` it lacks; returns the
    names added."""
    tensors, metadata = read_safetensors(weights_path)
    merged = [(n, d, s, b) for n, (d, s, b) in sorted(tensors.items())]
    added = [e for e in extra if e[0] not in tensors]
    write_safetensors(out_path, merged + added, metadata or {"format": "pt"})
    return [e[0] for e in added]


def cmd_kiln_weights(args):
    added = merge_kiln_weights(args.weights, inline_float_initializers(args.onnx), args.output)
    print(f"wrote {args.output}: {args.weights} plus {len(added)} inline initializers of "
          f"{args.onnx} ({', '.join(added) if added else 'none'})")
    return 0


# -------------------------------------------------------------- name mapping

def _mismatches(kind, file_shapes, model_shapes, rename):
    """Problems mapping a file's tensors onto the model's parameters:
    missing, extra, shape mismatches (fail loudly: every one is listed)."""
    mapped = {}
    for file_name in file_shapes:
        mapped.setdefault(rename(file_name), []).append(file_name)
    problems = []
    for name, files in sorted(mapped.items()):
        if len(files) > 1:
            problems.append(f"{kind}: {' and '.join(files)} both map to '{name}'")
    missing = sorted(set(model_shapes) - set(mapped))
    extra = sorted(set(mapped) - set(model_shapes))
    for name in missing:
        problems.append(f"{kind}: the model's '{name}' has no tensor in the file")
    for name in extra:
        problems.append(f"{kind}: the file's '{mapped[name][0]}' is no parameter of the model")
    for name in sorted(set(mapped) & set(model_shapes)):
        got, want = list(file_shapes[mapped[name][0]]), list(model_shapes[name])
        if got != want:
            problems.append(f"{kind}: '{mapped[name][0]}' is {got}, the model's '{name}' is {want}")
    if problems:
        raise CurveError("\n".join(problems))
    return {name: files[0] for name, files in mapped.items()}


def base_mapping(file_shapes, model_shapes):
    """model name -> file name for the frozen weights (Hugging Face names on
    both sides); every frozen parameter exactly once, nothing extra."""
    return _mismatches("weights", file_shapes, model_shapes, lambda n: n)


def adapter_mapping(file_shapes, model_shapes):
    """model name -> file name for PEFT-named adapters
    (base_model.model.<module>.lora_A.weight -> <module>.lora_A.weight)."""
    bad = sorted(n for n in file_shapes if not n.startswith(PEFT_PREFIX))
    if bad:
        raise CurveError("adapters: not PEFT names (no 'base_model.model.' prefix): "
                         + ", ".join(bad))
    return _mismatches("adapters", file_shapes, model_shapes,
                       lambda n: n[len(PEFT_PREFIX):])


# ----------------------------------------------------------- logs and compare
STEP_LINE = re.compile(r"^step (\d+) loss (\S+)")


def parse_kiln_log(text):
    """{step: loss} from kiln-run's `step N loss L ...` lines. A step logged
    twice with different losses is an error."""
    losses = {}
    for line in text.splitlines():
        m = STEP_LINE.match(line.strip())
        if not m:
            continue
        step, loss = int(m.group(1)), float(m.group(2))  # float() reads nan/inf
        if step in losses and not (losses[step] == loss or
                                   (math.isnan(loss) and math.isnan(losses[step]))):
            raise CurveError(f"step {step} is logged twice: {losses[step]} and {loss}")
        losses[step] = loss
    return losses


def relative_difference(kiln, torch):
    if not (math.isfinite(kiln) and math.isfinite(torch)):
        return math.nan
    if torch == 0:
        return 0.0 if kiln == 0 else math.inf
    return abs(kiln - torch) / abs(torch)


def compare(kiln, torch, tolerance, steps=None):
    """kiln: {step: loss}; torch: [loss of step 1, 2, ...]. Returns
    (ok, rows, problems, worst) with rows (step, kiln, torch, rel) for every
    step and worst (rel, step) over the steps both sides have."""
    steps = len(torch) if steps is None else steps
    problems = []
    if steps < 1:
        problems.append("no steps to compare")
    if len(torch) < steps:
        problems.append(f"the PyTorch run has {len(torch)} steps, expected {steps}")
    missing = [t for t in range(1, steps + 1) if t not in kiln]
    if missing:
        shown = ", ".join(map(str, missing[:10])) + (", ..." if len(missing) > 10 else "")
        problems.append(f"the Kiln log lacks {len(missing)} of {steps} steps ({shown})")
    extra = sorted(t for t in kiln if t < 1 or t > steps)
    if extra:
        problems.append(f"the Kiln log has steps outside 1..{steps}: "
                        + ", ".join(map(str, extra[:10])))
    rows, worst = [], (0.0, None)
    for t in range(1, min(steps, len(torch)) + 1):
        k = kiln.get(t)
        p = torch[t - 1]
        if k is None:
            rows.append((t, None, p, None))
            continue
        rel = relative_difference(k, p)
        rows.append((t, k, p, rel))
        if not math.isfinite(k) or not math.isfinite(p):
            side = "Kiln" if not math.isfinite(k) else "PyTorch"
            problems.append(f"step {t}: the {side} loss is not finite "
                            f"(kiln {k}, pytorch {p})")
        elif rel > tolerance:
            problems.append(f"step {t}: kiln {k:.7f} vs pytorch {p:.7f}: "
                            f"relative difference {rel:.3e} > {tolerance:g}")
        if math.isfinite(rel) and (worst[1] is None or rel > worst[0]):
            worst = (rel, t)
    return not problems, rows, problems, worst


def format_table(rows, every=10):
    """Step 1, every `every`-th step and the last, as aligned text."""
    last = rows[-1][0] if rows else 0
    chosen = [r for r in rows if r[0] == 1 or r[0] % every == 0 or r[0] == last]
    fmt = lambda v: "missing" if v is None else f"{v:.7f}"  # noqa: E731
    lines = [("step", "kiln", "pytorch", "rel diff")]
    for t, k, p, rel in chosen:
        lines.append((str(t), fmt(k), fmt(p), "-" if rel is None else f"{rel:.2e}"))
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in lines)


def load_pytorch_json(path):
    with open(path) as f:
        record = json.load(f)
    losses = record.get("losses") if isinstance(record, dict) else None
    if not isinstance(losses, list) or not all(isinstance(v, (int, float)) for v in losses):
        raise CurveError(f"{path}: expected an object with a 'losses' list of numbers")
    return [float(v) for v in losses], record


def adapter_differences(kiln_dir, torch_dir):
    """Relative L2 difference of each lora tensor after training (reported,
    not judged). F32 files only."""
    import numpy as np

    def load(d):
        tensors, _ = read_safetensors(os.path.join(d, "adapter_model.safetensors"))
        out = {}
        for name, (dtype, shape, raw) in tensors.items():
            if dtype != "F32":
                raise CurveError(f"{d}: '{name}' is {dtype}; the adapter report reads F32")
            out[name] = np.frombuffer(raw, "<f4").reshape(shape).astype(np.float64)
        return out

    k, p = load(kiln_dir), load(torch_dir)
    if set(k) != set(p):
        raise CurveError(f"{kiln_dir} and {torch_dir} hold different adapter names")
    diffs = {}
    for name in sorted(k):
        norm = np.linalg.norm(p[name])
        diffs[name] = float(np.linalg.norm(k[name] - p[name]) / norm) if norm else float(
            np.linalg.norm(k[name]))
    return diffs


def cmd_compare(args):
    try:
        with open(args.kiln) as f:
            kiln = parse_kiln_log(f.read())
        torch, record = load_pytorch_json(args.pytorch)
    except (OSError, ValueError, CurveError) as e:
        print(f"loss_curve compare: {e}", file=sys.stderr)
        return 2
    ok, rows, problems, (worst, worst_step) = compare(kiln, torch, args.tolerance, args.steps)
    print(format_table(rows))
    if worst_step is not None:
        print(f"max relative difference {worst:.3e} at step {worst_step} "
              f"(tolerance {args.tolerance:g}, {len(rows)} steps)")
    if args.kiln_adapters and args.pytorch_adapters:
        try:
            diffs = adapter_differences(args.kiln_adapters, args.pytorch_adapters)
            name = max(diffs, key=diffs.get)
            print(f"trained adapters: relative L2 difference max {diffs[name]:.3e} ({name}), "
                  f"median {sorted(diffs.values())[len(diffs) // 2]:.3e} over {len(diffs)} "
                  f"tensors (reported, not judged)")
        except (OSError, CurveError, ValueError) as e:
            print(f"trained adapters: not compared ({e})")
    for problem in problems:
        print(f"FAIL: {problem}")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


# -------------------------------------------------------------- PyTorch side

def cmd_pytorch(args):
    import numpy as np
    import torch
    from safetensors.torch import load_file, save_file

    from model import build
    from tokens import windows

    cfg = CONFIGS[args.config]
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise CurveError("no CUDA device (--device cpu runs a slow smoke test)")
    # Under autocast the GEMMs are bf16; keep any fp32 matmul exact as well.
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    model = build(cfg, device, lora=True, seed=args.seed)
    params = dict(model.named_parameters())
    base = {n: p for n, p in params.items() if ".lora_" not in n}
    adapters = {n: p for n, p in params.items() if ".lora_" in n}

    weights = load_file(args.weights)
    mapping = base_mapping({n: t.shape for n, t in weights.items()},
                           {n: p.shape for n, p in base.items()})
    dtypes = sorted({str(t.dtype) for t in weights.values()})
    with torch.no_grad():
        for name, file_name in mapping.items():
            base[name].copy_(weights[file_name])
    nf4_record = None
    if args.quant == "nf4":
        nf4_record = quantize_base(model)
        print(f"nf4: {nf4_record['weights']} frozen linear weights quantized from their bf16 "
              f"values (codes and absmax sha256 {nf4_record['sha256'][:16]})")
        if args.nf4_weights is not None and nf4_record["weights"] != args.nf4_weights:
            raise CurveError(f"--quant nf4 quantized {nf4_record['weights']} weights; the "
                             f"artifact stores {args.nf4_weights} as NF4")

    config_path = os.path.join(args.adapters, "adapter_config.json")
    with open(config_path) as f:
        peft_config = json.load(f)
    if peft_config.get("r") != cfg.lora_r or peft_config.get("lora_alpha") != cfg.lora_alpha:
        raise CurveError(f"{config_path}: r {peft_config.get('r')}, lora_alpha "
                         f"{peft_config.get('lora_alpha')}; the '{cfg.name}' model has r "
                         f"{cfg.lora_r}, alpha {cfg.lora_alpha}")
    init = load_file(os.path.join(args.adapters, "adapter_model.safetensors"))
    mapping = adapter_mapping({n: t.shape for n, t in init.items()},
                              {n: p.shape for n, p in adapters.items()})
    adapter_dtypes = sorted({str(t.dtype) for t in init.values()})
    if adapter_dtypes != ["torch.float32"]:
        print(f"warning: Kiln's adapters are {', '.join(adapter_dtypes)}, not fp32 master "
              f"weights: the artifact was compiled by a kiln that keeps bf16 adapters",
              file=sys.stderr)
    nonzero_b = [n for n, t in init.items() if ".lora_B." in n and bool(t.any())]
    if nonzero_b:
        print(f"warning: {len(nonzero_b)} lora_B tensors are not zero: these are not "
              f"initial adapters ({nonzero_b[0]}, ...)", file=sys.stderr)
    with torch.no_grad():
        for name, file_name in mapping.items():
            adapters[name].copy_(init[file_name])
    print(f"loaded {len(mapping)} adapters ({', '.join(adapter_dtypes)}) from {args.adapters} "
          f"and {len(base)} base weights ({', '.join(dtypes)}) from {args.weights}")

    token_dtype = args.token_dtype or ("uint32" if cfg.vocab > 65535 else "uint16")
    tokens = np.fromfile(args.data, dtype="<u4" if token_dtype == "uint32" else "<u2")
    if tokens.size < cfg.seq + 1:
        raise CurveError(f"{args.data}: {tokens.size} tokens, one window needs {cfg.seq + 1}")
    if int(tokens.max()) >= cfg.vocab:
        raise CurveError(f"{args.data}: token {int(tokens.max())} is outside the vocabulary "
                         f"({cfg.vocab})")

    betas = tuple(float(b) for b in args.betas.split("/"))
    opt_kwargs = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW(list(adapters.values()), lr=args.lr, betas=betas, eps=args.eps,
                            weight_decay=args.weight_decay, **opt_kwargs)
    model.train()
    losses = []
    for t in range(1, args.steps + 1):
        window = torch.from_numpy(
            windows(tokens, args.seed, t, cfg.batch, cfg.seq).astype(np.int64)).to(device)
        inputs, labels = window[:, :-1].contiguous(), window[:, 1:].contiguous()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(inputs, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.detach().item())
        if t == 1 or t % args.log_every == 0 or t == args.steps:
            print(f"step {t} loss {losses[-1]:.7f}", flush=True)

    if args.save_adapters:
        os.makedirs(args.save_adapters, exist_ok=True)
        save_file({PEFT_PREFIX + n: p.detach().float().contiguous().cpu()
                   for n, p in adapters.items()},
                  os.path.join(args.save_adapters, "adapter_model.safetensors"),
                  metadata={"format": "pt"})
        with open(os.path.join(args.save_adapters, "adapter_config.json"), "w") as f:
            json.dump(peft_config, f, indent=2)
    record = {
        "system": "pytorch", "config": cfg.as_dict(), "steps": args.steps, "seed": args.seed,
        "optimizer": {"name": "AdamW", "fused": device.type == "cuda", "lr": args.lr,
                      "betas": list(betas), "eps": args.eps,
                      "weight_decay": args.weight_decay},
        "autocast": "bfloat16", "weights": args.weights, "weights_dtypes": dtypes,
        "quant": nf4_record,
        "adapters": args.adapters, "adapter_dtypes": adapter_dtypes,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "losses": losses,
    }
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=2)
        print(f"wrote {args.json}: {len(losses)} losses, {losses[0]:.4f} -> {losses[-1]:.4f}")
    return 0


def quantize_base(model):
    """bench/nf4.py's quantize_model, the codes computed on the CPU (the
    arithmetic test/Quant/nf4-bench-codes.test checks against Kiln's) and
    kept on the model's device; returns the weight count and a digest of
    every weight's codes and absmax (module name order), which is the same
    on every device."""
    import hashlib

    import nf4

    count = nf4.quantize_model(model, on="cpu")
    digest = hashlib.sha256()
    for name, module in model.named_modules():
        if isinstance(module, nf4.NF4Weight):
            digest.update(name.encode())
            digest.update(module.codes.cpu().numpy().tobytes())
            digest.update(module.absmax.cpu().numpy().astype("<f4").tobytes())
    return {"scheme": "nf4", "block": nf4.BLOCK, "weights": count,
            "sha256": digest.hexdigest()}


# ---------------------------------------------------------------------- main

def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    w = sub.add_parser("kiln-weights", help="weights.safetensors + model.onnx's inline "
                                            "initializers, for kiln-run")
    w.add_argument("--onnx", required=True)
    w.add_argument("--weights", required=True)
    w.add_argument("-o", "--output", required=True)

    t = sub.add_parser("pytorch", help="train the PyTorch side, write the losses as JSON")
    t.add_argument("--config", default="curve", choices=sorted(CONFIGS))
    t.add_argument("--weights", required=True, help="base weights (Hugging Face names)")
    t.add_argument("--adapters", required=True,
                   help="Kiln's initial adapters: kiln-run train --steps 0 --save-adapters DIR")
    t.add_argument("--data", required=True, help="token file (what kiln-run --data reads)")
    t.add_argument("--token-dtype", choices=("uint16", "uint32"))
    t.add_argument("--steps", type=int, default=100)
    t.add_argument("--seed", type=int, default=0, help="kiln-run's --seed (data order)")
    t.add_argument("--lr", type=float, default=ADAMW["lr"])
    t.add_argument("--betas", default="%g/%g" % ADAMW["betas"])
    t.add_argument("--eps", type=float, default=ADAMW["eps"])
    t.add_argument("--weight-decay", type=float, default=ADAMW["weight_decay"])
    t.add_argument("--device", default="cuda")
    t.add_argument("--log-every", type=int, default=10)
    t.add_argument("--json", metavar="OUT")
    t.add_argument("--save-adapters", metavar="DIR",
                   help="also write the trained adapters (PEFT layout)")
    t.add_argument("--quant", choices=("nf4",),
                   help="frozen linear weights as NF4 (bench/nf4.py), as `kiln compile "
                        "--quant nf4` stores them: QLoRA")
    t.add_argument("--nf4-weights", type=int, metavar="N",
                   help="with --quant nf4: fail unless exactly N weights are quantized "
                        "(the artifact's .nf4_codes params)")

    c = sub.add_parser("compare", help="judge the curves (no torch needed)")
    c.add_argument("--kiln", required=True, metavar="LOG", help="kiln-run train output")
    c.add_argument("--pytorch", required=True, metavar="JSON", help="the pytorch command's JSON")
    c.add_argument("--tolerance", type=float, default=0.01)
    c.add_argument("--steps", type=int, help="steps expected (default: the PyTorch run's)")
    c.add_argument("--kiln-adapters", metavar="DIR", help="also report trained-adapter "
                                                          "differences (with --pytorch-adapters)")
    c.add_argument("--pytorch-adapters", metavar="DIR")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.command == "pytorch" and args.nf4_weights is not None and not args.quant:
        print("loss_curve pytorch: error: --nf4-weights needs --quant nf4", file=sys.stderr)
        return 2
    handler = {"kiln-weights": cmd_kiln_weights, "pytorch": cmd_pytorch,
               "compare": cmd_compare}[args.command]
    try:
        return handler(args)
    except CurveError as e:
        print(f"loss_curve {args.command}: error: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
