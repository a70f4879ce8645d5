//===- GraphAttrs.cpp - Size expressions and the dims encoding ------------===//
//
// SymExprAttr keeps polynomials canonical (sorted terms, merged coefficients,
// no zero terms) so structural equality is polynomial equality.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphAttrs.h"
#include "kiln/Dialect/Graph/DimOverflow.h"
#include "kiln/Dialect/Graph/GraphDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/MathExtras.h"

using namespace mlir;
using namespace kiln;

#include "kiln/Dialect/Graph/GraphEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "kiln/Dialect/Graph/GraphAttrs.cpp.inc"

void GraphDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "kiln/Dialect/Graph/GraphAttrs.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// SymExprAttr
//===----------------------------------------------------------------------===//

namespace {
/// Higher degree first, then factor names in order: `batch*seq + seq + 1`.
bool termBefore(const SymTerm &a, const SymTerm &b) {
  unsigned da = a.degree(), db = b.degree();
  if (da != db)
    return da > db;
  for (unsigned i = 0; i < da; ++i) {
    int cmp = a.factors[i].getValue().compare(b.factors[i].getValue());
    if (cmp != 0)
      return cmp < 0;
  }
  return false;
}

void sortFactors(SymTerm &term) {
  unsigned n = term.degree();
  std::sort(term.factors.begin(), term.factors.begin() + n,
            [](StringAttr a, StringAttr b) { return a.getValue() < b.getValue(); });
}
} // namespace

SymExprAttr SymExprAttr::getCanonical(MLIRContext *context, ArrayRef<SymTerm> terms) {
  SmallVector<SymTerm> sorted(terms.begin(), terms.end());
  for (SymTerm &term : sorted)
    sortFactors(term);
  llvm::sort(sorted, termBefore);
  SmallVector<SymTerm> merged;
  for (const SymTerm &term : sorted) {
    if (merged.empty() || !merged.back().sameFactors(term)) {
      merged.push_back(term);
      continue;
    }
    // A coefficient past int64 is no size: unknown, never wrapped.
    if (llvm::AddOverflow(merged.back().coeff, term.coeff, merged.back().coeff)) {
      noteDimOverflow();
      return {};
    }
  }
  llvm::erase_if(merged, [](const SymTerm &t) { return t.coeff == 0; });
  return get(context, merged);
}

SymExprAttr SymExprAttr::getSymbol(MLIRContext *context, StringRef name) {
  SymTerm term;
  term.coeff = 1;
  term.factors[0] = StringAttr::get(context, name);
  return get(context, {term});
}

SymExprAttr SymExprAttr::getConstant(MLIRContext *context, int64_t value) {
  if (value == 0)
    return get(context, {});
  SymTerm term;
  term.coeff = value;
  return get(context, {term});
}

std::optional<int64_t> SymExprAttr::getConstantValue() const {
  ArrayRef<SymTerm> terms = getTerms();
  if (terms.empty())
    return 0;
  if (terms.size() == 1 && terms[0].degree() == 0)
    return terms[0].coeff;
  return std::nullopt;
}

LogicalResult SymExprAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                  ArrayRef<SymTerm> terms) {
  for (const SymTerm &term : terms) {
    if (term.coeff == 0)
      return emitError() << "size expression has a zero term";
    for (unsigned i = term.degree(); i < kMaxSymDegree; ++i)
      if (term.factors[i])
        return emitError() << "size expression term has a gap in its factors";
  }
  return success();
}

void SymExprAttr::printBare(raw_ostream &os) const {
  ArrayRef<SymTerm> terms = getTerms();
  if (terms.empty()) {
    os << 0;
    return;
  }
  bool first = true;
  for (const SymTerm &term : terms) {
    int64_t coeff = term.coeff;
    unsigned degree = term.degree();
    if (!first) {
      os << (coeff < 0 ? " - " : " + ");
      coeff = coeff < 0 ? -coeff : coeff;
    }
    // A negative unit coefficient keeps its 1 (`- 1*seq`): the MLIR lexer
    // only reads a minus as part of an integer.
    bool printCoeff = degree == 0 || coeff != 1 || (!first && term.coeff < 0);
    if (printCoeff)
      os << coeff;
    for (unsigned i = 0; i < degree; ++i)
      os << (i == 0 && !printCoeff ? "" : "*") << term.factors[i].getValue();
    first = false;
  }
}

