//===- ShapeInference.h - Shared result-type inference helpers --*- C++ -*-===//

#ifndef KILN_DIALECT_GRAPH_SHAPEINFERENCE_H
#define KILN_DIALECT_GRAPH_SHAPEINFERENCE_H

#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "mlir/IR/Location.h"

namespace kiln {

/// Numpy broadcast of two dims; fails (with a diagnostic at `loc`) only when
/// two different static sizes, neither 1, meet.
mlir::FailureOr<Dim> broadcastDim(std::optional<mlir::Location> loc, Dim a, Dim b);
mlir::FailureOr<DimList> broadcastShapes(std::optional<mlir::Location> loc,
                                         llvm::ArrayRef<mlir::RankedTensorType> types);
/// Axes in range, strictly increasing.
llvm::LogicalResult verifyAxisList(std::optional<mlir::Location> loc, int64_t rank,
                                   llvm::ArrayRef<int64_t> axes, llvm::StringRef what);

/// False only when the dims differ by a nonzero constant (4 vs 8, seq vs
/// seq + 1); other symbolic equalities are assumptions the dynamic-shape pass
/// turns into guards.
bool dimsMayBeEqual(Dim a, Dim b);
/// Emits "<what> <i>: expected <a> but got <b>" unless the dims may be equal.
llvm::LogicalResult expectDim(std::optional<mlir::Location> loc, Dim expected, Dim actual,
                              llvm::StringRef what);

} // namespace kiln

#endif // KILN_DIALECT_GRAPH_SHAPEINFERENCE_H
