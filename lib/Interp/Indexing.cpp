//===- Indexing.cpp - gather, gather_elements, gather_nd, scatter_add -----===//
//
// Negative indices count from the end; any index still out of range is an
// error (never an out-of-bounds read).
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "absl/strings/str_cat.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace kiln::interp {
namespace {

/// data[:axis] + indices + data[axis+1:].
Shape gatheredShape(const HostTensor &data, const HostTensor &indices, int64_t axis) {
  Shape shape(data.shape.begin(), data.shape.begin() + axis);
  shape.insert(shape.end(), indices.shape.begin(), indices.shape.end());
  shape.insert(shape.end(), data.shape.begin() + axis + 1, data.shape.end());
  return shape;
}

absl::StatusOr<Tensors> runGather(GatherOp op, const HostTensor &data, const HostTensor &indices) {
  int64_t axis = op.getAxis();
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), gatheredShape(data, indices, axis));
  if (!out.ok())
    return out.status();
  // result[o, n, i] = data[o, indices[n], i] with n over all of indices.
  AxisSplit d(data.shape, axis);
  int64_t count = indices.numel();
  for (int64_t n = 0; n < count; ++n) {
    absl::StatusOr<int64_t> k = wrapIndex(indices.ints[n], d.len);
    if (!k.ok())
      return k.status();
    for (int64_t o = 0; o < d.outer; ++o)
      for (int64_t i = 0; i < d.inner; ++i)
        copyElement(*out, (o * count + n) * d.inner + i, data, d.at(o, *k, i));
  }
  return Tensors{std::move(*out)};
}

absl::StatusOr<Tensors> runGatherElements(GatherElementsOp op, const HostTensor &data,
                                          const HostTensor &indices) {
  int64_t axis = op.getAxis();
  for (size_t i = 0; i < data.shape.size(); ++i)
    if (static_cast<int64_t>(i) != axis && indices.shape[i] > data.shape[i])
      return absl::InvalidArgumentError(absl::StrCat(
          "indices ", indices.shapeString(), " exceed data ", data.shapeString(), " in dim ", i));
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), indices.shape);
  if (!out.ok())
    return out.status();
  Shape dataStrides = stridesOf(data.shape);
  Shape index(indices.shape.size());
  for (int64_t n = 0; n < indices.numel(); ++n) {
    // The multi-index of n in `indices`, with the axis coordinate replaced.
    int64_t rest = n, at = 0;
    for (int64_t d = static_cast<int64_t>(index.size()) - 1; d >= 0; --d) {
      index[d] = rest % indices.shape[d];
      rest /= indices.shape[d];
    }
    absl::StatusOr<int64_t> k = wrapIndex(indices.ints[n], data.shape[axis]);
    if (!k.ok())
      return k.status();
    index[axis] = *k;
    for (size_t d = 0; d < index.size(); ++d)
      at += index[d] * dataStrides[d];
    copyElement(*out, n, data, at);
  }
  return Tensors{std::move(*out)};
}

absl::StatusOr<Tensors> runGatherNd(GatherNdOp op, const HostTensor &data,
                                    const HostTensor &indices) {
  int64_t batchDims = op.getBatchDims();
  int64_t depth = indices.shape.back();
  for (int64_t i = 0; i < batchDims; ++i)
    if (data.shape[i] != indices.shape[i])
      return absl::InvalidArgumentError(absl::StrCat("batch dim ", i, " differs: data ",
                                                     data.shapeString(), ", indices ",
                                                     indices.shapeString()));
  // result = indices.shape[:-1] + data.shape[batchDims + depth:]
  Shape shape(indices.shape.begin(), indices.shape.end() - 1);
  shape.insert(shape.end(), data.shape.begin() + batchDims + depth, data.shape.end());
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), shape);
  if (!out.ok())
    return out.status();
  Shape strides = stridesOf(data.shape);
  int64_t batches = numel(ArrayRef(data.shape).take_front(batchDims));
  int64_t batchStride = batches ? data.numel() / batches : 0;
  int64_t tuples = batches ? indices.numel() / depth / batches : 0;
  int64_t sliceSize = numel(ArrayRef(data.shape).drop_front(batchDims + depth));
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t t = 0; t < tuples; ++t) {
      int64_t tuple = b * tuples + t, at = b * batchStride;
      for (int64_t j = 0; j < depth; ++j) {
        absl::StatusOr<int64_t> k =
            wrapIndex(indices.ints[tuple * depth + j], data.shape[batchDims + j]);
        if (!k.ok())
          return k.status();
        at += *k * strides[batchDims + j];
      }
      for (int64_t s = 0; s < sliceSize; ++s)
        copyElement(*out, tuple * sliceSize + s, data, at + s);
    }
  }
  return Tensors{std::move(*out)};
}

absl::StatusOr<Tensors> runScatterAdd(ScatterAddOp op, const HostTensor &dest,
                                      const HostTensor &indices, const HostTensor &updates) {
  int64_t axis = op.getAxis();
  Shape expected = gatheredShape(dest, indices, axis);
  if (updates.shape != expected)
    return absl::InvalidArgumentError(absl::StrCat("updates ", updates.shapeString(),
                                                   " must have shape ", shapeString(expected),
                                                   " (dest dims around indices dims)"));
  // Sum in double / wrapping int64, round once: the result then does not
  // depend on the order of duplicate indices.
  std::vector<double> floats(dest.floats);
  std::vector<uint64_t> ints(dest.ints.begin(), dest.ints.end());
  AxisSplit d(dest.shape, axis);
  int64_t count = indices.numel();
  for (int64_t n = 0; n < count; ++n) {
    absl::StatusOr<int64_t> k = wrapIndex(indices.ints[n], d.len);
    if (!k.ok())
      return k.status();
    for (int64_t o = 0; o < d.outer; ++o) {
      for (int64_t i = 0; i < d.inner; ++i) {
        int64_t from = (o * count + n) * d.inner + i, to = d.at(o, *k, i);
        if (dest.isFloat())
          floats[to] += updates.floats[from];
        else
          ints[to] += static_cast<uint64_t>(updates.ints[from]);
      }
    }
  }
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), dest.shape);
  if (!out.ok())
    return out.status();
  for (int64_t i = 0; i < out->numel(); ++i) {
    if (out->isFloat())
      out->set(i, floats[i]);
    else
      out->setInt(i, static_cast<int64_t>(ints[i]));
  }
  return Tensors{std::move(*out)};
}

} // namespace

MaybeResults runIndexing(Operation *op, Operands args) {
  return llvm::TypeSwitch<Operation *, MaybeResults>(op)
      .Case([&](GatherOp g) { return runGather(g, *args[0], *args[1]); })
      .Case([&](GatherElementsOp g) { return runGatherElements(g, *args[0], *args[1]); })
      .Case([&](GatherNdOp g) { return runGatherNd(g, *args[0], *args[1]); })
      .Case([&](ScatterAddOp s) { return runScatterAdd(s, *args[0], *args[1], *args[2]); })
      .Default([](Operation *) { return std::nullopt; });
}

} // namespace kiln::interp
