//===- MaskAnalysis.h - What a boolean attention mask computes --*- C++ -*-===//
//
// Exporters build attention masks as small integer programs over iota
// (arange) values: comparisons of positions, broadcasts, and/or/not. The
// analysis evaluates such a program symbolically, element by element, as
// linear inequalities over the mask's own indices, so a mask that is the
// causal one (key j <= query i) is recognized whatever ops spell it. A
// mask the exporter folded into a constant (a static-shape export's [S, S]
// or [B, 1, S, S] bool or 0/-inf initializer, an arange constant, a trilu of
// ones) is evaluated from its values.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_GRAPH_MASKANALYSIS_H
#define KILN_DIALECT_GRAPH_MASKANALYSIS_H

#include "mlir/IR/Value.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>

namespace kiln {

/// What an i1 mask of rank >= 2 provably holds at every index [..., i, j],
/// whatever the leading indices and the sizes.
enum class MaskKind {
  Unknown, ///< not proven (data-dependent, windowed, ...): keep the mask
  All,     ///< true everywhere: no mask
  Causal,  ///< exactly (j <= i)
};
MaskKind classifyMask(mlir::Value mask);

/// Whether an i1 mask keeps no key after its query (j <= i wherever it is
/// true), though it may keep less: a sliding window, or causal and the same
/// packed document (a data-dependent conjunct). Such an attention is a
/// decoder's.
bool maskImpliesCausal(mlir::Value mask);

/// The same for an additive float mask (0 keeps a score, -inf or <= -1e4
/// drops it) whose values are known: a constant or a parameter the importer
/// recorded a pattern for, seen through views, broadcasts and casts.
MaskKind classifyAdditiveMask(mlir::Value mask);

/// What the values of a tensor of `shape` hold over its last two dims for
/// every leading index, evaluated element by element: `keep(flat index)` is
/// true (kept), false (dropped) or nullopt (neither: a bias, a weight).
/// Unknown unless the last two dims are square.
MaskKind classifyMaskValues(llvm::ArrayRef<int64_t> shape,
                            llvm::function_ref<std::optional<bool>(int64_t)> keep);

/// On a kiln.parameter (an initializer whose values the IR does not hold):
/// "causal" or "all", the importer's classifyMaskValues of its values.
constexpr const char *kMaskPatternAttr = "kiln.mask_pattern";
/// On a kiln.parameter whose every element the importer found equal: that
/// value (the analysis reads it as a splat constant).
constexpr const char *kSplatValueAttr = "kiln.splat_value";

} // namespace kiln

#endif // KILN_DIALECT_GRAPH_MASKANALYSIS_H
