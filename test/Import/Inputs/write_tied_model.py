#!/usr/bin/env python3
"""write_tied_model.py OUT.onnx METADATA [PARAMETERS]: the loss sum(x W^T
+ b) of a linear layer with a bias initializer `inv_freq_like` whose weight
`lm_head.weight` the metadata kiln.tied_weights (the JSON text METADATA, or
no entry when it is `none`) may tie to other names; PARAMETERS, when
given, is the kiln.parameters metadata (the model's parameter names)."""
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

out, metadata = sys.argv[1], sys.argv[2]
w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "lm_head.weight")
b = numpy_helper.from_array(np.array([0.5, 0.25], dtype=np.float32), "inv_freq_like")
graph = helper.make_graph(
    [helper.make_node("Transpose", ["lm_head.weight"], ["wt"], perm=[1, 0]),
     helper.make_node("MatMul", ["x", "wt"], ["xw"]),
     helper.make_node("Add", ["xw", "inv_freq_like"], ["y"]),
     helper.make_node("ReduceSum", ["y"], ["loss"], keepdims=0)],
    "tied", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 3])],
    [helper.make_tensor_value_info("loss", TensorProto.FLOAT, [])], [w, b])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
if metadata != "none":
    entry = model.metadata_props.add()
    entry.key, entry.value = "kiln.tied_weights", metadata
if len(sys.argv) > 3:
    entry = model.metadata_props.add()
    entry.key, entry.value = "kiln.parameters", sys.argv[3]
onnx.save(model, out)
