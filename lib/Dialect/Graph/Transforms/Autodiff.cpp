//===- Autodiff.cpp - Reverse-mode differentiation over the op interface --===//
//
// Generic reverse mode: activity analysis forward from the trainable
// parameters, then one backward walk that asks each active op for its VJP.
// No op-specific code lives here.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/InitProgram.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/VJP.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

namespace kiln {
#define GEN_PASS_DEF_AUTODIFFPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

bool isFloatTensor(Value v) {
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  return type && llvm::isa<FloatType>(type.getElementType());
}

/// Values that depend on a trainable parameter through float data flow.
llvm::DenseSet<Value> findActiveValues(Block &body) {
  llvm::DenseSet<Value> active;
  for (Operation &op : body) {
    if (auto param = llvm::dyn_cast<ParameterOp>(op)) {
      if (param.getTrainable() && isFloatTensor(param))
        active.insert(param);
      continue;
    }
    if (llvm::isa<StopGradientOp>(op))
      continue;
    bool anyActive = llvm::any_of(op.getOperands(), [&](Value v) { return active.contains(v); });
    if (!anyActive)
      continue;
    for (Value result : op.getResults())
      if (isFloatTensor(result))
        active.insert(result);
  }
  return active;
}

struct AutodiffPass final : kiln::impl::AutodiffPassBase<AutodiffPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (isInitProgram(func)) // runs once at load, not in the step
      return;
    if (func.isExternal() || !func.getBody().hasOneBlock())
      return;
    Block &body = func.getBody().front();
    auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
    if (ret.getNumOperands() == 0) {
      func.emitError("autodiff needs the loss as the function's first result");
      return signalPassFailure();
    }
    Value loss = ret.getOperand(0);
    auto lossType = llvm::dyn_cast<RankedTensorType>(loss.getType());
    if (!lossType || lossType.getRank() != 0 || !isFloatTensor(loss)) {
      func.emitError("the loss (first result) must be a float scalar, got ") << loss.getType();
      return signalPassFailure();
    }

    llvm::DenseSet<Value> active = findActiveValues(body);
    OpBuilder builder(ret);
    llvm::DenseMap<Value, Value> grads;
    auto accumulate = [&](Value v, Value g) {
      auto [it, inserted] = grads.try_emplace(v, g);
      if (!inserted) // Fan-out: gradients of every use add up.
        it->second = builder.create<AddOp>(g.getLoc(), it->second, g);
    };
    if (active.contains(loss))
      grads[loss] = scalarConstant(builder, loss.getLoc(), 1.0, lossType.getElementType());

    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    for (Operation *op : llvm::reverse(ops)) {
      SmallVector<Value> resultGrads;
      bool anyGrad = false;
      for (Value r : op->getResults()) {
        Value g = active.contains(r) ? grads.lookup(r) : Value();
        resultGrads.push_back(g);
        anyGrad |= static_cast<bool>(g);
      }
      if (!anyGrad)
        continue;
      SmallVector<bool> want;
      for (Value operand : op->getOperands())
        want.push_back(active.contains(operand));
      if (llvm::none_of(want, [](bool w) { return w; }))
        continue;
      auto differentiable = llvm::dyn_cast<DifferentiableOpInterface>(op);
      if (!differentiable) {
        op->emitError("'") << op->getName()
                           << "' has no gradient (VJP) but lies on the "
                              "differentiated path";
        return signalPassFailure();
      }
      builder.setInsertionPoint(ret);
      SmallVector<Value> operandGrads;
      if (failed(differentiable.buildVJP(builder, resultGrads, want, operandGrads)))
        return signalPassFailure();
      if (operandGrads.size() != op->getNumOperands()) {
        op->emitError("VJP returned ")
            << operandGrads.size() << " gradients for " << op->getNumOperands() << " operands";
        return signalPassFailure();
      }
      for (auto [operand, g, w] : llvm::zip(op->getOperands(), operandGrads, want)) {
        if (!g || !w)
          continue;
        if (g.getType() != operand.getType()) {
          op->emitError("VJP gradient has type ")
              << g.getType() << " for an operand of type " << operand.getType();
          return signalPassFailure();
        }
        accumulate(operand, g);
      }
    }

    // A trainable parameter the loss does not depend on through float data
    // flow (a constant the exporter lifted into an initializer that only
    // feeds a comparison, an unused head) has no gradient at all: PyTorch
    // leaves its .grad None and its optimizer skips it, weight decay too.
    // It is frozen here, so that the step neither decays nor stores it.
    for (Operation &op : body.without_terminator())
      if (auto param = llvm::dyn_cast<ParameterOp>(op);
          param && param.getTrainable() && !grads.lookup(param))
        param.setTrainable(false);

    // Return the loss and one gradient per trainable parameter, in order.
    SmallVector<Value> results = {loss};
    SmallVector<Attribute> resultAttrs = {func.getResultAttrDict(0)
                                              ? Attribute(func.getResultAttrDict(0))
                                              : builder.getDictionaryAttr({})};
    for (Operation &op : body.without_terminator()) {
      auto param = llvm::dyn_cast<ParameterOp>(op);
      if (!param || !param.getTrainable() || !isFloatTensor(param))
        continue;
      builder.setInsertionPoint(ret);
      results.push_back(gradOrZeros(builder, param.getLoc(), grads.lookup(param), param.getType()));
      resultAttrs.push_back(builder.getDictionaryAttr(
          builder.getNamedAttr("kiln.grad_of", builder.getStringAttr(param.getName()))));
    }
    builder.setInsertionPoint(ret);
    builder.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();
    SmallVector<Type> resultTypes;
    for (Value v : results)
      resultTypes.push_back(v.getType());
    func.setType(FunctionType::get(&getContext(), func.getArgumentTypes(), resultTypes));
    func.setAllResultAttrs(resultAttrs);
  }
};

} // namespace
