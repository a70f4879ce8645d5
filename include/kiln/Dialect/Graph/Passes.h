//===- Passes.h - Graph dialect passes --------------------------*- C++ -*-===//

#ifndef KILN_DIALECT_GRAPH_PASSES_H
#define KILN_DIALECT_GRAPH_PASSES_H

#include "kiln/Dialect/Graph/GraphOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Pass/Pass.h"

namespace kiln {

#define GEN_PASS_DECL
#include "kiln/Dialect/Graph/Passes.h.inc"

/// The rewrites of --kiln-raise-composites, for pipelines that want them.
void populateRaiseCompositesPatterns(mlir::RewritePatternSet &patterns);

#define GEN_PASS_REGISTRATION
#include "kiln/Dialect/Graph/Passes.h.inc"

} // namespace kiln

#endif // KILN_DIALECT_GRAPH_PASSES_H
