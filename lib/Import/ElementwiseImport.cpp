//===- ElementwiseImport.cpp - ONNX elementwise ops and activations -------===//
//
// Direct maps for ops the dialect has, and short decompositions for the
// activation zoo (LeakyRelu, Elu, HardSigmoid, Clip, ...) so later stages
// see only the core op set.
//
//===----------------------------------------------------------------------===//

#include "NodeContext.h"
#include "kiln/Dialect/Graph/DimOverflow.h"

#include <limits>

using namespace mlir;

namespace kiln {
namespace {

Type elementTypeOf(Value v) { return llvm::cast<ShapedType>(v.getType()).getElementType(); }

//===----------------------------------------------------------------------===//
// Known-tensor folding (shape arithmetic)
//===----------------------------------------------------------------------===//

/// Bounds of a size expression when every size symbol is >= 1 (the shape
/// guards check positive sizes): each monomial is then >= 1, so with
/// non-negative coefficients the value is >= the coefficient sum, with
/// non-positive ones <= it.
struct DimBounds {
  std::optional<int64_t> low, high;
};
DimBounds boundsOf(Dim d) {
  int64_t sum = 0;
  bool anyPositive = false, anyNegative = false;
  for (const SymTerm &t : d.getTerms()) {
    if (__builtin_add_overflow(sum, t.coeff, &sum))
      return DimBounds{}; // past int64: no bounds
    if (t.degree() > 0) {
      anyPositive |= t.coeff > 0;
      anyNegative |= t.coeff < 0;
    }
  }
  DimBounds b;
  if (!anyNegative)
    b.low = sum;
  if (!anyPositive)
    b.high = sum;
  return b;
}

/// The truth of `a <op> b` for a comparison op, when the bounds decide it.
std::optional<bool> compareDims(StringRef opType, Dim a, Dim b) {
  if (opType == "Equal" && a == b)
    return true;
  Dim difference = dimSub(a, b);
  if (!difference) { // a - b past int64: the bounds cannot say
    (void)takeDimOverflow(); // Handled: not the node's error.
    return std::nullopt;
  }
  DimBounds diff = boundsOf(difference);
  auto positive = [&] { return diff.low && *diff.low > 0; };
  auto nonNegative = [&] { return diff.low && *diff.low >= 0; };
  auto negative = [&] { return diff.high && *diff.high < 0; };
  auto nonPositive = [&] { return diff.high && *diff.high <= 0; };
  if (opType == "Equal") {
    if (a == b)
      return true;
    if (positive() || negative())
      return false;
  } else if (opType == "Less" || opType == "Greater") {
    bool less = opType == "Less";
    if (less ? negative() : positive())
      return true;
    if (less ? nonNegative() : nonPositive())
      return false;
  } else if (opType == "LessOrEqual" || opType == "GreaterOrEqual") {
    bool lessEq = opType == "LessOrEqual";
    if (lessEq ? nonPositive() : nonNegative())
      return true;
    if (lessEq ? positive() : negative())
      return false;
  }
  return std::nullopt;
}

bool isComparison(StringRef opType) {
  return llvm::is_contained({"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}, opType);
}

std::optional<Dim> foldDims(StringRef opType, Dim a, Dim b, MLIRContext *ctx) {
  if (!a || !b)
    return std::nullopt;
  std::optional<int64_t> ca = a.getConstantValue(), cb = b.getConstantValue();
  // A sum or product past int64 is not folded: the op runs on the values
  // and wraps as ONNX integer arithmetic does.
  auto known = [](Dim d) -> std::optional<Dim> {
    if (d)
      return d;
    (void)takeDimOverflow(); // Handled: not the node's error.
    return std::nullopt;
  };
  if (isComparison(opType)) {
    std::optional<bool> truth = compareDims(opType, a, b);
    if (!truth)
      return std::nullopt;
    return dimConst(ctx, *truth);
  }
  if (opType == "And" || opType == "Or" || opType == "Xor") {
    if (!ca || !cb)
      return std::nullopt;
    bool x = *ca != 0, y = *cb != 0;
    return dimConst(ctx, opType == "And" ? (x && y) : opType == "Or" ? (x || y) : (x != y));
  }
  if (opType == "Add")
    return known(dimAdd(a, b));
  if (opType == "Sub")
    return known(dimSub(a, b));
  if (opType == "Mul")
    return known(dimMul(a, b));
  if (opType == "Div") {
    if (ca && cb && *cb != 0 && !(*ca == std::numeric_limits<int64_t>::min() && *cb == -1))
      return dimConst(ctx, *ca / *cb);
    if (cb && *cb != 0)
      if (Dim q = dimDivExact(a, *cb))
        return q;
    return std::nullopt;
  }
  if (opType == "Max" || opType == "Min") {
    if (a == b)
      return a;
    if (ca && cb)
      return dimConst(ctx, opType == "Max" ? std::max(*ca, *cb) : std::min(*ca, *cb));
    // max(seq, 1) is seq when the bounds order the two.
    if (std::optional<bool> aFirst = compareDims("GreaterOrEqual", a, b))
      return (*aFirst == (opType == "Max")) ? a : b;
    return std::nullopt;
  }
  return std::nullopt;
}

} // namespace

std::optional<KnownTensor> foldKnownBinary(StringRef opType, const KnownTensor &a,
                                           const KnownTensor &b) {
  size_t n = std::max(a.elements.size(), b.elements.size());
  if ((a.elements.size() != n && a.elements.size() != 1) ||
      (b.elements.size() != n && b.elements.size() != 1) || n == 0)
    return std::nullopt;
  KnownTensor result;
  result.dtype = isComparison(opType) ? DType::Bool : a.dtype;
  result.shape = a.shape.size() >= b.shape.size() ? a.shape : b.shape;
  MLIRContext *ctx =
      a.elements.front() ? a.elements.front().getContext() : b.elements.front().getContext();
  for (size_t i = 0; i < n; ++i) {
    Dim x = a.elements[a.elements.size() == 1 ? 0 : i];
    Dim y = b.elements[b.elements.size() == 1 ? 0 : i];
    std::optional<Dim> r = foldDims(opType, x, y, ctx);
    if (!r)
      return std::nullopt;
    result.elements.push_back(*r);
  }
  return result;
}

namespace {

//===----------------------------------------------------------------------===//
// Direct maps
//===----------------------------------------------------------------------===//

template <typename OpT> LogicalResult importUnary(NodeContext &ctx) {
  if (const KnownTensor *k = ctx.known(0); k && std::is_same_v<OpT, NotOp>) {
    if (std::optional<std::vector<int64_t>> values = k->constants()) {
      KnownTensor result = *k;
      for (size_t i = 0; i < values->size(); ++i)
        result.elements[i] = dimConst(ctx.context(), (*values)[i] == 0);
      ctx.setKnown(0, result);
      return success();
    }
  }
  if (const KnownTensor *k = ctx.known(0); k && std::is_same_v<OpT, NegOp>) {
    KnownTensor result = *k;
    for (Dim &d : result.elements)
      d = dimSub(dimConst(ctx.context(), 0), d);
    ctx.setKnown(0, result);
    return success();
  }
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  return ctx.produce(ctx.create<OpT>(*x));
}

template <typename OpT> LogicalResult importBinary(NodeContext &ctx) {
  const KnownTensor *ka = ctx.known(0), *kb = ctx.known(1);
  if (ka && kb)
    if (std::optional<KnownTensor> folded = foldKnownBinary(ctx.node().op_type(), *ka, *kb)) {
      ctx.setKnown(0, *folded);
      return success();
    }
  FailureOr<Value> a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  return ctx.produce(ctx.create<OpT>(*a, *b));
}

/// Max, Min, Sum, Mean take any number of inputs.
template <typename OpT> LogicalResult importVariadic(NodeContext &ctx) {
  if (ctx.numInputs() == 2 && ctx.known(0) && ctx.known(1))
    if (std::optional<KnownTensor> folded =
            foldKnownBinary(ctx.node().op_type(), *ctx.known(0), *ctx.known(1))) {
      ctx.setKnown(0, *folded);
      return success();
    }
  FailureOr<Value> acc = ctx.input(0);
  if (failed(acc))
    return failure();
  for (size_t i = 1; i < ctx.numInputs(); ++i) {
    FailureOr<Value> next = ctx.input(i);
    if (failed(next))
      return failure();
    acc = ctx.create<OpT>(*acc, *next);
    if (failed(acc))
      return failure();
  }
  if (ctx.node().op_type() == "Mean" && ctx.numInputs() > 1) {
    Value n = ctx.scalar(static_cast<double>(ctx.numInputs()), elementTypeOf(*acc));
    acc = ctx.create<DivOp>(*acc, n);
    if (failed(acc))
      return failure();
  }
  ctx.setOutput(0, *acc);
  return success();
}

LogicalResult importIdentity(NodeContext &ctx) {
  if (const KnownTensor *k = ctx.known(0)) {
    ctx.setKnown(0, *k);
    return success();
  }
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  ctx.setOutput(0, *x);
  return success();
}

LogicalResult importDropout(NodeContext &ctx) {
  // Exported graphs run dropout in inference mode; training mode is the
  // identity only with ratio 0 (real dropout needs the RNG of the LoRA
  // issue). Opset < 12 carried the mode in `is_test`-free attributes.
  bool training = false;
  if (ctx.hasInput(2)) {
    FailureOr<int64_t> flag = ctx.constantInt(2, "Dropout training_mode");
    if (failed(flag))
      return failure();
    training = *flag != 0;
  }
  if (training) {
    std::optional<double> ratio =
        ctx.hasInput(1) ? ctx.constantScalar(1) : std::optional<double>(0.5);
    if (!ratio || *ratio != 0.0)
      return ctx.unsupported("Dropout in training mode with a non-zero ratio");
  }
  if (failed(importIdentity(ctx)))
    return failure();
  if (ctx.node().output_size() > 1 && !ctx.node().output(1).empty()) {
    FailureOr<RankedTensorType> type = ctx.inputType(0);
    if (failed(type))
      return failure();
    Type i1 = ctx.builder().getI1Type();
    Value keep = ctx.scalar(1, i1);
    RankedTensorType maskType = type->clone(i1);
    ctx.setOutput(1, maskType.getRank() == 0 ? keep : ctx.createTyped<ExpandOp>(maskType, keep));
  }
  return success();
}

LogicalResult importPow(NodeContext &ctx) {
  FailureOr<Value> base = ctx.input(0), exponent = ctx.input(1);
  if (failed(base) || failed(exponent))
    return failure();
  Type element = elementTypeOf(*base);
  if (elementTypeOf(*exponent) != element) {
    auto type = llvm::cast<RankedTensorType>(exponent->getType());
    *exponent = ctx.createTyped<CastOp>(type.clone(element), *exponent);
  }
  return ctx.produce(ctx.create<PowOp>(*base, *exponent));
}

LogicalResult importGelu(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  std::string approximate = ctx.attrString("approximate", "none");
  GeluApproximation mode;
  if (approximate == "none")
    mode = GeluApproximation::none;
  else if (approximate == "tanh")
    mode = GeluApproximation::tanh;
  else
    return ctx.error("unknown approximate '" + approximate + "'");
  return ctx.produce(ctx.create<GeluOp>(*x, GeluApproximationAttr::get(ctx.context(), mode)));
}

LogicalResult importWhere(NodeContext &ctx) {
  const KnownTensor *c = ctx.known(0), *a = ctx.known(1), *b = ctx.known(2);
  if (c && a && b && c->elements.size() == a->elements.size() &&
      a->elements.size() == b->elements.size()) {
    if (std::optional<std::vector<int64_t>> cond = c->constants()) {
      KnownTensor result = *a;
      for (size_t i = 0; i < cond->size(); ++i)
        result.elements[i] = (*cond)[i] ? a->elements[i] : b->elements[i];
      ctx.setKnown(0, result);
      return success();
    }
  }
  FailureOr<Value> cond = ctx.input(0), x = ctx.input(1), y = ctx.input(2);
  if (failed(cond) || failed(x) || failed(y))
    return failure();
  return ctx.produce(ctx.create<SelectOp>(*cond, *x, *y));
}

LogicalResult castTo(NodeContext &ctx, Type target) {
  std::optional<DType> dtype = fromMlirType(target);
  if (const KnownTensor *k = ctx.known(0); k && dtype && !isFloat(*dtype)) {
    KnownTensor result = *k;
    result.dtype = *dtype;
    if (*dtype == DType::Bool) // Casting to bool is "!= 0".
      for (Dim &d : result.elements) {
        std::optional<int64_t> c = d.getConstantValue();
        if (!c)
          return ctx.unsupported("bool cast of a symbolic size");
        d = dimConst(ctx.context(), *c != 0);
      }
    ctx.setKnown(0, result);
    return success();
  }
  if (const KnownTensor *k = ctx.known(0); k && dtype && isFloat(*dtype)) {
    // A compile-time integer cast to float stays a constant (Range and
    // friends read their bounds from constants).
    if (std::optional<std::vector<int64_t>> values = k->constants()) {
      HostTensor converted(*dtype, k->shape);
      for (size_t i = 0; i < values->size(); ++i)
        converted.set(i, static_cast<double>((*values)[i]));
      ctx.outputs()[0] = constantTensor(ctx.builder(), ctx.loc(), converted);
      return success();
    }
  }
  FailureOr<RankedTensorType> type = ctx.inputType(0);
  FailureOr<Value> x = ctx.input(0);
  if (failed(type) || failed(x))
    return failure();
  ctx.setOutput(
      0, type->getElementType() == target ? *x : ctx.createTyped<CastOp>(type->clone(target), *x));
  return success();
}

LogicalResult importCast(NodeContext &ctx) {
  int64_t to = ctx.attrInt("to", 0);
  static const std::map<int64_t, DType> kinds = {
      {1, DType::F32}, {2, DType::U8},   {3, DType::I8},   {5, DType::I16},  {6, DType::I32},
      {7, DType::I64}, {9, DType::Bool}, {10, DType::F16}, {11, DType::F64}, {16, DType::BF16}};
  auto it = kinds.find(to);
  if (it == kinds.end())
    return ctx.unsupported("Cast to ONNX type " + Twine(to));
  return castTo(ctx, toMlirType(it->second, ctx.context()));
}

LogicalResult importCastLike(NodeContext &ctx) {
  FailureOr<RankedTensorType> target = ctx.inputType(1);
  if (failed(target))
    return failure();
  return castTo(ctx, target->getElementType());
}

//===----------------------------------------------------------------------===//
// Decomposed activations
//===----------------------------------------------------------------------===//

/// A small expression builder so decompositions read like their formulas.
struct Expr {
  NodeContext &ctx;
  Type element;
  bool failedAny = false;

  Value check(FailureOr<Value> v) {
    if (failed(v)) {
      failedAny = true;
      return {};
    }
    return *v;
  }
  Value c(double v) { return ctx.scalar(v, element); }
  template <typename OpT> Value bin(Value a, Value b) {
    return failedAny ? Value() : check(ctx.create<OpT>(a, b));
  }
  template <typename OpT> Value un(Value a) {
    return failedAny ? Value() : check(ctx.create<OpT>(a));
  }
  Value select(Value cond, Value a, Value b) {
    return failedAny ? Value() : check(ctx.create<SelectOp>(cond, a, b));
  }
};

using Decomposition = Value (*)(Expr &, Value, NodeContext &);

template <Decomposition decompose> LogicalResult importDecomposed(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  Type element = elementTypeOf(*x);
  if (!llvm::isa<FloatType>(element))
    return ctx.unsupported("non-float input");
  Expr e{ctx, element};
  Value r = decompose(e, *x, ctx);
  if (e.failedAny || !r)
    return failure();
  ctx.setOutput(0, r);
  return success();
}

Value leakyRelu(Expr &e, Value x, NodeContext &ctx) {
  Value alpha = e.c(ctx.attrFloat("alpha", 0.01f));
  return e.select(e.bin<LtOp>(x, e.c(0)), e.bin<MulOp>(x, alpha), x);
}
Value elu(Expr &e, Value x, NodeContext &ctx) {
  Value alpha = e.c(ctx.attrFloat("alpha", 1.0f));
  Value negative = e.bin<MulOp>(alpha, e.bin<SubOp>(e.un<ExpOp>(x), e.c(1)));
  return e.select(e.bin<LtOp>(x, e.c(0)), negative, x);
}
Value selu(Expr &e, Value x, NodeContext &ctx) {
  Value alpha = e.c(ctx.attrFloat("alpha", 1.67326319217681884765625f));
  Value gamma = e.c(ctx.attrFloat("gamma", 1.05070102214813232421875f));
  Value negative = e.bin<SubOp>(e.bin<MulOp>(alpha, e.un<ExpOp>(x)), alpha);
  return e.bin<MulOp>(gamma, e.select(e.bin<LeOp>(x, e.c(0)), negative, x));
}
Value celu(Expr &e, Value x, NodeContext &ctx) {
  double a = ctx.attrFloat("alpha", 1.0f);
  Value alpha = e.c(a);
  Value negative = e.bin<MulOp>(alpha, e.bin<SubOp>(e.un<ExpOp>(e.bin<DivOp>(x, alpha)), e.c(1)));
  return e.bin<AddOp>(e.bin<MaxOp>(x, e.c(0)), e.bin<MinOp>(negative, e.c(0)));
}
Value hardSigmoidOf(Expr &e, Value x, double alpha, double beta) {
  Value linear = e.bin<AddOp>(e.bin<MulOp>(x, e.c(alpha)), e.c(beta));
  return e.bin<MaxOp>(e.bin<MinOp>(linear, e.c(1)), e.c(0));
}
Value hardSigmoid(Expr &e, Value x, NodeContext &ctx) {
  return hardSigmoidOf(e, x, ctx.attrFloat("alpha", 0.2f), ctx.attrFloat("beta", 0.5f));
}
Value hardSwish(Expr &e, Value x, NodeContext &) {
  return e.bin<MulOp>(x, hardSigmoidOf(e, x, 1.0 / 6.0, 0.5));
}
Value softplus(Expr &e, Value x, NodeContext &) {
  return e.un<LogOp>(e.bin<AddOp>(e.un<ExpOp>(x), e.c(1)));
}
Value softsign(Expr &e, Value x, NodeContext &) {
  return e.bin<DivOp>(x, e.bin<AddOp>(e.un<AbsOp>(x), e.c(1)));
}
Value mish(Expr &e, Value x, NodeContext &ctx) {
  return e.bin<MulOp>(x, e.un<TanhOp>(softplus(e, x, ctx)));
}
Value thresholdedRelu(Expr &e, Value x, NodeContext &ctx) {
  Value alpha = e.c(ctx.attrFloat("alpha", 1.0f));
  return e.select(e.bin<GtOp>(x, alpha), x, e.c(0));
}

LogicalResult importPRelu(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0), slope = ctx.input(1);
  if (failed(x) || failed(slope))
    return failure();
  Expr e{ctx, elementTypeOf(*x)};
  Value r = e.select(e.bin<LtOp>(*x, e.c(0)), e.bin<MulOp>(*x, *slope), *x);
  if (e.failedAny)
    return failure();
  ctx.setOutput(0, r);
  return success();
}

LogicalResult importClip(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  Value r = *x;
  Type element = elementTypeOf(*x);
  auto bound = [&](size_t input, const char *attr) -> FailureOr<Value> {
    if (ctx.opset() < 11) {
      if (!ctx.attr(attr))
        return Value();
      return ctx.scalar(ctx.attrFloat(attr, 0), element);
    }
    if (!ctx.hasInput(input))
      return Value();
    return ctx.input(input);
  };
  FailureOr<Value> lo = bound(1, "min"), hi = bound(2, "max");
  if (failed(lo) || failed(hi))
    return failure();
  if (*lo) {
    FailureOr<Value> m = ctx.create<MaxOp>(r, *lo);
    if (failed(m))
      return failure();
    r = *m;
  }
  if (*hi) {
    FailureOr<Value> m = ctx.create<MinOp>(r, *hi);
    if (failed(m))
      return failure();
    r = *m;
  }
  ctx.setOutput(0, r);
  return success();
}

/// IsInf: which infinities count comes from detect_positive/_negative.
LogicalResult importIsInf(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  bool positive = ctx.attrInt("detect_positive", 1) != 0;
  bool negative = ctx.attrInt("detect_negative", 1) != 0;
  return ctx.produce(ctx.create<IsInfOp>(*x, ctx.builder().getBoolAttr(positive),
                                         ctx.builder().getBoolAttr(negative)));
}

} // namespace

void registerElementwiseHandlers(HandlerMap &map) {
  map["Neg"] = importUnary<NegOp>;
  map["Abs"] = importUnary<AbsOp>;
  map["Exp"] = importUnary<ExpOp>;
  map["Log"] = importUnary<LogOp>;
  map["Sqrt"] = importUnary<SqrtOp>;
  map["Reciprocal"] = importUnary<ReciprocalOp>;
  map["Tanh"] = importUnary<TanhOp>;
  map["Sigmoid"] = importUnary<SigmoidOp>;
  map["Erf"] = importUnary<ErfOp>;
  map["Sin"] = importUnary<SinOp>;
  map["Cos"] = importUnary<CosOp>;
  map["Not"] = importUnary<NotOp>;
  map["IsNaN"] = importUnary<IsNanOp>;
  map["IsInf"] = importIsInf;
  map["Relu"] = importUnary<ReluOp>;
  map["Gelu"] = importGelu;
  map["Identity"] = importIdentity;
  map["Dropout"] = importDropout;

  map["Add"] = importBinary<AddOp>;
  map["Sub"] = importBinary<SubOp>;
  map["Mul"] = importBinary<MulOp>;
  map["Div"] = importBinary<DivOp>;
  map["Pow"] = importPow;
  map["Equal"] = importBinary<EqOp>;
  map["Less"] = importBinary<LtOp>;
  map["LessOrEqual"] = importBinary<LeOp>;
  map["Greater"] = importBinary<GtOp>;
  map["GreaterOrEqual"] = importBinary<GeOp>;
  map["And"] = importBinary<AndOp>;
  map["Or"] = importBinary<OrOp>;
  map["Xor"] = importBinary<XorOp>;
  map["Max"] = importVariadic<MaxOp>;
  map["Min"] = importVariadic<MinOp>;
  map["Sum"] = importVariadic<AddOp>;
  map["Mean"] = importVariadic<AddOp>;
  map["Where"] = importWhere;
  map["Cast"] = importCast;
  map["CastLike"] = importCastLike;

  map["LeakyRelu"] = importDecomposed<leakyRelu>;
  map["Elu"] = importDecomposed<elu>;
  map["Selu"] = importDecomposed<selu>;
  map["Celu"] = importDecomposed<celu>;
  map["HardSigmoid"] = importDecomposed<hardSigmoid>;
  map["HardSwish"] = importDecomposed<hardSwish>;
  map["Softplus"] = importDecomposed<softplus>;
  map["Softsign"] = importDecomposed<softsign>;
  map["Mish"] = importDecomposed<mish>;
  map["ThresholdedRelu"] = importDecomposed<thresholdedRelu>;
  map["PRelu"] = importPRelu;
  map["Clip"] = importClip;
}

} // namespace kiln
