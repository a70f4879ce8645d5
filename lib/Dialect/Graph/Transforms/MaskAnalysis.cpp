//===- MaskAnalysis.cpp - Symbolic evaluation of attention masks ----------===//
//
// An element of an integer tensor is an affine expression over the indices
// of the mask being analysed (iota gives an index, broadcasts and views map
// indices, add/sub/mul-by-constant combine expressions); an element of a
// bool tensor is a conjunction of `expr >= 0` facts. Anything else (data,
// gathers, reductions) makes the analysis give up: the mask then stays a
// mask operand, never a wrong `causal`.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/MaskAnalysis.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

#include <map>

using namespace mlir;

namespace kiln {
namespace {

/// sum(coeff[v] * index_v) + constant.
struct Affine {
  std::map<unsigned, int64_t> coeffs;
  int64_t constant = 0;

  static Affine of(int64_t c) {
    Affine a;
    a.constant = c;
    return a;
  }
  static Affine index(unsigned v) {
    Affine a;
    a.coeffs[v] = 1;
    return a;
  }
  Affine scaled(int64_t k) const {
    Affine a;
    for (auto [v, c] : coeffs)
      if (c * k != 0)
        a.coeffs[v] = c * k;
    a.constant = constant * k;
    return a;
  }
  Affine plus(const Affine &o) const {
    Affine a = *this;
    for (auto [v, c] : o.coeffs) {
      a.coeffs[v] += c;
      if (a.coeffs[v] == 0)
        a.coeffs.erase(v);
    }
    a.constant += o.constant;
    return a;
  }
  bool isConstant() const { return coeffs.empty(); }
};

/// A conjunction of `expr >= 0` (true when empty), or false.
struct Pred {
  bool isFalse = false;
  std::vector<Affine> facts;

