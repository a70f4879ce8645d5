#!/usr/bin/env python3
"""Writes one small ONNX model per graph-break kind into OUT_DIR.

usage: make_models.py OUT_DIR"""
import pathlib
import sys

import numpy as np
from onnx import TensorProto, helper, numpy_helper, save

out = pathlib.Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
F, I = TensorProto.FLOAT, TensorProto.INT64


def model(name, nodes, inputs, outputs, inits=(), domains=()):
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(inits))
    opsets = [helper.make_opsetid("", 17)] + [helper.make_opsetid(d, 1) for d in domains]
    save(helper.make_model(graph, opset_imports=opsets), str(out / f"{name}.onnx"))


x = helper.make_tensor_value_info("x", F, ["n", 4])
y = helper.make_tensor_value_info("y", F, None)
w = numpy_helper.from_array(np.ones((4, 4), np.float32), "w")

# An op Kiln has no importer for.
model("unsupported_op", [helper.make_node("Hardmax", ["x"], ["y"], name="hardmax")],
      [x], [y])
# Output size depends on values.
model("nonzero", [helper.make_node("NonZero", ["x"], ["y"], name="find")],
      [x], [helper.make_tensor_value_info("y", I, None)])
# A reshape target read from a tensor.
model("reshape_from_data",
      [helper.make_node("Reshape", ["x", "s"], ["y"], name="reshape_by_value")],
      [x, helper.make_tensor_value_info("s", I, [2])], [y])
# A size used as data (host-value extraction).
model("host_value",
      [helper.make_node("Shape", ["x"], ["s"], name="shape"),
       helper.make_node("Cast", ["s"], ["f"], to=F, name="to_float"),
       helper.make_node("Add", ["x", "f"], ["y"], name="add_size")],
      [helper.make_tensor_value_info("x", F, ["n", "m"])], [y])
# Data-dependent control flow.
then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                           [helper.make_tensor_value_info("t", F, None)])
else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                           [helper.make_tensor_value_info("e", F, None)])
model("if_on_data",
      [helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0, name="sum"),
       helper.make_node("Greater", ["s", "zero"], ["c"], name="positive"),
       helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g,
                        name="branch")],
      [x], [y], inits=[numpy_helper.from_array(np.array(0, np.float32), "zero")])
body = helper.make_graph(
    [helper.make_node("Add", ["acc", "one"], ["acc_out"]),
     helper.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
    [helper.make_tensor_value_info("i", I, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
     helper.make_tensor_value_info("acc", F, None)],
    [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
     helper.make_tensor_value_info("acc_out", F, None)],
    initializer=[numpy_helper.from_array(np.array(1, np.float32), "one")])
model("loop_on_data",
      [helper.make_node("Loop", ["trips", "", "x"], ["y"], body=body, name="repeat")],
      [x, helper.make_tensor_value_info("trips", I, [])], [y])
# A node from a custom domain.
model("custom_domain",
      [helper.make_node("FusedGelu", ["x"], ["y"], domain="com.microsoft", name="fused")],
      [x], [y], domains=["com.microsoft"])
# A trainable weight feeding an op without a gradient for it.
model("no_vjp",
      [helper.make_node("GatherElements", ["w", "idx"], ["g"], axis=0, name="pick"),
       helper.make_node("ReduceSum", ["g"], ["y"], keepdims=0, name="total")],
      [helper.make_tensor_value_info("idx", I, [2, 4])],
      [helper.make_tensor_value_info("y", F, [])], inits=[w])
# Control flow on a constant is inlined: no break.
model("if_on_constant",
      [helper.make_node("If", ["flag"], ["y"], then_branch=then_g, else_branch=else_g,
                        name="static_branch")],
      [x], [y], inits=[numpy_helper.from_array(np.array(False), "flag")])
