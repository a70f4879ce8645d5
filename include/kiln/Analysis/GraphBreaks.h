//===- GraphBreaks.h - What Kiln cannot compile, and why --------*- C++ -*-===//

#ifndef KILN_ANALYSIS_GRAPHBREAKS_H
#define KILN_ANALYSIS_GRAPHBREAKS_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>
#include <vector>

namespace kiln {

struct GraphBreak {
  std::string code;     // unsupported-op, data-dependent-shape, control-flow, ...
  std::string nodeName; // the ONNX node
  std::string opType;
  std::string reason; // what exactly is unsupported
  std::string hint;   // how to avoid it, when there is a known way
  std::string location;
};

struct BreakReport {
  std::vector<GraphBreak> breaks;
  /// Compiled ops in each graph between breaks, in program order.
  std::vector<int64_t> opsPerGraph;
};

/// Finds the graph breaks of an imported function: ops kept as kiln.opaque
/// (classified by why), and — with trainable parameters — an op on the
/// differentiated path that has no gradient.
BreakReport analyzeGraphBreaks(mlir::func::FuncOp func);

} // namespace kiln

#endif // KILN_ANALYSIS_GRAPHBREAKS_H
