//===- ElementwiseOps.cpp - Constants, casts, select, arithmetic folds ----===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/ShapeInference.h"
#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace kiln;

LogicalResult ConstantOp::inferReturnTypes(MLIRContext *, std::optional<Location>, Adaptor adaptor,
                                           SmallVectorImpl<Type> &results) {
  results.push_back(adaptor.getValue().getType());
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

LogicalResult SelectOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &results) {
  auto cond = llvm::cast<RankedTensorType>(adaptor.getCondition().getType());
  auto a = llvm::cast<RankedTensorType>(adaptor.getTrueValue().getType());
  auto b = llvm::cast<RankedTensorType>(adaptor.getFalseValue().getType());
  if (a.getElementType() != b.getElementType())
    return emitOptionalError(loc,
                             "select branches have different element types: ", a.getElementType(),
                             " vs ", b.getElementType());
  FailureOr<DimList> dims = broadcastShapes(loc, {cond, a, b});
  if (failed(dims))
    return failure();
  results.push_back(makeTensorType(*dims, a.getElementType()));
  return success();
}

LogicalResult CastOp::verify() {
  auto in = getInput().getType();
  auto out = getResult().getType();
  if (in.getRank() != out.getRank() ||
      !areCompatibleReturnTypes({makeTensorType(getDims(in), out.getElementType())}, {out}))
    return emitOpError("changes the shape from ")
           << shapeToString(in) << " to " << shapeToString(out)
           << "; cast only converts the element type";
  return success();
}

OpFoldResult CastOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

/// x op c -> x when c is a splat of `identity` and the result type is x's.
static OpFoldResult foldRightIdentity(Operation *op, Value lhs, Attribute rhs, double identity) {
  auto splat = llvm::dyn_cast_or_null<SplatElementsAttr>(rhs);
  if (!splat || lhs.getType() != op->getResult(0).getType())
    return {};
  Type element = splat.getElementType();
  if (llvm::isa<FloatType>(element)) {
    if (splat.getSplatValue<APFloat>().convertToDouble() == identity)
      return lhs;
  } else if (llvm::isa<IntegerType>(element)) {
    if (splat.getSplatValue<APInt>().getSExtValue() == static_cast<int64_t>(identity))
      return lhs;
  }
  return {};
}

OpFoldResult AddOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult r = foldRightIdentity(*this, getLhs(), adaptor.getRhs(), 0))
    return r;
  return foldRightIdentity(*this, getRhs(), adaptor.getLhs(), 0);
}
OpFoldResult SubOp::fold(FoldAdaptor adaptor) {
  return foldRightIdentity(*this, getLhs(), adaptor.getRhs(), 0);
}
OpFoldResult MulOp::fold(FoldAdaptor adaptor) {
  if (OpFoldResult r = foldRightIdentity(*this, getLhs(), adaptor.getRhs(), 1))
    return r;
  return foldRightIdentity(*this, getRhs(), adaptor.getLhs(), 1);
}
OpFoldResult DivOp::fold(FoldAdaptor adaptor) {
  return foldRightIdentity(*this, getLhs(), adaptor.getRhs(), 1);
}
