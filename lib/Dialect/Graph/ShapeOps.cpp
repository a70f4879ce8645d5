//===- ShapeOps.cpp - Reshape, transpose, slice, concat and friends -------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/ShapeInference.h"

using namespace mlir;
using namespace kiln;

static RankedTensorType asTensor(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

//===----------------------------------------------------------------------===//
// reshape / expand
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("changes the element type");
  MLIRContext *context = getContext();
  Dim inCount = dimProduct(getDims(in), context);
  Dim outCount = dimProduct(getDims(out), context);
  if (!dimsMayBeEqual(inCount, outCount))
    return emitOpError("changes the element count from ")
           << dimToString(inCount) << " to " << dimToString(outCount);
  return success();
}

OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

LogicalResult ExpandOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  if (in.getElementType() != out.getElementType())
    return emitOpError("changes the element type");
  if (in.getRank() > out.getRank())
    return emitOpError("cannot lower the rank from ") << in.getRank() << " to " << out.getRank();
  DimList inDims = getDims(in), outDims = getDims(out);
  int64_t offset = out.getRank() - in.getRank();
  Dim one = dimConst(getContext(), 1);
  for (int64_t i = 0; i < in.getRank(); ++i) {
    // A symbolic input dim may be 1 at run time and then broadcasts to any
    // size, so only a provable mismatch is an error.
    if (dimsMayBeEqual(inDims[i], one) || dimsMayBeEqual(inDims[i], outDims[offset + i]))
      continue;
    return emitOpError("cannot broadcast dim ") << i << " of size " << dimToString(inDims[i])
                                                << " to " << dimToString(outDims[offset + i]);
  }
  return success();
}

OpFoldResult ExpandOp::fold(FoldAdaptor) {
  if (getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

//===----------------------------------------------------------------------===//
// transpose
//===----------------------------------------------------------------------===//

LogicalResult TransposeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &results) {
  RankedTensorType input = asTensor(adaptor.getInput());
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if (static_cast<int64_t>(perm.size()) != input.getRank())
    return emitOptionalError(loc, "transpose perm has ", perm.size(), " entries for rank ",
                             input.getRank());
  SmallVector<bool> seen(perm.size(), false);
  DimList in = getDims(input), out;
  for (int64_t p : perm) {
    if (p < 0 || p >= input.getRank() || seen[p])
      return emitOptionalError(loc, "transpose perm is not a permutation of [0, ", input.getRank(),
                               ")");
    seen[p] = true;
    out.push_back(in[p]);
  }
  results.push_back(makeTensorType(out, input.getElementType()));
  return success();
}

OpFoldResult TransposeOp::fold(FoldAdaptor) {
  // The declared result may know dims the input does not; replacing it with
  // the input would then change the value's type.
  if (getInput().getType() != getResult().getType())
    return {};
  for (auto [i, p] : llvm::enumerate(getPerm()))
    if (static_cast<int64_t>(i) != p)
      return {};
  return getInput();
}

//===----------------------------------------------------------------------===//
// slice
//===----------------------------------------------------------------------===//

LogicalResult SliceOp::verify() {
  RankedTensorType in = getInput().getType(), out = getResult().getType();
  int64_t rank = in.getRank();
  ArrayRef<SymExprAttr> starts = getStarts().getDims();
  ArrayRef<int64_t> steps = getSteps();
  if (out.getRank() != rank || out.getElementType() != in.getElementType())
    return emitOpError("result must have the input's rank and element type");
  if (static_cast<int64_t>(starts.size()) != rank || static_cast<int64_t>(steps.size()) != rank)
    return emitOpError("needs one start and one step per dim (rank ") << rank << ")";
  DimList inDims = getDims(in), outDims = getDims(out);
  for (int64_t d = 0; d < rank; ++d) {
    if (!starts[d])
      return emitOpError("start of dim ") << d << " is unknown";
    if (steps[d] == 0)
      return emitOpError("step of dim ") << d << " is 0";
    // With everything static, every index taken must be inside the input.
    std::optional<int64_t> size = inDims[d] ? inDims[d].getConstantValue() : std::nullopt;
    std::optional<int64_t> length = outDims[d] ? outDims[d].getConstantValue() : std::nullopt;
    std::optional<int64_t> start = starts[d].getConstantValue();
    if (!size || !length || !start || *length == 0)
      continue;
    int64_t last = *start + (*length - 1) * steps[d];
    if (*start < 0 || *start >= *size || last < 0 || last >= *size)
      return emitOpError("dim ") << d << " reads indices " << *start << " to " << last
                                 << " of a dim of size " << *size;
  }
  return success();
}

OpFoldResult SliceOp::fold(FoldAdaptor) {
  if (getInput().getType() != getResult().getType())
    return {};
  for (auto [start, step] : llvm::zip(getStarts().getDims(), getSteps()))
    if (!isConst(start, 0) || step != 1)
      return {};
  return getInput();
}

//===----------------------------------------------------------------------===//
// concat / split
//===----------------------------------------------------------------------===//

LogicalResult ConcatOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &results) {
  ValueRange inputs = adaptor.getInputs();
  if (inputs.empty())
    return emitOptionalError(loc, "concat needs at least one input");
  RankedTensorType first = asTensor(inputs.front());
  int64_t axis = adaptor.getAxis();
  if (failed(verifyAxis(loc, first, axis, "concat axis")))
    return failure();
  DimList result = getDims(first);
  for (Value v : inputs.drop_front()) {
    RankedTensorType t = asTensor(v);
    if (t.getRank() != first.getRank() || t.getElementType() != first.getElementType())
      return emitOptionalError(loc, "concat inputs differ in rank or element type");
    DimList dims = getDims(t);
    for (int64_t i = 0; i < t.getRank(); ++i) {
      if (i == axis) {
        result[i] = dimAdd(result[i], dims[i]);
        continue;
      }
      if (failed(expectDim(loc, result[i], dims[i], "concat input dim")))
        return failure();
      if (!result[i])
        result[i] = dims[i];
    }
  }
  results.push_back(makeTensorType(result, first.getElementType()));
  return success();
}

