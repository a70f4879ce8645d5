#!/usr/bin/env python3
"""Attention graphs whose mask is a constant, as static-shape exports write
them: softmax(q k^T * scale + mask) v with the mask an initializer or built
from constants (Trilu of ones, Range comparisons).

make_constant_masks.py OUT_DIR writes OUT_DIR/<variant>/model.onnx,
OUT_DIR/<variant>/inputs/input_{0,1,2}.pb (q, k, v: [1, 2, S, 8]) and
OUT_DIR/<variant>/expected/output_0.pb (numpy, float64 then float32):

  bool_init      a bool [S, S] lower-triangular initializer, Where(m, 0, -inf) added
  bool_const     the same at S = 8 (64 elements: the importer folds it to a constant)
  float_init     a float [1, 1, S, S] 0/-inf initializer added (S = 16)
  float_min      the same with finfo(float32).min instead of -inf, [1, 2, S, S]
  trilu          Cast(Trilu(ones [S, S]), bool) selecting 0 or -inf
  range          GreaterOrEqual(Range(0, S)[:, None], Range(0, S)[None, :])
  all_keep       a bool [S, S] initializer of trues (no mask at all)
  zeros          a float [1, 1, S, S] initializer of zeros (a bias for all Kiln knows: stays)
  banded         a 0/-inf initializer keeping j in [i - 3, i] (a window: stays a mask)
  upper          the transposed (upper-triangular) pattern (not causal: stays a mask)
"""
import pathlib
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

D, HEADS = 8, 2


def attention_graph(s, mask_nodes, mask_inits, mask_name, name):
    q, k, v = (helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, HEADS, s, D])
               for n in ("q", "k", "v"))
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, HEADS, s, D])
    scale = numpy_helper.from_array(np.array(D ** -0.5, np.float32), "scale")
    nodes = [helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             helper.make_node("MatMul", ["q", "kt"], ["qk"]),
             helper.make_node("Mul", ["qk", "scale"], ["scores"])]
    nodes += mask_nodes
    nodes += [helper.make_node("Add", ["scores", mask_name], ["masked"]),
              helper.make_node("Softmax", ["masked"], ["p"], axis=-1),
              helper.make_node("MatMul", ["p", "v"], ["y"])]
    graph = helper.make_graph(nodes, name, [q, k, v], [out], initializer=[scale] + mask_inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def select_nodes(cond):
    """Where(cond, 0, -inf): the additive mask of a bool condition."""
    return [helper.make_node("Where", [cond, "zero", "ninf"], ["mask"])], [
        numpy_helper.from_array(np.array(0, np.float32), "zero"),
        numpy_helper.from_array(np.array(-np.inf, np.float32), "ninf")]


def variant(name, s):
    tril = np.tril(np.ones((s, s), bool))
    if name in ("bool_init", "bool_const"):
        nodes, inits = select_nodes("keep")
        return nodes, inits + [numpy_helper.from_array(tril, "keep")], "mask", tril
    if name == "all_keep":
        nodes, inits = select_nodes("keep")
        return nodes, inits + [numpy_helper.from_array(np.ones((s, s), bool), "keep")], "mask", \
            np.ones((s, s), bool)
    if name in ("float_init", "float_min", "zeros", "banded", "upper"):
        keep = {"float_init": tril, "float_min": tril, "zeros": np.ones((s, s), bool),
                "banded": tril & ~np.tril(np.ones((s, s), bool), -4), "upper": tril.T}[name]
        drop = np.finfo(np.float32).min if name == "float_min" else -np.inf
        lead = (1, HEADS) if name == "float_min" else (1, 1)
        values = np.broadcast_to(np.where(keep, 0.0, drop).astype(np.float32), lead + (s, s))
        return [], [numpy_helper.from_array(np.ascontiguousarray(values), "mask")], "mask", keep
    if name == "trilu":
        nodes, inits = select_nodes("keep")
        nodes = [helper.make_node("Trilu", ["ones"], ["tri"], upper=0),
                 helper.make_node("Cast", ["tri"], ["keep"], to=TensorProto.BOOL)] + nodes
        return nodes, inits + [numpy_helper.from_array(np.ones((s, s), np.float32), "ones")], \
            "mask", tril
    if name == "range":
        nodes, inits = select_nodes("keep")
        nodes = [helper.make_node("Range", ["start", "limit", "delta"], ["pos"]),
                 helper.make_node("Unsqueeze", ["pos", "ax1"], ["rows"]),
                 helper.make_node("Unsqueeze", ["pos", "ax0"], ["cols"]),
                 helper.make_node("GreaterOrEqual", ["rows", "cols"], ["keep"])] + nodes
        inits += [numpy_helper.from_array(np.array(v, np.int64), n)
                  for n, v in (("start", 0), ("limit", s), ("delta", 1))]
        inits += [numpy_helper.from_array(np.array([a], np.int64), n)
                  for n, a in (("ax1", 1), ("ax0", 0))]
        return nodes, inits, "mask", tril
    raise ValueError(name)


def main():
    out = pathlib.Path(sys.argv[1])
    rng = np.random.default_rng(0)
    for name in ("bool_init", "bool_const", "float_init", "float_min", "trilu", "range",
                 "all_keep", "zeros", "banded", "upper"):
        s = 8 if name == "bool_const" else 16
        nodes, inits, mask_name, keep = variant(name, s)
        d = out / name
        (d / "inputs").mkdir(parents=True, exist_ok=True)
        (d / "expected").mkdir(parents=True, exist_ok=True)
        onnx.save_model(attention_graph(s, nodes, inits, mask_name, name), str(d / "model.onnx"))
        q, k, v = (rng.standard_normal((1, HEADS, s, D)).astype(np.float32) for _ in range(3))
        for i, t in enumerate((q, k, v)):
            (d / "inputs" / f"input_{i}.pb").write_bytes(numpy_helper.from_array(t).SerializeToString())
        scores = (q.astype(np.float64) @ k.astype(np.float64).transpose(0, 1, 3, 2)) * D ** -0.5
        scores = np.where(keep, scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        y = (p / p.sum(-1, keepdims=True)) @ v.astype(np.float64)
        (d / "expected" / "output_0.pb").write_bytes(
            numpy_helper.from_array(y.astype(np.float32)).SerializeToString())


if __name__ == "__main__":
    main()
