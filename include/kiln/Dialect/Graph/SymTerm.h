//===- SymTerm.h - One monomial of a size expression -------------*- C++ -*-===//
//
// A size expression (SymExprAttr) is a sum of SymTerms. A term is trivially
// copyable so the attribute storage can own an array of them directly.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_GRAPH_SYMTERM_H
#define KILN_DIALECT_GRAPH_SYMTERM_H

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/Hashing.h"

#include <array>
#include <cstdint>

namespace kiln {

/// Highest degree of a monomial. Shapes of LLM training steps need products
/// of at most three symbols (batch*seq*seq); past this an expression becomes
/// unknown rather than failing.
inline constexpr unsigned kMaxSymDegree = 4;

/// coeff * factors[0] * factors[1] * ... ; factors sorted by name, unused
/// slots null. A repeated symbol is a power (seq*seq).
struct SymTerm {
  int64_t coeff = 0;
  std::array<mlir::StringAttr, kMaxSymDegree> factors{};

  unsigned degree() const {
    unsigned n = 0;
    while (n < kMaxSymDegree && factors[n])
      ++n;
    return n;
  }
  bool sameFactors(const SymTerm &other) const { return factors == other.factors; }
  bool operator==(const SymTerm &other) const {
    return coeff == other.coeff && factors == other.factors;
  }
};

inline llvm::hash_code hash_value(const SymTerm &term) {
  llvm::hash_code code = llvm::hash_value(term.coeff);
  for (mlir::StringAttr factor : term.factors)
    code = llvm::hash_combine(code, factor.getAsOpaquePointer());
  return code;
}

} // namespace kiln

#endif // KILN_DIALECT_GRAPH_SYMTERM_H
