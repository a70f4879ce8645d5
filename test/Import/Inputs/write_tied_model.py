#!/usr/bin/env python3
"""write_tied_model.py OUT.onnx METADATA: a linear layer y = x W^T whose
weight `w` the metadata kiln.tied_weights (the JSON text METADATA, or no
entry when it is `none`) may tie to other names."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out, metadata = sys.argv[1], sys.argv[2]
w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "lm_head.weight")
graph = helper.make_graph(
    [helper.make_node("Transpose", ["lm_head.weight"], ["wt"], perm=[1, 0]),
     helper.make_node("MatMul", ["x", "wt"], ["y"])],
    "tied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 2])], [w])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
if metadata != "none":
    entry = model.metadata_props.add()
    entry.key, entry.value = "kiln.tied_weights", metadata
onnx.save(model, out)