OpFoldResult ConcatOp::fold(FoldAdaptor) {
  if (getInputs().size() == 1 && getInputs().front().getType() == getResult().getType())
    return getInputs().front();
  return {};
}

LogicalResult SplitOp::verify() {
  RankedTensorType input = getInput().getType();
  int64_t axis = getAxis();
  if (failed(verifyAxis(getLoc(), input, axis, "split axis")))
    return failure();
  if (getResults().empty())
    return emitOpError("needs at least one result");
  DimList in = getDims(input);
  Dim total = dimConst(getContext(), 0);
  for (Value r : getResults()) {
    auto t = llvm::cast<RankedTensorType>(r.getType());
    if (t.getRank() != input.getRank() || t.getElementType() != input.getElementType())
      return emitOpError("result ") << t << " differs in rank or element type";
    DimList dims = getDims(t);
    for (int64_t i = 0; i < t.getRank(); ++i)
      if (i != axis && !dimsMayBeEqual(in[i], dims[i]))
        return emitOpError("result dim ")
               << i << " is " << dimToString(dims[i]) << ", expected " << dimToString(in[i]);
    total = dimAdd(total, dims[axis]);
  }
  if (!dimsMayBeEqual(total, in[axis]))
    return emitOpError("pieces add up to ") << dimToString(total) << " along axis " << axis
                                            << ", input has " << dimToString(in[axis]);
  return success();
}

//===----------------------------------------------------------------------===//
// squeeze / unsqueeze / pad
//===----------------------------------------------------------------------===//

LogicalResult SqueezeOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &results) {
  RankedTensorType input = asTensor(adaptor.getInput());
  ArrayRef<int64_t> axes = adaptor.getAxes();
  if (failed(verifyAxisList(loc, input.getRank(), axes, "squeeze axis")))
    return failure();
  DimList in = getDims(input), out;
  for (int64_t i = 0; i < input.getRank(); ++i) {
    if (!llvm::is_contained(axes, i)) {
      out.push_back(in[i]);
      continue;
    }
    if (in[i] && !isConst(in[i], 1) && in[i].getConstantValue())
      return emitOptionalError(loc, "squeeze axis ", i, " has size ", dimToString(in[i]),
                               ", not 1");
  }
  results.push_back(makeTensorType(out, input.getElementType()));
  return success();
}

OpFoldResult SqueezeOp::fold(FoldAdaptor) {
  if (getAxes().empty() && getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

LogicalResult UnsqueezeOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &results) {
  RankedTensorType input = asTensor(adaptor.getInput());
  ArrayRef<int64_t> axes = adaptor.getAxes();
  int64_t rank = input.getRank() + static_cast<int64_t>(axes.size());
  if (failed(verifyAxisList(loc, rank, axes, "unsqueeze axis")))
    return failure();
  DimList in = getDims(input), out;
  auto next = in.begin();
  for (int64_t i = 0; i < rank; ++i)
    out.push_back(llvm::is_contained(axes, i) ? dimConst(context, 1) : *next++);
  results.push_back(makeTensorType(out, input.getElementType()));
  return success();
}

OpFoldResult UnsqueezeOp::fold(FoldAdaptor) {
  if (getAxes().empty() && getInput().getType() == getResult().getType())
    return getInput();
  return {};
}

LogicalResult PadOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                      Adaptor adaptor, SmallVectorImpl<Type> &results) {
  RankedTensorType input = asTensor(adaptor.getInput());
  ArrayRef<int64_t> pads = adaptor.getPads();
  int64_t rank = input.getRank();
  if (static_cast<int64_t>(pads.size()) != 2 * rank)
    return emitOptionalError(loc, "pad needs 2 * rank = ", 2 * rank, " pads, got ", pads.size());
  if (llvm::any_of(pads, [](int64_t p) { return p < 0; }))
    return emitOptionalError(loc, "pad amounts must be non-negative");
  DimList out = getDims(input);
  for (int64_t i = 0; i < rank; ++i)
    out[i] = dimAdd(out[i], dimConst(context, pads[i] + pads[rank + i]));
  results.push_back(makeTensorType(out, input.getElementType()));
  return success();
}
