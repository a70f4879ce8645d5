//===- ShapeVJP.cpp - VJPs of shape and indexing ops ----------------------===//

#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Graph/VJP.h"

using namespace mlir;

namespace kiln {
namespace {

template <typename Derived, typename OpT>
struct VJPModel
    : DifferentiableOpInterface::ExternalModel<VJPModel<Derived, OpT>, OpT> {
  LogicalResult buildVJP(Operation *op, OpBuilder &b, ArrayRef<Value> resultGrads,
                         ArrayRef<bool> want, SmallVectorImpl<Value> &grads) const {
    return Derived::vjp(llvm::cast<OpT>(op), b, resultGrads, want, grads);
  }
};

/// A reshape's gradient is the gradient reshaped back.
struct ReshapeVJP : VJPModel<ReshapeVJP, ReshapeOp> {
  static LogicalResult vjp(ReshapeOp op, OpBuilder &b, ArrayRef<Value> dys,
                           ArrayRef<bool> want, SmallVectorImpl<Value> &grads) {
    Value dx;
    if (want[0] && dys[0])
      dx = b.create<ReshapeOp>(op.getLoc(), op.getInput().getType(), dys[0]);
    grads.push_back(dx);
    return success();
  }
};

} // namespace

void attachShapeVJPModels(MLIRContext &context) {
  ReshapeOp::attachInterface<ReshapeVJP>(context);
}

} // namespace kiln
