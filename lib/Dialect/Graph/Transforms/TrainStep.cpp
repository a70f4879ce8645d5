//===- TrainStep.cpp - Build the optimizer step from (loss, gradients) ----===//
//
// Trainable parameters become block arguments and results, optimizer state
// is threaded the same way, and the update is written with plain graph ops
// so fusion can later merge it into one multi-tensor kernel.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/InitProgram.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/VJP.h"

namespace kiln {
#define GEN_PASS_DEF_TRAINSTEPPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// Scalar arithmetic on rank-0 tensors and broadcasting ops, kept short.
struct Math {
  OpBuilder &b;
  Location loc;
  Type element;

  Value c(double v) { return scalarConstant(b, loc, v, element); }
  Value add(Value x, Value y) { return b.create<AddOp>(loc, x, y); }
  Value sub(Value x, Value y) { return b.create<SubOp>(loc, x, y); }
  Value mul(Value x, Value y) { return b.create<MulOp>(loc, x, y); }
  Value div(Value x, Value y) { return b.create<DivOp>(loc, x, y); }
  Value sqrt(Value x) { return b.create<SqrtOp>(loc, x); }
  Value pow(Value x, Value y) { return b.create<PowOp>(loc, x, y); }
  /// `x` in the optimizer's element type (fp32 for bf16/f16 parameters).
  Value wide(Value x) {
    auto type = llvm::cast<RankedTensorType>(x.getType());
    if (type.getElementType() == element)
      return x;
    return b.create<CastOp>(loc, type.clone(element), x);
  }
  Value narrow(Value x, RankedTensorType type) {
    if (x.getType() == type)
      return x;
    return b.create<CastOp>(loc, type, x);
  }
  Value sumAll(Value x) {
    auto type = llvm::cast<RankedTensorType>(x.getType());
    if (type.getRank() == 0)
      return x;
    SmallVector<int64_t> axes;
    for (int64_t i = 0; i < type.getRank(); ++i)
      axes.push_back(i);
    return b.create<ReduceSumOp>(loc, x, b.getDenseI64ArrayAttr(axes), false);
  }
};

struct Trained {
  std::string name;
  RankedTensorType type;
  ParameterOp param;
  Value grad;
  BlockArgument value;
  SmallVector<BlockArgument> state;
};

struct TrainStepPass final : kiln::impl::TrainStepPassBase<TrainStepPass> {
  using TrainStepPassBase::TrainStepPassBase;

  LogicalResult updateAdamW(Math &m, Trained &t, Value lrArg, Value step,
                            SmallVectorImpl<Value> &results) {
    Value p = m.mul(m.wide(t.value), m.sub(m.c(1), m.mul(lrArg, m.c(weightDecay))));
    Value mOld = t.state[0], vOld = t.state[1], g = t.grad;
    Value mNew = m.add(mOld, m.mul(m.c(1 - beta1), m.sub(g, mOld)));
    Value vNew = m.add(m.mul(vOld, m.c(beta2)), m.mul(m.c(1 - beta2), m.mul(g, g)));
    Value bc1 = m.sub(m.c(1), m.pow(m.c(beta1), step));
    Value bc2 = m.sub(m.c(1), m.pow(m.c(beta2), step));
    Value denom = m.add(m.div(m.sqrt(vNew), m.sqrt(bc2)), m.c(eps));
    Value stepSize = m.div(lrArg, bc1);
    p = m.sub(p, m.mul(stepSize, m.div(mNew, denom)));
    results.append({m.narrow(p, t.type), mNew, vNew});
    return success();
  }

