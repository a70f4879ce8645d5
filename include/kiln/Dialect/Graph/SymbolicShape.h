//===- SymbolicShape.h - Dims as size expressions ---------------*- C++ -*-===//
//
// Every dimension is handled as a SymExprAttr: a static size is a constant
// expression, a symbolic one its polynomial, and an unknown one a null
// attribute. Arithmetic on unknowns yields unknown.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_GRAPH_SYMBOLICSHAPE_H
#define KILN_DIALECT_GRAPH_SYMBOLICSHAPE_H

#include "kiln/Dialect/Graph/GraphAttrs.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringMap.h"

#include <optional>

namespace kiln {

using Dim = SymExprAttr;
using DimList = llvm::SmallVector<Dim, 4>;

Dim dimAdd(Dim a, Dim b);
Dim dimSub(Dim a, Dim b);
Dim dimMul(Dim a, Dim b);
Dim dimConst(mlir::MLIRContext *context, int64_t value);
/// Exact division by a constant; unknown when a coefficient is not divisible.
Dim dimDivExact(Dim a, int64_t divisor);
/// Product of all dims (the element count).
Dim dimProduct(llvm::ArrayRef<Dim> dims, mlir::MLIRContext *context);
bool isConst(Dim d, int64_t value);

/// The dims of a ranked tensor type.
DimList getDims(mlir::RankedTensorType type);
Dim getDim(mlir::RankedTensorType type, int64_t index);
/// The canonical tensor type with these dims: constants become static sizes,
/// expressions go to the #kiln.dims encoding.
mlir::RankedTensorType makeTensorType(llvm::ArrayRef<Dim> dims, mlir::Type elementType);

/// Evaluates with symbol values from `lookup`; nullopt if a symbol is unbound
/// or the dim is unknown.
std::optional<int64_t>
evaluateDim(Dim d, llvm::function_ref<std::optional<int64_t>(llvm::StringRef)> lookup);

/// Replaces the symbols `lookup` knows by their values (others stay).
Dim dimSubstitute(Dim d, llvm::function_ref<std::optional<int64_t>(llvm::StringRef)> lookup);
/// Substitutes symbols by values in every type and size expression of `op`
/// (and its regions), turning dims that become constants into static sizes.
void specializeSymbols(mlir::Operation *op, const llvm::StringMap<int64_t> &values);
/// The symbols a dim mentions.
llvm::SmallVector<llvm::StringRef> dimSymbols(Dim d);

/// Prints a dim the way it appears in shapes: 64, batch*seq or ?.
std::string dimToString(Dim d);
std::string shapeToString(mlir::RankedTensorType type);

} // namespace kiln

#endif // KILN_DIALECT_GRAPH_SYMBOLICSHAPE_H
