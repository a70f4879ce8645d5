"""Checks Kiln's NF4 quantization of every linear weight of an ONNX fixture
bit-exactly against the NumPy reference (test/utils/nf4_reference.py).

1. `kiln compile --train=none --quant nf4` stores every frozen linear weight
   as NF4; `kiln interp --write-init` runs the init program, which writes
   each weight's codes and absmax.
2. Codes and absmax must equal the reference's, computed from the ONNX
   initializer in PyTorch's [out, in] layout (meta.json says which
   initializers the exporter stored transposed).
3. kiln.nf4_dequantize of Kiln's codes must equal the reference's dequantized
   weight bit for bit.
With --double-quant the absmax values are stored as QLoRA's double
quantization (8-bit codes, scales, offset), compared the same way, and the
dequantization rebuilds the absmax from them first.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import onnx
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
    ap.add_argument("--work", required=True)
    ap.add_argument("--double-quant", action="store_true")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    model_path = os.path.join(args.fixture, "model.onnx")
    meta = json.load(open(os.path.join(args.fixture, "meta.json")))
    transposed = {p["initializer"]: p["transposed"] for p in meta["params"].values()}
    model = onnx.load(model_path)
    inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    step = os.path.join(args.work, "q.mlir")
    run([args.kiln, "compile", model_path, "--emit=mlir", "--train=none",
         "--quant", "nf4", "-o", step] + (["--double-quant"] if args.double_quant else []))
    init_dir = os.path.join(args.work, "init")
    run([args.kiln, "interp", step, "--inputs",
         os.path.join(args.fixture, "test_data_set_0"), "--outputs",
         os.path.join(args.work, "out"), "--write-init", init_dir])

    names = sorted(f[:-len(".nf4_codes.pb")] for f in os.listdir(init_dir)
                   if f.endswith(".nf4_codes.pb"))
    if not names:
        sys.exit("FAIL: no weight was quantized")
    failures = 0
    deq_funcs, expected = [], []
    for name in names:
        if name not in transposed:
            sys.exit(f"FAIL: {name} is not a parameter in meta.json")
        weight = inits[name].T if transposed[name] else inits[name]
        ref_codes, ref_absmax = nf4_reference.quantize(weight)
        codes = load(os.path.join(init_dir, name + ".nf4_codes.pb"))
        same_codes = codes.dtype == np.uint8 and np.array_equal(codes, ref_codes)
        if args.double_quant:
            ref_nested = nf4_reference.double_quantize(ref_absmax)
            nested = [load(os.path.join(init_dir, f"{name}.nf4_absmax_{part}.pb"))
                      for part in ("codes", "scale", "offset")]
            same_absmax = all(
                got.dtype == want.dtype and got.shape == np.shape(want) and
                np.array_equal(np.asarray(got).view(np.uint8 if got.dtype == np.uint8 else np.uint32),
                               np.asarray(want).view(np.uint8 if got.dtype == np.uint8 else np.uint32))
                for got, want in zip(nested, ref_nested))
            ref_absmax = nf4_reference.double_dequantize(*ref_nested)
            absmax = ref_absmax
        else:
            absmax = load(os.path.join(init_dir, name + ".nf4_absmax.pb"))
            same_absmax = absmax.dtype == np.float32 and np.array_equal(
                absmax.view(np.uint32), ref_absmax.view(np.uint32))
        if not (same_codes and same_absmax):
            failures += 1
            bad = int(np.sum(codes != ref_codes)) if codes.shape == ref_codes.shape else -1
            print(f"MISMATCH {name}: {bad} code bytes differ, absmax equal={same_absmax}")
        out, inn = weight.shape
        deq_funcs.append((name, codes.size, ref_absmax.size, out, inn))
        expected.append(nf4_reference.dequantize(ref_codes, ref_absmax, weight.size)
                        .reshape(out, inn))

    # Kiln's dequantization of its own codes, one result per weight.
    lines = ["func.func @main() -> (" + ", ".join(
        f"tensor<{o}x{i}xf32>" for _, _, _, o, i in deq_funcs) + ") {"]
    results = []
    for k, (name, nc, na, o, i) in enumerate(deq_funcs):
        lines.append(f'  %c{k} = kiln.parameter "{name}.nf4_codes" : tensor<{nc}xui8>')
        if args.double_quant:
            ns = -(-na // 256)
            lines += [
                f'  %q{k} = kiln.parameter "{name}.nf4_absmax_codes" : tensor<{na}xui8>',
                f'  %s{k} = kiln.parameter "{name}.nf4_absmax_scale" : tensor<{ns}xf32>',
                f'  %o{k} = kiln.parameter "{name}.nf4_absmax_offset" : tensor<f32>',
                f"  %r{k} = kiln.dequantize_blockwise_8bit %q{k}, %s{k} : "
                f"tensor<{na}xui8>, tensor<{ns}xf32> -> tensor<{na}xf32>",
                f"  %a{k} = kiln.add %r{k}, %o{k} : (tensor<{na}xf32>, tensor<f32>) "
                f"-> tensor<{na}xf32>"]
        else:
            lines.append(f'  %a{k} = kiln.parameter "{name}.nf4_absmax" : tensor<{na}xf32>')
        lines += [
            f"  %d{k} = kiln.nf4_dequantize %c{k}, %a{k} : tensor<{nc}xui8>, "
            f"tensor<{na}xf32> -> tensor<{o}x{i}xf32>"]
        results.append(f"%d{k}")
    lines.append("  return " + ", ".join(results) + " : " + ", ".join(
        f"tensor<{o}x{i}xf32>" for _, _, _, o, i in deq_funcs))
    lines.append("}")
    deq = os.path.join(args.work, "dequantize.mlir")
    open(deq, "w").write("\n".join(lines) + "\n")
    empty = os.path.join(args.work, "no-inputs")
    os.makedirs(empty, exist_ok=True)
    deq_out = os.path.join(args.work, "deq")
    run([args.kiln, "interp", deq, "--inputs", empty, "--outputs", deq_out,
         "--params", init_dir])
    for k, (name, *_rest) in enumerate(deq_funcs):
        got = load(os.path.join(deq_out, f"output_{k}.pb"))
        if not np.array_equal(got.view(np.uint32), expected[k].view(np.uint32)):
            failures += 1
            print(f"MISMATCH dequantized {name}: "
                  f"{int(np.sum(got != expected[k]))} elements differ")
    if failures:
        sys.exit(f"FAIL: {failures} mismatches")
    print(f"PASS: {len(names)} weights bit-exact "
          f"({sum(w.size for w in expected)} elements)")


if __name__ == "__main__":
    main()