  LogicalResult updateSgd(Math &m, Trained &t, Value lrArg, Value step,
                          SmallVectorImpl<Value> &results) {
    Value g = t.grad, value = m.wide(t.value);
    if (weightDecay != 0)
      g = m.add(g, m.mul(m.c(weightDecay), value));
    Value buf;
    if (momentum != 0) {
      // torch starts the buffer at the first gradient, undamped.
      Value later = m.add(m.mul(m.c(momentum), t.state[0]), m.mul(m.c(1 - dampening), g));
      Value first = m.b.create<EqOp>(m.loc, step, m.c(1));
      buf = m.b.create<SelectOp>(m.loc, first, g, later);
      g = nesterov ? m.add(g, m.mul(m.c(momentum), buf)) : buf;
    }
    results.push_back(m.narrow(m.sub(value, m.mul(lrArg, g)), t.type));
    if (buf)
      results.push_back(buf);
    return success();
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (isInitProgram(func)) // runs once at load, not in the step
      return;
    if (func.isExternal())
      return;
    // kiln-loop-programs' accumulate and eval programs update nothing.
    if (auto program = func->getAttrOfType<StringAttr>("kiln.loop_program");
        program && program.getValue() != "apply")
      return;
    bool adamw = optimizer == "adamw", sgd = optimizer == "sgd";
    if (!adamw && !sgd) {
      func.emitError("unknown optimizer '") << optimizer << "' (adamw or sgd)";
      return signalPassFailure();
    }
    SmallVector<StringRef> stateNames;
    if (adamw)
      stateNames = {"exp_avg", "exp_avg_sq"};
    else if (momentum != 0)
      stateNames = {"momentum_buffer"};

    Block &body = func.getBody().front();
    auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
    // A name may be read more than once (micro-batch copies): all reads of
    // a trainable parameter become its argument.
    llvm::StringMap<SmallVector<ParameterOp>> params;
    func.walk([&](ParameterOp p) { params[p.getName()].push_back(p); });
    SmallVector<Trained> trained;
    SmallVector<Value> passThrough = {ret.getOperand(0)};
    SmallVector<DictionaryAttr> passThroughAttrs = {func.getResultAttrDict(0)};
    for (unsigned i = 1; i < ret.getNumOperands(); ++i) {
      // The apply program clears its accumulators: those results pass.
      if (func.getResultAttr(i, "kiln.accum")) {
        passThrough.push_back(ret.getOperand(i));
        passThroughAttrs.push_back(func.getResultAttrDict(i));
        continue;
      }
      auto name = func.getResultAttrOfType<StringAttr>(i, "kiln.grad_of");
      if (!name) {
        func.emitError("result ") << i << " is not a gradient; run kiln-autodiff first";
        return signalPassFailure();
      }
      auto reads = params.find(name.getValue());
      ParameterOp param = reads == params.end() ? ParameterOp() : reads->second.front();
      if (!param) {
        func.emitError("no parameter named '") << name.getValue() << "'";
        return signalPassFailure();
      }
      trained.push_back({param.getName().str(), param.getType(), param, ret.getOperand(i), {}, {}});
    }
    if (trained.empty()) {
      func.emitError("nothing trains: no gradient results");
      return signalPassFailure();
    }

    // New arguments: parameters, state, lr, step.
    OpBuilder b(ret);
    MLIRContext *ctx = &getContext();
    auto tag = [&](StringRef key, StringRef value) {
      return b.getDictionaryAttr(b.getNamedAttr(key, b.getStringAttr(value)));
    };
    for (Trained &t : trained) {
      unsigned index = func.getNumArguments();
      // The weights file's names go along (folded_from, its orientation,
      // tied aliases): a fully fine-tuned weight is read from it too.
      SmallVector<NamedAttribute> attrs{b.getNamedAttr("kiln.param", b.getStringAttr(t.name))};
      for (StringRef key : {kSourceNameAttr, kSourceTransposedAttr, kSourceAliasesAttr})
        if (Attribute value = t.param->getAttr(key))
          attrs.push_back(b.getNamedAttr(key, value));
      func.insertArgument(index, t.type, b.getDictionaryAttr(attrs), t.param.getLoc());
      t.value = body.getArgument(index);
    }
    // Optimizer math, state, lr and step are fp32 (fp64 for fp64 params):
    // in bf16, beta2 = 0.999 rounds to 1 and the bias correction divides
    // by zero; and the moments of small gradients need the mantissa.
    Type element = b.getF32Type();
    if (llvm::any_of(trained, [](const Trained &t) { return t.type.getElementType().isF64(); }))
      element = b.getF64Type();
    for (Trained &t : trained)
      for (StringRef state : stateNames) {
        unsigned index = func.getNumArguments();
        func.insertArgument(index, t.type.clone(element),
                            tag("kiln.state", t.name + "/" + state.str()), t.param.getLoc());
        t.state.push_back(body.getArgument(index));
      }
    auto scalarType = RankedTensorType::get({}, element);
    unsigned lrIndex = func.getNumArguments();
    func.insertArgument(lrIndex, scalarType,
                        b.getDictionaryAttr(b.getNamedAttr("kiln.lr", b.getUnitAttr())),
                        func.getLoc());
    unsigned stepIndex = func.getNumArguments();
    func.insertArgument(stepIndex, scalarType,
                        b.getDictionaryAttr(b.getNamedAttr("kiln.step", b.getUnitAttr())),
                        func.getLoc());
    Value lrArg = body.getArgument(lrIndex), stepArg = body.getArgument(stepIndex);

    // Reads of trainable parameters now read the argument.
    for (Trained &t : trained) {
      for (ParameterOp read : params[t.name]) {
        read.replaceAllUsesWith(t.value);
        read.erase();
      }
      t.param = nullptr;
    }

    b.setInsertionPoint(ret);
    Math m{b, func.getLoc(), element};
    for (Trained &t : trained)
      t.grad = m.wide(t.grad);
    // The global L2 norm before clipping (what clip_grad_norm_ returns).
    Value norm;
    if (maxGradNorm > 0 || gradNorm) {
      Value total = m.c(0);
      for (Trained &t : trained)
        total = m.add(total, m.sumAll(m.mul(t.grad, t.grad)));
      norm = m.sqrt(total);
    }
    if (gradNorm) {
      passThrough.insert(passThrough.begin() + 1, norm);
      passThroughAttrs.insert(
          passThroughAttrs.begin() + 1,
          b.getDictionaryAttr(b.getNamedAttr("kiln.name", b.getStringAttr("grad_norm"))));
    }
    if (maxGradNorm > 0) {
      Value coef = m.div(m.c(maxGradNorm), m.add(norm, m.c(1e-6)));
      coef = b.create<MinOp>(m.loc, coef, m.c(1));
      for (Trained &t : trained)
        t.grad = m.mul(t.grad, coef);
    }
    SmallVector<Value> newParams, newState;
    for (Trained &t : trained) {
      SmallVector<Value> updated;
      if (failed(adamw ? updateAdamW(m, t, lrArg, stepArg, updated)
                       : updateSgd(m, t, lrArg, stepArg, updated)))
        return signalPassFailure();
      newParams.push_back(updated.front());
      newState.append(updated.begin() + 1, updated.end());
    }

    SmallVector<Value> results = passThrough;
    SmallVector<Attribute> attrs(passThroughAttrs.begin(), passThroughAttrs.end());
    for (auto [t, v] : llvm::zip(trained, newParams)) {
      results.push_back(v);
      attrs.push_back(tag("kiln.param", t.name));
    }
    size_t s = 0;
    for (Trained &t : trained)
      for (StringRef state : stateNames) {
        results.push_back(newState[s++]);
        attrs.push_back(tag("kiln.state", t.name + "/" + state.str()));
      }
    for (Attribute &a : attrs)
      if (!a)
        a = b.getDictionaryAttr({});
    b.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();
    SmallVector<Type> types;
    for (Value v : results)
      types.push_back(v.getType());
    func.setType(FunctionType::get(ctx, func.getArgumentTypes(), types));
    func.setAllResultAttrs(attrs);
    func->setAttr("kiln.optimizer", b.getStringAttr(optimizer));
    func->setAttr("kiln.default_lr", b.getF64FloatAttr(lr));
  }
};

} // namespace
