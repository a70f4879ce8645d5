#!/usr/bin/env python3
"""Writes Llama inputs whose two tensors disagree on seq: input_ids 2x16
(from test_data_set_0) and labels 2x9. usage: mismatched_seq.py FIXTURE OUT"""
import pathlib
import sys

import numpy as np
import onnx
from onnx import numpy_helper

fixture, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
ids = numpy_helper.to_array(onnx.load_tensor(str(fixture / "input_0.pb")))
labels = numpy_helper.to_array(onnx.load_tensor(str(fixture / "input_1.pb")))[:, :9]
onnx.save_tensor(numpy_helper.from_array(ids, "input_ids"), str(out / "input_0.pb"))
onnx.save_tensor(numpy_helper.from_array(np.ascontiguousarray(labels), "labels"),
                 str(out / "input_1.pb"))
