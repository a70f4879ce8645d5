//===- SymbolicShape.cpp - Dims as size expressions -----------------------===//

#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Graph/DimOverflow.h"
#include "mlir/IR/AttrTypeSubElements.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>

using namespace mlir;

namespace kiln {

namespace {
thread_local bool dimOverflowed = false;
thread_local bool negativeDim = false;
} // namespace

void noteDimOverflow() { dimOverflowed = true; }

bool takeDimOverflow() {
  bool overflowed = dimOverflowed;
  dimOverflowed = false;
  return overflowed;
}

void noteNegativeDim() { negativeDim = true; }

bool takeNegativeDim() {
  bool negative = negativeDim;
  negativeDim = false;
  return negative;
}

Dim dimConst(MLIRContext *context, int64_t value) {
  return SymExprAttr::getConstant(context, value);
}

bool isConst(Dim d, int64_t value) {
  if (!d)
    return false;
  std::optional<int64_t> c = d.getConstantValue();
  return c && *c == value;
}

Dim dimAdd(Dim a, Dim b) {
  if (!a || !b)
    return {};
  SmallVector<SymTerm> terms(a.getTerms());
  terms.append(b.getTerms().begin(), b.getTerms().end());
  return SymExprAttr::getCanonical(a.getContext(), terms);
}

Dim dimSub(Dim a, Dim b) {
  if (!a || !b)
    return {};
  SmallVector<SymTerm> terms(a.getTerms());
  for (SymTerm term : b.getTerms()) {
    if (llvm::SubOverflow(int64_t(0), term.coeff, term.coeff)) {
      noteDimOverflow();
      return {};
    }
    terms.push_back(term);
  }
  return SymExprAttr::getCanonical(a.getContext(), terms);
}

Dim dimMul(Dim a, Dim b) {
  if (!a || !b)
    return {};
  SmallVector<SymTerm> terms;
  for (const SymTerm &x : a.getTerms()) {
    for (const SymTerm &y : b.getTerms()) {
      unsigned dx = x.degree(), dy = y.degree();
      if (dx + dy > kMaxSymDegree)
        return {}; // Too complex to track: unknown, never wrong.
      SymTerm product;
      if (llvm::MulOverflow(x.coeff, y.coeff, product.coeff)) {
        noteDimOverflow();
        return {};
      }
      for (unsigned i = 0; i < dx; ++i)
        product.factors[i] = x.factors[i];
      for (unsigned i = 0; i < dy; ++i)
        product.factors[dx + i] = y.factors[i];
      terms.push_back(product);
    }
  }
  return SymExprAttr::getCanonical(a.getContext(), terms);
}

Dim dimDivExact(Dim a, int64_t divisor) {
  if (!a || divisor == 0)
    return {};
  SmallVector<SymTerm> terms(a.getTerms());
  for (SymTerm &term : terms) {
    if (divisor == -1 && term.coeff == std::numeric_limits<int64_t>::min()) {
      noteDimOverflow();
      return {};
    }
    if (term.coeff % divisor != 0)
      return {};
    term.coeff /= divisor;
  }
  return SymExprAttr::getCanonical(a.getContext(), terms);
}

Dim dimProduct(ArrayRef<Dim> dims, MLIRContext *context) {
  Dim product = dimConst(context, 1);
  for (Dim d : dims)
    product = dimMul(product, d);
  return product;
}

Dim getDim(RankedTensorType type, int64_t index) {
  MLIRContext *context = type.getContext();
  if (!type.isDynamicDim(index))
    return dimConst(context, type.getDimSize(index));
  auto encoding = llvm::dyn_cast_or_null<DimsAttr>(type.getEncoding());
  if (!encoding)
    return {};
  int64_t dynamicIndex = 0;
  for (int64_t i = 0; i < index; ++i)
    dynamicIndex += type.isDynamicDim(i);
  return encoding.getDims()[dynamicIndex];
}

DimList getDims(RankedTensorType type) {
  DimList dims;
  for (int64_t i = 0, e = type.getRank(); i < e; ++i)
    dims.push_back(getDim(type, i));
  return dims;
}

RankedTensorType makeTensorType(ArrayRef<Dim> dims, Type elementType) {
  SmallVector<int64_t> shape;
  SmallVector<SymExprAttr> dynamic;
  bool anyKnown = false;
  for (Dim d : dims) {
    std::optional<int64_t> c = d ? d.getConstantValue() : std::nullopt;
    if (c && *c >= 0) {
      shape.push_back(*c);
      continue;
    }
    shape.push_back(ShapedType::kDynamic);
    // A negative constant is no size; keep it unknown so a verifier reports
    // it, and flag it for the importer.
    if (c)
      noteNegativeDim();
    dynamic.push_back(c ? Dim() : d);
    anyKnown |= dynamic.back() != nullptr;
  }
  Attribute encoding;
  if (anyKnown)
    encoding = DimsAttr::get(elementType.getContext(), dynamic);
  return RankedTensorType::get(shape, elementType, encoding);
}

std::optional<int64_t> evaluateDim(Dim d, function_ref<std::optional<int64_t>(StringRef)> lookup) {
  if (!d)
    return std::nullopt;
  int64_t total = 0;
  bool overflow = false;
  for (const SymTerm &term : d.getTerms()) {
    int64_t value = term.coeff;
    for (unsigned i = 0, e = term.degree(); i < e; ++i) {
      std::optional<int64_t> v = lookup(term.factors[i].getValue());
      if (!v)
        return std::nullopt;
      overflow |= llvm::MulOverflow(value, *v, value);
    }
    overflow |= llvm::AddOverflow(total, value, total);
  }
  if (overflow) {
    noteDimOverflow();
    return std::nullopt;
  }
  return total;
}

Dim dimSubstitute(Dim d, function_ref<std::optional<int64_t>(StringRef)> lookup) {
  if (!d)
    return d;
  SmallVector<SymTerm> terms;
  for (const SymTerm &term : d.getTerms()) {
    SymTerm kept;
    kept.coeff = term.coeff;
    unsigned n = 0;
    for (unsigned i = 0, e = term.degree(); i < e; ++i) {
      if (std::optional<int64_t> v = lookup(term.factors[i].getValue())) {
        if (llvm::MulOverflow(kept.coeff, *v, kept.coeff)) {
          noteDimOverflow();
          return {};
        }
      } else
        kept.factors[n++] = term.factors[i];
    }
    terms.push_back(kept);
  }
  return SymExprAttr::getCanonical(d.getContext(), terms);
}

void specializeSymbols(Operation *root, const llvm::StringMap<int64_t> &values) {
  auto lookup = [&](StringRef name) -> std::optional<int64_t> {
    auto it = values.find(name);
    return it == values.end() ? std::nullopt : std::optional(it->second);
  };
  AttrTypeReplacer replacer;
  replacer.addReplacement([&](SymExprAttr expr) -> std::pair<Attribute, WalkResult> {
    Dim substituted = dimSubstitute(expr, lookup);
    // An overflowing value stays symbolic (a null attribute cannot stand in).
    return {substituted ? substituted : expr, WalkResult::skip()};
  });
  // Rebuilt tensor types turn new constants into static sizes.
  replacer.addReplacement([&](RankedTensorType type) -> std::pair<Type, WalkResult> {
    DimList dims = getDims(type);
    for (Dim &d : dims)
      d = dimSubstitute(d, lookup);
    return {makeTensorType(dims, type.getElementType()), WalkResult::skip()};
  });
  root->walk([&](Operation *op) {
    replacer.replaceElementsIn(op, /*replaceAttrs=*/true, /*replaceLocs=*/false,
                               /*replaceTypes=*/true);
  });
}

SmallVector<StringRef> dimSymbols(Dim d) {
  SmallVector<StringRef> names;
  if (!d)
    return names;
  for (const SymTerm &term : d.getTerms())
    for (unsigned i = 0, e = term.degree(); i < e; ++i)
      if (!llvm::is_contained(names, term.factors[i].getValue()))
        names.push_back(term.factors[i].getValue());
  return names;
}

std::string dimToString(Dim d) {
  if (!d)
    return "?";
  std::string text;
  llvm::raw_string_ostream os(text);
  d.printBare(os);
  return text;
}

std::string shapeToString(RankedTensorType type) {
  std::string text = "[";
  llvm::ListSeparator sep(", ");
  for (Dim d : getDims(type))
    text += (StringRef(sep) + dimToString(d)).str();
  return text + "]";
}

} // namespace kiln
