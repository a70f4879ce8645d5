#!/usr/bin/env python3
"""Inputs and numpy's loss and d loss/d w for masked-ce.onnxtxt.

loss = mean over rows with labels != -100 of -log_softmax(x @ w)[r, labels[r]]
(torch.nn.functional.cross_entropy(..., ignore_index=-100)); masked rows
(prompt tokens, padding) contribute nothing to the loss or the gradient.

usage: masked_ce_reference.py OUT
Writes OUT/inputs (labels with -100 rows), OUT/perturbed (the same, with
the masked rows' x replaced by large values: the loss and gradient must not
change), OUT/want/output_0.pb and OUT/want/grad/w.pb."""
import pathlib
import sys

import numpy as np
from onnx import numpy_helper

out = pathlib.Path(sys.argv[1])
w = np.array([0.1, -0.2, 0.3, -0.4, 0.5, 0.6, -0.7, 0.8, -0.9, 1.0, -1.1, 1.2,
              1.3, -1.4, 1.5, 0.25, 0.5, -0.75, 1.0, -1.25], np.float32).reshape(4, 5)
x = np.linspace(-1.5, 2.0, 24, dtype=np.float32).reshape(6, 4)
# Two "prompt" rows, one "padding" row, three counted rows.
labels = np.array([-100, -100, 3, 0, 4, -100], np.int64)
masked = labels == -100


def write(folder, x_value):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "input_0.pb").write_bytes(numpy_helper.from_array(x_value, "x").SerializeToString())
    (folder / "input_1.pb").write_bytes(numpy_helper.from_array(labels, "labels").SerializeToString())


write(out / "inputs", x)
perturbed = x.copy()
perturbed[masked] = np.float32(37.0) * np.arange(1, 5, dtype=np.float32)
write(out / "perturbed", perturbed)

x64, w64 = x.astype(np.float64), w.astype(np.float64)
logits = x64 @ w64
shifted = logits - logits.max(axis=1, keepdims=True)
log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
counted = ~masked
n = counted.sum()
rows = np.nonzero(counted)[0]
loss = -log_probs[rows, labels[rows]].sum() / n
dlogits = np.exp(log_probs)
dlogits[rows, labels[rows]] -= 1
dlogits[masked] = 0
dlogits /= n
dw = x64.T @ dlogits
(out / "want" / "grad").mkdir(parents=True, exist_ok=True)
(out / "want" / "output_0.pb").write_bytes(
    numpy_helper.from_array(np.array(loss, np.float32), "loss").SerializeToString())
(out / "want" / "grad" / "w.pb").write_bytes(
    numpy_helper.from_array(dw.astype(np.float32), "w").SerializeToString())
