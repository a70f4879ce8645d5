#!/usr/bin/env python3
"""Writes models and input files whose external data tries to leave their folder.

make_escape.py OUT_DIR creates, next to OUT_DIR/secret.bin (16 float32s
that must never be read):
  OUT_DIR/<case>/model.onnx   y = x * scale, `scale` float[8] external, with
                              location '../secret.bin' (dotdot), the absolute
                              path of secret.bin (absolute), 'scale.bin', a
                              symlink to ../secret.bin (symlink), and
                              'data/scale.bin', a real file in a subfolder (ok);
  OUT_DIR/lora/model.onnx     the same with a LoRA target, so `scale` is a
                              frozen weight `kiln compile` inlines;
  OUT_DIR/shape/model.onnx    a Reshape whose int64 target is external at
                              '../secret.bin': import itself reads it;
  OUT_DIR/inputs/input_0.pb   x, and OUT_DIR/bad-inputs/input_0.pb: x as
                              external data at '../secret.bin'.
"""
import os
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def external(name, dtype, dims, location, nbytes):
    tensor = TensorProto()
    tensor.name = name
    tensor.data_type = dtype
    tensor.dims.extend(dims)
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(nbytes))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return tensor


def make_model(nodes, inputs, outputs, inits):
    graph = helper.make_graph(nodes, "escape", inputs, outputs, initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # What ONNX 1.12 (Kiln's C++ side) reads.
    return model


def scale_model(location):
    return make_model(
        [helper.make_node("Mul", ["x", "scale"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])],
        [external("scale", TensorProto.FLOAT, [8], location, 32)])


def lora_model(location):
    weight = numpy_helper.from_array(np.eye(8, dtype=np.float32), "q_proj_weight")
    return make_model(
        [helper.make_node("MatMul", ["x", "q_proj_weight"], ["h"]),
         helper.make_node("Mul", ["h", "scale"], ["z"]),
         helper.make_node("ReduceSum", ["z"], ["loss"], keepdims=0)],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])],
        [weight, external("scale", TensorProto.FLOAT, [8], location, 32)])


def write(model, directory):
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "model.onnx").write_bytes(model.SerializeToString())


def main():
    out = pathlib.Path(sys.argv[1]).resolve()
    out.mkdir(parents=True, exist_ok=True)
    secret = np.arange(16, dtype=np.float32) + 100
    (out / "secret.bin").write_bytes(secret.tobytes())

    write(scale_model("../secret.bin"), out / "dotdot")
    write(scale_model(str(out / "secret.bin")), out / "absolute")
    write(scale_model("scale.bin"), out / "symlink")
    os.symlink("../secret.bin", out / "symlink" / "scale.bin")
    write(scale_model("data/scale.bin"), out / "ok")
    (out / "ok" / "data").mkdir()
    (out / "ok" / "data" / "scale.bin").write_bytes(np.full(8, 2, np.float32).tobytes())
    write(lora_model("../secret.bin"), out / "lora")

    write(make_model(
        [helper.make_node("Reshape", ["x", "target"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 4])],
        [external("target", TensorProto.INT64, [2], "../secret.bin", 16)]), out / "shape")

    x = np.ones((2, 8), np.float32)
    (out / "inputs").mkdir()
    (out / "inputs" / "input_0.pb").write_bytes(numpy_helper.from_array(x, "x").SerializeToString())
    (out / "bad-inputs").mkdir()
    (out / "bad-inputs" / "input_0.pb").write_bytes(
        external("x", TensorProto.FLOAT, [2, 8], "../secret.bin", 64).SerializeToString())
    return 0


if __name__ == "__main__":
    sys.exit(main())
