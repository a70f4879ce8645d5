//===- ShapeImport.cpp - ONNX shape ops and shape arithmetic --------------===//
//
// Ops that compute or apply shapes. When their inputs are known (compile-time
// size expressions) they fold; a shape that reaches Reshape/Expand/Range as a
// known vector becomes the result type instead of a run-time tensor. Slice,
// Expand, Pad and Tile are SliceImport.cpp.
//
//===----------------------------------------------------------------------===//

#include "NodeContext.h"
#include "kiln/Dialect/Graph/ShapeInference.h"
#include "kiln/Import/TensorProto.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;

namespace kiln {

FailureOr<DimList> knownDims(NodeContext &ctx, size_t i, StringRef what) {
  const KnownTensor *k = ctx.known(i);
  if (!k || k->shape.size() > 1) {
    (void)ctx.unsupported(what + " is computed from tensor data");
    return failure();
  }
  for (Dim d : k->elements)
    if (!d) {
      (void)ctx.unsupported(what + " has an unknown element");
      return failure();
    }
  return k->elements;
}

namespace {

RankedTensorType tensorOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

KnownTensor knownVector(DimList elements, DType dtype = DType::I64) {
  KnownTensor k;
  k.dtype = dtype;
  k.shape = {static_cast<int64_t>(elements.size())};
  k.elements = std::move(elements);
  return k;
}

/// Axes from an attribute (old opsets) or a constant input (new ones).
FailureOr<std::optional<std::vector<int64_t>>> axesOf(NodeContext &ctx, int64_t inputSinceOpset,
                                                      size_t input) {
  if (ctx.opset() < inputSinceOpset)
    return ctx.attrInts("axes");
  if (!ctx.hasInput(input))
    return std::optional<std::vector<int64_t>>();
  FailureOr<std::vector<int64_t>> axes = ctx.constantInts(input, "axes");
  if (failed(axes))
    return failure();
  return std::optional<std::vector<int64_t>>(*axes);
}

LogicalResult normalizeAll(NodeContext &ctx, std::vector<int64_t> &axes, int64_t rank) {
  for (int64_t &a : axes) {
    FailureOr<int64_t> n = ctx.normalizeAxis(a, rank);
    if (failed(n))
      return failure();
    a = *n;
  }
  llvm::sort(axes);
  return success();
}

//===----------------------------------------------------------------------===//
// Shape sources
//===----------------------------------------------------------------------===//

LogicalResult importShape(NodeContext &ctx) {
  DimList dims;
  if (const KnownTensor *k = ctx.known(0)) {
    for (int64_t d : k->shape)
      dims.push_back(dimConst(ctx.context(), d));
  } else {
    FailureOr<RankedTensorType> type = ctx.inputType(0);
    if (failed(type))
      return failure();
    dims = getDims(*type);
  }
  int64_t rank = static_cast<int64_t>(dims.size());
  auto clampIndex = [&](int64_t i) {
    if (i < 0)
      i += rank;
    return std::max<int64_t>(0, std::min(i, rank));
  };
  int64_t start = clampIndex(ctx.attrInt("start", 0));
  int64_t end = clampIndex(ctx.attrInt("end", rank));
  DimList slice;
  for (int64_t i = start; i < end; ++i) {
    if (!dims[i])
      return ctx.unsupported("Shape of a dim whose size depends on data");
    slice.push_back(dims[i]);
  }
  ctx.setKnown(0, knownVector(slice));
  return success();
}

LogicalResult importSize(NodeContext &ctx) {
  FailureOr<RankedTensorType> type = ctx.inputType(0);
  if (failed(type))
    return failure();
  Dim n = dimProduct(getDims(*type), ctx.context());
  if (!n)
    return ctx.unsupported("Size of a tensor whose shape depends on data");
  KnownTensor k;
  k.elements = {n};
  ctx.setKnown(0, k);
  return success();
}

LogicalResult setConstant(NodeContext &ctx, const HostTensor &tensor) {
  ctx.outputs()[0] = constantTensor(ctx.builder(), ctx.loc(), tensor);
  return success();
}

LogicalResult importConstant(NodeContext &ctx) {
  if (const onnx::AttributeProto *a = ctx.attr("value")) {
    absl::StatusOr<HostTensor> tensor = tensorFromProto(a->t(), "");
    if (!tensor.ok())
      return ctx.error(std::string(tensor.status().message()));
    return setConstant(ctx, *tensor);
  }
  if (const onnx::AttributeProto *a = ctx.attr("value_float")) {
    HostTensor t(DType::F32, {});
    t.floats[0] = a->f();
    return setConstant(ctx, t);
  }
  if (const onnx::AttributeProto *a = ctx.attr("value_floats")) {
    HostTensor t(DType::F32, {a->floats_size()});
    for (int i = 0; i < a->floats_size(); ++i)
      t.floats[i] = a->floats(i);
    return setConstant(ctx, t);
  }
  if (const onnx::AttributeProto *a = ctx.attr("value_int")) {
    HostTensor t(DType::I64, {});
    t.ints[0] = a->i();
    return setConstant(ctx, t);
  }
  if (const onnx::AttributeProto *a = ctx.attr("value_ints")) {
    HostTensor t(DType::I64, {a->ints_size()});
    for (int i = 0; i < a->ints_size(); ++i)
      t.ints[i] = a->ints(i);
    return setConstant(ctx, t);
  }
  return ctx.unsupported("Constant without a numeric value attribute");
}

LogicalResult importConstantOfShape(NodeContext &ctx) {
  FailureOr<DimList> dims = knownDims(ctx, 0, "ConstantOfShape shape");
  if (failed(dims))
    return failure();
  HostTensor fill(DType::F32, {1});
  if (const onnx::AttributeProto *a = ctx.attr("value")) {
    absl::StatusOr<HostTensor> t = tensorFromProto(a->t(), "");
    if (!t.ok())
      return ctx.error(std::string(t.status().message()));
    fill = *t;
  }
  if (fill.numel() != 1)
    return ctx.error("value must hold one element");
  Dim count = dimProduct(*dims, ctx.context());
  std::optional<int64_t> n = count ? count.getConstantValue() : std::nullopt;
  if (!fill.isFloat() && dims->size() <= 1 && n && *n <= kMaxKnownElements) {
    KnownTensor known; // A small integer fill stays a compile-time value.
    known.dtype = fill.dtype;
    for (Dim d : *dims)
      known.shape.push_back(*d.getConstantValue());
    known.elements.assign(*n, dimConst(ctx.context(), fill.getInt(0)));
    ctx.setKnown(0, known);
    return success();
  }
  Type element = toMlirType(fill.dtype, ctx.context());
  Value scalar = ctx.scalar(fill.getDouble(0), element);
  RankedTensorType type = makeTensorType(*dims, element);
  ctx.setOutput(0, type.getRank() == 0 ? scalar : ctx.createTyped<ExpandOp>(type, scalar));
  return success();
}

LogicalResult importRange(NodeContext &ctx) {
  const KnownTensor *start = ctx.known(0), *limit = ctx.known(1), *delta = ctx.known(2);
  Type element;
  Dim length, startDim;
  int64_t step = 1;
  double floatStart = 0, floatDelta = 1;
  for (const KnownTensor *k : {start, limit, delta})
    if (k && k->elements.size() != 1)
      return ctx.error("Range bounds must be scalars");
  if (start && limit && delta) {
    std::optional<std::vector<int64_t>> d = delta->constants();
    if (!d || (*d)[0] == 0)
      return ctx.unsupported("Range with a non-constant or zero delta");
    step = (*d)[0];
    Dim span = dimSub(limit->elements[0], start->elements[0]);
    std::optional<int64_t> constantSpan = span ? span.getConstantValue() : std::nullopt;
    // ceil(span / step) elements, without rounding terms that could wrap.
    if (constantSpan)
      length = dimConst(ctx.context(),
                        step > 0 ? (*constantSpan <= 0 ? 0 : (*constantSpan - 1) / step + 1)
                                 : (*constantSpan >= 0 ? 0 : (*constantSpan + 1) / step + 1));
    else if (step == 1)
      length = span; // Assumes limit >= start, a guard for the shape pass.
    else
      return ctx.unsupported("Range over a symbolic span with step != 1");
    startDim = start->elements[0];
    element = toMlirType(start->dtype, ctx.context());
  } else {
    std::optional<double> s = ctx.constantScalar(0), l = ctx.constantScalar(1),
                          d = ctx.constantScalar(2);
    if (!s || !l || !d || *d == 0)
      return ctx.unsupported("Range bounds are computed from tensor data");
    FailureOr<RankedTensorType> type = ctx.inputType(0);
    if (failed(type))
      return failure();
    element = type->getElementType();
    floatStart = *s;
    floatDelta = *d;
    double count = std::ceil((*l - *s) / *d);
    if (std::isnan(count))
      return ctx.error("Range bounds are not numbers");
    if (count >= 9223372036854775808.0) // 2^63
      return ctx.error("Range has " + llvm::formatv("{0:e}", count) +
                       " elements, more than int64 can count");
    length = dimConst(ctx.context(), count > 0 ? static_cast<int64_t>(count) : 0);
  }
  RankedTensorType type = makeTensorType({length}, element);
  Value iota = ctx.createTyped<IotaOp>(type, ctx.builder().getI64IntegerAttr(0));
  FailureOr<Value> r = iota;
  if (startDim) {
    std::optional<int64_t> s = startDim.getConstantValue();
    if (!s)
      return ctx.unsupported("Range with a symbolic start");
    floatStart = static_cast<double>(*s);
    floatDelta = static_cast<double>(step);
  }
  if (floatDelta != 1 && failed(r = ctx.create<MulOp>(*r, ctx.scalar(floatDelta, element))))
    return failure();
  if (floatStart != 0 && failed(r = ctx.create<AddOp>(*r, ctx.scalar(floatStart, element))))
    return failure();
  ctx.setOutput(0, *r);
  return success();
}

//===----------------------------------------------------------------------===//
// Reshaping
//===----------------------------------------------------------------------===//

/// Solves a -1 in a reshape target: count / product(other dims), exactly.
Dim inferMissingDim(Dim count, ArrayRef<Dim> others, MLIRContext *context) {
  Dim product = dimProduct(others, context);
  if (!count || !product)
    return {};
  std::optional<int64_t> c = product.getConstantValue();
  if (c)
    return dimDivExact(count, *c);
  // Divide by a monomial: strip its factors from every term.
  if (product.getTerms().size() != 1)
    return {};
  const SymTerm &divisor = product.getTerms()[0];
  SmallVector<SymTerm> terms;
  for (SymTerm term : count.getTerms()) {
    if (term.coeff % divisor.coeff != 0)
      return {};
    term.coeff /= divisor.coeff;
    SmallVector<StringAttr> factors(term.factors.begin(), term.factors.begin() + term.degree());
    for (unsigned i = 0; i < divisor.degree(); ++i) {
      auto it = llvm::find(factors, divisor.factors[i]);
      if (it == factors.end())
        return {};
      factors.erase(it);
    }
    term.factors = {};
    for (auto [i, f] : llvm::enumerate(factors))
      term.factors[i] = f;
    terms.push_back(term);
  }
  return SymExprAttr::getCanonical(context, terms);
}

LogicalResult importReshape(NodeContext &ctx) {
  FailureOr<DimList> target = knownDims(ctx, 1, "Reshape target shape");
  if (failed(target))
    return failure();
  bool allowZero = ctx.attrInt("allowzero", 0) != 0;
  // Reshaping a known vector (e.g. [n] -> [1, n] or to a scalar) stays known.
  if (const KnownTensor *k = ctx.known(0); k && target->size() <= 1) {
    KnownTensor result = *k;
    result.shape.clear();
    for (Dim d : *target) {
      std::optional<int64_t> c = d.getConstantValue();
      result.shape.push_back(c && *c == -1 ? static_cast<int64_t>(k->elements.size())
                                           : c.value_or(-2));
    }
    if (llvm::all_of(result.shape, [](int64_t d) { return d >= 0; })) {
      int64_t count = 1;
      for (int64_t d : result.shape)
        count *= d;
      if (count != static_cast<int64_t>(k->elements.size()))
        return ctx.error("Reshape of " + Twine(k->elements.size()) + " elements into a shape of " +
                         Twine(count));
      ctx.setKnown(0, result);
      return success();
    }
  }
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  RankedTensorType type = tensorOf(*x);
  DimList in = getDims(type), out;
  int64_t missing = -1;
  for (auto [i, d] : llvm::enumerate(*target)) {
    std::optional<int64_t> c = d.getConstantValue();
    if (c && *c == 0 && !allowZero) {
      if (static_cast<int64_t>(i) >= type.getRank())
        return ctx.error("Reshape copies dim " + Twine(i) + " the input lacks");
      out.push_back(in[i]);
    } else if (c && *c == -1) {
      if (missing >= 0)
        return ctx.error("Reshape target has more than one -1");
      missing = static_cast<int64_t>(i);
      out.push_back(Dim());
    } else {
      out.push_back(d);
    }
  }
  if (missing >= 0) {
    DimList others;
    for (auto [i, d] : llvm::enumerate(out))
      if (static_cast<int64_t>(i) != missing)
        others.push_back(d);
    out[missing] = inferMissingDim(dimProduct(in, ctx.context()), others, ctx.context());
    if (!out[missing])
      return ctx.unsupported("cannot solve the -1 of a Reshape symbolically");
  }
  ctx.setOutput(0, ctx.createTyped<ReshapeOp>(makeTensorType(out, type.getElementType()), *x));
  return success();
}

LogicalResult importFlatten(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  RankedTensorType type = tensorOf(*x);
  int64_t axis = ctx.attrInt("axis", 1);
  if (axis < 0)
    axis += type.getRank();
  if (axis < 0 || axis > type.getRank())
    return ctx.error("axis out of range");
  DimList dims = getDims(type);
  ArrayRef<Dim> all(dims);
  DimList out = {dimProduct(all.take_front(axis), ctx.context()),
                 dimProduct(all.drop_front(axis), ctx.context())};
  ctx.setOutput(0, ctx.createTyped<ReshapeOp>(makeTensorType(out, type.getElementType()), *x));
  return success();
}

LogicalResult importTranspose(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t rank = tensorOf(*x).getRank();
  std::vector<int64_t> perm;
  if (std::optional<std::vector<int64_t>> given = ctx.attrInts("perm")) {
    perm = *given;
  } else {
    for (int64_t i = rank - 1; i >= 0; --i)
      perm.push_back(i);
  }
  return ctx.produce(ctx.create<TransposeOp>(*x, ctx.builder().getDenseI64ArrayAttr(perm)));
}

LogicalResult importSqueeze(NodeContext &ctx) {
  FailureOr<std::optional<std::vector<int64_t>>> axes = axesOf(ctx, 13, 1);
  if (failed(axes))
    return failure();
  if (const KnownTensor *k = ctx.known(0); k && k->shape == std::vector<int64_t>{1}) {
    KnownTensor result = *k;
    result.shape.clear();
    ctx.setKnown(0, result);
    return success();
  }
  FailureOr<RankedTensorType> type = ctx.inputType(0);
  FailureOr<Value> x = ctx.input(0);
  if (failed(type) || failed(x))
    return failure();
  std::vector<int64_t> list;
  if (*axes) {
    list = **axes;
  } else { // No axes: every static size-1 dim.
    for (int64_t i = 0; i < type->getRank(); ++i)
      if (type->getDimSize(i) == 1)
        list.push_back(i);
  }
  if (failed(normalizeAll(ctx, list, type->getRank())))
    return failure();
  return ctx.produce(ctx.create<SqueezeOp>(*x, ctx.builder().getDenseI64ArrayAttr(list)));
}

LogicalResult importUnsqueeze(NodeContext &ctx) {
  FailureOr<std::optional<std::vector<int64_t>>> axes = axesOf(ctx, 13, 1);
  if (failed(axes))
    return failure();
  if (!*axes)
    return ctx.error("Unsqueeze needs axes");
  std::vector<int64_t> list = **axes;
  if (const KnownTensor *k = ctx.known(0); k && k->isScalar() && list.size() == 1) {
    KnownTensor result = *k;
    result.shape = {1};
    ctx.setKnown(0, result);
    return success();
  }
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t rank = tensorOf(*x).getRank() + static_cast<int64_t>(list.size());
  if (failed(normalizeAll(ctx, list, rank)))
    return failure();
  return ctx.produce(ctx.create<UnsqueezeOp>(*x, ctx.builder().getDenseI64ArrayAttr(list)));
}

LogicalResult importConcat(NodeContext &ctx) {
  bool allKnown = ctx.numInputs() > 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i)
    allKnown &= ctx.known(i) && ctx.known(i)->shape.size() == 1;
  if (allKnown) {
    KnownTensor result = *ctx.known(0);
    result.elements.clear();
    for (size_t i = 0; i < ctx.numInputs(); ++i)
      result.elements.append(ctx.known(i)->elements);
    result.shape = {static_cast<int64_t>(result.elements.size())};
    ctx.setKnown(0, result);
    return success();
  }
  SmallVector<Value> inputs;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    FailureOr<Value> v = ctx.input(i);
    if (failed(v))
      return failure();
    inputs.push_back(*v);
  }
  if (inputs.empty())
    return ctx.error("Concat needs inputs");
  FailureOr<int64_t> axis =
      ctx.normalizeAxis(ctx.attrInt("axis", 0), tensorOf(inputs[0]).getRank());
  if (failed(axis))
    return failure();
  return ctx.produce(ctx.create<ConcatOp>(inputs, ctx.builder().getI64IntegerAttr(*axis)));
}

