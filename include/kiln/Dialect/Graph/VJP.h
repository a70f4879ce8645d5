//===- VJP.h - Vector-Jacobian products of graph ops ------------*- C++ -*-===//
//
// Each op family attaches DifferentiableOpInterface as an external model
// (lib/Dialect/Graph/VJP/<Family>VJP.cpp), so the ODS stays free of
// differentiation details and the autodiff pass stays free of op details.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_GRAPH_VJP_H
#define KILN_DIALECT_GRAPH_VJP_H

#include "kiln/Dialect/Graph/GraphOps.h"
#include "mlir/IR/Builders.h"

namespace kiln {

/// Attaches the VJP models of every differentiable op (called by the dialect).
void attachVJPModels(mlir::MLIRContext &context);
void attachElementwiseVJPModels(mlir::MLIRContext &context);
/// Reductions, cumsum and trilu (attached by attachElementwiseVJPModels).
void attachReductionVJPModels(mlir::MLIRContext &context);
void attachShapeVJPModels(mlir::MLIRContext &context);
void attachNNVJPModels(mlir::MLIRContext &context);

//===--- helpers for VJP models ---------------------------------------------===//

inline mlir::RankedTensorType tensorOf(mlir::Value v) {
  return llvm::cast<mlir::RankedTensorType>(v.getType());
}

/// External model that forwards buildVJP to `Derived::vjp(OpT, ...)`, so
/// each op's VJP is one static function with the op's typed accessors.
template <typename Derived, typename OpT>
struct VJPModel : DifferentiableOpInterface::ExternalModel<VJPModel<Derived, OpT>, OpT> {
  llvm::LogicalResult buildVJP(mlir::Operation *op, mlir::OpBuilder &b,
                               llvm::ArrayRef<mlir::Value> resultGrads, llvm::ArrayRef<bool> want,
                               llvm::SmallVectorImpl<mlir::Value> &grads) const {
    return Derived::vjp(llvm::cast<OpT>(op), b, resultGrads, want, grads);
  }
};

/// Sums `grad` over the dims numpy broadcasting added or stretched so it has
/// exactly `target`'s type: the transpose of an implicit broadcast.
mlir::Value sumToShape(mlir::OpBuilder &b, mlir::Location loc, mlir::Value grad,
                       mlir::RankedTensorType target);
/// A splat of `value` with `type` (a rank-0 constant expanded if needed).
mlir::Value splatLike(mlir::OpBuilder &b, mlir::Location loc, double value,
                      mlir::RankedTensorType type);
/// A rank-0 constant of `elementType`.
mlir::Value scalarConstant(mlir::OpBuilder &b, mlir::Location loc, double value,
                           mlir::Type elementType);
/// `grad` if present, else zeros of `type` (a missing result gradient).
mlir::Value gradOrZeros(mlir::OpBuilder &b, mlir::Location loc, mlir::Value grad,
                        mlir::RankedTensorType type);

} // namespace kiln

#endif // KILN_DIALECT_GRAPH_VJP_H
