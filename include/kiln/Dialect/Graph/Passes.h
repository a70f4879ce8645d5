//===- Passes.h - Graph dialect passes --------------------------*- C++ -*-===//

#ifndef KILN_DIALECT_GRAPH_PASSES_H
#define KILN_DIALECT_GRAPH_PASSES_H

#include "kiln/Dialect/Graph/GraphOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"
#include "llvm/ADT/DenseSet.h"

#include <optional>

namespace kiln {

#define GEN_PASS_DECL
#include "kiln/Dialect/Graph/Passes.h.inc"

/// The forward part of a joint (forward + backward) function: the ops of
/// its one block that the loss, its first result, depends on; none for a
/// function without a body or results.
std::optional<llvm::DenseSet<mlir::Operation *>> forwardPart(mlir::func::FuncOp func);

/// The rewrites of --kiln-raise-composites, for pipelines that want them.
void populateRaiseCompositesPatterns(mlir::RewritePatternSet &patterns);

#define GEN_PASS_REGISTRATION
#include "kiln/Dialect/Graph/Passes.h.inc"

} // namespace kiln

#endif // KILN_DIALECT_GRAPH_PASSES_H
