#!/usr/bin/env python3
"""grad_error_ratio.py NEW OLD REF MAX: the L2 relative error of the gradients
in folder NEW against REF (every *.pb of REF), the same for OLD, and PASS when
NEW's is at most MAX times OLD's (else FAIL)."""
import pathlib
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def error(got, ref):
    num = den = 0.0
    for want in sorted(pathlib.Path(ref).glob("*.pb")):
        r = numpy_helper.to_array(onnx.load_tensor(str(want))).astype(np.float64)
        g = numpy_helper.to_array(onnx.load_tensor(str(pathlib.Path(got) / want.name)))
        num += float(((g.astype(np.float64) - r) ** 2).sum())
        den += float((r ** 2).sum())
    return (num / den) ** 0.5


new, old, ref, bound = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
e_new, e_old = error(new, ref), error(old, ref)
print(f"L2 relative error: new {e_new:.4e}, old {e_old:.4e}, ratio {e_new / e_old:.3f}")
print("PASS" if e_new <= bound * e_old else "FAIL")
