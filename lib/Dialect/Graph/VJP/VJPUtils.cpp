//===- VJPUtils.cpp - Helpers shared by the VJP models --------------------===//

#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Graph/VJP.h"

using namespace mlir;

namespace kiln {

void attachVJPModels(MLIRContext &context) {
  attachElementwiseVJPModels(context);
  attachShapeVJPModels(context);
  attachNNVJPModels(context);
}

Value scalarConstant(OpBuilder &b, Location loc, double value, Type elementType) {
  auto type = RankedTensorType::get({}, elementType);
  Attribute element = llvm::isa<FloatType>(elementType)
                          ? Attribute(b.getFloatAttr(elementType, value))
                          : Attribute(b.getIntegerAttr(elementType, static_cast<int64_t>(value)));
  return b.create<ConstantOp>(loc, DenseElementsAttr::get(type, element));
}

Value splatLike(OpBuilder &b, Location loc, double value, RankedTensorType type) {
  Value scalar = scalarConstant(b, loc, value, type.getElementType());
  if (type.getRank() == 0)
    return scalar;
  return b.create<ExpandOp>(loc, type, scalar);
}

Value gradOrZeros(OpBuilder &b, Location loc, Value grad, RankedTensorType type) {
  return grad ? grad : splatLike(b, loc, 0.0, type);
}

Value sumToShape(OpBuilder &b, Location loc, Value grad, RankedTensorType target) {
  auto type = llvm::cast<RankedTensorType>(grad.getType());
  if (type == target)
    return grad;
  int64_t extra = type.getRank() - target.getRank();
  DimList gradDims = getDims(type), targetDims = getDims(target);
  SmallVector<int64_t> leading, stretched;
  for (int64_t i = 0; i < extra; ++i)
    leading.push_back(i);
  for (int64_t i = 0; i < target.getRank(); ++i)
    if (isConst(targetDims[i], 1) && !isConst(gradDims[extra + i], 1))
      stretched.push_back(extra + i);
  Value result = grad;
  if (!stretched.empty())
    result = b.create<ReduceSumOp>(loc, result, b.getDenseI64ArrayAttr(stretched),
                                   /*keepdim=*/true);
  if (!leading.empty())
    result = b.create<ReduceSumOp>(loc, result, b.getDenseI64ArrayAttr(leading),
                                   /*keepdim=*/false);
  // Equal dims spelled differently (a symbol vs its value) still need the
  // target's exact type.
  if (result.getType() != target)
    result = b.create<ReshapeOp>(loc, target, result);
  return result;
}

} // namespace kiln
