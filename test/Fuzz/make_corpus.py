#!/usr/bin/env python3
"""Writes the kiln-fuzz-onnx seed corpus: make_corpus.py [OUT_DIR].

OUT_DIR defaults to test/Fuzz/corpus next to this script. Two kinds of tiny
binary models, both deterministic:

  ok-*.onnx   valid models `kiln import` must accept (exit 0);
  bad-*.onnx  protobufs that parse but are inconsistent; `kiln import` must
              reject each with one `kiln: error: <file>: ...` line (exit 1);
  any-*.onnx  dubious models Kiln may accept (e.g. keep as kiln.opaque) or
              reject, but never crash on.

check_corpus.py runs `kiln import` on every file and checks exactly that, so
the seeds double as a no-crash regression suite without the fuzzer. The
checked-in copy of test/fixtures/onnx/mlp_dynamo/model.onnx (ok-mlp-dynamo)
is copied here too when the fixture exists.
"""
import os
import pathlib
import shutil
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

IR_VERSION = 8  # What ONNX 1.12 (the C++ side) reads without complaint.
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def model(nodes, inputs, outputs, inits=(), opset=17, value_info=()):
    graph = helper.make_graph(nodes, "g", list(inputs), list(outputs),
                              initializer=list(inits), value_info=list(value_info))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = IR_VERSION
    m.producer_name = "kiln-make-corpus"
    return m


def vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def const(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def valid_models():
    rng = np.random.default_rng(0)
    w = lambda *shape: rng.standard_normal(shape).astype(np.float32)
    yield "ok-add-broadcast", model(
        [helper.make_node("Add", ["x", "y"], ["z"])],
        [vi("x", F, [2, 3]), vi("y", F, [3])], [vi("z", F, [2, 3])])
    yield "ok-mlp", model(
        [helper.make_node("MatMul", ["x", "w1"], ["h"]),
         helper.make_node("Add", ["h", "b1"], ["hb"]),
         helper.make_node("Relu", ["hb"], ["r"]),
         helper.make_node("MatMul", ["r", "w2"], ["y"])],
        [vi("x", F, ["batch", 4])], [vi("y", F, ["batch", 2])],
        [const("w1", w(4, 8)), const("b1", w(8)), const("w2", w(8, 2))])
    yield "ok-shape-reshape", model(
        [helper.make_node("Shape", ["x"], ["s"]),
         helper.make_node("Gather", ["s", "zero"], ["b"], axis=0),
         helper.make_node("Unsqueeze", ["b", "ax0"], ["b1"]),
         helper.make_node("Concat", ["b1", "tail"], ["target"], axis=0),
         helper.make_node("Reshape", ["x", "target"], ["y"])],
        [vi("x", F, ["b", "s", 8])], [vi("y", F, None)],
        [const("zero", np.array(0, np.int64)), const("ax0", np.array([0], np.int64)),
         const("tail", np.array([-1, 4], np.int64))])
    yield "ok-softmax-ce", model(
        [helper.make_node("Gemm", ["x", "w", "bias"], ["logits"], transB=1),
         helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "labels"], ["loss"],
                          reduction="mean")],
        [vi("x", F, ["n", 6]), vi("labels", I64, ["n"])], [vi("loss", F, [])],
        [const("w", w(5, 6)), const("bias", w(5))])
    yield "ok-constant-cast", model(
        [helper.make_node("Constant", [], ["c"],
                          value=numpy_helper.from_array(np.array([1.5, -2.0], np.float32))),
         helper.make_node("Add", ["x", "c"], ["xc"]),
         helper.make_node("Cast", ["xc"], ["y"], to=TensorProto.DOUBLE),
         helper.make_node("Constant", [], ["shape"], value_ints=[2, 2]),
         helper.make_node("ConstantOfShape", ["shape"], ["ones"],
                          value=numpy_helper.from_array(np.array([1.0], np.float32)))],
        [vi("x", F, [3, 2])], [vi("y", TensorProto.DOUBLE, [3, 2]), vi("ones", F, [2, 2])])
    yield "ok-slice-transpose", model(
        [helper.make_node("Slice", ["x", "starts", "ends", "axes"], ["s"]),
         helper.make_node("Transpose", ["s"], ["t"], perm=[1, 0, 2]),
         helper.make_node("Concat", ["t", "t"], ["y"], axis=-1)],
        [vi("x", F, [4, 5, 6])], [vi("y", F, None)],
        [const("starts", np.array([1, 0], np.int64)), const("ends", np.array([3, -1], np.int64)),
         const("axes", np.array([0, 2], np.int64))])
    yield "ok-layernorm-gelu", model(
        [helper.make_node("LayerNormalization", ["x", "g", "bt"], ["n"], axis=-1, epsilon=1e-5),
         helper.make_node("Gelu", ["n"], ["y"], approximate="tanh")],
        [vi("x", F, ["b", 8])], [vi("y", F, ["b", 8])],
        [const("g", w(8)), const("bt", w(8))], opset=20)
    yield "ok-reduce-where", model(
        [helper.make_node("ReduceMean", ["x", "axes"], ["m"], keepdims=1),
         helper.make_node("Greater", ["x", "m"], ["gt"]),
         helper.make_node("Where", ["gt", "x", "m"], ["y"]),
         helper.make_node("ReduceSum", ["y"], ["total"], keepdims=0)],
        [vi("x", F, ["n", 7])], [vi("y", F, ["n", 7]), vi("total", F, [])],
        [const("axes", np.array([-1], np.int64))], opset=18)
    yield "ok-split-tile", model(
        [helper.make_node("Split", ["x", "parts"], ["a", "b"], axis=1),
         helper.make_node("Tile", ["a", "reps"], ["ta"]),
         helper.make_node("Expand", ["b", "eshape"], ["eb"]),
         helper.make_node("Mul", ["ta", "eb"], ["y"])],
        [vi("x", F, [2, 6])], [vi("y", F, [2, 4])],
        [const("parts", np.array([2, 4], np.int64)), const("reps", np.array([1, 2], np.int64)),
         const("eshape", np.array([2, 4], np.int64))])
    yield "ok-cumsum-trilu-pad", model(
        [helper.make_node("CumSum", ["x", "axis"], ["c"]),
         helper.make_node("Trilu", ["c"], ["t"], upper=0),
         helper.make_node("Pad", ["t", "pads"], ["y"], mode="constant")],
        [vi("x", F, [3, 3])], [vi("y", F, [4, 5])],
        [const("axis", np.array(1, np.int64)), const("pads", np.array([0, 1, 1, 1], np.int64))])
    yield "ok-range-gather", model(
        [helper.make_node("Shape", ["ids"], ["s"]),
         helper.make_node("Gather", ["s", "one"], ["len"], axis=0),
         helper.make_node("Range", ["zero", "len", "one"], ["pos"]),
         helper.make_node("Gather", ["table", "ids"], ["e"], axis=0),
         helper.make_node("Gather", ["ptable", "pos"], ["p"], axis=0),
         helper.make_node("Add", ["e", "p"], ["y"])],
        [vi("ids", I64, ["b", "s"])], [vi("y", F, ["b", "s", 4])],
        [const("zero", np.array(0, np.int64)), const("one", np.array(1, np.int64)),
         const("table", w(10, 4)), const("ptable", w(16, 4))])
    # Initializer encodings: typed fields instead of raw_data, f16, bool, i32.
    typed = helper.make_tensor("k", I64, [3], [1, 2, 3])
    half = numpy_helper.from_array(np.array([[0.5, 1.0]], np.float16), "h")
    yield "ok-typed-initializers", model(
        [helper.make_node("Cast", ["k"], ["kf"], to=F),
         helper.make_node("Cast", ["h"], ["hf"], to=F),
         helper.make_node("Mul", ["x", "kf"], ["xk"]),
         helper.make_node("Cast", ["mask"], ["mf"], to=F),
         helper.make_node("Mul", ["xk", "mf"], ["y"]),
         helper.make_node("Cast", ["i32"], ["y2"], to=I64)],
        [vi("x", F, [2, 3])], [vi("y", F, [2, 3]), vi("hf", F, [1, 2]), vi("y2", I64, [2])],
        [typed, half, numpy_helper.from_array(np.array([True, False, True]), "mask"),
         helper.make_tensor("i32", TensorProto.INT32, [2], [7, -7])])


