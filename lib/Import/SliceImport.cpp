//===- SliceImport.cpp - ONNX Slice, Expand, Pad and Tile -----------------===//
//
// Ops that take a region of their input or repeat it, with the region's
// bounds from compile-time size expressions (ShapeImport.cpp has the other
// shape ops).
//
//===----------------------------------------------------------------------===//

#include "NodeContext.h"
#include "kiln/Dialect/Graph/ShapeInference.h"

#include <limits>

using namespace mlir;

namespace kiln {
namespace {

RankedTensorType tensorOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

//===----------------------------------------------------------------------===//
// Slice
//===----------------------------------------------------------------------===//

/// An end at or past this means "to the end" (exporters write INT64_MAX,
/// older ones INT32_MAX).
constexpr int64_t kToEnd = std::numeric_limits<int32_t>::max();

struct SliceRange {
  Dim start;
  Dim length;
  int64_t step;
};

/// ONNX Slice on one dim. With everything constant it clamps like ONNX;
/// with a symbolic size or bound it assumes the bounds are in range (guards
/// for the dynamic-shape pass) and does not clamp.
FailureOr<SliceRange> sliceRange(NodeContext &ctx, Dim size, Dim start, Dim end, int64_t step) {
  MLIRContext *c = ctx.context();
  std::optional<int64_t> n = size ? size.getConstantValue() : std::nullopt;
  std::optional<int64_t> s = start.getConstantValue(), e = end.getConstantValue();
  if (n && s && e) {
    int64_t first = *s < 0 ? *s + *n : *s, last = *e;
    if (last < 0 && last > std::numeric_limits<int64_t>::min() / 2)
      last += *n;
    int64_t length;
    if (step > 0) {
      first = std::clamp<int64_t>(first, 0, *n);
      last = std::clamp<int64_t>(last, 0, *n);
      length = last > first ? (last - first + step - 1) / step : 0;
    } else {
      first = std::clamp<int64_t>(first, 0, *n - 1);
      last = std::clamp<int64_t>(last, -1, *n - 1);
      length = first > last ? (first - last - step - 1) / -step : 0;
    }
    return SliceRange{dimConst(c, length == 0 ? 0 : first), dimConst(c, length), step};
  }
  if (step != 1 || !size) {
    (void)ctx.unsupported("Slice of a symbolic dim with step != 1");
    return failure();
  }
  Dim first = s && *s < 0 ? dimAdd(size, start) : start;
  Dim last = e && *e >= kToEnd ? size : (e && *e < 0 ? dimAdd(size, end) : end);
  return SliceRange{first, dimSub(last, first), step};
}

LogicalResult importSlice(NodeContext &ctx) {
  DimList starts, ends;
  std::vector<int64_t> axes, steps;
  if (ctx.opset() < 10) {
    for (int64_t v : ctx.attrInts("starts").value_or(std::vector<int64_t>{}))
      starts.push_back(dimConst(ctx.context(), v));
    for (int64_t v : ctx.attrInts("ends").value_or(std::vector<int64_t>{}))
      ends.push_back(dimConst(ctx.context(), v));
    axes = ctx.attrInts("axes").value_or(std::vector<int64_t>{});
  } else {
    FailureOr<DimList> s = knownDims(ctx, 1, "Slice starts");
    FailureOr<DimList> e = knownDims(ctx, 2, "Slice ends");
    if (failed(s) || failed(e))
      return failure();
    starts = *s;
    ends = *e;
    if (ctx.hasInput(3)) {
      FailureOr<std::vector<int64_t>> a = ctx.constantInts(3, "Slice axes");
      if (failed(a))
        return failure();
      axes = *a;
    }
    if (ctx.hasInput(4)) {
      FailureOr<std::vector<int64_t>> st = ctx.constantInts(4, "Slice steps");
      if (failed(st))
        return failure();
      steps = *st;
    }
  }
  if (starts.size() != ends.size())
    return ctx.error("Slice starts and ends differ in length");
  if (starts.empty()) { // Slicing no axis keeps everything.
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
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<int64_t>(i));
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size())
    return ctx.error("Slice axes/steps do not match starts");

