#!/usr/bin/env python3
"""Compares TensorProto files: compare_tensors.py GOT WANT [--rtol R] [--atol A]
[--max-rel R].

GOT and WANT are files or folders (folders: every *.pb of WANT must exist in
GOT). Passes when |got - want| <= atol + rtol * |want| elementwise; prints
one line per tensor with the worst error, and exits 1 on any mismatch.
"""
import argparse
import pathlib
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def load(path):
    return numpy_helper.to_array(onnx.load_tensor(str(path)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("got")
    parser.add_argument("want")
    parser.add_argument("--rtol", type=float, default=1e-5)
    parser.add_argument("--atol", type=float, default=0.0)
    parser.add_argument("--outliers", type=int, default=0,
                        help="elements (over all tensors) allowed past the "
                             "tolerance, each still within --outlier-atol")
    parser.add_argument("--outlier-atol", type=float, default=0.0)
    parser.add_argument("--max-rel", type=float, default=None,
                        help="pass when max|got - want| <= R * max|want| per "
                             "tensor (the gradient acceptance rule)")
    args = parser.parse_args()
    got, want = pathlib.Path(args.got), pathlib.Path(args.want)
    if not want.exists():
        print(f"no reference at {want}")
        return 1
    pairs = ([(got / p.name, p) for p in sorted(want.glob("*.pb"))]
             if want.is_dir() else [(got, want)])
    if not pairs:
        print(f"no reference tensors in {want}")
        return 1
    ok = True
    outliers = 0
    for g, w in pairs:
        if not g.exists():
            print(f"MISSING {g}")
            ok = False
            continue
        a, b = load(g), load(w)
        if a.shape != b.shape:
            print(f"SHAPE {w.name}: got {a.shape}, want {b.shape}")
            ok = False
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        err = np.abs(a64 - b64)
        worst = float(err.max()) if err.size else 0.0
        if args.max_rel is not None:
            scale = float(np.abs(b64).max()) if b64.size else 0.0
            passed = worst <= args.max_rel * scale + args.atol
        else:
            bound = args.atol + args.rtol * np.abs(b64)
            past = err > bound
            if past.any() and args.outliers and bool(np.all(err <= args.outlier_atol)):
                outliers += int(past.sum())
                print(f"OUTLIERS {w.name}: {int(past.sum())} elements past "
                      f"{args.atol:g}, max abs err {worst:.3g}")
                continue
            passed = not past.any()
        print(f"{'OK' if passed else 'MISMATCH'} {w.name}: max abs err {worst:.3g}")
        ok &= passed
    if outliers > args.outliers:
        print(f"TOO MANY OUTLIERS: {outliers} > {args.outliers}")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
