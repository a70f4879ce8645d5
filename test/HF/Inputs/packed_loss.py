#!/usr/bin/env python3
"""packed_loss.py OUT: compares the packed row's loss (OUT/packed_out) with
the documents' own losses (OUT/doc_D_out), each a mean over its counted
labels: the packed loss must be their mean weighted by those counts."""
import pathlib
import sys

import numpy as np
from onnx import TensorProto, numpy_helper

out = pathlib.Path(sys.argv[1])


def loss(directory):
    tensor = TensorProto()
    tensor.ParseFromString((directory / "output_0.pb").read_bytes())
    return float(numpy_helper.to_array(tensor))


counts = [int(c) for c in (out / "counts.txt").read_text().split()]
losses = [loss(out / f"doc_{d}_out") for d in range(len(counts))]
expected = sum(l * c for l, c in zip(losses, counts)) / sum(counts)
got = loss(out / "packed_out")
ok = abs(got - expected) <= 1e-5 * abs(expected)
print(f"packed {got:.6f} documents {expected:.6f} ({len(counts)} documents, "
      f"{sum(counts)} counted): {'OK' if ok else 'FAIL'}")
sys.exit(0 if ok else 1)
