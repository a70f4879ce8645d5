//===- NNVJP.cpp - VJPs of matmul and the unit ops ------------------------===//
//
// The unit ops' gradients are backward ops of their own (softmax_grad,
// layer_norm_grad, ...), the fused-friendly formulas, rather than a
// re-derivation through primitives.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Graph/VJP.h"

using namespace mlir;

namespace kiln {
namespace {

/// y = op(a) op(b): dA = dY op(B)^T, dB = op(A)^T dY, with transposes
/// folded into the matmul flags and broadcast batch dims summed away.
struct MatmulVJP : VJPModel<MatmulVJP, MatmulOp> {
  static LogicalResult vjp(MatmulOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Location loc = op.getLoc();
    Value dy = gradOrZeros(b, loc, dys[0], tensorOf(op));
    Value lhs = op.getLhs(), rhs = op.getRhs();
    bool ta = op.getTransposeA(), tb = op.getTransposeB();
    Value da, db;
    if (want[0]) {
      // dA = dY op(B)^T, or its transpose when A was transposed.
      da = ta ? b.create<MatmulOp>(loc, rhs, dy, tb, true).getResult()
              : b.create<MatmulOp>(loc, dy, rhs, false, !tb).getResult();
      da = sumToShape(b, loc, da, tensorOf(lhs));
    }
    if (want[1]) {
      // dB = op(A)^T dY, or its transpose when B was transposed.
      db = tb ? b.create<MatmulOp>(loc, dy, lhs, true, ta).getResult()
              : b.create<MatmulOp>(loc, lhs, dy, !ta, false).getResult();
      db = sumToShape(b, loc, db, tensorOf(rhs));
    }
    grads.append({da, db});
    return success();
  }
};

/// Dropout is linear in its input with the same mask: dX = dropout(dY),
/// the mask redrawn from (seed, stream) instead of saved.
struct DropoutVJP : VJPModel<DropoutVJP, DropoutOp> {
  static LogicalResult vjp(DropoutOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Value dx;
    if (want[0] && dys[0])
      dx =
          b.create<DropoutOp>(op.getLoc(), dys[0], op.getSeed(), op.getPAttr(), op.getStreamAttr());
    grads.append({dx, Value()});
    return success();
  }
};

template <typename OpT, typename GradOpT>
struct SoftmaxLikeVJP : VJPModel<SoftmaxLikeVJP<OpT, GradOpT>, OpT> {
  static LogicalResult vjp(OpT op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Value dx;
    if (want[0] && dys[0])
      dx = b.create<GradOpT>(op.getLoc(), op.getType(), op.getResult(), dys[0], op.getAxisAttr());
    grads.push_back(dx);
    return success();
  }
};

struct LayerNormVJP : VJPModel<LayerNormVJP, LayerNormOp> {
  static LogicalResult vjp(LayerNormOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    if (!dys[0]) {
      grads.append(op->getNumOperands(), Value());
      return success();
    }
    Type weightType = op.getWeight().getType();
    auto g = b.create<LayerNormGradOp>(op.getLoc(), op.getInput().getType(), weightType, weightType,
                                       op.getInput(), op.getWeight(), dys[0], op.getAxisAttr(),
                                       op.getEpsilonAttr());
    grads.push_back(want[0] ? g.getInputGrad() : Value());
    grads.push_back(want[1] ? g.getWeightGrad() : Value());
    if (op.getBias())
      grads.push_back(want[2] ? g.getBiasGrad() : Value());
    return success();
  }
};

struct RmsNormVJP : VJPModel<RmsNormVJP, RmsNormOp> {
  static LogicalResult vjp(RmsNormOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    if (!dys[0]) {
      grads.append(2, Value());
      return success();
    }
    auto g = b.create<RmsNormGradOp>(op.getLoc(), op.getInput().getType(), op.getWeight().getType(),
                                     op.getInput(), op.getWeight(), dys[0], op.getAxisAttr(),
                                     op.getEpsilonAttr());
    grads.push_back(want[0] ? g.getInputGrad() : Value());
    grads.push_back(want[1] ? g.getWeightGrad() : Value());
    return success();
  }
};

struct AttentionVJP : VJPModel<AttentionVJP, AttentionOp> {
  static LogicalResult vjp(AttentionOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    if (op.getMask() && want.size() > 3 && want[3])
      return op.emitOpError("has no gradient for its mask; the mask must not "
                            "depend on trainable parameters");
    if (!dys[0]) {
      grads.append(op->getNumOperands(), Value());
      return success();
    }
    // Unmasked bf16/f16 attention may run as cuDNN's fused attention, whose
    // backward reads the forward's output: keep it for the gradient.
    Type element = cast<RankedTensorType>(op.getQuery().getType()).getElementType();
    Value out = !op.getMask() && (element.isBF16() || element.isF16()) ? op.getResult() : Value();
    auto g = b.create<AttentionGradOp>(op.getLoc(), op.getQuery().getType(), op.getKey().getType(),
                                       op.getValue().getType(), op.getQuery(), op.getKey(),
                                       op.getValue(), op.getMask(), dys[0], out, op.getCausalAttr(),
                                       op.getScaleAttr(), DenseBoolArrayAttr());
    // Each gradient in its operand's layout; dO and out in the output's.
    if (hasSeqMajorRole(op)) {
      bool o = isSeqMajor(op, kAttnResult);
      g.setSeqMajorAttr(b.getDenseBoolArrayAttr(
          {isSeqMajor(op, kAttnQuery), isSeqMajor(op, kAttnKey), isSeqMajor(op, kAttnValue), o, o,
           isSeqMajor(op, kAttnQuery), isSeqMajor(op, kAttnKey), isSeqMajor(op, kAttnValue)}));
    }
    grads.push_back(want[0] ? g.getQueryGrad() : Value());
    grads.push_back(want[1] ? g.getKeyGrad() : Value());
    grads.push_back(want[2] ? g.getValueGrad() : Value());
    if (op.getMask())
      grads.push_back(Value());
    return success();
  }
};

struct CrossEntropyVJP : VJPModel<CrossEntropyVJP, CrossEntropyOp> {
  static LogicalResult vjp(CrossEntropyOp op, OpBuilder &b, ArrayRef<Value> dys,
                           ArrayRef<bool> want, SmallVectorImpl<Value> &grads) {
    Value dlogits;
    if (want[0] && dys[0])
      dlogits = b.create<CrossEntropyGradOp>(op.getLoc(), op.getLogits().getType(), op.getLogits(),
                                             op.getLabels(), dys[0], op.getIgnoreIndexAttr(),
                                             op.getReductionAttr());
    grads.append({dlogits, Value()}); // Labels are integers.
    return success();
  }
};

/// The fused LM head's gradient op recomputes each logits chunk from
/// hidden and W (the chunks are never kept); it also yields the loss, so the
/// canonicalizer drops the forward op in a train step (one chunked pass).
struct LinearCrossEntropyVJP : VJPModel<LinearCrossEntropyVJP, LinearCrossEntropyOp> {
  static LogicalResult vjp(LinearCrossEntropyOp op, OpBuilder &b, ArrayRef<Value> dys,
                           ArrayRef<bool> want, SmallVectorImpl<Value> &grads) {
    if (!dys[0] || (!want[0] && !want[1])) {
      grads.append({Value(), Value(), Value()});
      return success();
    }
    Type weightGrad = want[1] ? op.getWeight().getType() : Type();
    auto g = b.create<LinearCrossEntropyGradOp>(
        op.getLoc(), op.getLoss().getType(), op.getHidden().getType(), weightGrad, op.getHidden(),
        op.getWeight(), op.getLabels(), dys[0], op.getTransposeWeightAttr(),
        op.getIgnoreIndexAttr(), op.getSoftcapAttr(), op.getChunkTokensAttr(),
        op.getBf16LogitsAttr());
    grads.push_back(want[0] ? g.getHiddenGrad() : Value());
    grads.push_back(want[1] ? g.getWeightGrad() : Value());
    grads.push_back(Value()); // Labels are integers.
    return success();
  }
};

} // namespace

void attachNNVJPModels(MLIRContext &context) {
  MatmulOp::attachInterface<MatmulVJP>(context);
  DropoutOp::attachInterface<DropoutVJP>(context);
  SoftmaxOp::attachInterface<SoftmaxLikeVJP<SoftmaxOp, SoftmaxGradOp>>(context);
  LogSoftmaxOp::attachInterface<SoftmaxLikeVJP<LogSoftmaxOp, LogSoftmaxGradOp>>(context);
  LayerNormOp::attachInterface<LayerNormVJP>(context);
  RmsNormOp::attachInterface<RmsNormVJP>(context);
  AttentionOp::attachInterface<AttentionVJP>(context);
  CrossEntropyOp::attachInterface<CrossEntropyVJP>(context);
  LinearCrossEntropyOp::attachInterface<LinearCrossEntropyVJP>(context);
}

} // namespace kiln
