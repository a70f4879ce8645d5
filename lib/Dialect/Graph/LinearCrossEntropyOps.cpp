//===- LinearCrossEntropyOps.cpp - Fused LM head + cross entropy ----------===//
//
// Verifiers of kiln.linear_cross_entropy(_grad) and the canonicalization
// that lets the train step compute the loss in the gradient op: the forward
// op would otherwise run the chunked logits GEMMs a second time.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/ShapeInference.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace kiln;

namespace {

template <typename OpT> LogicalResult verifyLinearCrossEntropy(OpT op) {
  auto hidden = cast<RankedTensorType>(op.getHidden().getType());
  auto weight = cast<RankedTensorType>(op.getWeight().getType());
  auto labels = cast<RankedTensorType>(op.getLabels().getType());
  auto loss = cast<RankedTensorType>(op.getLoss().getType());
  if (hidden.getRank() != 2 || weight.getRank() != 2 || labels.getRank() != 1)
    return op.emitOpError("takes hidden [N, H], weight [H, V] or [V, H] and labels [N], got ranks ")
           << hidden.getRank() << ", " << weight.getRank() << " and " << labels.getRank();
  if (hidden.getElementType() != weight.getElementType())
    return op.emitOpError("hidden and weight must have one element type");
  if (loss.getRank() != 0 || !loss.getElementType().isF32())
    return op.emitOpError("loss must be an f32 scalar");
  if (op.getChunkTokens() <= 0)
    return op.emitOpError("chunk_tokens must be positive, got ") << op.getChunkTokens();
  if (op.getBf16Logits() && !hidden.getElementType().isBF16())
    return op.emitOpError("bf16_logits needs bf16 hidden states and weight, got ")
           << hidden.getElementType();
  if (std::optional<APFloat> cap = op.getSoftcap(); cap && !(cap->convertToDouble() > 0))
    return op.emitOpError("softcap must be positive");
  Dim h = getDim(weight, op.getTransposeWeight() ? 1 : 0);
  if (failed(expectDim(op.getLoc(), getDim(hidden, 1), h, "weight hidden dim")) ||
      failed(expectDim(op.getLoc(), getDim(hidden, 0), getDim(labels, 0), "labels dim")))
    return failure();
  return success();
}

/// grad(h, W, y, g) carries the loss too: the forward op on the same
/// operands goes when every use of its loss comes after the gradient op
/// (a train step returns the loss; nothing in the forward reads it), or
/// when g is a constant (the seed, or the 1/N of accumulated micro-batches):
/// then the gradient op moves up to where the forward op was.
struct MergeForward : OpRewritePattern<LinearCrossEntropyGradOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(LinearCrossEntropyGradOp grad,
                                PatternRewriter &rewriter) const override {
    for (Operation *user : grad.getHidden().getUsers()) {
      auto forward = dyn_cast<LinearCrossEntropyOp>(user);
      if (!forward || forward->getBlock() != grad->getBlock() ||
          forward.getWeight() != grad.getWeight() || forward.getLabels() != grad.getLabels() ||
          forward.getHidden() != grad.getHidden() ||
          forward->getAttrDictionary() != grad->getAttrDictionary() ||
          forward.getLoss().getType() != grad.getLoss().getType())
        continue;
      bool after = llvm::all_of(forward.getLoss().getUsers(), [&](Operation *use) {
        Operation *top = grad->getBlock()->findAncestorOpInBlock(*use);
        return top && grad->isBeforeInBlock(top);
      });
      Operation *seed = grad.getGrad().getDefiningOp();
      bool hoistable =
          seed && seed->hasTrait<OpTrait::ConstantLike>() && seed->getNumOperands() == 0;
      if (!after && !hoistable)
        continue;
      if (!after) {
        if (seed->getBlock() == forward->getBlock() && !seed->isBeforeInBlock(forward))
          rewriter.moveOpBefore(seed, forward);
        rewriter.moveOpBefore(grad, forward);
      }
      rewriter.replaceOp(forward, grad.getLoss());
      return success();
    }
    return failure();
  }
};

} // namespace

LogicalResult LinearCrossEntropyOp::verify() { return verifyLinearCrossEntropy(*this); }

LogicalResult LinearCrossEntropyGradOp::verify() {
  if (failed(verifyLinearCrossEntropy(*this)))
    return failure();
  if (getGrad().getType() != getLoss().getType())
    return emitOpError("grad must have the loss's type");
  if (getHiddenGrad().getType() != getHidden().getType())
    return emitOpError("hidden_grad must have the hidden states' type");
  if (getWeightGrad() && getWeightGrad().getType() != getWeight().getType())
    return emitOpError("weight_grad must have the weight's type");
  return success();
}

void LinearCrossEntropyGradOp::getCanonicalizationPatterns(RewritePatternSet &patterns,
                                                           MLIRContext *context) {
  patterns.add<MergeForward>(context);
}
