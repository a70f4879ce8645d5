"""bench/nf4.py's NF4 codes (the PyTorch side of the QLoRA loss curve) against
Kiln's, bit for bit.

  op      kiln.nf4_quantize under `kiln interp` on crafted fp32 weights:
          elements exactly on each fp32 midpoint of neighbouring NF4 values
          (a tie: the lower code) and one ulp either side, elements whose
          product with the fp32 reciprocal of the absmax and whose quotient
          by the absmax fall on different sides of a midpoint, an all-zero
          block, a negative absmax, -0.0, random blocks; and random bf16
          weights. Prints how many elements the nearest-value argmin and the
          division would have coded differently, so that the ties are known
          to be in the data.
  init    `kiln compile --lora --quant nf4 [--precision=bf16]` of an ONNX
          fixture, `kiln interp --write-init`: the init program's codes and
          absmax of every frozen linear weight equal bench/nf4.py's of the
          weight in PyTorch's [out, in] layout, taken at the precision the
          step stores it (bf16-rounded under --precision=bf16, as
          loss_curve.py pytorch loads it into bench/model.py's bf16 weights).
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "bench"))
import nf4  # noqa: E402


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{result.stdout}{result.stderr}")
    return result.stdout


def load(path):
    return numpy_helper.to_array(onnx.load_tensor(path))


def same(codes, absmax, ref_codes, ref_absmax):
    return (codes.dtype == np.uint8 and np.array_equal(codes, ref_codes.numpy()) and
            absmax.dtype == np.float32 and
            np.array_equal(absmax.view(np.uint32), ref_absmax.numpy().view(np.uint32)))


def f32(bits):
    return np.array(bits, dtype=np.uint32).view(np.float32)


def crafted():
    """[rows, 64] fp32 weight of the hard cases."""
    mids = nf4.midpoints().numpy()
    rows = []
    # absmax 1: each midpoint itself, and one ulp below and above.
    ties = np.concatenate([[1.0], mids, np.nextafter(mids, np.float32(-2)),
                           np.nextafter(mids, np.float32(2))])
    rows.append(np.pad(ties, (0, 64 - ties.size)))
    # The same ties under a negative absmax of -2 (times 2 is exact).
    neg = np.concatenate([[-2.0], 2 * mids])
    rows.append(np.pad(neg, (0, 64 - neg.size)))
    # x * (1 / a) and x / a on different sides of a midpoint: one block
    # each (the absmax a and the element x).
    rng = np.random.default_rng(0)
    found = 0
    while found < 40:
        a = np.float32(rng.uniform(0.01, 4.0))
        x0 = np.float32(mids[rng.integers(mids.size)] * a)
        for d in range(-2, 3):
            x = np.int32(x0.view(np.int32) + d).view(np.float32)
            if not abs(x) < a:
                continue
            mul = x * (np.float32(1) / a)
            div = x / a
            if (mul > mids).sum() != (div > mids).sum():
                rows.append(np.pad(np.array([a, x], dtype=np.float32), (0, 62)))
                found += 1
                break
    rows.append(np.zeros(64))
    neg_zero = np.full(64, -0.0)
    neg_zero[5] = 0.25
    rows.append(neg_zero)
    rows += list(rng.standard_normal((8, 64)) * 0.02)
    return np.stack(rows).astype(np.float32)


def old_codes(w):
    """The rule bench/nf4.py had: divide by the absmax, nearest value by
    argmin (ties to the first, which is not bitsandbytes' threshold)."""
    blocks = torch.from_numpy(w).reshape(-1, nf4.BLOCK)
    absmax = blocks.abs().amax(dim=1).clamp_min(1e-12)
    scaled = (blocks / absmax[:, None]).reshape(-1)
    table = torch.tensor(nf4.NF4_VALUES)
    return (scaled[:, None] - table).abs().argmin(dim=1)


def unpack(packed):
    codes = np.empty(packed.size * 2, dtype=np.uint8)
    codes[0::2], codes[1::2] = packed >> 4, packed & 15
    return codes


def interp_quantize(kiln, work, name, weight, element):
    """kiln.nf4_quantize of `weight` (stored as `element`) under kiln interp."""
    rows, cols = weight.shape
    n = rows * cols
    ir = os.path.join(work, f"{name}.mlir")
    with open(ir, "w") as f:
        f.write(f"""func.func @main(%w: tensor<{rows}x{cols}x{element}>) -> (tensor<{n // 2}xui8>, tensor<{n // 64}xf32>) {{
  %c, %s = kiln.nf4_quantize %w : tensor<{rows}x{cols}x{element}> -> tensor<{n // 2}xui8>, tensor<{n // 64}xf32>
  return %c, %s : tensor<{n // 2}xui8>, tensor<{n // 64}xf32>
}}
""")
    inputs, outputs = os.path.join(work, f"{name}-in"), os.path.join(work, f"{name}-out")
    os.makedirs(inputs, exist_ok=True)
    if element == "bf16":
        bits = weight.view(torch.int16).numpy().tobytes()
        tensor = onnx.helper.make_tensor("w", onnx.TensorProto.BFLOAT16, weight.shape, bits,
                                         raw=True)
    else:
        tensor = numpy_helper.from_array(weight.numpy(), "w")
    onnx.save_tensor(tensor, os.path.join(inputs, "input_0.pb"))
    run([kiln, "interp", ir, "--inputs", inputs, "--outputs", outputs])
    return load(os.path.join(outputs, "output_0.pb")), load(os.path.join(outputs, "output_1.pb"))


def check_op(kiln, work):
    w = crafted()
    codes, absmax = interp_quantize(kiln, work, "crafted", torch.from_numpy(w), "f32")
    ref_codes, ref_absmax = nf4.quantize(torch.from_numpy(w))
    if not same(codes, absmax, ref_codes, ref_absmax):
        bad = np.nonzero(unpack(codes) != unpack(ref_codes.numpy()))[0]
        sys.exit(f"FAIL: crafted weight: {bad.size} codes differ (elements {bad[:10].tolist()}), "
                 f"absmax equal {np.array_equal(absmax, ref_absmax.numpy())}")
    old = old_codes(w).numpy()
    kiln_codes = unpack(codes)
    ties = int(np.sum(old[:64] != kiln_codes[:64]) + np.sum(old[64:128] != kiln_codes[64:128]))
    division = int(np.sum(old[128:128 + 40 * 64] != kiln_codes[128:128 + 40 * 64]))
    print(f"op f32: {w.size} elements bit-exact (the nearest-value argmin codes {ties} midpoint "
          f"ties differently, the division {division} elements)")
    torch.manual_seed(0)
    b = (torch.randn(64, 128) * 0.02).bfloat16()
    codes, absmax = interp_quantize(kiln, work, "bf16", b, "bf16")
    if not same(codes, absmax, *nf4.quantize(b)):
        sys.exit("FAIL: bf16 weight: codes or absmax differ")
    print(f"op bf16: {b.numel()} elements bit-exact")


def check_init(kiln, work, fixture, precision):
    model_path = os.path.join(fixture, "model.onnx")
    step = os.path.join(work, f"step-{precision}.mlir")
    run([kiln, "compile", model_path, "--lora", "r=8,alpha=16,dropout=0",
         f"--precision={precision}", "--quant", "nf4", "--emit=step-mlir", "-o", step])
    init = os.path.join(work, f"init-{precision}")
    run([kiln, "interp", step, "--inputs", os.path.join(fixture, "test_data_set_0"),
         "--outputs", os.path.join(work, f"out-{precision}"), "--write-init", init])
    inits = {t.name: numpy_helper.to_array(t) for t in onnx.load(model_path).graph.initializer}
    text = open(step).read()
    params = re.findall(r'kiln\.parameter "([^"]+)" \{kiln\.source_name = "([^"]+)"'
                        r'(, kiln\.source_transposed = true)?\}', text)
    transposed = {name: bool(t) for name, _, t in params}
    names = sorted(f[:-len(".nf4_codes.pb")] for f in os.listdir(init)
                   if f.endswith(".nf4_codes.pb"))
    if not names:
        sys.exit(f"FAIL: {precision}: no weight was quantized")
    as_fp32 = 0
    for name in names:
        if name not in transposed or name not in inits:
            sys.exit(f"FAIL: {name} is no initializer with a source name")
        weight = torch.from_numpy(inits[name].astype(np.float32))
        weight = weight.T if transposed[name] else weight
        stored = weight.bfloat16() if precision == "bf16" else weight
        codes = load(os.path.join(init, name + ".nf4_codes.pb"))
        absmax = load(os.path.join(init, name + ".nf4_absmax.pb"))
        if not same(codes, absmax, *nf4.quantize(stored)):
            sys.exit(f"FAIL: {precision}: {name}: Kiln's codes or absmax differ from "
                     f"bench/nf4.py's")
        as_fp32 += not same(codes, absmax, *nf4.quantize(weight))
    print(f"init {precision}: {len(names)} weights bit-exact "
          f"({as_fp32} of them differ from the codes of the unrounded fp32 weight)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    check_op(args.kiln, args.work)
    for precision in ("bf16", "fp32"):
        check_init(args.kiln, args.work, args.fixture, precision)
    print("PASS")


if __name__ == "__main__":
    main()