  static Pred atLeastZero(const Affine &e) {
    Pred p;
    if (e.isConstant())
      p.isFalse = e.constant < 0;
    else
      p.facts.push_back(e);
    return p;
  }
};

using Index = SmallVector<Affine, 4>;

RankedTensorType typeOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

/// The index of `operand` read for result index `idx` under numpy
/// broadcasting (trailing alignment, static 1 dims read element 0).
std::optional<Index> broadcastIndex(Value operand, Value result, const Index &idx) {
  RankedTensorType in = typeOf(operand), out = typeOf(result);
  int64_t offset = out.getRank() - in.getRank();
  if (offset < 0)
    return std::nullopt;
  Index mapped;
  for (int64_t d = 0; d < in.getRank(); ++d) {
    bool broadcast = !in.isDynamicDim(d) && in.getDimSize(d) == 1 &&
                     !(!out.isDynamicDim(d + offset) && out.getDimSize(d + offset) == 1);
    mapped.push_back(broadcast ? Affine::of(0) : idx[d + offset]);
  }
  return mapped;
}

/// The input index read for result index `idx` by a view-like op (expand,
/// unsqueeze, squeeze, reshape that only adds or drops unit dims,
/// transpose, unit-stride slice with a constant start).
std::optional<Index> viewIndex(Operation *op, const Index &idx) {
  return llvm::TypeSwitch<Operation *, std::optional<Index>>(op)
      .Case([&](ExpandOp e) { return broadcastIndex(e.getInput(), e.getResult(), idx); })
      .Case([&](UnsqueezeOp u) -> std::optional<Index> {
        Index in;
        for (auto [d, a] : llvm::enumerate(idx))
          if (!llvm::is_contained(u.getAxes(), static_cast<int64_t>(d)))
            in.push_back(a);
        return in;
      })
      .Case([&](SqueezeOp s) -> std::optional<Index> {
        Index in;
        size_t next = 0;
        int64_t rank = typeOf(s.getInput()).getRank();
        for (int64_t d = 0; d < rank; ++d)
          in.push_back(llvm::is_contained(s.getAxes(), d) ? Affine::of(0) : idx[next++]);
        return in;
      })
      .Case([&](TransposeOp t) -> std::optional<Index> {
        Index in(idx.size());
        for (auto [i, p] : llvm::enumerate(t.getPerm()))
          in[p] = idx[i];
        return in;
      })
      .Case([&](ReshapeOp r) -> std::optional<Index> {
        // Only unit dims move: the non-unit dims agree in order.
        DimList in = getDims(typeOf(r.getInput())), out = getDims(typeOf(r.getResult()));
        SmallVector<int64_t> inKeep, outKeep;
        for (auto [d, dim] : llvm::enumerate(in))
          if (!isConst(dim, 1))
            inKeep.push_back(d);
        for (auto [d, dim] : llvm::enumerate(out))
          if (!isConst(dim, 1))
            outKeep.push_back(d);
        if (inKeep.size() != outKeep.size())
          return std::nullopt;
        Index mapped(in.size(), Affine::of(0));
        for (auto [a, b] : llvm::zip(inKeep, outKeep)) {
          if (!in[a] || in[a] != out[b])
            return std::nullopt;
          mapped[a] = idx[b];
        }
        return mapped;
      })
      .Case([&](SliceOp s) -> std::optional<Index> {
        Index in;
        for (auto [d, start, step] : llvm::enumerate(s.getStarts().getDims(), s.getSteps())) {
          std::optional<int64_t> c = start ? start.getConstantValue() : std::nullopt;
          if (!c)
            return std::nullopt;
          in.push_back(idx[d].scaled(step).plus(Affine::of(*c)));
        }
        return in;
      })
      .Default([](Operation *) { return std::nullopt; });
}

std::optional<int64_t> splatInt(Value v) {
  if (auto param = v.getDefiningOp<ParameterOp>()) {
    // An initializer the importer found to hold one value (kSplatValueAttr).
    auto value = param->getAttrOfType<FloatAttr>(kSplatValueAttr);
    if (!value)
      return std::nullopt;
    double d = value.getValueAsDouble();
    if (d != static_cast<double>(static_cast<int64_t>(d)))
      return std::nullopt;
    return static_cast<int64_t>(d);
  }
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat())
    return std::nullopt;
  Type element = attr.getElementType();
  if (llvm::isa<IntegerType>(element))
    return attr.getSplatValue<APInt>().getSExtValue();
  if (llvm::isa<FloatType>(element)) {
    double d = attr.getSplatValue<APFloat>().convertToDouble();
    if (d == static_cast<double>(static_cast<int64_t>(d)))
      return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

/// Constants this large are not evaluated element by element.
constexpr int64_t kMaxEvaluatedElements = int64_t(1) << 26;

/// A non-splat static constant's elements as doubles (integers and bools
/// exactly), or null.
std::optional<std::vector<double>> constantValues(Value v) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || attr.isSplat() ||
      attr.getNumElements() > kMaxEvaluatedElements)
    return std::nullopt;
  std::vector<double> values;
  values.reserve(attr.getNumElements());
  Type element = attr.getElementType();
  if (element.isInteger(1)) {
    for (bool b : attr.getValues<bool>())
      values.push_back(b ? 1.0 : 0.0);
  } else if (llvm::isa<IntegerType>(element)) {
    for (const APInt &i : attr.getValues<APInt>())
      values.push_back(static_cast<double>(i.getSExtValue()));
  } else if (llvm::isa<FloatType>(element)) {
    for (const APFloat &f : attr.getValues<APFloat>())
      values.push_back(f.convertToDouble());
  } else {
    return std::nullopt;
  }
  return values;
}

/// c0 + sum(c_d * index_d) when every element of the static integer
/// constant `v` is that affine function of its own indices (an arange the
/// importer folded, a position table): checked on every element.
std::optional<Affine> affineConstant(Value v, const Index &idx) {
  auto type = typeOf(v);
  if (!type.hasStaticShape() || llvm::isa<FloatType>(type.getElementType()))
    return std::nullopt;
  std::optional<std::vector<double>> values = constantValues(v);
  if (!values || values->empty())
    return std::nullopt;
  ArrayRef<int64_t> shape = type.getShape();
  int64_t rank = type.getRank();
  SmallVector<int64_t> strides(rank, 1), coeff(rank, 0);
  for (int64_t d = rank - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * shape[d + 1];
  double base = (*values)[0];
  for (int64_t d = 0; d < rank; ++d)
    if (shape[d] > 1)
      coeff[d] = static_cast<int64_t>((*values)[strides[d]] - base);
  for (int64_t flat = 0, n = values->size(); flat < n; ++flat) {
    double want = base;
    for (int64_t d = 0, rest = flat; d < rank; ++d) {
      want += static_cast<double>(coeff[d] * (rest / strides[d]));
      rest %= strides[d];
    }
    if ((*values)[flat] != want)
      return std::nullopt;
  }
  Affine a = Affine::of(static_cast<int64_t>(base));
  for (int64_t d = 0; d < rank; ++d)
    if (coeff[d])
      a = a.plus(idx[d].scaled(coeff[d]));
  return a;
}

/// Keep/drop of an element value: masks are bool (nonzero keeps) or
/// additive (0 keeps, -inf or a large negative drops).
std::optional<bool> keepOfValue(double v, bool additive) {
  if (!additive)
    return v != 0;
  if (v == 0)
    return true;
  if (v <= -1e4)
    return false;
  return std::nullopt;
}

/// The keep pattern of a constant or of a parameter the importer
/// classified (kMaskPatternAttr), or nullopt.
std::optional<MaskKind> recordedPattern(Value v, bool additive) {
  if (auto param = v.getDefiningOp<ParameterOp>()) {
    auto attr = param->getAttrOfType<StringAttr>(kMaskPatternAttr);
    if (!attr)
      return std::nullopt;
    if (attr.getValue() == "causal")
      return MaskKind::Causal;
    if (attr.getValue() == "all")
      return MaskKind::All;
    return std::nullopt;
  }
  auto type = typeOf(v);
  if (!type.hasStaticShape() || type.getRank() < 2)
    return std::nullopt;
  std::optional<std::vector<double>> values = constantValues(v);
  if (!values)
    return std::nullopt;
  MaskKind kind = classifyMaskValues(
      type.getShape(), [&](int64_t i) { return keepOfValue((*values)[i], additive); });
  return kind == MaskKind::Unknown ? std::nullopt : std::optional<MaskKind>(kind);
}

/// The predicate of a recorded pattern at `idx` (its last two indices).
Pred patternPred(MaskKind kind, const Index &idx) {
  if (kind == MaskKind::All)
    return Pred();
  size_t r = idx.size(); // causal: key j <= query i
  return Pred::atLeastZero(idx[r - 2].plus(idx[r - 1].scaled(-1)));
}

/// The element of an integer-valued tensor at `idx`.
std::optional<Affine> intAt(Value v, const Index &idx, int depth) {
  if (depth > 64)
    return std::nullopt;
  if (std::optional<int64_t> c = splatInt(v))
    return Affine::of(*c);
  if (std::optional<Affine> a = affineConstant(v, idx))
    return a;
  Operation *op = v.getDefiningOp();
  if (!op)
    return std::nullopt;
  if (auto iota = llvm::dyn_cast<IotaOp>(op))
    return idx[iota.getDim()];
  auto operandAt = [&](Value operand) -> std::optional<Affine> {
    std::optional<Index> in = broadcastIndex(operand, v, idx);
    return in ? intAt(operand, *in, depth + 1) : std::nullopt;
  };
  if (llvm::isa<AddOp, SubOp, MulOp>(op)) {
    std::optional<Affine> a = operandAt(op->getOperand(0)), b = operandAt(op->getOperand(1));
    if (!a || !b)
      return std::nullopt;
    if (llvm::isa<AddOp>(op))
      return a->plus(*b);
    if (llvm::isa<SubOp>(op))
      return a->plus(b->scaled(-1));
    if (a->isConstant())
      return b->scaled(a->constant);
    if (b->isConstant())
      return a->scaled(b->constant);
    return std::nullopt;
  }
  if (auto cast = llvm::dyn_cast<CastOp>(op)) {
    // Integer positions survive a cast to a wider integer or to float.
    Type from = typeOf(cast.getInput()).getElementType();
    Type to = typeOf(cast.getResult()).getElementType();
    bool exact =
        llvm::isa<FloatType>(to) ||
        (llvm::isa<IntegerType>(to) && to.getIntOrFloatBitWidth() >= from.getIntOrFloatBitWidth());
    if (!llvm::isa<IntegerType>(from) || from.isInteger(1) || !exact)
      return std::nullopt;
    return intAt(cast.getInput(), idx, depth + 1);
  }
  if (std::optional<Index> in = viewIndex(op, idx))
    return intAt(op->getOperand(0), *in, depth + 1);
  return std::nullopt;
}

Pred conjunction(Pred a, const Pred &b) {
  a.isFalse |= b.isFalse;
  a.facts.insert(a.facts.end(), b.facts.begin(), b.facts.end());
  return a;
}

/// The element of a bool tensor at `idx`.
std::optional<Pred> boolAt(Value v, const Index &idx, int depth) {
  if (depth > 64)
    return std::nullopt;
  if (std::optional<int64_t> c = splatInt(v)) {
    Pred p;
    p.isFalse = *c == 0;
    return p;
  }
  if (std::optional<MaskKind> kind = recordedPattern(v, /*additive=*/false))
    return patternPred(*kind, idx);
  Operation *op = v.getDefiningOp();
  if (!op)
    return std::nullopt;
  // trilu keeps (i, j) where j - i <= k (lower) or j - i >= k (upper).
  auto triluFact = [&](TriluOp t) {
    size_t r = idx.size();
    Affine jMinusI = idx[r - 1].plus(idx[r - 2].scaled(-1));
    int64_t k = t.getDiagonal();
    return Pred::atLeastZero(t.getUpper() ? jMinusI.plus(Affine::of(-k))
                                          : jMinusI.scaled(-1).plus(Affine::of(k)));
  };
  if (auto t = llvm::dyn_cast<TriluOp>(op)) {
    std::optional<Pred> in = boolAt(t.getInput(), idx, depth + 1);
    if (!in)
      return std::nullopt;
    return conjunction(*in, triluFact(t));
  }
  // A cast to bool of trilu(nonzero constant): nonzero where trilu keeps.
  if (auto cast = llvm::dyn_cast<CastOp>(op))
    if (auto t = cast.getInput().getDefiningOp<TriluOp>()) {
      Value ones = t.getInput();
      if (auto expand = ones.getDefiningOp<ExpandOp>())
        ones = expand.getInput();
      std::optional<int64_t> c = splatInt(ones);
      if (c && *c != 0)
        return triluFact(t);
    }
  auto intOperand = [&](unsigned i) -> std::optional<Affine> {
    std::optional<Index> in = broadcastIndex(op->getOperand(i), v, idx);
    return in ? intAt(op->getOperand(i), *in, depth + 1) : std::nullopt;
  };
  auto boolOperand = [&](unsigned i) -> std::optional<Pred> {
    std::optional<Index> in = broadcastIndex(op->getOperand(i), v, idx);
    return in ? boolAt(op->getOperand(i), *in, depth + 1) : std::nullopt;
  };
  if (llvm::isa<LeOp, LtOp, GeOp, GtOp>(op)) {
    std::optional<Affine> a = intOperand(0), b = intOperand(1);
    if (!a || !b)
      return std::nullopt;
    Affine bMinusA = b->plus(a->scaled(-1));
    if (llvm::isa<LeOp>(op)) // b - a >= 0
      return Pred::atLeastZero(bMinusA);
    if (llvm::isa<LtOp>(op)) // b - a - 1 >= 0
      return Pred::atLeastZero(bMinusA.plus(Affine::of(-1)));
    if (llvm::isa<GeOp>(op))
      return Pred::atLeastZero(bMinusA.scaled(-1));
    return Pred::atLeastZero(bMinusA.scaled(-1).plus(Affine::of(-1)));
  }
  if (llvm::isa<AndOp>(op)) {
    std::optional<Pred> a = boolOperand(0), b = boolOperand(1);
    if (!a || !b)
      return std::nullopt;
    return conjunction(*a, *b);
  }
  if (llvm::isa<OrOp>(op)) { // Only an identity or absorbing side simplifies.
    std::optional<Pred> a = boolOperand(0), b = boolOperand(1);
    if (!a || !b)
      return std::nullopt;
    if (a->isFalse)
      return b;
    if (b->isFalse)
      return a;
    if (a->facts.empty() || b->facts.empty())
      return Pred();
    return std::nullopt;
  }
  if (llvm::isa<NotOp>(op)) {
    std::optional<Pred> a = boolOperand(0);
    if (!a)
      return std::nullopt;
    if (a->isFalse)
      return Pred();
    if (a->facts.empty()) {
      Pred p;
      p.isFalse = true;
      return p;
    }
    if (a->facts.size() != 1)
      return std::nullopt;
    return Pred::atLeastZero(a->facts[0].scaled(-1).plus(Affine::of(-1)));
  }
  if (auto select = llvm::dyn_cast<SelectOp>(op)) {
    std::optional<Pred> c = boolOperand(0);
    std::optional<int64_t> t = splatInt(select.getTrueValue()),
                           f = splatInt(select.getFalseValue());
    if (!c || !t || !f)
      return std::nullopt;
    if (*t && !*f)
      return c;
    Pred p;
    p.isFalse = !*t;
    return p.isFalse == !*f ? std::optional<Pred>(p) : std::nullopt;
  }
  if (std::optional<Index> in = viewIndex(op, idx))
    return boolAt(op->getOperand(0), *in, depth + 1);
  return std::nullopt;
}

/// Facts every kept element at `idx` satisfies, where the element itself
/// need not be known: a conjunction implies each side it can evaluate (a
/// packed-documents mask `causal and same_document(data)` implies causal).
/// Empty when nothing is known; never a fact that does not follow.
Pred impliedAt(Value v, const Index &idx, int depth) {
  if (std::optional<Pred> exact = boolAt(v, idx, depth))
    return *exact;
  Operation *op = v.getDefiningOp();
  if (!op || depth > 64)
    return Pred();
  auto implied = [&](unsigned i) {
    std::optional<Index> in = broadcastIndex(op->getOperand(i), v, idx);
    return in ? impliedAt(op->getOperand(i), *in, depth + 1) : Pred();
  };
  if (llvm::isa<AndOp>(op))
    return conjunction(implied(0), implied(1));
  if (auto select = llvm::dyn_cast<SelectOp>(op)) {
    // select(c, true, false) is c; select(c, x, false) keeps only where c.
    std::optional<int64_t> f = splatInt(select.getFalseValue());
    if (f && *f == 0)
      return implied(0);
    return Pred();
  }
  if (std::optional<Index> in = viewIndex(op, idx))
    return impliedAt(op->getOperand(0), *in, depth + 1);
  return Pred();
}

} // namespace

/// Whether `fact >= 0` holds for every index (indices are >= 0).
bool alwaysHolds(const Affine &fact) {
  return fact.constant >= 0 &&
         llvm::all_of(fact.coeffs, [](auto entry) { return entry.second >= 0; });
}

namespace {
/// What predicate `p` over the indices of a rank-`rank` mask is.
MaskKind kindOf(const std::optional<Pred> &p, unsigned rank) {
  if (!p || p->isFalse)
    return MaskKind::Unknown;
  std::vector<Affine> facts;
  for (const Affine &f : p->facts)
    if (!alwaysHolds(f) && llvm::none_of(facts, [&](const Affine &g) {
          return g.coeffs == f.coeffs && g.constant == f.constant;
        }))
      facts.push_back(f);
  if (facts.empty())
    return MaskKind::All;
  if (facts.size() != 1)
    return MaskKind::Unknown;
  // The one fact is k * (i - j) >= 0 with k > 0: key j <= query i.
  const Affine &fact = facts[0];
  unsigned i = rank - 2, j = rank - 1;
  if (fact.constant != 0 || fact.coeffs.size() != 2 || !fact.coeffs.count(i) ||
      !fact.coeffs.count(j))
    return MaskKind::Unknown;
  int64_t k = fact.coeffs.at(i);
  return k > 0 && fact.coeffs.at(j) == -k ? MaskKind::Causal : MaskKind::Unknown;
}

Index maskIndex(unsigned rank) {
  Index idx;
  for (unsigned d = 0; d < rank; ++d)
    idx.push_back(Affine::index(d));
  return idx;
}
} // namespace

MaskKind classifyMask(Value mask) {
  auto type = llvm::dyn_cast<RankedTensorType>(mask.getType());
  if (!type || type.getRank() < 2 || !type.getElementType().isInteger(1))
    return MaskKind::Unknown;
  return kindOf(boolAt(mask, maskIndex(type.getRank()), 0), type.getRank());
}

bool maskImpliesCausal(Value mask) {
  auto type = llvm::dyn_cast<RankedTensorType>(mask.getType());
  if (!type || type.getRank() < 2 || !type.getElementType().isInteger(1))
    return false;
  unsigned rank = type.getRank(), i = rank - 2, j = rank - 1;
  Pred p = impliedAt(mask, maskIndex(rank), 0);
  // k (i - j) + c >= 0 with k > 0 and c <= 0: key j <= query i - c/k <= i.
  return !p.isFalse && llvm::any_of(p.facts, [&](const Affine &f) {
    if (f.coeffs.size() != 2 || !f.coeffs.count(i) || !f.coeffs.count(j))
      return false;
    int64_t k = f.coeffs.at(i);
    return k > 0 && f.coeffs.at(j) == -k && f.constant <= 0;
  });
}

MaskKind classifyAdditiveMask(Value mask) {
  auto type = llvm::dyn_cast<RankedTensorType>(mask.getType());
  if (!type || type.getRank() < 2 || !llvm::isa<FloatType>(type.getElementType()))
    return MaskKind::Unknown;
  Index idx = maskIndex(type.getRank());
  Value v = mask;
  for (int depth = 0; depth < 64; ++depth) {
    if (std::optional<MaskKind> kind = recordedPattern(v, /*additive=*/true))
      return kindOf(patternPred(*kind, idx), type.getRank());
    Operation *op = v.getDefiningOp();
    if (!op)
      return MaskKind::Unknown;
    if (auto cast = llvm::dyn_cast<CastOp>(op)) {
      // 0 and -inf (or a large negative) survive a float-to-float cast.
      if (!llvm::isa<FloatType>(typeOf(cast.getInput()).getElementType()))
        return MaskKind::Unknown;
      v = cast.getInput();
      continue;
    }
    std::optional<Index> in = viewIndex(op, idx);
    if (!in)
      return MaskKind::Unknown;
    idx = std::move(*in);
    v = op->getOperand(0);
  }
  return MaskKind::Unknown;
}

MaskKind classifyMaskValues(ArrayRef<int64_t> shape,
                            llvm::function_ref<std::optional<bool>(int64_t)> keep) {
  size_t rank = shape.size();
  if (rank < 2 || shape[rank - 1] != shape[rank - 2] || shape[rank - 1] < 1)
    return MaskKind::Unknown;
  int64_t n = shape[rank - 1], matrices = 1;
  for (size_t d = 0; d + 2 < rank; ++d)
    matrices *= shape[d];
  bool all = true, causal = true;
  for (int64_t m = 0; m < matrices; ++m)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        std::optional<bool> k = keep((m * n + i) * n + j);
        if (!k)
          return MaskKind::Unknown;
        all &= *k;
        causal &= *k == (j <= i);
        if (!all && !causal)
          return MaskKind::Unknown;
      }
  return all ? MaskKind::All : MaskKind::Causal;
}

} // namespace kiln
