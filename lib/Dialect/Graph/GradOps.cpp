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

LogicalResult AttentionGradOp::verify() {
  if (getQueryGrad().getType() != getQuery().getType() ||
      getKeyGrad().getType() != getKey().getType() ||
      getValueGrad().getType() != getValue().getType())
    return emitOpError("gradients must have the types of query, key and value");
  // The forward op's rules (ranks, heads, mask) apply to the same operands.
  SmallVector<Type> forward;
  if (failed(inferAttentionResult(getLoc(), getQuery(), getKey(), getValue(), getMask(), forward)))
    return failure();
  if (!areCompatibleReturnTypes(forward, {getGrad().getType()}))
    return emitOpError("grad must have the attention output's type");
  if (getOut() && getOut().getType() != getGrad().getType())
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
