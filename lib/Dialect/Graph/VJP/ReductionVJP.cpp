//===- ReductionVJP.cpp - VJPs of reductions, cumsum and trilu ------------===//
//
// A reduction's gradient is the result gradient broadcast back over the
// reduced axes (scaled or masked). Integer results have no gradient.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Graph/VJP.h"

using namespace mlir;

namespace kiln {
namespace {

/// Shared plumbing: the model's buildVJP forwards to `vjp(op, ...)` when the
/// op is differentiable at all (float result, result gradient present, input
/// gradient wanted); otherwise the input gets none.
template <typename Derived, typename OpT>
struct FloatVJPModel : DifferentiableOpInterface::ExternalModel<FloatVJPModel<Derived, OpT>, OpT> {
  LogicalResult buildVJP(Operation *op, OpBuilder &b, ArrayRef<Value> resultGrads,
                         ArrayRef<bool> want, SmallVectorImpl<Value> &grads) const {
    Value result = op->getResult(0);
    if (!want[0] || !resultGrads[0] || !llvm::isa<FloatType>(tensorOf(result).getElementType())) {
      grads.push_back(Value());
      return success();
    }
    return Derived::vjp(llvm::cast<OpT>(op), b, resultGrads[0], grads);
  }
};

/// `v` (a reduction result or its gradient) with the reduced axes back as
/// size-1 dims, so it broadcasts against the input.
template <typename OpT> Value withKeptDims(OpBuilder &b, OpT op, Value v) {
  if (op.getKeepdim())
    return v;
  return b.create<UnsqueezeOp>(op.getLoc(), v, op.getAxesAttr());
}

Value expandTo(OpBuilder &b, Location loc, Value v, RankedTensorType type) {
  if (v.getType() == type)
    return v;
  return b.create<ExpandOp>(loc, type, v);
}

/// Each input element contributed once: dx = broadcast(dy).
struct ReduceSumVJP : FloatVJPModel<ReduceSumVJP, ReduceSumOp> {
  static LogicalResult vjp(ReduceSumOp op, OpBuilder &b, Value dy, SmallVectorImpl<Value> &grads) {
    grads.push_back(expandTo(b, op.getLoc(), withKeptDims(b, op, dy), op.getInput().getType()));
    return success();
  }
};

/// dx = broadcast(dy) / count. A symbolic count has no constant to divide
/// by, so it is counted at run time as the sum of ones over the reduced axes.
struct ReduceMeanVJP : FloatVJPModel<ReduceMeanVJP, ReduceMeanOp> {
  static LogicalResult vjp(ReduceMeanOp op, OpBuilder &b, Value dy, SmallVectorImpl<Value> &grads) {
    Location loc = op.getLoc();
    RankedTensorType inType = op.getInput().getType();
    DimList dims = getDims(inType), reduced;
    for (int64_t axis : op.getAxes())
      reduced.push_back(dims[axis]);
    Dim count = dimProduct(reduced, op.getContext());
    if (!count)
      return op.emitOpError("has no gradient: a reduced dim is unknown");
    Value g = withKeptDims(b, op, dy);
    if (std::optional<int64_t> n = count.getConstantValue()) {
      Value scale = scalarConstant(b, loc, 1.0 / static_cast<double>(*n), inType.getElementType());
      g = b.create<MulOp>(loc, g, scale);
    } else {
      Value ones = splatLike(b, loc, 1.0, inType);
      g = b.create<DivOp>(loc, g,
                          b.create<ReduceSumOp>(loc, ones, op.getAxesAttr(),
                                                /*keepdim=*/b.getUnitAttr()));
    }
    grads.push_back(expandTo(b, loc, g, inType));
    return success();
  }
};

/// dy goes to the elements equal to the max, split evenly between ties (as
/// torch does for amax), so the gradient stays a true subgradient.
struct ReduceMaxVJP : FloatVJPModel<ReduceMaxVJP, ReduceMaxOp> {
  static LogicalResult vjp(ReduceMaxOp op, OpBuilder &b, Value dy, SmallVectorImpl<Value> &grads) {
    Location loc = op.getLoc();
    Value x = op.getInput();
    RankedTensorType inType = op.getInput().getType();
    Type element = inType.getElementType();
    Value isMax = b.create<EqOp>(loc, x, withKeptDims(b, op, op.getResult()));
    Value hits = b.create<CastOp>(loc, makeTensorType(getDims(tensorOf(isMax)), element), isMax);
    Value ties = b.create<ReduceSumOp>(loc, hits, op.getAxesAttr(),
                                       /*keepdim=*/b.getUnitAttr());
    Value share = b.create<DivOp>(loc, withKeptDims(b, op, dy), ties);
    Value dx = b.create<SelectOp>(loc, isMax, share, scalarConstant(b, loc, 0.0, element));
    grads.push_back(sumToShape(b, loc, dx, inType));
    return success();
  }
};

/// Element j feeds every later (or, reversed, earlier) running sum, so its
/// gradient is the running sum of dy in the other direction; exclusivity
/// carries over unchanged.
struct CumsumVJP : FloatVJPModel<CumsumVJP, CumsumOp> {
  static LogicalResult vjp(CumsumOp op, OpBuilder &b, Value dy, SmallVectorImpl<Value> &grads) {
    UnitAttr reverse = op.getReverse() ? UnitAttr() : b.getUnitAttr();
    grads.push_back(
        b.create<CumsumOp>(op.getLoc(), dy, op.getAxisAttr(), op.getExclusiveAttr(), reverse));
    return success();
  }
};

/// trilu is a mask, its own transpose.
struct TriluVJP : FloatVJPModel<TriluVJP, TriluOp> {
  static LogicalResult vjp(TriluOp op, OpBuilder &b, Value dy, SmallVectorImpl<Value> &grads) {
    grads.push_back(b.create<TriluOp>(op.getLoc(), dy, op.getDiagonalAttr(), op.getUpperAttr()));
    return success();
  }
};

} // namespace

void attachReductionVJPModels(MLIRContext &context) {
  ReduceSumOp::attachInterface<ReduceSumVJP>(context);
  ReduceMeanOp::attachInterface<ReduceMeanVJP>(context);
  ReduceMaxOp::attachInterface<ReduceMaxVJP>(context);
  CumsumOp::attachInterface<CumsumVJP>(context);
  TriluOp::attachInterface<TriluVJP>(context);
}

} // namespace kiln