def bad_models():
    x23 = vi("x", F, [2, 3])
    y23 = vi("y", F, [2, 3])
    relu = [helper.make_node("Relu", ["x"], ["y"])]
    yield "bad-opset-99", model(relu, [x23], [y23], opset=99)
    no_default = model(relu, [x23], [y23])
    no_default.opset_import[0].domain = "com.example"
    yield "bad-no-default-opset", no_default
    yield "bad-input-no-shape", model(relu, [vi("x", F, None)], [y23])
    yield "bad-input-not-tensor", model(
        relu, [helper.make_value_info("x", helper.make_sequence_type_proto(
            helper.make_tensor_type_proto(F, [2])))], [y23])
    yield "bad-input-string", model(relu, [vi("x", TensorProto.STRING, [2])], [y23])
    yield "bad-undefined-input", model(
        [helper.make_node("Add", ["x", "nowhere"], ["y"])], [x23], [y23])
    yield "bad-output-never-produced", model(relu, [x23], [y23, vi("ghost", F, [1])])
    yield "bad-cycle", model(
        [helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"])],
        [x23], [vi("b", F, [2, 3])])
    yield "bad-add-shapes", model(
        [helper.make_node("Add", ["x", "z"], ["y"], name="bad_add")],
        [x23, vi("z", F, [4, 5])], [y23])
    yield "bad-matmul-shapes", model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], [x23], [y23],
        [const("w", np.zeros((4, 2), np.float32))])
    yield "bad-relu-no-inputs", model(
        [helper.make_node("Relu", [], ["y"])], [x23], [y23])
    yield "bad-relu-no-outputs", model(
        [helper.make_node("Relu", ["x"], [])], [x23], [y23])
    yield "any-constant-no-value", model(
        [helper.make_node("Constant", [], ["y"])], [], [y23])
    value_as_int = helper.make_node("Constant", [], ["y"])
    value_as_int.attribute.append(helper.make_attribute("value", 3))
    yield "bad-constant-wrong-attr-type", model([value_as_int], [], [vi("y", I64, [])])
    yield "any-constant-two-values", model(
        [helper.make_node("Constant", [], ["y"], value_int=1, value_float=2.0)],
        [], [vi("y", I64, [])])
    axis_as_float = helper.make_node("Concat", ["x", "x"], ["y"])
    axis_as_float.attribute.append(helper.make_attribute("axis", 1.5))
    yield "bad-attr-wrong-type", model([axis_as_float], [x23], [vi("y", F, None)])
    yield "bad-softmax-axis", model(
        [helper.make_node("Softmax", ["x"], ["y"], axis=7)], [x23], [y23])
    yield "bad-transpose-perm", model(
        [helper.make_node("Transpose", ["x"], ["y"], perm=[0, 0])], [x23], [y23])
    yield "bad-gather-axis", model(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=-9)], [x23], [y23],
        [const("i", np.array([0], np.int64))])
    # Initializers whose declared shape and payload disagree.
    short = const("k", np.array([1, 2, 3], np.int64))
    short.dims[:] = [4]
    yield "bad-raw-data-short", model(
        [helper.make_node("Cast", ["k"], ["y"], to=F)], [], [vi("y", F, [4])], [short])
    neg = const("k", np.array([1, 2, 3], np.int64))
    neg.dims[:] = [-3]
    yield "bad-negative-dim", model(
        [helper.make_node("Cast", ["k"], ["y"], to=F)], [], [vi("y", F, [3])], [neg])
    huge = const("k", np.array([1, 2], np.int64))
    huge.dims[:] = [1 << 40, 1 << 40, 1 << 40]
    yield "bad-huge-dims-int", model(
        [helper.make_node("Cast", ["k"], ["y"], to=F)], [], [vi("y", F, None)], [huge])
    hugef = const("w", np.ones(2, np.float32))
    hugef.dims[:] = [1 << 62, 4]
    yield "bad-huge-dims-float", model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", F, [1, 4])], [vi("y", F, None)],
        [hugef])
    negf = const("w", np.ones(2, np.float32))
    negf.dims[:] = [-2]
    yield "bad-negative-dim-float", model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [vi("x", F, [2])], [vi("y", F, None)],
        [negf])
    yield "bad-input-negative-dim", model(relu, [vi("x", F, [2, -3])], [vi("y", F, None)])
    yield "bad-initializer-string", model(
        [helper.make_node("Identity", ["s"], ["y"])], [], [vi("y", F, None)],
        [helper.make_tensor("s", TensorProto.STRING, [1], [b"hi"])])
    ext = const("k", np.array([1, 2], np.int64))
    ext.ClearField("raw_data")
    ext.data_location = TensorProto.EXTERNAL
    for key, value in (("location", "missing-weights.bin"), ("offset", "0"), ("length", "16")):
        ext.external_data.add(key=key, value=value)
    yield "bad-external-missing-file", model(
        [helper.make_node("Cast", ["k"], ["y"], to=F)], [], [vi("y", F, [2])], [ext])
    ext2 = onnx.TensorProto()
    ext2.CopyFrom(ext)
    del ext2.external_data[:]
    for key, value in (("location", "w.bin"), ("offset", "zero"), ("length", "x16")):
        ext2.external_data.add(key=key, value=value)
    yield "bad-external-bad-offset", model(
        [helper.make_node("Cast", ["k"], ["y"], to=F)], [], [vi("y", F, [2])], [ext2])
    # External data outside the model's folder, refused before any open.
    for case, location in (("dotdot", "../../etc/passwd"), ("absolute", "/etc/passwd")):
        escape = onnx.TensorProto()
        escape.CopyFrom(ext)
        del escape.external_data[:]
        for key, value in (("location", location), ("offset", "0"), ("length", "16")):
            escape.external_data.add(key=key, value=value)
        yield f"bad-external-{case}", model(
            [helper.make_node("Cast", ["k"], ["y"], to=F)], [], [vi("y", F, [2])], [escape])
    # Graphs ONNX forbids: a value defined twice, two default-domain opsets,
    # constant indices out of range, sizes past int64.
    yield "bad-duplicate-output", model(
        [helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["x"], ["y"])],
        [x23], [y23])
    yield "bad-output-shadows-input", model(
        [helper.make_node("Relu", ["x"], ["x"]), helper.make_node("Neg", ["x"], ["y"])],
        [x23], [y23])
    two_opsets = model(relu, [x23], [y23])
    two_opsets.opset_import.append(helper.make_opsetid("ai.onnx", 13))
    yield "bad-two-default-opsets", two_opsets
    yield "bad-gather-index", model(
        [helper.make_node("Gather", ["x", "i"], ["y"], axis=1)], [x23], [vi("y", F, None)],
        [const("i", np.array([0, 3], np.int64))])
    yield "bad-tile-overflow", model(
        [helper.make_node("Tile", ["x", "r"], ["y"])], [x23], [vi("y", F, None)],
        [const("r", np.array([1 << 30, 1 << 30], np.int64))])
    yield "bad-pad-overflow", model(
        [helper.make_node("Pad", ["x", "p"], ["y"])], [x23], [vi("y", F, None)],
        [const("p", np.array([0, 1 << 62, 0, 1 << 62], np.int64))])


def main():
    here = pathlib.Path(__file__).resolve().parent
    out = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else here / "corpus"
    out.mkdir(parents=True, exist_ok=True)
    for name, m in list(valid_models()) + list(bad_models()):
        (out / f"{name}.onnx").write_bytes(m.SerializeToString())
    fixture = here.parent / "fixtures" / "onnx" / "mlp_dynamo" / "model.onnx"
    if fixture.exists():
        shutil.copyfile(fixture, out / "ok-mlp-dynamo.onnx")
        os.chmod(out / "ok-mlp-dynamo.onnx", 0o644)
    return 0


if __name__ == "__main__":
    sys.exit(main())
