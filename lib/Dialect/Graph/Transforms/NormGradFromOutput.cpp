//===- NormGradFromOutput.cpp - RMSNorm gradients from the kept output ----===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// kiln.rms_norm_grad reads the norm's input only for xhat = x * rstd. The
// next projection's gradient keeps the norm's (scaled) output anyway, so
// xhat is that value over the scale, given the row's rstd: the residual
// stream is then not kept for the norms' backward (2 x [tokens x hidden]
// per decoder layer).
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/DenseSet.h"

namespace kiln {
#define GEN_PASS_DEF_NORMGRADFROMOUTPUTPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// A constant every element of which is `pred`.
bool constantAll(Value v, llvm::function_ref<bool(double)> pred) {
  auto constant = v.getDefiningOp<kiln::ConstantOp>();
  auto dense = constant ? dyn_cast<DenseElementsAttr>(constant.getValue()) : nullptr;
  if (!dense || !isa<FloatType>(dense.getElementType()))
    return false;
  for (const APFloat &f : dense.getValues<APFloat>())
    if (!pred(f.convertToDouble()))
      return false;
  return true;
}

/// The frozen parameter `v` is, through widening casts (which keep every
/// nonzero value nonzero); null if none.
ParameterOp frozenParameter(Value v) {
  while (auto cast = v.getDefiningOp<CastOp>()) {
    auto from = dyn_cast<FloatType>(cast.getInput().getType().getElementType());
    auto to = dyn_cast<FloatType>(cast.getType().getElementType());
    if (!from || !to || to.getWidth() < from.getWidth())
      return {};
    v = cast.getInput();
  }
  auto param = v.getDefiningOp<ParameterOp>();
  return param && !param.getTrainable() ? param : ParameterOp();
}

/// A per-column value the gradient may divide by: a constant without zeros,
/// or a frozen weight (checked when weights load). Trained weights change
/// every step.
bool mayDivideBy(Value v) {
  return frozenParameter(v) || constantAll(v, [](double d) { return d != 0.0; });
}

struct NormGradFromOutputPass final
    : kiln::impl::NormGradFromOutputPassBase<NormGradFromOutputPass> {
  llvm::DenseSet<Operation *> forward;

  /// Whether a backward op reads `v` (so the step keeps it anyway).
  bool backwardReads(Value v, Operation *except = nullptr) const {
    return llvm::any_of(v.getUsers(), [&](Operation *user) {
      return user != except && !forward.contains(user) && !isa<func::ReturnOp>(user);
    });
  }

  /// The kept value that is `norm`'s result times a per-column divisor: the
  /// result or a cast of it (divided by the norm's weight), or, for a unit
  /// weight, a product of those with a scale of the normalized dims.
  std::pair<Value, Value> keptScaledOutput(RmsNormOp norm) const {
    Value weight = norm.getWeight();
    bool unit = constantAll(weight, [](double d) { return d == 1.0; });
    auto cols = ArrayRef<Dim>(getDims(norm.getInput().getType())).drop_front(norm.getAxis());
    SmallVector<Value> work = {norm.getResult()};
    while (!work.empty()) {
      Value v = work.pop_back_val();
      if (backwardReads(v) && mayDivideBy(weight))
        return {v, weight};
      for (Operation *user : v.getUsers()) {
        if (!forward.contains(user))
          continue;
        if (auto cast = dyn_cast<CastOp>(user)) {
          work.push_back(cast.getResult());
          continue;
        }
        auto mul = dyn_cast<MulOp>(user);
        if (!unit || !mul || mul.getLhs() == mul.getRhs())
          continue;
        Value scale = mul.getLhs() == v ? mul.getRhs() : mul.getLhs();
        auto type = dyn_cast<RankedTensorType>(scale.getType());
        if (type && ArrayRef<Dim>(getDims(type)) == cols &&
            mul.getType() == cast<RankedTensorType>(v.getType()) && mayDivideBy(scale) &&
            backwardReads(mul.getResult()))
          return {mul.getResult(), scale};
      }
    }
    return {};
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    std::optional<llvm::DenseSet<Operation *>> forwardOps = forwardPart(func);
    if (!forwardOps)
      return;
    forward = std::move(*forwardOps);
    Block &body = func.getBody().front();

    SmallVector<RmsNormGradOp> grads;
    for (Operation &op : body)
      if (auto g = dyn_cast<RmsNormGradOp>(op); g && !forward.contains(g))
        grads.push_back(g);
    for (RmsNormGradOp g : grads) {
      Value x = g.getInput();
      // The norm this gradient belongs to, and nothing else of the backward
      // pass reading its input (or keeping it would save nothing).
      RmsNormOp norm;
      for (Operation *user : x.getUsers())
        if (auto n = dyn_cast<RmsNormOp>(user);
            n && forward.contains(n) && n.getWeight() == g.getWeight() &&
            n.getAxis() == g.getAxis() && n.getEpsilon() == g.getEpsilon())
          norm = n;
      if (!norm || backwardReads(x, g))
        continue;
      auto [kept, divisor] = keptScaledOutput(norm);
      if (!kept)
        continue;
      OpBuilder b(norm);
      auto withRstd = b.create<RmsNormWithRstdOp>(norm.getLoc(), x, norm.getWeight(),
                                                  norm.getAxisAttr(), norm.getEpsilonAttr());
      forward.insert(withRstd);
      if (kept == norm.getResult())
        kept = withRstd.getResult();
      norm.getResult().replaceAllUsesWith(withRstd.getResult());
      forward.erase(norm);
      norm.erase();
      b.setInsertionPoint(g);
      auto fromOutput = b.create<RmsNormGradFromOutputOp>(
          g.getLoc(), g.getInputGrad().getType(), g.getWeightGrad().getType(), kept, divisor,
          g.getWeight(), withRstd.getRstd(), g.getGrad(), g.getAxisAttr());
      g.replaceAllUsesWith(fromOutput.getResults());
      g.erase();
      if (ParameterOp param = frozenParameter(divisor))
        param->setAttr(kNonzeroAttr, UnitAttr::get(&getContext()));
    }
  }
};

} // namespace
