//===- CostModel.h - FLOPs of graph ops -------------------------*- C++ -*-===//
//
// A coarse FLOP model: what recomputing an op costs. Contractions count
// 2 FLOPs per multiply-add, normalizations and softmax a few per element,
// pointwise ops one per element, views and copies nothing.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ANALYSIS_COSTMODEL_H
#define KILN_ANALYSIS_COSTMODEL_H

#include "kiln/Analysis/MemoryPlan.h"
#include "mlir/IR/Operation.h"

namespace kiln {

/// FLOPs of one execution of `op` at `symbols` (unbound symbols count as 0).
int64_t estimateFlops(mlir::Operation *op, const SymbolValues &symbols);

/// Ops whose recomputation costs a contraction (matmul, attention): the
/// rematerializer recomputes them only when a budget demands it.
bool isExpensiveToRecompute(mlir::Operation *op);

} // namespace kiln

#endif // KILN_ANALYSIS_COSTMODEL_H
