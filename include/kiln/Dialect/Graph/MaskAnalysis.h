//===- MaskAnalysis.h - What a boolean attention mask computes --*- C++ -*-===//
//
// Exporters build attention masks as small integer programs over iota
// (arange) values: comparisons of positions, broadcasts, and/or/not. The
// analysis evaluates such a program symbolically, element by element, as
// linear inequalities over the mask's own indices, so a mask that is the
// causal one (key j <= query i) is recognized whatever ops spell it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_GRAPH_MASKANALYSIS_H
#define KILN_DIALECT_GRAPH_MASKANALYSIS_H

#include "mlir/IR/Value.h"

namespace kiln {

/// What an i1 mask of rank >= 2 provably holds at every index [..., i, j],
/// whatever the leading indices and the sizes.
enum class MaskKind {
  Unknown, ///< not proven (data-dependent, windowed, ...): keep the mask
  All,     ///< true everywhere: no mask
  Causal,  ///< exactly (j <= i)
};
MaskKind classifyMask(mlir::Value mask);

} // namespace kiln

#endif // KILN_DIALECT_GRAPH_MASKANALYSIS_H
