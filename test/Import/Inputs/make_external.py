#!/usr/bin/env python3
"""Writes models whose initializers live in an external data file.

make_external.py OUT_DIR creates:
  OUT_DIR/model/model.onnx       y = relu(x @ w1 + b1) @ w2 + b2, x: [batch, 4];
  OUT_DIR/model/weights.bin      all four initializers (float32, external);
  OUT_DIR/inputs/input_0.pb      x for batch = 3;
  OUT_DIR/expected/output_0.pb   y computed with numpy (float32);
  OUT_DIR/shape/model.onnx       a Reshape whose int64 target shape is also
  OUT_DIR/shape/shape.bin        external: import itself must read it.
"""
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def save(model, directory, location):
    directory.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, str(directory / "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location=location, size_threshold=0)


def make_model(nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "external", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # What ONNX 1.12 (Kiln's C++ side) reads.
    return model


def main():
    out = pathlib.Path(sys.argv[1])
    rng = np.random.default_rng(7)
    w1 = rng.standard_normal((4, 8)).astype(np.float32)
    b1 = rng.standard_normal(8).astype(np.float32)
    w2 = rng.standard_normal((8, 2)).astype(np.float32)
    b2 = rng.standard_normal(2).astype(np.float32)
    x = rng.standard_normal((3, 4)).astype(np.float32)

    mlp = make_model(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]),
         helper.make_node("Add", ["h", "b1"], ["hb"]),
         helper.make_node("Relu", ["hb"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["o"]),
         helper.make_node("Add", ["o", "b2"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 2])],
        [numpy_helper.from_array(a, n) for a, n in ((w1, "w1"), (b1, "b1"), (w2, "w2"), (b2, "b2"))])
    save(mlp, out / "model", "weights.bin")

    y = np.maximum(x @ w1 + b1, np.float32(0)) @ w2 + b2
    for sub, name, array in (("inputs", "input_0.pb", x), ("expected", "output_0.pb", y)):
        (out / sub).mkdir(parents=True, exist_ok=True)
        tensor = numpy_helper.from_array(array.astype(np.float32), "x" if sub == "inputs" else "y")
        (out / sub / name).write_bytes(tensor.SerializeToString())

    reshape = make_model(
        [helper.make_node("Reshape", ["x", "target"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])],
        [numpy_helper.from_array(np.array([2, 6], np.int64), "target")])
    save(reshape, out / "shape", "shape.bin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