LogicalResult importSplit(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  RankedTensorType type = tensorOf(*x);
  FailureOr<int64_t> axis = ctx.normalizeAxis(ctx.attrInt("axis", 0), type.getRank());
  if (failed(axis))
    return failure();
  int64_t outputs = ctx.node().output_size();
  DimList dims = getDims(type);
  DimList sizes;
  std::optional<std::vector<int64_t>> given =
      ctx.opset() < 13 ? ctx.attrInts("split") : std::nullopt;
  if (ctx.opset() >= 13 && ctx.hasInput(1)) {
    FailureOr<std::vector<int64_t>> s = ctx.constantInts(1, "Split sizes");
    if (failed(s))
      return failure();
    given = *s;
  }
  if (given) {
    if (static_cast<int64_t>(given->size()) != outputs)
      return ctx.error("Split has " + Twine(given->size()) + " sizes for " + Twine(outputs) +
                       " outputs");
    for (int64_t s : *given)
      sizes.push_back(dimConst(ctx.context(), s));
  } else {
    Dim whole = dims[*axis];
    std::optional<int64_t> c = whole ? whole.getConstantValue() : std::nullopt;
    if (c) { // Equal pieces; since opset 18 the last may be smaller.
      int64_t piece = (*c + outputs - 1) / outputs;
      for (int64_t i = 0; i < outputs; ++i)
        sizes.push_back(
            dimConst(ctx.context(), std::max<int64_t>(0, std::min(piece, *c - i * piece))));
    } else {
      Dim piece = dimDivExact(whole, outputs);
      if (!piece)
        return ctx.unsupported("Split of a symbolic dim into uneven pieces");
      sizes.assign(outputs, piece);
    }
  }
  SmallVector<Type> types;
  for (Dim s : sizes) {
    DimList piece = dims;
    piece[*axis] = s;
    types.push_back(makeTensorType(piece, type.getElementType()));
  }
  auto split =
      ctx.builder().create<SplitOp>(ctx.loc(), types, *x, ctx.builder().getI64IntegerAttr(*axis));
  for (int64_t i = 0; i < outputs; ++i)
    ctx.setOutput(i, split.getResult(i));
  return success();
}

} // namespace

void registerShapeHandlers(HandlerMap &map) {
  map["Shape"] = importShape;
  map["Size"] = importSize;
  map["Constant"] = importConstant;
  map["ConstantOfShape"] = importConstantOfShape;
  map["Range"] = importRange;
  map["Reshape"] = importReshape;
  map["Flatten"] = importFlatten;
  map["Transpose"] = importTranspose;
  map["Squeeze"] = importSqueeze;
  map["Unsqueeze"] = importUnsqueeze;
  map["Concat"] = importConcat;
  map["Split"] = importSplit;
}

} // namespace kiln
