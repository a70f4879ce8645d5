//===- NNOps.cpp - Matmul, norms, attention, loss, scans ------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/ShapeInference.h"

using namespace mlir;
using namespace kiln;

static RankedTensorType asTensor(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

LogicalResult MatmulOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                         Adaptor adaptor, SmallVectorImpl<Type> &results) {
  RankedTensorType lhs = asTensor(adaptor.getLhs());
  RankedTensorType rhs = asTensor(adaptor.getRhs());
  if (lhs.getRank() < 2 || rhs.getRank() < 2)
    return emitOptionalError(loc, "matmul operands need rank >= 2, got ", lhs.getRank(), " and ",
                             rhs.getRank());
  if (lhs.getElementType() != rhs.getElementType())
    return emitOptionalError(loc, "matmul element types differ: ", lhs.getElementType(), " vs ",
                             rhs.getElementType());
  DimList a = getDims(lhs), b = getDims(rhs);
  if (adaptor.getTransposeA())
    std::swap(a[a.size() - 1], a[a.size() - 2]);
  if (adaptor.getTransposeB())
    std::swap(b[b.size() - 1], b[b.size() - 2]);
  Dim m = a[a.size() - 2], k = a.back(), kRhs = b[b.size() - 2], n = b.back();
  if (failed(expectDim(loc, k, kRhs, "matmul contraction dim")))
    return failure();
  // Batch dims broadcast like an elementwise op over the leading dims.
  DimList batchA(a.begin(), a.end() - 2), batchB(b.begin(), b.end() - 2);
  Type element = lhs.getElementType();
  FailureOr<DimList> batch =
      broadcastShapes(loc, {makeTensorType(batchA, element), makeTensorType(batchB, element)});
  if (failed(batch))
    return failure();
  batch->push_back(m);
  batch->push_back(n);
  results.push_back(makeTensorType(*batch, element));
  return success();
}

/// Weight (and bias) of a norm over dims [axis, rank) have those dims.
static LogicalResult verifyNormParam(std::optional<Location> loc, RankedTensorType input,
                                     int64_t axis, Value param, StringRef what) {
  RankedTensorType type = asTensor(param);
  // ONNX LayerNormalization / RMSNormalization share one type T for all three.
  if (type.getElementType() != input.getElementType())
    return emitOptionalError(loc, what, " element type ", type.getElementType(),
                             " differs from the input's ", input.getElementType());
  if (type.getRank() != input.getRank() - axis)
    return emitOptionalError(loc, what, " must have rank ", input.getRank() - axis,
                             " (dims [axis, rank)), got ", type.getRank());
  DimList in = getDims(input), p = getDims(type);
  for (int64_t i = 0; i < type.getRank(); ++i)
    if (failed(expectDim(loc, in[axis + i], p[i], (what + " dim").str())))
      return failure();
  return success();
}

LogicalResult LayerNormOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &results) {
  RankedTensorType input = asTensor(adaptor.getInput());
  int64_t axis = adaptor.getAxis();
  if (failed(verifyAxis(loc, input, axis, "layer_norm axis")) ||
      failed(verifyNormParam(loc, input, axis, adaptor.getWeight(), "weight")) ||
      (adaptor.getBias() && failed(verifyNormParam(loc, input, axis, adaptor.getBias(), "bias"))))
    return failure();
  results.push_back(input);
  return success();
}

/// rms_norm's result (the input's type), and for rms_norm_with_rstd also
/// the f32 rstd over the leading dims.
template <typename AdaptorT>
static LogicalResult inferRmsNorm(MLIRContext *context, std::optional<Location> loc,
                                  AdaptorT adaptor, bool withRstd,
                                  SmallVectorImpl<Type> &results) {
  RankedTensorType input = asTensor(adaptor.getInput());
  int64_t axis = adaptor.getAxis();
  if (failed(verifyAxis(loc, input, axis, withRstd ? "rms_norm_with_rstd axis" : "rms_norm axis")) ||
      failed(verifyNormParam(loc, input, axis, adaptor.getWeight(), "weight")))
    return failure();
  results.push_back(input);
  if (withRstd) {
    DimList rows = getDims(input);
    rows.resize(axis);
    results.push_back(makeTensorType(rows, Float32Type::get(context)));
  }
  return success();
}

