"""QLoRA end to end on an ONNX fixture: `kiln compile --quant nf4 --lora ...`
run by `kiln interp` against the same computation done by references:
ONNX Runtime runs the original model with every adapted linear weight
replaced by its NumPy NF4 round trip (test/utils/nf4_reference.py) plus the
merged adapter (alpha / r) * B A, in the exporter's stored layout.

Twice: with the adapters the init program makes (B = 0) and with a random
nonzero B fed through `kiln interp --params`, so the adapter path counts.
Dropout is off: ONNX Runtime cannot draw Kiln's masks.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(__file__))
import nf4_reference  # noqa: E402


def load(path):
    return numpy_helper.to_array(onnx.load_tensor(path))


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{result.stderr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--rank", type=int, default=4)
    ap.add_argument("--alpha", type=float, default=8)
    ap.add_argument("--targets", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    work = args.work
    os.makedirs(work, exist_ok=True)
    model_path = os.path.join(args.fixture, "model.onnx")
    data = os.path.join(args.fixture, "test_data_set_0")
    meta = json.load(open(os.path.join(args.fixture, "meta.json")))
    by_init = {p["initializer"]: (torch_name, p["transposed"])
               for torch_name, p in meta["params"].items()}

    step = f"{work}/qlora.mlir"
    run([args.kiln, "compile", model_path, "--emit=mlir", "--quant", "nf4", "--lora",
         f"r={args.rank},alpha={args.alpha},targets_regex={args.targets}", "-o", step])
    run([args.kiln, "interp", step, "--inputs", data, "--outputs", f"{work}/init-run",
         "--write-init", f"{work}/init"])
    quantized = sorted(f[:-len(".nf4_codes.pb")] for f in os.listdir(f"{work}/init")
                       if f.endswith(".nf4_codes.pb"))
    if not quantized:
        sys.exit("FAIL: nothing was quantized")

    model = onnx.load(model_path)
    inputs = [load(f"{data}/input_{k}.pb") for k in range(len(model.graph.input))]
    feeds = {i.name: x for i, x in zip(model.graph.input, inputs)}
    rng = np.random.default_rng(1)
    scale = np.float32(args.alpha / args.rank)
    failures = 0
    for case in ("B = 0", "random B"):
        overrides = {}
        if case == "random B":
            os.makedirs(f"{work}/params", exist_ok=True)
            for f in os.listdir(f"{work}/init"):
                if f.endswith(".lora_B.weight.pb"):
                    b = load(f"{work}/init/{f}")
                    b = (0.05 * rng.standard_normal(b.shape)).astype(np.float32)
                    overrides[f[:-3]] = b
                    onnx.save_tensor(numpy_helper.from_array(b, f[:-3]),
                                     f"{work}/params/{f}")
        cmd = [args.kiln, "interp", step, "--inputs", data, "--outputs", f"{work}/out"]
        if overrides:
            cmd += ["--params", f"{work}/params"]
        run(cmd)
        kiln_loss = float(load(f"{work}/out/output_0.pb"))

        reference = onnx.load(model_path)
        adapted = 0
        for init in reference.graph.initializer:
            if init.name not in quantized:
                continue
            torch_name, transposed = by_init[init.name]
            stored = numpy_helper.to_array(init)
            weight = stored.T if transposed else stored  # PyTorch [out, in]
            codes, absmax = nf4_reference.quantize(weight)
            w = nf4_reference.dequantize(codes, absmax, weight.size).reshape(weight.shape)
            module = torch_name[:-len(".weight")]
            if os.path.exists(f"{work}/init/{module}.lora_A.weight.pb"):
                adapted += 1
                a = load(f"{work}/init/{module}.lora_A.weight.pb")
                b = overrides.get(module + ".lora_B.weight",
                                  load(f"{work}/init/{module}.lora_B.weight.pb"))
                w = w + scale * (b.astype(np.float64) @ a.astype(np.float64))
            merged = (w.T if transposed else w).astype(np.float32)
            init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(merged), init.name))
        session = ort.InferenceSession(reference.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        ref_loss = float(session.run(None, feeds)[0])
        rel = abs(kiln_loss - ref_loss) / abs(ref_loss)
        ok = rel <= 1e-5
        failures += not ok
        print(f"{case}: kiln {kiln_loss:.8f} reference {ref_loss:.8f} rel {rel:.1e} "
              f"{'OK' if ok else 'MISMATCH'}")
    print(f"{len(quantized)} NF4 weights, {adapted} with adapters")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
