#!/usr/bin/env python3
"""Writes a model whose If nodes nest DEPTH levels deep.

make_nested_if.py OUT.onnx DEPTH: y = If(c) { If(c) { ... Identity(x) } }
along every then_branch (the else branches are Identity(x)). Each level costs
protobuf three nested messages (node, attribute, graph), so 40 levels pass
its default recursion limit of 100. Python's protobuf refuses to build
messages that deep too, so the nesting is spliced as wire-format bytes.
"""
import sys

from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, helper


def varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, payload):
    """A length-delimited field: `payload` is an already serialized message."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def graph_bytes(depth, out):
    """GraphProto bytes whose single node computes `out`."""
    graph = GraphProto(name=f"g{depth}")
    graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, [2]))
    if depth == 0:
        graph.node.append(helper.make_node("Identity", ["x"], [out]))
        return graph.SerializeToString()
    inner = graph_bytes(depth - 1, f"t{depth}")
    else_graph = helper.make_graph([helper.make_node("Identity", ["x"], [f"e{depth}"])], f"else{depth}", [],
                                   [helper.make_tensor_value_info(f"e{depth}", TensorProto.FLOAT, [2])])
    then_attr = AttributeProto(name="then_branch", type=AttributeProto.GRAPH).SerializeToString() + field(6, inner)
    node = helper.make_node("If", ["c"], [out], else_branch=else_graph)
    GRAPH_NODE, NODE_ATTRIBUTE = 1, 5
    return field(GRAPH_NODE, node.SerializeToString() + field(NODE_ATTRIBUTE, then_attr)) + \
        graph.SerializeToString()


def main():
    path, depth = sys.argv[1], int(sys.argv[2])
    top = GraphProto(name="nested")
    top.input.extend([helper.make_tensor_value_info("c", TensorProto.BOOL, []),
                      helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])])
    model = ModelProto(ir_version=8)  # What ONNX 1.12 (Kiln's C++ side) reads.
    model.opset_import.append(helper.make_opsetid("", 17))
    MODEL_GRAPH = 7
    inner = graph_bytes(depth, "y")
    with open(path, "wb") as f:
        f.write(model.SerializeToString() + field(MODEL_GRAPH, top.SerializeToString() + inner))
    return 0


if __name__ == "__main__":
    sys.exit(main())