LogicalResult RmsNormOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                          Adaptor adaptor, SmallVectorImpl<Type> &results) {
  return inferRmsNorm(context, loc, adaptor, /*withRstd=*/false, results);
}

LogicalResult RmsNormWithRstdOp::inferReturnTypes(MLIRContext *context,
                                                  std::optional<Location> loc, Adaptor adaptor,
                                                  SmallVectorImpl<Type> &results) {
  return inferRmsNorm(context, loc, adaptor, /*withRstd=*/true, results);
}

LogicalResult CumsumOp::verify() {
  return verifyAxis(getLoc(), getInput().getType(), getAxis(), "cumsum axis");
}

LogicalResult TriluOp::verify() {
  if (getInput().getType().getRank() < 2)
    return emitOpError("needs rank >= 2, got ") << getInput().getType().getRank();
  return success();
}

LogicalResult CrossEntropyOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                               Adaptor adaptor, SmallVectorImpl<Type> &results) {
  return inferCrossEntropyResult(loc, adaptor.getLogits(), adaptor.getLabels(),
                                 adaptor.getReduction(), results);
}

LogicalResult kiln::inferCrossEntropyResult(std::optional<Location> loc, Value logitsValue,
                                            Value labelsValue, Reduction reduction,
                                            SmallVectorImpl<Type> &results) {
  RankedTensorType logits = asTensor(logitsValue);
  RankedTensorType labels = asTensor(labelsValue);
  if (logits.getRank() != 2 || labels.getRank() != 1)
    return emitOptionalError(loc,
                             "cross_entropy takes logits [N, C] and labels "
                             "[N], got ranks ",
                             logits.getRank(), " and ", labels.getRank());
  Dim rows = getDim(logits, 0);
  if (failed(expectDim(loc, rows, getDim(labels, 0), "labels dim 0")))
    return failure();
  DimList dims;
  if (reduction == Reduction::none)
    dims.push_back(rows ? rows : getDim(labels, 0));
  results.push_back(makeTensorType(dims, logits.getElementType()));
  return success();
}

LogicalResult AttentionOp::inferReturnTypes(MLIRContext *, std::optional<Location> loc,
                                            Adaptor adaptor, SmallVectorImpl<Type> &results) {
  std::optional<ArrayRef<bool>> seqMajor = adaptor.getSeqMajor();
  if (seqMajor && seqMajor->size() != kAttnRoles)
    return emitOptionalError(loc, "attention seq_major has ", seqMajor->size(),
                             " entries, expected 4 (query, key, value, result)");
  auto view = [&](Value v, unsigned role) {
    return headMajorType(v.getType(), isSeqMajor(seqMajor, role));
  };
  if (failed(inferAttentionResult(loc, view(adaptor.getQuery(), kAttnQuery),
                                  view(adaptor.getKey(), kAttnKey),
                                  view(adaptor.getValue(), kAttnValue), adaptor.getMask(),
                                  results)))
    return failure();
  if (isSeqMajor(seqMajor, kAttnResult))
    results[0] = swapSeqAndHeads(llvm::cast<RankedTensorType>(results[0]));
  return success();
}

bool kiln::isSeqMajor(std::optional<ArrayRef<bool>> seqMajor, unsigned role) {
  return seqMajor && role < seqMajor->size() && (*seqMajor)[role];
}

bool kiln::isSeqMajor(Operation *op, unsigned role) {
  auto flags = op->getAttrOfType<DenseBoolArrayAttr>("seq_major");
  return flags && isSeqMajor(flags.asArrayRef(), role);
}

