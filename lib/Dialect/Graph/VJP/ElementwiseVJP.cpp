//===- ElementwiseVJP.cpp - VJPs of elementwise ops and reductions --------===//

#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Graph/VJP.h"

using namespace mlir;

namespace kiln {
namespace {

RankedTensorType tensorOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

template <typename Derived, typename OpT>
struct VJPModel
    : DifferentiableOpInterface::ExternalModel<VJPModel<Derived, OpT>, OpT> {
  LogicalResult buildVJP(Operation *op, OpBuilder &b, ArrayRef<Value> resultGrads,
                         ArrayRef<bool> want, SmallVectorImpl<Value> &grads) const {
    return Derived::vjp(llvm::cast<OpT>(op), b, resultGrads, want, grads);
  }
};

/// d(a + b) = (dy, dy), each summed to its operand's shape.
struct AddVJP : VJPModel<AddVJP, AddOp> {
  static LogicalResult vjp(AddOp op, OpBuilder &b, ArrayRef<Value> dys,
                           ArrayRef<bool> want, SmallVectorImpl<Value> &grads) {
    Location loc = op.getLoc();
    Value dy = gradOrZeros(b, loc, dys[0], tensorOf(op));
    grads.push_back(want[0] ? sumToShape(b, loc, dy, tensorOf(op.getLhs())) : Value());
    grads.push_back(want[1] ? sumToShape(b, loc, dy, tensorOf(op.getRhs())) : Value());
    return success();
  }
};

/// d(a * b) = (dy * b, dy * a).
struct MulVJP : VJPModel<MulVJP, MulOp> {
  static LogicalResult vjp(MulOp op, OpBuilder &b, ArrayRef<Value> dys,
                           ArrayRef<bool> want, SmallVectorImpl<Value> &grads) {
    Location loc = op.getLoc();
    Value dy = gradOrZeros(b, loc, dys[0], tensorOf(op));
    Value da, db;
    if (want[0])
      da = sumToShape(b, loc, b.create<MulOp>(loc, dy, op.getRhs()),
                      tensorOf(op.getLhs()));
    if (want[1])
      db = sumToShape(b, loc, b.create<MulOp>(loc, dy, op.getLhs()),
                      tensorOf(op.getRhs()));
    grads.append({da, db});
    return success();
  }
};

} // namespace

void attachElementwiseVJPModels(MLIRContext &context) {
  AddOp::attachInterface<AddVJP>(context);
  MulOp::attachInterface<MulVJP>(context);
}

} // namespace kiln
