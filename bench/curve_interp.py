#!/usr/bin/env python3
"""The loss curve's first steps on a machine without a GPU: `kiln interp` of
the compiled step against `loss_curve.py pytorch --device cpu`, from the same
base weights, Kiln's initial adapters and token windows (what bench/curve.sh
compares on the GPU, for a few steps; QLoRA with --quant nf4).

  curve_interp.py --kiln build/bin/kiln --step STEP.mlir --weights weights.safetensors
      --data tokens.bin --work DIR [--steps 3] [--quant nf4] [--tolerance 1e-3]

STEP.mlir is `kiln compile model.onnx --emit=step-mlir` with the artifact's
flags. The step's frozen parameters are written as <name>.pb from the weights
file (by their kiln.source_name, transposed where kiln.source_transposed);
step t's windows are tokens.windows(data, seed, t); kiln interp runs one step
per call, continuing from the previous call's --save (so each step reads its
own windows), and its first call writes the init program's adapters
(--write-init), which PyTorch starts from. Prints the comparison table of
loss_curve.py compare and exits non-zero past the tolerance.
"""

import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loss_curve as lc  # noqa: E402
from configs import CONFIGS  # noqa: E402

PARAM = re.compile(r'kiln\.parameter "([^"]+)"(?: \{([^}]*)\})? : tensor<([0-9x]*?)x?(bf16|f32)>')
KILN_LOSS = re.compile(r"^step \d+: loss (\S+)", re.M)


def frozen_params(step_text):
    """{name: (source name, transposed, shape, element)} of the step's
    frozen parameters that come from the weights file (not adapters, not
    what the init program makes)."""
    params = {}
    for name, attrs, dims, element in PARAM.findall(step_text):
        if ".lora_" in name or ".nf4_" in name or name in params:
            continue
        source = re.search(r'kiln\.source_name = "([^"]+)"', attrs or "")
        params[name] = (source.group(1) if source else name,
                        "kiln.source_transposed = true" in (attrs or ""),
                        [int(d) for d in dims.split("x") if d], element)
    return params


def write_params(step_text, weights_path, out):
    """The frozen parameters as <name>.pb; returns how many. Names the
    weights file lacks stay with the model (its inline values)."""
    import numpy as np
    from onnx import TensorProto, helper, save_tensor

    tensors, _ = lc.read_safetensors(weights_path)
    os.makedirs(out, exist_ok=True)
    count = 0
    for name, (source, transposed, shape, element) in frozen_params(step_text).items():
        if source not in tensors:
            continue
        dtype, file_shape, raw = tensors[source]
        want = {"bf16": "BF16", "f32": "F32"}[element]
        if dtype != want:
            raise lc.CurveError(f"{weights_path}: '{source}' is {dtype}; the step's '{name}' "
                                f"is {want}")
        values = np.frombuffer(raw, "<u2" if dtype == "BF16" else "<f4").reshape(file_shape)
        if transposed:
            values = values.T
        if list(values.shape) != shape:
            raise lc.CurveError(f"'{source}' {list(values.shape)} does not fit the step's "
                                f"'{name}' {shape}")
        kind = TensorProto.BFLOAT16 if dtype == "BF16" else TensorProto.FLOAT
        tensor = helper.make_tensor(name, kind, values.shape,
                                    np.ascontiguousarray(values).tobytes(), raw=True)
        save_tensor(tensor, os.path.join(out, name + ".pb"))
        count += 1
    return count


def write_inputs(tokens, cfg, seed, step, out):
    import numpy as np
    from onnx import numpy_helper, save_tensor

    from tokens import windows

    window = windows(tokens, seed, step, cfg.batch, cfg.seq).astype(np.int64)
    os.makedirs(out, exist_ok=True)
    save_tensor(numpy_helper.from_array(np.ascontiguousarray(window[:, :-1])),
                os.path.join(out, "input_0.pb"))
    save_tensor(numpy_helper.from_array(np.ascontiguousarray(window[:, 1:])),
                os.path.join(out, "input_1.pb"))


