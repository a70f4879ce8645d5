//===- NNImport.cpp - ONNX matmul, reductions, norms, losses, gathers -----===//

#include "NodeContext.h"

using namespace mlir;

namespace kiln {
namespace {

Type elementTypeOf(Value v) { return llvm::cast<ShapedType>(v.getType()).getElementType(); }

RankedTensorType tensorOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

DenseI64ArrayAttr i64s(NodeContext &ctx, ArrayRef<int64_t> values) {
  return ctx.builder().getDenseI64ArrayAttr(values);
}

FailureOr<Value> unsqueeze(NodeContext &ctx, Value v, ArrayRef<int64_t> axes) {
  return ctx.create<UnsqueezeOp>(v, i64s(ctx, axes));
}
FailureOr<Value> squeeze(NodeContext &ctx, Value v, ArrayRef<int64_t> axes) {
  return ctx.create<SqueezeOp>(v, i64s(ctx, axes));
}

Value reshapeTo(NodeContext &ctx, Value v, ArrayRef<Dim> dims) {
  RankedTensorType type = makeTensorType(dims, elementTypeOf(v));
  if (type == v.getType())
    return v;
  return ctx.createTyped<ReshapeOp>(type, v);
}

//===----------------------------------------------------------------------===//
// Matmul and Gemm
//===----------------------------------------------------------------------===//

LogicalResult importMatMul(NodeContext &ctx) {
  FailureOr<Value> a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  int64_t ra = tensorOf(*a).getRank(), rb = tensorOf(*b).getRank();
  if (ra == 0 || rb == 0)
    return ctx.error("MatMul operands must have rank >= 1");
  // numpy semantics for vectors: promote to a matrix, then drop that dim.
  if (ra == 1 && failed(a = unsqueeze(ctx, *a, {0})))
    return failure();
  if (rb == 1 && failed(b = unsqueeze(ctx, *b, {1})))
    return failure();
  FailureOr<Value> r = ctx.create<MatmulOp>(*a, *b, false, false);
  if (failed(r))
    return failure();
  int64_t rank = tensorOf(*r).getRank();
  if (rb == 1 && failed(r = squeeze(ctx, *r, {rank - 1})))
    return failure();
  if (ra == 1 && failed(r = squeeze(ctx, *r, {tensorOf(*r).getRank() - 2 + (rb == 1 ? 1 : 0)})))
    return failure();
  ctx.setOutput(0, *r);
  return success();
}

LogicalResult importGemm(NodeContext &ctx) {
  FailureOr<Value> a = ctx.input(0), b = ctx.input(1);
  if (failed(a) || failed(b))
    return failure();
  if (tensorOf(*a).getRank() != 2 || tensorOf(*b).getRank() != 2)
    return ctx.error("Gemm operands must be matrices");
  FailureOr<Value> r =
      ctx.create<MatmulOp>(*a, *b, ctx.attrInt("transA", 0) != 0, ctx.attrInt("transB", 0) != 0);
  if (failed(r))
    return failure();
  Type element = elementTypeOf(*r);
  double alpha = ctx.attrFloat("alpha", 1.0f), beta = ctx.attrFloat("beta", 1.0f);
  if (alpha != 1.0 && failed(r = ctx.create<MulOp>(*r, ctx.scalar(alpha, element))))
    return failure();
  if (ctx.hasInput(2) && beta != 0.0) {
    FailureOr<Value> c = ctx.input(2);
    if (failed(c))
      return failure();
    if (beta != 1.0 && failed(c = ctx.create<MulOp>(*c, ctx.scalar(beta, element))))
      return failure();
    if (failed(r = ctx.create<AddOp>(*r, *c)))
      return failure();
  }
  ctx.setOutput(0, *r);
  return success();
}

//===----------------------------------------------------------------------===//
// Softmax family
//===----------------------------------------------------------------------===//

template <typename OpT> LogicalResult importSoftmax(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  RankedTensorType type = tensorOf(*x);
  int64_t rank = type.getRank();
  FailureOr<int64_t> axis =
      ctx.normalizeAxis(ctx.attrInt("axis", ctx.opset() >= 13 ? -1 : 1), rank);
  if (failed(axis))
    return failure();
  if (ctx.opset() >= 13 || *axis == rank - 1) {
    FailureOr<Value> r = ctx.create<OpT>(*x, ctx.builder().getI64IntegerAttr(*axis));
    if (failed(r))
      return failure();
    ctx.setOutput(0, *r);
    return success();
  }
  // Before opset 13 the input is flattened to 2-D at `axis`.
  DimList dims = getDims(type);
  DimList flat(dims.begin(), dims.begin() + *axis);
  flat.push_back(dimProduct(ArrayRef<Dim>(dims).drop_front(*axis), ctx.context()));
  FailureOr<Value> r =
      ctx.create<OpT>(reshapeTo(ctx, *x, flat), ctx.builder().getI64IntegerAttr(*axis));
  if (failed(r))
    return failure();
  ctx.setOutput(0, reshapeTo(ctx, *r, dims));
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

enum class ReduceKind { Sum, Mean, Max, Min, L1, L2, SumSquare, LogSum, LogSumExp };

template <ReduceKind kind> LogicalResult importReduce(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t rank = tensorOf(*x).getRank();
  // Axes became an input at opset 13 for ReduceSum and at 18 for the rest.
  bool axesAsInput = ctx.opset() >= (kind == ReduceKind::Sum ? 13 : 18);
  std::vector<int64_t> axes;
  if (axesAsInput && ctx.hasInput(1)) {
    FailureOr<std::vector<int64_t>> given = ctx.constantInts(1, "reduction axes");
    if (failed(given))
      return failure();
    axes = *given;
  } else if (!axesAsInput) {
    axes = ctx.attrInts("axes").value_or(std::vector<int64_t>{});
  }
  if (axes.empty()) {
    if (ctx.attrInt("noop_with_empty_axes", 0)) {
      ctx.setOutput(0, *x);
      return success();
    }
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  }
  for (int64_t &a : axes) {
    FailureOr<int64_t> n = ctx.normalizeAxis(a, rank);
    if (failed(n))
      return failure();
    a = *n;
  }
  llvm::sort(axes);
  axes.erase(std::unique(axes.begin(), axes.end()), axes.end());
  bool keep = ctx.attrInt("keepdims", 1) != 0;
  auto axesAttr = i64s(ctx, axes);
  Value v = *x;
  FailureOr<Value> r;
  switch (kind) {
  case ReduceKind::Sum: r = ctx.create<ReduceSumOp>(v, axesAttr, keep); break;
  case ReduceKind::Mean: r = ctx.create<ReduceMeanOp>(v, axesAttr, keep); break;
  case ReduceKind::Max: r = ctx.create<ReduceMaxOp>(v, axesAttr, keep); break;
  case ReduceKind::Min: {
    FailureOr<Value> neg = ctx.create<NegOp>(v);
    if (failed(neg) || failed(r = ctx.create<ReduceMaxOp>(*neg, axesAttr, keep)))
      return failure();
    r = ctx.create<NegOp>(*r);
    break;
  }
  case ReduceKind::L1: {
    FailureOr<Value> a = ctx.create<AbsOp>(v);
    if (failed(a))
      return failure();
    r = ctx.create<ReduceSumOp>(*a, axesAttr, keep);
    break;
  }
  case ReduceKind::L2:
  case ReduceKind::SumSquare: {
    FailureOr<Value> sq = ctx.create<MulOp>(v, v);
    if (failed(sq) || failed(r = ctx.create<ReduceSumOp>(*sq, axesAttr, keep)))
      return failure();
    if (kind == ReduceKind::L2)
      r = ctx.create<SqrtOp>(*r);
    break;
  }
  case ReduceKind::LogSum:
  case ReduceKind::LogSumExp: {
    FailureOr<Value> in =
        kind == ReduceKind::LogSumExp ? ctx.create<ExpOp>(v) : FailureOr<Value>(v);
    if (failed(in) || failed(r = ctx.create<ReduceSumOp>(*in, axesAttr, keep)))
      return failure();
    r = ctx.create<LogOp>(*r);
    break;
  }
  }
  if (failed(r))
    return failure();
  ctx.setOutput(0, *r);
  return success();
}

//===----------------------------------------------------------------------===//
// Norms and losses
//===----------------------------------------------------------------------===//

/// LayerNormalization's optional Mean and InvStdDev outputs, over the
/// normalized dims with those dims kept as size 1.
LogicalResult layerNormStatistics(NodeContext &ctx, Value x, int64_t axis, double epsilon) {
  int64_t rank = tensorOf(x).getRank();
  SmallVector<int64_t> axes;
  for (int64_t i = axis; i < rank; ++i)
    axes.push_back(i);
  DenseI64ArrayAttr axesAttr = i64s(ctx, axes);
  FailureOr<Value> mean = ctx.create<ReduceMeanOp>(x, axesAttr, true);
  if (failed(mean))
    return failure();
  FailureOr<Value> centered = ctx.create<SubOp>(x, *mean);
  if (failed(centered))
    return failure();
  FailureOr<Value> square = ctx.create<MulOp>(*centered, *centered);
  if (failed(square))
    return failure();
  FailureOr<Value> variance = ctx.create<ReduceMeanOp>(*square, axesAttr, true);
  if (failed(variance))
    return failure();
  FailureOr<Value> shifted = ctx.create<AddOp>(*variance, ctx.scalar(epsilon, elementTypeOf(x)));
  if (failed(shifted))
    return failure();
  FailureOr<Value> invStd = ctx.create<RsqrtOp>(*shifted);
  if (failed(invStd))
    return failure();
  ctx.setOutput(1, *mean);
  ctx.setOutput(2, *invStd);
  return success();
}

LogicalResult importLayerNorm(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0), scale = ctx.input(1);
  if (failed(x) || failed(scale))
    return failure();
  RankedTensorType type = tensorOf(*x);
  FailureOr<int64_t> axis = ctx.normalizeAxis(ctx.attrInt("axis", -1), type.getRank());
  if (failed(axis))
    return failure();
  double epsilon = ctx.attrFloat("epsilon", 1e-5f);
  // ONNX lets scale/bias broadcast; the op wants exactly the normalized dims.
  DimList dims = getDims(type);
  DimList normalized(dims.begin() + *axis, dims.end());
  auto fit = [&](Value p) -> Value {
    RankedTensorType want = makeTensorType(normalized, elementTypeOf(p));
    if (p.getType() == want)
      return p;
    if (tensorOf(p).getRank() > want.getRank()) // Leading 1s only.
      p = ctx.createTyped<ReshapeOp>(
          makeTensorType(ArrayRef<Dim>(getDims(tensorOf(p))).take_back(want.getRank()),
                         elementTypeOf(p)),
          p);
    return p.getType() == want ? p : ctx.createTyped<ExpandOp>(want, p);
  };
  Value bias;
  if (ctx.hasInput(2)) {
    FailureOr<Value> b = ctx.input(2);
    if (failed(b))
      return failure();
    bias = fit(*b);
  }
  FailureOr<Value> r =
      ctx.create<LayerNormOp>(*x, fit(*scale), bias, ctx.builder().getI64IntegerAttr(*axis),
                              ctx.builder().getF64FloatAttr(epsilon));
  if (failed(r))
    return failure();
  ctx.setOutput(0, *r);
  bool statistics = false;
  for (int i = 1; i < ctx.node().output_size(); ++i)
    statistics |= !ctx.node().output(i).empty();
  if (statistics)
    return layerNormStatistics(ctx, *x, *axis, epsilon);
  return success();
}

/// SoftmaxCrossEntropyLoss with class weights, spelled out:
/// loss[n] = -w[y[n]] * log_softmax(scores)[n, y[n]] over counted rows;
/// mean divides by the summed weights of counted rows (the ONNX rule).
FailureOr<Value> weightedCrossEntropy(NodeContext &ctx, Value scores, Value labels, Value weights,
                                      std::optional<int64_t> ignore, Reduction reduction) {
  Type element = elementTypeOf(scores);
  Type labelType = elementTypeOf(labels);
  FailureOr<Value> logProb = ctx.create<LogSoftmaxOp>(scores, ctx.builder().getI64IntegerAttr(1));
  if (failed(logProb))
    return failure();
  Value safeLabels = labels, counted;
  if (ignore) {
    FailureOr<Value> keep =
        ctx.create<NeOp>(labels, ctx.scalar(static_cast<double>(*ignore), labelType));
    if (failed(keep))
      return failure();
    counted = *keep;
    FailureOr<Value> safe = ctx.create<SelectOp>(*keep, labels, ctx.scalar(0, labelType));
    if (failed(safe))
      return failure();
    safeLabels = *safe;
  }
  FailureOr<Value> index = unsqueeze(ctx, safeLabels, {1});
  if (failed(index))
    return failure();
  FailureOr<Value> picked =
      ctx.create<GatherElementsOp>(*logProb, *index, ctx.builder().getI64IntegerAttr(1));
  if (failed(picked) || failed(picked = squeeze(ctx, *picked, {1})))
    return failure();
  FailureOr<Value> w =
      ctx.create<GatherOp>(weights, safeLabels, ctx.builder().getI64IntegerAttr(0));
  if (failed(w))
    return failure();
  if (counted && failed(w = ctx.create<SelectOp>(counted, *w, ctx.scalar(0, element))))
    return failure();
  FailureOr<Value> loss = ctx.create<MulOp>(*picked, *w);
  if (failed(loss) || failed(loss = ctx.create<NegOp>(*loss)))
    return failure();
  if (reduction == Reduction::none)
    return loss;
  int64_t rank = tensorOf(*loss).getRank();
  SmallVector<int64_t> all;
  for (int64_t i = 0; i < rank; ++i)
    all.push_back(i);
  FailureOr<Value> total = ctx.create<ReduceSumOp>(*loss, i64s(ctx, all), false);
  if (failed(total) || reduction == Reduction::sum)
    return total;
  FailureOr<Value> weightSum = ctx.create<ReduceSumOp>(*w, i64s(ctx, all), false);
  if (failed(weightSum))
    return failure();
  return ctx.create<DivOp>(*total, *weightSum);
}

LogicalResult fusedCrossEntropy(NodeContext &ctx, Value scores, Value labels, Reduction reduction);

LogicalResult importSoftmaxCrossEntropy(NodeContext &ctx) {
  FailureOr<Value> scores = ctx.input(0), labels = ctx.input(1);
  if (failed(scores) || failed(labels))
    return failure();
  std::string reductionName = ctx.attrString("reduction", "mean");
  Reduction reduction;
  if (reductionName == "mean")
    reduction = Reduction::mean;
  else if (reductionName == "sum")
    reduction = Reduction::sum;
  else if (reductionName == "none")
    reduction = Reduction::none;
  else
    return ctx.error("unknown reduction '" + reductionName + "'");
  RankedTensorType type = tensorOf(*scores);
  if (type.getRank() < 2)
    return ctx.error("scores must have rank >= 2 ([N, C, ...])");
  if (ctx.hasInput(2)) {
    FailureOr<Value> weights = ctx.input(2);
    if (failed(weights))
      return failure();
    std::optional<int64_t> ignore;
    if (ctx.attr("ignore_index"))
      ignore = ctx.attrInt("ignore_index", 0);
    FailureOr<Value> loss =
        weightedCrossEntropy(ctx, *scores, *labels, *weights, ignore, reduction);
    if (failed(loss))
      return failure();
    ctx.setOutput(0, *loss);
  } else if (failed(fusedCrossEntropy(ctx, *scores, *labels, reduction))) {
    return failure();
  }
  if (ctx.node().output_size() > 1 && !ctx.node().output(1).empty()) {
    FailureOr<Value> logProb =
        ctx.create<LogSoftmaxOp>(*scores, ctx.builder().getI64IntegerAttr(1));
    if (failed(logProb))
      return failure();
    ctx.setOutput(1, *logProb);
  }
  return success();
}

/// Without class weights the loss is the fused op on [rows, classes].
LogicalResult fusedCrossEntropy(NodeContext &ctx, Value scores, Value labels, Reduction reduction) {
  RankedTensorType type = tensorOf(scores);
  // [N, C, d1...] -> [N*d1*..., C] with classes last; labels to [N*d1*...].
  DimList dims = getDims(type);
  Value logits = scores;
  DimList spatial;
  if (type.getRank() > 2) {
    SmallVector<int64_t> perm = {0};
    for (int64_t i = 2; i < type.getRank(); ++i)
      perm.push_back(i);
    perm.push_back(1);
    FailureOr<Value> t = ctx.create<TransposeOp>(logits, i64s(ctx, perm));
    if (failed(t))
      return failure();
    spatial.assign(dims.begin() + 2, dims.end());
    DimList rows = {dims[0]};
    rows.append(spatial);
    logits = reshapeTo(ctx, *t, {dimProduct(rows, ctx.context()), dims[1]});
  }
  DimList rowDims = getDims(tensorOf(labels));
  Dim rowCount = dimProduct(rowDims, ctx.context());
  Value flatLabels = reshapeTo(ctx, labels, {rowCount});
  // No ignore_index means every label counts: use one no label can equal.
  int64_t ignore = ctx.attr("ignore_index") ? ctx.attrInt("ignore_index", -100)
                                            : std::numeric_limits<int64_t>::min();
  FailureOr<Value> loss =
      ctx.create<CrossEntropyOp>(logits, flatLabels, ctx.builder().getI64IntegerAttr(ignore),
                                 ReductionAttr::get(ctx.context(), reduction));
  if (failed(loss))
    return failure();
  Value result = *loss;
  if (reduction == Reduction::none)
    result = reshapeTo(ctx, result, rowDims);
  ctx.setOutput(0, result);
  return success();
}

//===----------------------------------------------------------------------===//
// Scans, masks, gathers
//===----------------------------------------------------------------------===//

LogicalResult importCumSum(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  FailureOr<int64_t> axis = ctx.constantInt(1, "CumSum axis");
  if (failed(x) || failed(axis))
    return failure();
  FailureOr<int64_t> a = ctx.normalizeAxis(*axis, tensorOf(*x).getRank());
  if (failed(a))
    return failure();
  return ctx.produce(ctx.create<CumsumOp>(*x, *a, ctx.attrInt("exclusive", 0) != 0,
                                          ctx.attrInt("reverse", 0) != 0));
}

LogicalResult importTrilu(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t k = 0;
  if (ctx.hasInput(1)) {
    FailureOr<int64_t> given = ctx.constantInt(1, "Trilu k");
    if (failed(given))
      return failure();
    k = *given;
  }
  return ctx.produce(ctx.create<TriluOp>(*x, k, ctx.attrInt("upper", 1) != 0));
}

LogicalResult importGather(NodeContext &ctx) {
  int64_t axisAttr = ctx.attrInt("axis", 0);
  // Shape -> Gather: pick elements of a known vector at compile time.
  const KnownTensor *data = ctx.known(0), *indices = ctx.known(1);
  if (data && indices && data->shape.size() == 1) {
    std::optional<std::vector<int64_t>> idx = indices->constants();
    if (idx) {
      KnownTensor result;
      result.dtype = data->dtype;
      result.shape = indices->shape;
      int64_t n = static_cast<int64_t>(data->elements.size());
      for (int64_t i : *idx) {
        int64_t j = i < 0 ? i + n : i;
        if (j < 0 || j >= n)
          return ctx.error("Gather index " + Twine(i) + " out of range for " + Twine(n) +
                           " elements");
        result.elements.push_back(data->elements[j]);
      }
      ctx.setKnown(0, result);
      return success();
    }
  }
  FailureOr<Value> d = ctx.input(0), i = ctx.input(1);
  if (failed(d) || failed(i))
    return failure();
  FailureOr<int64_t> axis = ctx.normalizeAxis(axisAttr, tensorOf(*d).getRank());
  if (failed(axis))
    return failure();
  // Constant indices into a static dim are checked here: compiled kernels
  // do not bounds-check them.
  RankedTensorType dataType = tensorOf(*d);
  if (!dataType.isDynamicDim(*axis)) {
    int64_t n = dataType.getDimSize(*axis);
    std::vector<int64_t> values;
    if (indices) {
      if (std::optional<std::vector<int64_t>> c = indices->constants())
        values = *c;
    } else if (auto constant = i->getDefiningOp<ConstantOp>()) {
      if (auto dense = llvm::dyn_cast<DenseIntElementsAttr>(constant.getValue()))
        for (const APInt &v : dense)
          values.push_back(v.getSExtValue());
    }
    for (int64_t index : values)
      if (index < -n || index >= n)
        return ctx.error("Gather index " + Twine(index) + " is out of range for dim " +
                         Twine(*axis) + " of size " + Twine(n));
  }
  return ctx.produce(ctx.create<GatherOp>(*d, *i, ctx.builder().getI64IntegerAttr(*axis)));
}

LogicalResult importGatherElements(NodeContext &ctx) {
  FailureOr<Value> d = ctx.input(0), i = ctx.input(1);
  if (failed(d) || failed(i))
    return failure();
  FailureOr<int64_t> axis = ctx.normalizeAxis(ctx.attrInt("axis", 0), tensorOf(*d).getRank());
  if (failed(axis))
    return failure();
  return ctx.produce(ctx.create<GatherElementsOp>(*d, *i, ctx.builder().getI64IntegerAttr(*axis)));
}

LogicalResult importGatherND(NodeContext &ctx) {
  FailureOr<Value> d = ctx.input(0), i = ctx.input(1);
  if (failed(d) || failed(i))
    return failure();
  return ctx.produce(ctx.create<GatherNdOp>(
      *d, *i, ctx.builder().getI64IntegerAttr(ctx.attrInt("batch_dims", 0))));
}

} // namespace

void registerNNHandlers(HandlerMap &map) {
  map["MatMul"] = importMatMul;
  map["Gemm"] = importGemm;
  map["Softmax"] = importSoftmax<SoftmaxOp>;
  map["LogSoftmax"] = importSoftmax<LogSoftmaxOp>;
  map["ReduceSum"] = importReduce<ReduceKind::Sum>;
  map["ReduceMean"] = importReduce<ReduceKind::Mean>;
  map["ReduceMax"] = importReduce<ReduceKind::Max>;
  map["ReduceMin"] = importReduce<ReduceKind::Min>;
  map["ReduceL1"] = importReduce<ReduceKind::L1>;
  map["ReduceL2"] = importReduce<ReduceKind::L2>;
  map["ReduceSumSquare"] = importReduce<ReduceKind::SumSquare>;
  map["ReduceLogSum"] = importReduce<ReduceKind::LogSum>;
  map["ReduceLogSumExp"] = importReduce<ReduceKind::LogSumExp>;
  map["LayerNormalization"] = importLayerNorm;
  map["SoftmaxCrossEntropyLoss"] = importSoftmaxCrossEntropy;
  map["CumSum"] = importCumSum;
  map["Trilu"] = importTrilu;
  map["Gather"] = importGather;
  map["GatherElements"] = importGatherElements;
  map["GatherND"] = importGatherND;
}

} // namespace kiln
