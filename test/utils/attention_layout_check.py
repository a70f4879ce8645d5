"""--attention-layout=bshd on one ONNX fixture, through `kiln compile` and `kiln interp`.

1. The rewrite happened: the step has fewer kiln.transpose ops and its
   attention ops carry `seq_major` flags.
2. With random (nonzero) adapters, so that every attention gradient matters,
   the loss and every gradient equal those of the step without the flag
   bit for bit: the layout changes where elements live, not what is computed.
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


def run(cmd):
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"FAIL: {' '.join(cmd)}\n{result.stderr}")
    return result.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--fixture", required=True)
    ap.add_argument("--lora", required=True, help="the --lora spec (no dropout)")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--work", required=True)
    args = ap.parse_args()
    kiln, work = args.kiln, args.work
    os.makedirs(work, exist_ok=True)
    model = os.path.join(args.fixture, "model.onnx")
    data = os.path.join(args.fixture, "test_data_set_0")
    flags = ["--lora", args.lora, f"--precision={args.precision}"]
    failures = []

    for kind, extra in (("bhsd", ["--attention-layout=bhsd"]), ("bshd", ["--attention-layout=bshd"])):
        run([kiln, "compile", model, "--emit=grads-mlir", *flags, *extra,
             "-o", f"{work}/{kind}.mlir"])
    text = {k: open(f"{work}/{k}.mlir").read() for k in ("bhsd", "bshd")}
    transposes = [len(re.findall(r"= kiln\.transpose ", text[k])) for k in ("bhsd", "bshd")]
    flagged = len(re.findall(r"kiln\.attention(_grad)? .*seq_major", text["bshd"]))
    attentions = len(re.findall(r"kiln\.attention(_grad)? ", text["bshd"]))
    print(f"transposes {transposes[0]} -> {transposes[1]}, "
          f"attention ops with seq_major {flagged} of {attentions}")
    if not transposes[1] < transposes[0] or flagged == 0:
        failures.append("--attention-layout=bshd rewrote nothing")
    if "seq_major" in text["bhsd"]:
        failures.append("seq_major without the flag")

    # Random adapters: the init program's names and shapes, other values.
    run([kiln, "interp", f"{work}/bhsd.mlir", "--inputs", data, "--outputs",
         f"{work}/init_out", "--write-init", f"{work}/init"])
    rng = np.random.default_rng(0)
    params = f"{work}/params"
    os.makedirs(params, exist_ok=True)
    for f in sorted(os.listdir(f"{work}/init")):
        if ".lora_" not in f:
            continue
        shape = load(f"{work}/init/{f}").shape
        onnx.save_tensor(numpy_helper.from_array(
            (0.05 * rng.standard_normal(shape)).astype(np.float32), f[:-3]), f"{params}/{f}")

    results = {}
    for kind in ("bhsd", "bshd"):
        run([kiln, "interp", f"{work}/{kind}.mlir", "--inputs", data, "--outputs",
             f"{work}/{kind}_out", "--params", params])
        loss = load(f"{work}/{kind}_out/output_0.pb")
        grads = {f: load(f"{work}/{kind}_out/grad/{f}")
                 for f in os.listdir(f"{work}/{kind}_out/grad")}
        results[kind] = (loss, grads)
    (loss_a, grads_a), (loss_b, grads_b) = results["bhsd"], results["bshd"]
    print(f"loss bhsd {float(loss_a):.8f} bshd {float(loss_b):.8f}")
    if loss_a.tobytes() != loss_b.tobytes():
        failures.append("the losses differ")
    if sorted(grads_a) != sorted(grads_b) or not grads_a:
        failures.append("the gradients differ in names")
    differing = [n for n in sorted(set(grads_a) & set(grads_b))
                 if grads_a[n].tobytes() != grads_b[n].tobytes()]
    nonzero = sum(1 for g in grads_b.values() if np.any(g))
    print(f"gradients: {len(grads_b)} ({nonzero} nonzero), {len(differing)} differ")
    failures += [f"{n}: the gradient differs" for n in differing]
    for f in failures:
        print("FAIL:", f)
    print("FAIL" if failures else "PASS")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