def write_adapters(init_dir, step_text, out):
    """The init program's lora_*.pb as a PEFT folder (kiln-run --save-adapters')."""
    import numpy as np
    from onnx import load_tensor, numpy_helper

    lora = re.search(r"kiln\.lora = \{alpha = ([0-9.e+-]+) : f64, dropout = [^,]*, "
                     r"rank = (\d+) : i64\}", step_text)
    if not lora:
        raise lc.CurveError("the step has no kiln.lora attribute (compiled without --lora?)")
    tensors = []
    for f in sorted(os.listdir(init_dir)):
        if ".lora_" in f and f.endswith(".pb"):
            values = numpy_helper.to_array(load_tensor(os.path.join(init_dir, f)))
            values = np.ascontiguousarray(values.astype("<f4"))
            tensors.append((lc.PEFT_PREFIX + f[:-3], "F32", list(values.shape), values.tobytes()))
    os.makedirs(out, exist_ok=True)
    lc.write_safetensors(os.path.join(out, "adapter_model.safetensors"), tensors,
                         {"format": "pt"})
    with open(os.path.join(out, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": int(lora.group(2)),
                   "lora_alpha": float(lora.group(1))}, f, indent=2)
    return len(tensors)


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        raise lc.CurveError(f"{' '.join(cmd)} exited {result.returncode}:\n"
                            f"{result.stdout}{result.stderr}")
    return result.stdout


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--kiln", required=True)
    p.add_argument("--step", required=True, help="kiln compile --emit=step-mlir output")
    p.add_argument("--weights", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--config", default="curve", choices=sorted(CONFIGS))
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quant", choices=("nf4",))
    p.add_argument("--tolerance", type=float, default=1e-3)
    args = p.parse_args(argv)
    nf4 = 0
    try:
        import numpy as np

        cfg = CONFIGS[args.config]
        with open(args.step) as f:
            text = f.read()
        nf4 = len(set(re.findall(r'kiln\.parameter "([^"]+)\.nf4_codes"', text)))
        if bool(nf4) != bool(args.quant):
            raise lc.CurveError(f"{args.step} stores {nf4} NF4 weights: "
                                + ("give --quant nf4" if nf4 else "compiled without --quant nf4"))
        params = os.path.join(args.work, "params")
        print(f"{write_params(text, args.weights, params)} frozen parameters from {args.weights}")
        tokens = np.fromfile(args.data, dtype="<u4" if cfg.vocab > 65535 else "<u2")
        log = []
        for t in range(1, args.steps + 1):
            inputs = os.path.join(args.work, f"inputs{t}")
            write_inputs(tokens, cfg, args.seed, t, inputs)
            cmd = [args.kiln, "interp", args.step, "--inputs", inputs, "--outputs",
                   os.path.join(args.work, f"out{t}"), "--params", params, "--steps", "1",
                   "--seed", str(args.seed), "--save", os.path.join(args.work, f"after{t}")]
            cmd += (["--write-init", os.path.join(args.work, "init")] if t == 1 else
                    ["--resume", os.path.join(args.work, f"after{t - 1}")])
            losses = KILN_LOSS.findall(run(cmd))
            if len(losses) != 1:
                raise lc.CurveError(f"kiln interp printed {len(losses)} losses for step {t}")
            log.append(f"step {t} loss {losses[0]}")
            print(f"kiln interp: {log[-1]}", flush=True)
        kiln_log = os.path.join(args.work, "kiln.log")
        with open(kiln_log, "w") as f:
            f.write("\n".join(log) + "\n")
        adapters = os.path.join(args.work, "init_adapters")
        print(f"{write_adapters(os.path.join(args.work, 'init'), text, adapters)} initial "
              f"adapters from the init program")
    except (OSError, ValueError, lc.CurveError) as e:
        print(f"curve_interp: error: {e}", file=sys.stderr)
        return 1
    torch_json = os.path.join(args.work, "pytorch.json")
    rc = lc.main(["pytorch", "--config", args.config, "--device", "cpu", "--weights",
                  args.weights, "--adapters", adapters, "--data", args.data, "--steps",
                  str(args.steps), "--seed", str(args.seed), "--log-every", "1", "--json",
                  torch_json] + (["--quant", args.quant, "--nf4-weights", str(nf4)]
                                 if args.quant else []))
    if rc:
        return rc
    return lc.main(["compare", "--kiln", kiln_log, "--pytorch", torch_json, "--tolerance",
                    str(args.tolerance), "--steps", str(args.steps)])


if __name__ == "__main__":
    sys.exit(main())