  // Slicing a known vector (part of a shape) folds.
  if (const KnownTensor *k = ctx.known(0); k && k->shape.size() == 1) {
    int64_t n = static_cast<int64_t>(k->elements.size());
    FailureOr<SliceRange> r =
        sliceRange(ctx, dimConst(ctx.context(), n), starts[0], ends[0], steps[0]);
    if (succeeded(r) && r->start.getConstantValue() && r->length.getConstantValue()) {
      KnownTensor result = *k;
      result.elements.clear();
      for (int64_t i = 0; i < *r->length.getConstantValue(); ++i)
        result.elements.push_back(k->elements[*r->start.getConstantValue() + i * r->step]);
      result.shape = {static_cast<int64_t>(result.elements.size())};
      ctx.setKnown(0, result);
      return success();
    }
  }

  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  RankedTensorType type = tensorOf(*x);
  DimList dims = getDims(type);
  DimList first(type.getRank(), dimConst(ctx.context(), 0));
  DimList lengths = dims;
  SmallVector<int64_t> strides(type.getRank(), 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    FailureOr<int64_t> axis = ctx.normalizeAxis(axes[i], type.getRank());
    if (failed(axis))
      return failure();
    if (steps[i] == 0)
      return ctx.error("Slice step is 0");
    FailureOr<SliceRange> r = sliceRange(ctx, dims[*axis], starts[i], ends[i], steps[i]);
    if (failed(r))
      return failure();
    first[*axis] = r->start;
    lengths[*axis] = r->length;
    strides[*axis] = r->step;
  }
  RankedTensorType resultType = makeTensorType(lengths, type.getElementType());
  ctx.setOutput(0, ctx.createTyped<SliceOp>(resultType, *x, DimsAttr::get(ctx.context(), first),
                                            ctx.builder().getDenseI64ArrayAttr(strides)));
  return success();
}

//===----------------------------------------------------------------------===//
// Broadcast, pad, tile
//===----------------------------------------------------------------------===//

LogicalResult importExpand(NodeContext &ctx) {
  FailureOr<DimList> shape = knownDims(ctx, 1, "Expand shape");
  FailureOr<Value> x = ctx.input(0);
  if (failed(shape) || failed(x))
    return failure();
  RankedTensorType type = tensorOf(*x);
  // Expand broadcasts both ways: a target dim of 1 keeps the input's.
  FailureOr<DimList> dims =
      broadcastShapes(std::nullopt, {type, makeTensorType(*shape, type.getElementType())});
  if (failed(dims))
    return ctx.error("Expand target " +
                     Twine(shapeToString(makeTensorType(*shape, type.getElementType()))) +
                     " does not broadcast with input " + shapeToString(type));
  // Two different symbols meet: the target's names the result.
  size_t offset = dims->size() - shape->size();
  for (size_t i = offset; i < dims->size(); ++i)
    if (!(*dims)[i])
      (*dims)[i] = (*shape)[i - offset];
  RankedTensorType result = makeTensorType(*dims, type.getElementType());
  ctx.setOutput(0, result == type ? *x : ctx.createTyped<ExpandOp>(result, *x));
  return success();
}

/// x[start + i*step] for i < length along `dim`, other dims whole.
Value sliceAlong(NodeContext &ctx, Value x, int64_t dim, int64_t start, int64_t length,
                 int64_t step) {
  RankedTensorType type = tensorOf(x);
  DimList starts(type.getRank(), dimConst(ctx.context(), 0));
  starts[dim] = dimConst(ctx.context(), start);
  SmallVector<int64_t> steps(type.getRank(), 1);
  steps[dim] = step;
  DimList dims = getDims(type);
  dims[dim] = dimConst(ctx.context(), length);
  return ctx.createTyped<SliceOp>(makeTensorType(dims, type.getElementType()), x,
                                  DimsAttr::get(ctx.context(), starts),
                                  ctx.builder().getDenseI64ArrayAttr(steps));
}

/// Pad modes that copy input values (edge, reflect, wrap), one dim at a time
/// as slices concatenated around the input.
FailureOr<Value> padByCopying(NodeContext &ctx, Value x, StringRef mode, ArrayRef<int64_t> pads) {
  int64_t rank = tensorOf(x).getRank();
  for (int64_t d = 0; d < rank; ++d) {
    int64_t low = pads[d], high = pads[rank + d];
    if (low == 0 && high == 0)
      continue;
    RankedTensorType type = tensorOf(x);
    if (type.isDynamicDim(d)) {
      (void)ctx.unsupported("Pad mode '" + mode + "' of a symbolic dim");
      return failure();
    }
    int64_t n = type.getDimSize(d);
    SmallVector<Value> pieces;
    auto edge = [&](int64_t index, int64_t count) {
      Value one = sliceAlong(ctx, x, d, index, 1, 1);
      DimList dims = getDims(tensorOf(one));
      dims[d] = dimConst(ctx.context(), count);
      return ctx.createTyped<ExpandOp>(makeTensorType(dims, type.getElementType()), one);
    };
    if (mode == "reflect" && (low >= n || high >= n)) {
      (void)ctx.error("reflect pad larger than the dim minus one");
      return failure();
    }
    if (mode == "wrap" && (low > n || high > n)) {
      (void)ctx.unsupported("wrap pad larger than the dim");
      return failure();
    }
    if (low > 0)
      pieces.push_back(mode == "edge"      ? edge(0, low)
                       : mode == "reflect" ? sliceAlong(ctx, x, d, low, low, -1)
                                           : sliceAlong(ctx, x, d, n - low, low, 1));
    pieces.push_back(x);
    if (high > 0)
      pieces.push_back(mode == "edge"      ? edge(n - 1, high)
                       : mode == "reflect" ? sliceAlong(ctx, x, d, n - 2, high, -1)
                                           : sliceAlong(ctx, x, d, 0, high, 1));
    FailureOr<Value> joined = ctx.create<ConcatOp>(pieces, ctx.builder().getI64IntegerAttr(d));
    if (failed(joined))
      return failure();
    x = *joined;
  }
  return x;
}

LogicalResult importPad(NodeContext &ctx) {
  std::string mode = ctx.attrString("mode", "constant");
  if (mode != "constant" && mode != "edge" && mode != "reflect" && mode != "wrap")
    return ctx.error("unknown Pad mode '" + mode + "'");
  FailureOr<Value> x = ctx.input(0);
  if (failed(x))
    return failure();
  int64_t rank = tensorOf(*x).getRank();
  std::vector<int64_t> pads;
  double value = 0;
  if (ctx.opset() < 11) {
    pads = ctx.attrInts("pads").value_or(std::vector<int64_t>{});
    value = ctx.attrFloat("value", 0);
  } else {
    FailureOr<std::vector<int64_t>> p = ctx.constantInts(1, "Pad pads");
    if (failed(p))
      return failure();
    pads = *p;
    if (ctx.hasInput(2)) {
      std::optional<double> v = ctx.constantScalar(2);
      if (!v)
        return ctx.unsupported("Pad value computed from tensor data");
      value = *v;
    }
  }
  if (ctx.hasInput(3)) { // Since opset 18 pads may cover only some axes.
    FailureOr<std::vector<int64_t>> axes = ctx.constantInts(3, "Pad axes");
    if (failed(axes))
      return failure();
    std::vector<int64_t> full(2 * rank, 0);
    size_t n = axes->size();
    if (pads.size() != 2 * n)
      return ctx.error("Pad has " + Twine(pads.size()) + " pads for " + Twine(n) + " axes");
    for (size_t i = 0; i < n; ++i) {
      FailureOr<int64_t> a = ctx.normalizeAxis((*axes)[i], rank);
      if (failed(a))
        return failure();
      full[*a] = pads[i];
      full[rank + *a] = pads[n + i];
    }
    pads = full;
  }
  if (static_cast<int64_t>(pads.size()) != 2 * rank)
    return ctx.error("Pad needs 2 * rank pads");
  if (llvm::any_of(pads, [](int64_t p) { return p < 0; }))
    return ctx.unsupported("negative pads (cropping)");
  if (mode != "constant") {
    FailureOr<Value> r = padByCopying(ctx, *x, mode, pads);
    if (failed(r))
      return failure();
    ctx.setOutput(0, *r);
    return success();
  }
  return ctx.produce(ctx.create<PadOp>(*x, ctx.builder().getDenseI64ArrayAttr(pads),
                                       ctx.builder().getF64FloatAttr(value)));
}

LogicalResult importTile(NodeContext &ctx) {
  FailureOr<Value> x = ctx.input(0);
  FailureOr<std::vector<int64_t>> repeats = ctx.constantInts(1, "Tile repeats");
  if (failed(x) || failed(repeats))
    return failure();
  RankedTensorType type = tensorOf(*x);
  if (static_cast<int64_t>(repeats->size()) != type.getRank())
    return ctx.error("Tile needs one repeat per dim");
  // [d0, d1] -> [1, d0, 1, d1] -> expand [r0, d0, r1, d1] -> [r0*d0, r1*d1].
  DimList dims = getDims(type), spread, expanded, result;
  for (auto [d, r] : llvm::zip(dims, *repeats)) {
    Dim reps = dimConst(ctx.context(), r);
    spread.append({dimConst(ctx.context(), 1), d});
    expanded.append({reps, d});
    result.push_back(dimMul(reps, d));
  }
  Type element = type.getElementType();
  Value v = ctx.createTyped<ReshapeOp>(makeTensorType(spread, element), *x);
  v = ctx.createTyped<ExpandOp>(makeTensorType(expanded, element), v);
  v = ctx.createTyped<ReshapeOp>(makeTensorType(result, element), v);
  ctx.setOutput(0, v);
  return success();
}

} // namespace

void registerSliceHandlers(HandlerMap &map) {
  map["Slice"] = importSlice;
  map["Expand"] = importExpand;
  map["Pad"] = importPad;
  map["Tile"] = importTile;
}

} // namespace kiln
