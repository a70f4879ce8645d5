//===- Guards.h - Size expressions and run-time shape guards ----*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The artifact stores sizes that depend on the symbolic batch and sequence
// sizes (arena offsets, guard conditions) as text in the compiler's own
// syntax for #kiln.expr: integer polynomials over symbols, e.g.
// "batch*seq + 1" or "4096*batch*seq - 2*seq". The runtime binds the symbols
// from the run's sizes and evaluates them with overflow checks.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_GUARDS_H
#define KILN_ARTIFACT_GUARDS_H

#include "kiln/artifact/Expected.h"

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::artifact {

/// Values of the size symbols for one step.
using SymbolBindings = std::map<std::string, int64_t, std::less<>>;

/// A polynomial with integer coefficients over named symbols.
class SizeExpr {
public:
  /// Parses "TERM ((+|-) TERM)*", TERM = FACTOR ('*' FACTOR)*, FACTOR = an
  /// integer or a symbol name ([A-Za-z_][A-Za-z0-9_.]*); a leading '-' is
  /// allowed. The error names the text and the byte.
  static Expected<SizeExpr> parse(std::string_view text);

  /// \p scale times the product of \p factors, multiplied out into one
  /// polynomial ("2*batch*seq + 2*batch" for 2 * batch * (seq + 1)); an
  /// error names a coefficient that overflows int64.
  static Expected<SizeExpr> product(const std::vector<SizeExpr> &factors, int64_t scale);

  /// The value under \p bindings; an error names an unbound symbol or an
  /// int64 overflow.
  Expected<int64_t> evaluate(const SymbolBindings &bindings) const;

  /// The symbols it mentions, sorted, without repeats.
  std::vector<std::string> getSymbols() const;
  /// The text it was parsed from.
  const std::string &getText() const { return text; }

private:
  struct Term {
    int64_t coefficient = 1;
    std::vector<std::string> factors;
  };
  std::string text;
  std::vector<Term> terms;
};

/// One assumption the compiled step depends on (kiln.guards in the IR).
struct Guard {
  enum class Kind { Range, Divisible };
  Kind kind = Kind::Range;
  SizeExpr expr;
  int64_t min = 0, max = 0; ///< Range: min <= expr <= max.
  int64_t divisor = 1;      ///< Divisible: expr % divisor == 0.
  std::string origin;       ///< Why it exists ("--dynamic seq=8..8192:8").
};

/// Parses the "guards" section: a JSON array of objects
/// {"kind": "range", "expr": "...", "min": N, "max": N, "origin": "..."} or
/// {"kind": "divisible", "expr": "...", "divisor": N, "origin": "..."}.
Expected<std::vector<Guard>> parseGuards(std::string_view json);

/// Checks every guard under \p bindings. The first violation is one line:
/// "seq=9 violates seq % 8 == 0 (required by --dynamic seq=8..8192:8)".
Status checkGuards(const std::vector<Guard> &guards, const SymbolBindings &bindings);

/// "1 <= seq <= 8192" or "seq % 8 == 0".
std::string describeGuard(const Guard &guard);

/// Whether \p name is a symbol as SizeExpr::parse reads one
/// ([A-Za-z_][A-Za-z0-9_.]*).
bool isSizeSymbol(std::string_view name);

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_GUARDS_H