FailureOr<SymExprAttr> SymExprAttr::parseBare(AsmParser &parser) {
  MLIRContext *context = parser.getContext();
  SmallVector<SymTerm> terms;
  // factors := NAME ('*' NAME)*, filling `term` from slot `degree` on.
  auto parseFactors = [&](SymTerm &term, unsigned degree) -> LogicalResult {
    do {
      StringRef name;
      if (parser.parseKeyword(&name))
        return failure();
      if (degree == kMaxSymDegree)
        return parser.emitError(parser.getCurrentLocation(), "size expression term has more than ")
               << kMaxSymDegree << " factors";
      term.factors[degree++] = StringAttr::get(context, name);
    } while (succeeded(parser.parseOptionalStar()));
    return success();
  };
  // term := INT ('*' factors)? | factors. A leading minus belongs to INT.
  auto parseTerm = [&](bool optional) -> OptionalParseResult {
    SymTerm term;
    term.coeff = 1;
    int64_t coeff;
    OptionalParseResult intResult = parser.parseOptionalInteger(coeff);
    if (intResult.has_value()) {
      if (failed(*intResult))
        return failure();
      term.coeff = coeff;
      if (succeeded(parser.parseOptionalStar()) && failed(parseFactors(term, 0)))
        return failure();
    } else {
      StringRef name;
      if (failed(parser.parseOptionalKeyword(&name))) {
        if (optional)
          return std::nullopt;
        return parser.emitError(parser.getCurrentLocation(), "expected a size expression term");
      }
      term.factors[0] = StringAttr::get(context, name);
      if (succeeded(parser.parseOptionalStar()) && failed(parseFactors(term, 1)))
        return failure();
    }
    terms.push_back(term);
    return success();
  };

  OptionalParseResult first = parseTerm(/*optional=*/true);
  if (!first.has_value())
    return parser.emitError(parser.getCurrentLocation(), "expected a size expression");
  if (failed(*first))
    return failure();
  while (true) {
    if (succeeded(parser.parseOptionalPlus())) {
      if (failed(*parseTerm(/*optional=*/false)))
        return failure();
      continue;
    }
    // `seq - 2*batch` reaches here as the integer -2 followed by `*batch`.
    llvm::SMLoc loc = parser.getCurrentLocation();
    size_t before = terms.size();
    OptionalParseResult next = parseTerm(/*optional=*/true);
    if (!next.has_value())
      break;
    if (failed(*next))
      return failure();
    if (terms.size() != before + 1 || terms.back().coeff >= 0)
      return parser.emitError(loc, "expected '+' or '-' between terms");
  }
  SymExprAttr canonical = getCanonical(context, terms);
  if (!canonical)
    return parser.emitError(parser.getCurrentLocation(), "size expression overflows int64");
  return canonical;
}

Attribute SymExprAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  FailureOr<SymExprAttr> expr = parseBare(parser);
  if (failed(expr) || parser.parseGreater())
    return {};
  return *expr;
}

void SymExprAttr::print(AsmPrinter &printer) const {
  printer << "<";
  printBare(printer.getStream());
  printer << ">";
}

//===----------------------------------------------------------------------===//
// DimsAttr
//===----------------------------------------------------------------------===//

Attribute DimsAttr::parse(AsmParser &parser, Type) {
  SmallVector<SymExprAttr> dims;
  auto parseEntry = [&]() -> ParseResult {
    if (succeeded(parser.parseOptionalQuestion())) {
      dims.push_back(SymExprAttr());
      return success();
    }
    FailureOr<SymExprAttr> expr = SymExprAttr::parseBare(parser);
    if (failed(expr))
      return failure();
    dims.push_back(*expr);
    return success();
  };
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseEntry) ||
      parser.parseGreater())
    return {};
  return DimsAttr::get(parser.getContext(), dims);
}

void DimsAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  llvm::interleaveComma(getDims(), printer.getStream(), [&](SymExprAttr dim) {
    if (dim)
      dim.printBare(printer.getStream());
    else
      printer << "?";
  });
  printer << "]>";
}

LogicalResult DimsAttr::verifyEncoding(ArrayRef<int64_t> shape, Type,
                                       function_ref<InFlightDiagnostic()> emitError) const {
  size_t dynamic = llvm::count_if(shape, ShapedType::isDynamic);
  if (dynamic != getDims().size())
    return emitError() << "#kiln.dims has " << getDims().size() << " entries but the shape has "
                       << dynamic << " dynamic dims";
  // Without a known entry the encoding says nothing; `tensor<?xf32>` is the
  // one spelling of that shape (makeTensorType never builds such encodings).
  if (llvm::none_of(getDims(), [](SymExprAttr dim) { return bool(dim); }))
    return emitError() << "#kiln.dims has no known entry; leave the encoding "
                          "out";
  for (SymExprAttr dim : getDims())
    if (dim && dim.getConstantValue())
      return emitError() << "#kiln.dims entry is the constant " << *dim.getConstantValue()
                         << "; write it as a static size";
  return success();
}
