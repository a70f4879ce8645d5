"""LoRA acceptance on one ONNX fixture, through `kiln compile --lora` and `kiln interp`:

1. With B = 0 the loss equals the base model's (Kiln's, and PyTorch's reference).
2. Every lora_A gradient is exactly zero (it is B^T-weighted).
3. Every lora_B gradient matches central finite differences of the forward
   loss along two unit directions per tensor (the gradient's own and a random
   one), with the same dropout seed: |fd - g.d| <= 1e-3 |g| + fp32 noise.
4. One SGD step (lr 1e-2) changes the loss: the adapters learn.
"""
import argparse
import os
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--lora", required=True, help="the --lora spec")
    ap.add_argument("--work", required=True)
    ap.add_argument("--step", type=float, default=0.01, help="finite-difference step")
    args = ap.parse_args()
    kiln, work = args.kiln, args.work
    os.makedirs(work, exist_ok=True)
    model = os.path.join(args.fixture, "model.onnx")
    data = os.path.join(args.fixture, "test_data_set_0")
    failures = []

    # 1. Loss with B = 0 against the base model.
    run([kiln, "compile", model, "--emit=grads-mlir", "-o", f"{work}/base.mlir"])
    run([kiln, "interp", f"{work}/base.mlir", "--inputs", data, "--outputs", f"{work}/base"])
    run([kiln, "compile", model, "--emit=grads-mlir", "--lora", args.lora,
         "-o", f"{work}/lora.mlir"])
    run([kiln, "interp", f"{work}/lora.mlir", "--inputs", data, "--outputs",
         f"{work}/lora", "--write-init", f"{work}/init"])
    base = float(load(f"{work}/base/output_0.pb"))
    torch_loss = float(load(f"{data}/output_0.pb"))
    loss = float(load(f"{work}/lora/output_0.pb"))
    rel = abs(loss - base) / abs(base)
    print(f"loss base {base:.8f} lora {loss:.8f} rel {rel:.2e} (PyTorch {torch_loss:.8f})")
    if rel > 1e-6 or abs(loss - torch_loss) > 1e-5 * abs(torch_loss):
        failures.append("loss with B = 0 differs from the base model")

    grads = {f[:-3]: load(f"{work}/lora/grad/{f}")
             for f in os.listdir(f"{work}/lora/grad")}
    a_names = sorted(n for n in grads if n.endswith(".lora_A.weight"))
    b_names = sorted(n for n in grads if n.endswith(".lora_B.weight"))
    if not a_names or len(a_names) != len(b_names) or len(grads) != 2 * len(a_names):
        failures.append(f"expected only adapter gradients, got {sorted(grads)}")
    print(f"adapters: {len(a_names)}")

    # 2. lora_A gradients vanish exactly.
    nonzero = [n for n in a_names if np.any(grads[n] != 0)]
    print(f"lora_A gradients exactly zero: {len(a_names) - len(nonzero)}/{len(a_names)}")
    failures += [f"{n} has a nonzero gradient" for n in nonzero]

    # 3. lora_B gradients against finite differences of the forward loss.
    run([kiln, "compile", model, "--emit=mlir", "--lora", args.lora,
         "-o", f"{work}/forward.mlir"])
    rng = np.random.default_rng(0)
    h = args.step
    # Tolerance: 1e-3 of the gradient's norm (central differences are
    # O(h^2)), plus the fp32 rounding noise of two losses divided by 2h.
    noise = 5e-7 * abs(loss) / (2 * h)
    worst = 0.0
    for name in b_names:
        g = grads[name].astype(np.float64)
        b0 = load(f"{work}/init/{name}.pb")
        random = rng.standard_normal(g.shape)
        for kind, d in (("gradient", g), ("random", random)):
            d = d / np.linalg.norm(d)
            losses = []
            for sign in (1, -1):
                pdir = f"{work}/fd"
                os.makedirs(pdir, exist_ok=True)
                for f in os.listdir(pdir):
                    os.remove(os.path.join(pdir, f))
                save((b0 + sign * h * d).astype(np.float32), f"{pdir}/{name}.pb", name)
                out = f"{work}/fd_out"
                run([kiln, "interp", f"{work}/forward.mlir", "--inputs", data,
                     "--outputs", out, "--params", pdir])
                losses.append(float(load(f"{out}/output_0.pb")))
            fd = (losses[0] - losses[1]) / (2 * h)
            analytic = float(np.sum(g * d))
            tolerance = 1e-3 * np.linalg.norm(g) + noise
            err = abs(fd - analytic) / tolerance
            worst = max(worst, err)
            if err > 1:
                failures.append(f"{name}: {kind} direction FD {fd:.6e} vs {analytic:.6e}")
    print(f"lora_B finite differences: {2 * len(b_names)} directions, "
          f"worst error {worst:.2f} of tolerance")

    # 4. One SGD step (no dropout, so only learning can move the loss).
    spec = ",".join(p for p in args.lora.split(",") if not p.startswith("dropout="))
    run([kiln, "compile", model, "--emit=step-mlir", "--lora", spec,
         "--optimizer=sgd:lr=1e-2", "-o", f"{work}/step.mlir"])
    out = run([kiln, "interp", f"{work}/step.mlir", "--inputs", data, "--outputs",
               f"{work}/step", "--steps", "2"])
    steps = [float(line.split()[-1]) for line in out.splitlines() if line.startswith("step ")]
    print(f"SGD lr 1e-2: loss {steps[0]:.8f} -> {steps[1]:.8f}")
    if not abs(steps[1] - steps[0]) > 1e-7 * abs(steps[0]):
        failures.append("one SGD step did not change the loss")

    for f in failures:
        print("FAIL:", f)
    print("FAIL" if failures else "PASS")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
