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
/// The same rules on the [B, H, S, D] types of the operands (see
/// headMajorType).
llvm::LogicalResult inferAttentionResult(std::optional<mlir::Location> loc,
                                         mlir::RankedTensorType query, mlir::RankedTensorType key,
                                         mlir::RankedTensorType value, mlir::Value mask,
                                         llvm::SmallVectorImpl<mlir::Type> &results);
/// Positions in kiln.attention's `seq_major`.
enum AttentionRole : unsigned { kAttnQuery, kAttnKey, kAttnValue, kAttnResult, kAttnRoles };
/// Positions in kiln.attention_grad's `seq_major`.
enum AttentionGradRole : unsigned {
  kGradQuery,
  kGradKey,
  kGradValue,
  kGradDout,
  kGradOut,
  kGradQueryGrad,
  kGradKeyGrad,
  kGradValueGrad,
  kGradRoles
};
/// Whether role `role` of an attention or attention_grad op is stored
/// [B, S, H, D]; false for ops without `seq_major`.
bool isSeqMajor(mlir::Operation *op, unsigned role);
bool isSeqMajor(std::optional<llvm::ArrayRef<bool>> seqMajor, unsigned role);
/// Whether any role of the op is stored [B, S, H, D].
bool hasSeqMajorRole(mlir::Operation *op);
/// `type` with dims 1 and 2 swapped: [B, S, H, D] <-> [B, H, S, D].
mlir::RankedTensorType swapSeqAndHeads(mlir::RankedTensorType type);
/// The [B, H, S, D] view of a rank-4 type stored seq-major or not.
mlir::RankedTensorType headMajorType(mlir::Type type, bool seqMajor);
/// The dim that holds the sequence in a rank-4 attention tensor.
inline int64_t attentionSeqDim(bool seqMajor) { return seqMajor ? 1 : 2; }
llvm::LogicalResult inferCrossEntropyResult(std::optional<mlir::Location> loc, mlir::Value logits,
                                            mlir::Value labels, Reduction reduction,
                                            llvm::SmallVectorImpl<mlir::Type> &results);
} // namespace kiln

#define GET_OP_CLASSES
#include "kiln/Dialect/Graph/GraphOps.h.inc"

#endif // KILN_DIALECT_GRAPH_GRAPHOPS_H
