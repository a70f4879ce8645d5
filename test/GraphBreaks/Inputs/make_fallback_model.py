#!/usr/bin/env python3
"""A classifier whose labels arrive one-hot and go through ArgMax (which
Kiln keeps opaque) before the loss: a graph break on a non-differentiated
side path. Writes model.onnx, test data, and the numpy reference losses of
3 SGD steps (lr 0.1) into OUT_DIR/expected_losses.txt.

usage: make_fallback_model.py OUT_DIR"""
import pathlib
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

out = pathlib.Path(sys.argv[1])
(out / "data").mkdir(parents=True, exist_ok=True)
rng = np.random.default_rng(7)
n, d, c = 6, 5, 3
w0 = rng.normal(size=(c, d)).astype(np.float32)
b0 = rng.normal(size=(c,)).astype(np.float32)
x = rng.normal(size=(n, d)).astype(np.float32)
labels = rng.integers(0, c, size=n)
onehot = np.eye(c, dtype=np.float32)[labels]

nodes = [
    helper.make_node("ArgMax", ["onehot"], ["label"], axis=1, keepdims=0, name="to_index"),
    helper.make_node("Gemm", ["x", "w", "b"], ["logits"], transB=1, name="linear"),
    helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "label"], ["loss"],
                     reduction="mean", name="loss"),
]
graph = helper.make_graph(
    nodes, "fallback",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", d]),
     helper.make_tensor_value_info("onehot", TensorProto.FLOAT, ["n", c])],
    [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
    initializer=[numpy_helper.from_array(w0, "w"), numpy_helper.from_array(b0, "b")],
    value_info=[helper.make_tensor_value_info("label", TensorProto.INT64, ["n"])])
save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]),
     str(out / "model.onnx"))
from onnx import save_tensor
save_tensor(numpy_helper.from_array(x, "x"), str(out / "data" / "input_0.pb"))
save_tensor(numpy_helper.from_array(onehot, "onehot"), str(out / "data" / "input_1.pb"))

# Reference: plain SGD on softmax cross-entropy, in float64.
w, b = w0.astype(np.float64), b0.astype(np.float64)
losses = []
for _ in range(3):
    z = x @ w.T + b
    z -= z.max(axis=1, keepdims=True)
    p = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    losses.append(-np.log(p[np.arange(n), labels]).mean())
    g = (p - np.eye(c)[labels]) / n
    w -= 0.1 * (g.T @ x)
    b -= 0.1 * g.sum(axis=0)
(out / "expected_losses.txt").write_text("".join(f"{l:.9f}\n" for l in losses))
