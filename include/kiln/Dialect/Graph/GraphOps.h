//===- GraphOps.h - Kiln graph dialect ops ----------------------*- C++ -*-===//

#ifndef KILN_DIALECT_GRAPH_GRAPHOPS_H
#define KILN_DIALECT_GRAPH_GRAPHOPS_H

#include "kiln/Dialect/Graph/GraphAttrs.h"
#include "kiln/Dialect/Graph/GraphDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

namespace kiln {

/// What the element type of a broadcasting binary op's result is.
enum class BinaryResultKind { SameElement, Bool };

/// Shared shape inference; errors go to `loc` when present.
llvm::LogicalResult inferBroadcastBinary(mlir::MLIRContext *context,
                                         std::optional<mlir::Location> loc, mlir::Type lhs,
                                         mlir::Type rhs, BinaryResultKind kind,
                                         llvm::SmallVectorImpl<mlir::Type> &results);
llvm::LogicalResult inferReduction(mlir::MLIRContext *context, std::optional<mlir::Location> loc,
                                   mlir::Type input, llvm::ArrayRef<int64_t> axes, bool keepdim,
                                   llvm::SmallVectorImpl<mlir::Type> &results);
/// Checks 0 <= axis < rank.
llvm::LogicalResult verifyAxis(std::optional<mlir::Location> loc, mlir::RankedTensorType type,
                               int64_t axis, llvm::StringRef what);
/// Inferred and declared result types agree when every dim is equal or one
/// side does not know it (shape propagation refines unknown dims later).
bool areCompatibleReturnTypes(mlir::TypeRange inferred, mlir::TypeRange declared);

} // namespace kiln

#include "kiln/Dialect/Graph/GraphInterfaces.h.inc"

namespace kiln {
/// Result rules shared by a unit op and its backward op.
llvm::LogicalResult inferAttentionResult(std::optional<mlir::Location> loc, mlir::Value query,
                                         mlir::Value key, mlir::Value value, mlir::Value mask,
                                         llvm::SmallVectorImpl<mlir::Type> &results);
llvm::LogicalResult inferCrossEntropyResult(std::optional<mlir::Location> loc, mlir::Value logits,
                                            mlir::Value labels, Reduction reduction,
                                            llvm::SmallVectorImpl<mlir::Type> &results);
} // namespace kiln

#define GET_OP_CLASSES
#include "kiln/Dialect/Graph/GraphOps.h.inc"

#endif // KILN_DIALECT_GRAPH_GRAPHOPS_H