bool kiln::hasSeqMajorRole(Operation *op) {
  auto flags = op->getAttrOfType<DenseBoolArrayAttr>("seq_major");
  return flags && llvm::is_contained(flags.asArrayRef(), true);
}

RankedTensorType kiln::swapSeqAndHeads(RankedTensorType type) {
  DimList dims = getDims(type);
  std::swap(dims[1], dims[2]);
  return makeTensorType(dims, type.getElementType());
}

RankedTensorType kiln::headMajorType(Type type, bool seqMajor) {
  auto tensor = llvm::cast<RankedTensorType>(type);
  return seqMajor && tensor.getRank() == 4 ? swapSeqAndHeads(tensor) : tensor;
}

LogicalResult kiln::inferAttentionResult(std::optional<Location> loc, Value query, Value key,
                                         Value value, Value mask, SmallVectorImpl<Type> &results) {
  return inferAttentionResult(loc, asTensor(query), asTensor(key), asTensor(value), mask, results);
}

LogicalResult kiln::inferAttentionResult(std::optional<Location> loc, RankedTensorType q,
                                         RankedTensorType k, RankedTensorType v, Value mask,
                                         SmallVectorImpl<Type> &results) {
  if (q.getRank() != 4 || k.getRank() != 4 || v.getRank() != 4)
    return emitOptionalError(loc, "attention takes rank-4 [batch, heads, seq, "
                                  "head_dim] query/key/value");
  if (q.getElementType() != k.getElementType() || q.getElementType() != v.getElementType())
    return emitOptionalError(loc, "attention query/key/value element types differ");
  DimList qd = getDims(q), kd = getDims(k), vd = getDims(v);
  if (failed(expectDim(loc, qd[0], kd[0], "key batch")) ||
      failed(expectDim(loc, kd[0], vd[0], "value batch")) ||
      failed(expectDim(loc, kd[1], vd[1], "value heads")) ||
      failed(expectDim(loc, qd[3], kd[3], "key head_dim")) ||
      failed(expectDim(loc, kd[2], vd[2], "value seq")))
    return failure();
  std::optional<int64_t> hq = qd[1] ? qd[1].getConstantValue() : std::nullopt;
  std::optional<int64_t> hkv = kd[1] ? kd[1].getConstantValue() : std::nullopt;
  if (hq && hkv && (*hkv == 0 || *hq % *hkv != 0))
    return emitOptionalError(loc, "query heads ", *hq, " are not a multiple of key/value heads ",
                             *hkv);
  if (mask) {
    RankedTensorType m = asTensor(mask);
    Type me = m.getElementType();
    if (!me.isInteger(1) && !llvm::isa<FloatType>(me))
      return emitOptionalError(loc, "attention mask must be i1 or float, got ", me);
    // One-way broadcast: the mask may not widen the scores (numpy
    // broadcasting both ways would accept a longer rank or a dim where the
    // scores have 1).
    DimList scores = {qd[0], qd[1], qd[2], kd[2]};
    if (m.getRank() > 4)
      return emitOptionalError(loc, "attention mask rank ", m.getRank(),
                               " is above the rank 4 of the scores");
    DimList md = getDims(m);
    int64_t offset = 4 - m.getRank();
    Dim one = dimConst(q.getContext(), 1);
    for (int64_t i = 0; i < m.getRank(); ++i) {
      // A symbolic mask dim may be 1 at run time.
      if (dimsMayBeEqual(md[i], one) || dimsMayBeEqual(md[i], scores[offset + i]))
        continue;
      return emitOptionalError(loc, "attention mask dim ", i, " of size ", dimToString(md[i]),
                               " does not broadcast to the scores dim ",
                               dimToString(scores[offset + i]));
    }
  }
  results.push_back(makeTensorType({qd[0], qd[1], qd[2], vd[3]}, q.getElementType()));
  return success();
}

LogicalResult IotaOp::verify() {
  if (failed(verifyAxis(getLoc(), getResult().getType(), getDim(), "iota dim")))
    return failure();
  return success();
}
