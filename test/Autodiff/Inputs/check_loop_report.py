#!/usr/bin/env python3
"""Checks the run-time loop programs' reports (kiln interp --grad-accum).

usage: check_loop_report.py FULL.txt ACCUM.txt GRAD_DIR [MODEL.onnx CLIPPED_PARAMS LR MAX_NORM]

FULL.txt: `kiln interp --steps N` of @main on the whole batch; ACCUM.txt:
the same steps as micro-batches through @main__accum/@main__apply with
--eval-inputs on the whole batch. Prints one OK/FAIL line per property:
  tokens    each step's loss is the counted-token-weighted mean of its
            micro-batch losses (HF Trainer's num_items_in_batch), and the
            plain mean of the micro-batch losses differs (the test sees
            the weighting)
  full      the accumulated step's loss equals the full batch's (rtol 1e-6)
  eval      the eval loss after step s equals the full batch's loss at s+1
  grad_norm step 1's norm equals numpy's L2 norm of GRAD_DIR (PyTorch's
            gradients of the fixture; rtol 1e-4)
  clip      with MODEL, CLIPPED_PARAMS (params after one SGD step compiled
            with --clip-grad-norm MAX_NORM): p - LR * g * min(1, MAX_NORM /
            (norm + 1e-6)), torch.nn.utils.clip_grad_norm_'s rule, from the
            model's initial weights and GRAD_DIR (atol 1e-6)
"""
import pathlib
import re
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def parse(path):
    steps, micro, evals = {}, {}, {}
    for line in pathlib.Path(path).read_text().splitlines():
        if m := re.match(r"step (\d+) micro-batch (\d+): loss (\S+) tokens (\S+)", line):
            micro.setdefault(int(m[1]), []).append((float(m[3]), float(m[4])))
        elif m := re.match(r"step (\d+): eval loss (\S+)", line):
            evals[int(m[1])] = float(m[2])
        elif m := re.match(r"step (\d+): loss (\S+)(?: grad_norm (\S+))?", line):
            steps[int(m[1])] = (float(m[2]), float(m[3]) if m[3] else None)
    return steps, micro, evals


def report(name, ok, detail):
    print(("OK " if ok else "FAIL ") + name + ": " + detail)
    return ok


def main():
    full, _, _ = parse(sys.argv[1])
    steps, micro, evals = parse(sys.argv[2])
    grads = {p.stem: numpy_helper.to_array(onnx.load_tensor(str(p)))
             for p in pathlib.Path(sys.argv[3]).glob("*.pb")}
    good = True
    worst, spread = 0.0, 0.0
    for s, parts in micro.items():
        n = sum(t for _, t in parts)
        weighted = sum(l * t for l, t in parts) / n
        worst = max(worst, abs(weighted - steps[s][0]) / abs(steps[s][0]))
        spread = max(spread, abs(np.mean([l for l, _ in parts]) - steps[s][0]))
    good &= report("tokens", worst < 2e-7 and spread > 1e-3,
                   f"token-weighted mean rel err {worst:.2e}, plain mean off by {spread:.2e}")
    rel = max(abs(steps[s][0] - full[s][0]) / abs(full[s][0]) for s in full)
    good &= report("full", rel < 1e-6 and steps.keys() == full.keys(), f"max rel err {rel:.2e}")
    pairs = [(evals[s], full[s + 1][0]) for s in evals if s + 1 in full]
    rel = max(abs(a - b) / abs(b) for a, b in pairs)
    good &= report("eval", bool(pairs) and rel < 1e-6, f"{len(pairs)} steps, max rel err {rel:.2e}")
    norm = float(np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values())))
    rel = abs(steps[1][1] - norm) / norm
    good &= report("grad_norm", rel < 1e-4, f"{steps[1][1]:.7f} vs numpy {norm:.7f} (rel {rel:.2e})")
    if len(sys.argv) > 4:
        model = onnx.load(sys.argv[4])
        init = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        lr, max_norm = float(sys.argv[6]), float(sys.argv[7])
        coef = min(1.0, max_norm / (norm + 1e-6))
        err = 0.0
        for name, g in grads.items():
            want = init[name].astype(np.float64) - lr * coef * g.astype(np.float64)
            got = numpy_helper.to_array(onnx.load_tensor(str(pathlib.Path(sys.argv[5]) / f"{name}.pb")))
            err = max(err, float(np.max(np.abs(got - want))))
        good &= report("clip", coef < 1 and err < 1e-6, f"coefficient {coef:.6f}, max abs err {err:.2e}")
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
