//===- ShapeInference.cpp - Shared result-type inference helpers ----------===//
//
// Broadcasting and reduction rules over symbolic dims, shared by the op
// families. Unknown dims (null) never cause an error: they stay unknown.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/ShapeInference.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;

namespace kiln {

FailureOr<Dim> broadcastDim(std::optional<Location> loc, Dim a, Dim b) {
  if (a == b)
    return a;
  if (isConst(a, 1))
    return b;
  if (isConst(b, 1))
    return a;
  if (!a || !b)
    return a ? a : b; // The unknown one must be 1 or equal to the other.
  std::optional<int64_t> ca = a.getConstantValue(), cb = b.getConstantValue();
  if (ca && cb)
    return emitOptionalError(loc, "dims ", *ca, " and ", *cb, " do not broadcast");
  // A static size against a symbol: valid only if the symbol is 1 or equal,
  // and either way the result has the static size.
  if (ca)
    return a;
  if (cb)
    return b;
  // Two different symbolic dims: equal at run time (or one is 1); the
  // dynamic-shape pass records the equality and refines this.
  return Dim();
}

FailureOr<DimList> broadcastShapes(std::optional<Location> loc, ArrayRef<RankedTensorType> types) {
  int64_t rank = 0;
  for (RankedTensorType t : types)
    rank = std::max(rank, t.getRank());
  MLIRContext *context = types.front().getContext();
  DimList result(rank, dimConst(context, 1));
  for (RankedTensorType t : types) {
    DimList dims = getDims(t);
    int64_t offset = rank - t.getRank();
    for (int64_t i = 0; i < t.getRank(); ++i) {
      FailureOr<Dim> d = broadcastDim(loc, result[offset + i], dims[i]);
      if (failed(d))
        return failure();
      result[offset + i] = *d;
    }
  }
  return result;
}

LogicalResult inferBroadcastBinary(MLIRContext *context, std::optional<Location> loc, Type lhs,
                                   Type rhs, BinaryResultKind kind,
                                   SmallVectorImpl<Type> &results) {
  auto lhsType = llvm::cast<RankedTensorType>(lhs);
  auto rhsType = llvm::cast<RankedTensorType>(rhs);
  if (lhsType.getElementType() != rhsType.getElementType())
    return emitOptionalError(loc, "operand element types differ: ", lhsType.getElementType(),
                             " vs ", rhsType.getElementType());
  FailureOr<DimList> dims = broadcastShapes(loc, {lhsType, rhsType});
  if (failed(dims))
    return failure();
  Type element =
      kind == BinaryResultKind::Bool ? IntegerType::get(context, 1) : lhsType.getElementType();
  results.push_back(makeTensorType(*dims, element));
  return success();
}

LogicalResult verifyAxis(std::optional<Location> loc, RankedTensorType type, int64_t axis,
                         StringRef what) {
  if (axis < 0 || axis >= type.getRank())
    return emitOptionalError(loc, what, " ", axis, " is out of range for rank ", type.getRank());
  return success();
}

LogicalResult verifyAxisList(std::optional<Location> loc, int64_t rank, ArrayRef<int64_t> axes,
                             StringRef what) {
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < 0 || axes[i] >= rank)
      return emitOptionalError(loc, what, " ", axes[i], " is out of range for rank ", rank);
    if (i > 0 && axes[i] <= axes[i - 1])
      return emitOptionalError(loc, what, " must be strictly increasing without repeats");
  }
  return success();
}

LogicalResult inferReduction(MLIRContext *context, std::optional<Location> loc, Type input,
                             ArrayRef<int64_t> axes, bool keepdim, SmallVectorImpl<Type> &results) {
  auto type = llvm::cast<RankedTensorType>(input);
  if (axes.empty())
    return emitOptionalError(loc, "reduction needs at least one axis");
  if (failed(verifyAxisList(loc, type.getRank(), axes, "reduction axis")))
    return failure();
  DimList dims;
  DimList inputDims = getDims(type);
  for (int64_t i = 0; i < type.getRank(); ++i) {
    if (!llvm::is_contained(axes, i))
      dims.push_back(inputDims[i]);
    else if (keepdim)
      dims.push_back(dimConst(context, 1));
  }
  results.push_back(makeTensorType(dims, type.getElementType()));
  return success();
}

bool dimsMayBeEqual(Dim a, Dim b) {
  if (!a || !b || a == b)
    return true;
  // Polynomials are canonical, so a constant difference is the same for every
  // value of the symbols: `seq` and `seq + 1` never meet, 4 and 8 neither.
  Dim diff = dimSub(a, b);
  std::optional<int64_t> c = diff ? diff.getConstantValue() : std::nullopt;
  return !c || *c == 0;
}

LogicalResult expectDim(std::optional<Location> loc, Dim expected, Dim actual, StringRef what) {
  if (dimsMayBeEqual(expected, actual))
    return success();
  return emitOptionalError(loc, what, ": expected ", dimToString(expected), " but got ",
                           dimToString(actual));
}

bool areCompatibleReturnTypes(TypeRange inferred, TypeRange declared) {
  if (inferred.size() != declared.size())
    return false;
  for (auto [a, b] : llvm::zip(inferred, declared)) {
    if (a == b)
      continue;
    auto ta = llvm::dyn_cast<RankedTensorType>(a);
    auto tb = llvm::dyn_cast<RankedTensorType>(b);
    if (!ta || !tb || ta.getRank() != tb.getRank() || ta.getElementType() != tb.getElementType())
      return false;
    for (auto [da, db] : llvm::zip(getDims(ta), getDims(tb)))
      if (da && db && da != db)
        return false;
  }
  return true;
}

} // namespace kiln
