//===- DimOverflow.h - Size arithmetic that overflowed int64 ----*- C++ -*-===//
//
// Size expressions (SymExprAttr) have int64 coefficients. Arithmetic on them
// (dimAdd, dimMul, getCanonical, dimSubstitute, evaluateDim, ...) never
// wraps: a result that would overflow becomes unknown (a null Dim or
// nullopt) and this thread's overflow flag is raised, so the importer can
// blame the node whose sizes overflowed instead of carrying a `?` on. A
// negative size is flagged the same way.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_GRAPH_DIMOVERFLOW_H
#define KILN_DIALECT_GRAPH_DIMOVERFLOW_H

namespace kiln {

/// Raises this thread's overflow flag.
void noteDimOverflow();
/// Whether size arithmetic overflowed since the last call; clears the flag.
bool takeDimOverflow();

/// makeTensorType raises this flag when asked for a negative static dim
/// (which it makes unknown): a Reshape, Expand or Tile target of -4.
void noteNegativeDim();
/// Whether a negative dim was asked for since the last call; clears it.
bool takeNegativeDim();

} // namespace kiln

#endif // KILN_DIALECT_GRAPH_DIMOVERFLOW_H
