//===- GradOps.cpp - Verifiers of the backward ops ------------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/ShapeInference.h"

using namespace mlir;
using namespace kiln;

LogicalResult SoftmaxGradOp::verify() {
  return verifyAxis(getLoc(), getOutput().getType(), getAxis(), "softmax_grad axis");
}

LogicalResult LogSoftmaxGradOp::verify() {
  return verifyAxis(getLoc(), getOutput().getType(), getAxis(), "log_softmax_grad axis");
}

/// The gradients of a norm have the types of what they differentiate.
template <typename OpT> static LogicalResult verifyNormGrad(OpT op) {
  RankedTensorType input = op.getInput().getType();
  if (failed(verifyAxis(op.getLoc(), input, op.getAxis(), "axis")))
    return failure();
  if (op.getGrad().getType() != input)
    return op.emitOpError("grad must have the input's type");
  if (op.getInputGrad().getType() != input)
    return op.emitOpError("input_grad must have the input's type");
  for (Value r : op->getResults().drop_front())
    if (r.getType() != op.getWeight().getType())
      return op.emitOpError("weight gradients must have the weight's type");
  DimList dims = getDims(input), weight = getDims(op.getWeight().getType());
  if (static_cast<int64_t>(weight.size()) != input.getRank() - static_cast<int64_t>(op.getAxis()))
    return op.emitOpError("weight must have the normalized dims");
  return success();
}

LogicalResult LayerNormGradOp::verify() { return verifyNormGrad(*this); }
LogicalResult RmsNormGradOp::verify() { return verifyNormGrad(*this); }

LogicalResult RmsNormGradFromOutputOp::verify() {
  RankedTensorType output = getOutput().getType(), grad = getGrad().getType();
  if (failed(verifyAxis(getLoc(), output, getAxis(), "axis")))
    return failure();
  DimList dims = getDims(output);
  if (getDims(grad) != dims || getInputGrad().getType() != grad)
    return emitOpError("grad and input_grad must have the output's shape and one type");
  DimList cols(dims.begin() + getAxis(), dims.end()), rows(dims.begin(), dims.begin() + getAxis());
  if (getDims(getDivisor().getType()) != cols || getDims(getWeight().getType()) != cols)
    return emitOpError("divisor and weight must have the normalized dims");
  if (getWeightGrad().getType() != getWeight().getType())
    return emitOpError("weight_grad must have the weight's type");
  if (getDims(getRstd().getType()) != rows || !getRstd().getType().getElementType().isF32())
    return emitOpError("rstd must be f32 over the leading dims");
  return success();
}

LogicalResult AttentionGradOp::verify() {
  std::optional<ArrayRef<bool>> seqMajor = getSeqMajor();
  if (seqMajor && seqMajor->size() != kGradRoles)
    return emitOpError("seq_major has ")
           << seqMajor->size()
           << " entries, expected 8 (query, key, value, grad, out, query_grad, key_grad, "
              "value_grad)";
  // Every rule below compares [B, H, S, D] views, whatever each is stored as.
  auto view = [&](Value v, unsigned role) {
    return headMajorType(v.getType(), isSeqMajor(seqMajor, role));
  };
  if (view(getQueryGrad(), kGradQueryGrad) != view(getQuery(), kGradQuery) ||
      view(getKeyGrad(), kGradKeyGrad) != view(getKey(), kGradKey) ||
      view(getValueGrad(), kGradValueGrad) != view(getValue(), kGradValue))
    return emitOpError("gradients must have the types of query, key and value");
  // The forward op's rules (ranks, heads, mask) apply to the same operands.
  SmallVector<Type> forward;
  if (failed(inferAttentionResult(getLoc(), view(getQuery(), kGradQuery),
                                  view(getKey(), kGradKey), view(getValue(), kGradValue),
                                  getMask(), forward)))
    return failure();
  RankedTensorType grad = view(getGrad(), kGradDout);
  if (!areCompatibleReturnTypes(forward, {grad}))
    return emitOpError("grad must have the attention output's type");
  if (getOut() && view(getOut(), kGradOut) != grad)
    return emitOpError("out must have the attention output's type");
  return success();
}

LogicalResult CrossEntropyGradOp::verify() {
  if (getResult().getType() != getLogits().getType())
    return emitOpError("result must have the logits' type");
  SmallVector<Type> forward;
  if (failed(inferCrossEntropyResult(getLoc(), getLogits(), getLabels(), getReduction(), forward)))
    return failure();
  if (!areCompatibleReturnTypes(forward, {getGrad().getType()}))
    return emitOpError("grad must have the loss's type");
  return success();
}
