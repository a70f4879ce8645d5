"""kiln-lora-k-concat on one ONNX fixture, through `kiln compile --lora-k-concat` and `kiln interp`:

With random (nonzero) lora_A and lora_B, so that every adapter product and
its input gradient matter:
1. The rewrite happened: the step has fewer matmuls and more concats.
2. The loss equals that of the forward graph without the rewrite, and
   every adapter gradient that of the gradient graph without it (fp32:
   within 1e-5 of the gradient's norm; --precision bf16: within --bf16-tol,
   and no farther from the fp32 graph's than 1.5x the unrewritten bf16
   graph's distance + 1e-3).
3. Every adapter gradient of the rewritten graph matches central finite
   differences of the forward loss along its own direction:
   |fd - g.d| <= 1e-3 |g| + fp32 noise (fp32 only).
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def load(path):
    return numpy_helper.to_array(onnx.load_tensor(path))


def save(array, path, name):
    onnx.save_tensor(numpy_helper.from_array(array, name), path)


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{result.stderr}")
    return result.stdout


def count(path, op):
    with open(path) as f:
        return len(re.findall(rf"= kiln\.{op} ", f.read()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--lora", required=True, help="the --lora spec (no dropout)")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--bf16-tol", type=float, default=2e-2)
    ap.add_argument("--work", required=True)
    ap.add_argument("--step", type=float, default=0.01, help="finite-difference step")
    args = ap.parse_args()
    kiln, work = args.kiln, args.work
    os.makedirs(work, exist_ok=True)
    model = os.path.join(args.fixture, "model.onnx")
    data = os.path.join(args.fixture, "test_data_set_0")
    flags = ["--lora", args.lora, f"--precision={args.precision}"]
    failures = []

    run([kiln, "compile", model, "--emit=grads-mlir", *flags, "--lora-k-concat=false",
         "-o", f"{work}/plain.mlir"])
    run([kiln, "compile", model, "--emit=grads-mlir", *flags, "--lora-k-concat",
         "-o", f"{work}/kcat.mlir"])
    run([kiln, "compile", model, "--emit=mlir", *flags, "-o", f"{work}/forward.mlir"])
    matmuls = (count(f"{work}/plain.mlir", "matmul"), count(f"{work}/kcat.mlir", "matmul"))
    concats = (count(f"{work}/plain.mlir", "concat"), count(f"{work}/kcat.mlir", "concat"))
    print(f"matmuls {matmuls[0]} -> {matmuls[1]}, concats {concats[0]} -> {concats[1]}")
    if not matmuls[1] < matmuls[0] or not concats[1] > concats[0]:
        failures.append("--lora-k-concat rewrote nothing")

    # Random adapters: the init program's names and shapes, other values.
    run([kiln, "interp", f"{work}/plain.mlir", "--inputs", data, "--outputs",
         f"{work}/init_out", "--write-init", f"{work}/init"])
    rng = np.random.default_rng(0)
    params = f"{work}/params"
    os.makedirs(params, exist_ok=True)
    names = sorted(f[:-3] for f in os.listdir(f"{work}/init") if ".lora_" in f)
    for name in names:
        shape = load(f"{work}/init/{name}.pb").shape
        save((0.05 * rng.standard_normal(shape)).astype(np.float32), f"{params}/{name}.pb", name)

    results = {}
    for kind in ("plain", "kcat"):
        run([kiln, "interp", f"{work}/{kind}.mlir", "--inputs", data, "--outputs",
             f"{work}/{kind}_out", "--params", params])
        loss = float(load(f"{work}/{kind}_out/output_0.pb"))
        grads = {f[:-3]: load(f"{work}/{kind}_out/grad/{f}").astype(np.float64)
                 for f in os.listdir(f"{work}/{kind}_out/grad")}
        results[kind] = (loss, grads)
    run([kiln, "interp", f"{work}/forward.mlir", "--inputs", data, "--outputs",
         f"{work}/forward_out", "--params", params])
    forward = float(load(f"{work}/forward_out/output_0.pb"))

    fp32 = args.precision == "fp32"
    tol = 1e-5 if fp32 else args.bf16_tol
    if not fp32:
        # The fp32 graph as the reference: the rewrite may round differently,
        # not worse than the unrewritten bf16 graph does.
        run([kiln, "compile", model, "--emit=grads-mlir", "--lora", args.lora,
             "--lora-k-concat=false", "-o", f"{work}/fp32.mlir"])
        run([kiln, "interp", f"{work}/fp32.mlir", "--inputs", data, "--outputs",
             f"{work}/fp32_out", "--params", params])
        ref = {f[:-3]: load(f"{work}/fp32_out/grad/{f}").astype(np.float64)
               for f in os.listdir(f"{work}/fp32_out/grad")}
        worst_ratio = 0.0
        for name in sorted(ref):
            if name not in results["plain"][1] or name not in results["kcat"][1]:
                continue
            norm = np.linalg.norm(ref[name])
            plain = np.linalg.norm(results["plain"][1][name] - ref[name]) / norm
            kcat = np.linalg.norm(results["kcat"][1][name] - ref[name]) / norm
            worst_ratio = max(worst_ratio, kcat / max(plain, 1e-12))
            if kcat > 1.5 * plain + 1e-3:
                failures.append(f"{name}: {kcat:.2e} from fp32, the unrewritten bf16 {plain:.2e}")
        print(f"bf16 against fp32: rewritten / unrewritten error at most {worst_ratio:.2f}")
    (loss_p, grads_p), (loss_k, grads_k) = results["plain"], results["kcat"]
    rel = abs(loss_k - forward) / abs(forward)
    print(f"loss forward {forward:.8f} rewritten {loss_k:.8f} rel {rel:.2e}")
    if rel > tol:
        failures.append("the rewritten step's loss differs from the forward graph's")
    if sorted(grads_p) != sorted(grads_k) or not grads_k:
        failures.append(f"gradients differ in names: {sorted(grads_p)} vs {sorted(grads_k)}")
    worst = 0.0
    for name in sorted(set(grads_p) & set(grads_k)):
        g, gk = grads_p[name], grads_k[name]
        err = np.linalg.norm(gk - g) / max(np.linalg.norm(g), 1e-30)
        worst = max(worst, err)
        if err > tol:
            failures.append(f"{name}: rewritten gradient differs by {err:.2e} of its norm")
    print(f"adapter gradients: {len(grads_k)}, worst difference {worst:.2e} of the norm")

    if fp32:
        h = args.step
        noise = 5e-7 * abs(loss_k) / (2 * h)
        worst = 0.0
        for name in sorted(grads_k):
            g = grads_k[name]
            p0 = load(f"{params}/{name}.pb").astype(np.float64)
            d = g / np.linalg.norm(g)
            losses = []
            for sign in (1, -1):
                pdir = f"{work}/fd"
                os.makedirs(pdir, exist_ok=True)
                for f in os.listdir(pdir):
                    os.remove(os.path.join(pdir, f))
                for other in names:
                    if other != name:
                        os.link(f"{params}/{other}.pb", f"{pdir}/{other}.pb")
                save((p0 + sign * h * d).astype(np.float32), f"{pdir}/{name}.pb", name)
                run([kiln, "interp", f"{work}/forward.mlir", "--inputs", data,
                     "--outputs", f"{work}/fd_out", "--params", pdir])
                losses.append(float(load(f"{work}/fd_out/output_0.pb")))
            fd = (losses[0] - losses[1]) / (2 * h)
            analytic = float(np.sum(g * d))
            err = abs(fd - analytic) / (1e-3 * np.linalg.norm(g) + noise)
            worst = max(worst, err)
            if err > 1:
                failures.append(f"{name}: FD {fd:.6e} vs {analytic:.6e}")
        print(f"finite differences: {len(grads_k)} directions, worst error {worst:.2f} of tolerance")

    for f in failures:
        print("FAIL:", f)
    print("FAIL" if failures else "PASS")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
