#!/usr/bin/env python3
"""Splits a test-data folder into N micro-batches along dim 0.

usage: split_micro_batches.py IN_DIR N OUT_DIR
Writes input_{i*D + k}.pb for micro-batch i and input k (D inputs), the
argument order of a step compiled with --grad-accum N."""
import pathlib
import sys

import numpy as np
import onnx
from onnx import numpy_helper

src, n, out = pathlib.Path(sys.argv[1]), int(sys.argv[2]), pathlib.Path(sys.argv[3])
out.mkdir(parents=True, exist_ok=True)
inputs = sorted(src.glob("input_*.pb"), key=lambda p: int(p.stem.split("_")[1]))
for k, path in enumerate(inputs):
    tensor = onnx.load_tensor(str(path))
    parts = np.split(numpy_helper.to_array(tensor), n, axis=0)
    for i, part in enumerate(parts):
        index = i * len(inputs) + k
        onnx.save_tensor(numpy_helper.from_array(np.ascontiguousarray(part), tensor.name),
                         str(out / f"input_{index}.pb"))
