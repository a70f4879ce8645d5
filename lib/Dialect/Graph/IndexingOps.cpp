//===- IndexingOps.cpp - Gathers and scatter-add --------------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/ShapeInference.h"

using namespace mlir;
using namespace kiln;

static RankedTensorType asTensor(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

/// data[:axis] + indices + data[axis+1:], the shape gather produces and
/// scatter_add consumes.
static DimList gatheredDims(RankedTensorType data, RankedTensorType indices, int64_t axis) {
  DimList d = getDims(data), idx = getDims(indices);
  DimList result(d.begin(), d.begin() + axis);
  result.append(idx.begin(), idx.end());
  result.append(d.begin() + axis + 1, d.end());
  return result;
}

LogicalResult GatherOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &results) {
  RankedTensorType data = asTensor(adaptor.getData());
  if (failed(verifyAxis(loc, data, adaptor.getAxis(), "gather axis")))
    return failure();
  results.push_back(
      makeTensorType(gatheredDims(data, asTensor(adaptor.getIndices()), adaptor.getAxis()),
                     data.getElementType()));
  return success();
}

LogicalResult GatherElementsOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                                 Adaptor adaptor, SmallVectorImpl<Type> &results) {
  RankedTensorType data = asTensor(adaptor.getData());
  RankedTensorType indices = asTensor(adaptor.getIndices());
  if (data.getRank() != indices.getRank())
    return emitOptionalError(loc,
                             "gather_elements needs data and indices of "
                             "equal rank, got ",
                             data.getRank(), " and ", indices.getRank());
  if (failed(verifyAxis(loc, data, adaptor.getAxis(), "gather_elements axis")))
    return failure();
  results.push_back(makeTensorType(getDims(indices), data.getElementType()));
  return success();
}

LogicalResult GatherNdOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                           Adaptor adaptor, SmallVectorImpl<Type> &results) {
  RankedTensorType data = asTensor(adaptor.getData());
  RankedTensorType indices = asTensor(adaptor.getIndices());
  int64_t batchDims = adaptor.getBatchDims();
  int64_t r = data.getRank(), q = indices.getRank();
  if (q < 1 || batchDims < 0 || batchDims >= std::min(r, q))
    return emitOptionalError(loc, "gather_nd batch_dims ", batchDims,
                             " must be below the ranks of data (", r, ") and indices (", q, ")");
  if (indices.isDynamicDim(q - 1))
    return emitOptionalError(loc, "gather_nd index depth (last indices dim) "
                                  "must be static");
  int64_t depth = indices.getDimSize(q - 1);
  if (depth < 1 || depth > r - batchDims)
    return emitOptionalError(loc, "gather_nd index depth ", depth, " must be in [1, ",
                             r - batchDims, "]");
  DimList d = getDims(data), idx = getDims(indices);
  for (int64_t i = 0; i < batchDims; ++i)
    if (failed(expectDim(loc, d[i], idx[i], "gather_nd batch dim")))
      return failure();
  DimList result(idx.begin(), idx.end() - 1);
  result.append(d.begin() + batchDims + depth, d.end());
  results.push_back(makeTensorType(result, data.getElementType()));
  return success();
}

LogicalResult ScatterAddOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                             Adaptor adaptor, SmallVectorImpl<Type> &results) {
  RankedTensorType dest = asTensor(adaptor.getDest());
  RankedTensorType updates = asTensor(adaptor.getUpdates());
  int64_t axis = adaptor.getAxis();
  if (failed(verifyAxis(loc, dest, axis, "scatter_add axis")))
    return failure();
  if (dest.getElementType() != updates.getElementType())
    return emitOptionalError(loc, "scatter_add updates element type ", updates.getElementType(),
                             " differs from dest ", dest.getElementType());
  DimList expected = gatheredDims(dest, asTensor(adaptor.getIndices()), axis);
  DimList actual = getDims(updates);
  if (expected.size() != actual.size())
    return emitOptionalError(loc, "scatter_add updates must have rank ", expected.size(), ", got ",
                             actual.size());
  for (auto [e, a] : llvm::zip(expected, actual))
    if (failed(expectDim(loc, e, a, "scatter_add updates dim")))
      return failure();
  results.push_back(dest);
  return success();
}
