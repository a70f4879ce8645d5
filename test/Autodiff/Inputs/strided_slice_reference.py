#!/usr/bin/env python3
"""Writes the input and numpy's gradient of w for strided-slice.onnxtxt:
loss = sum(s[:, 0::2] * c1) + sum(s[:, 7::-3] * c2) + sum(s[:, 1::2] * c3)
with s = x + w, so dloss/dw scatters c1, c2, c3 to the strided positions."""
import pathlib
import sys

import numpy as np
from onnx import numpy_helper

out = pathlib.Path(sys.argv[1])
(out / "inputs").mkdir(parents=True, exist_ok=True)
(out / "want").mkdir(parents=True, exist_ok=True)
x = np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 8)
(out / "inputs" / "input_0.pb").write_bytes(numpy_helper.from_array(x).SerializeToString())
c1 = np.arange(1, 9, dtype=np.float32).reshape(2, 4)
c2 = -np.arange(1, 7, dtype=np.float32).reshape(2, 3)
c3 = np.arange(0.5, 8, dtype=np.float32).reshape(2, 4)
g = np.zeros((2, 8), np.float32)
g[:, 0::2] += c1
g[:, 7::-3] += c2
g[:, 1::2] += c3
(out / "want" / "w.pb").write_bytes(numpy_helper.from_array(g).SerializeToString())
