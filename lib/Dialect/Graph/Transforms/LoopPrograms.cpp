//===- LoopPrograms.cpp - accum, apply and eval programs of @main ---------===//
//
// The run-time training loop needs more than one fused step: gradients
// accumulated over a number of micro-batches chosen at run time, then one
// optimizer update on their token-weighted mean, and a forward-only loss on
// held-out data. Each is a function of its own, cloned from the (loss,
// gradients) form of @main; kiln-train-step then turns @main__apply into
// the optimizer update.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/VJP.h"

#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/StringSet.h"

namespace kiln {
#define GEN_PASS_DEF_LOOPPROGRAMSPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

struct Gradient {
  std::string name;
  RankedTensorType accumType; // the gradient's shape in fp32 (fp64 stays)
};

DictionaryAttr tagged(Builder &b, StringRef key, StringRef value) {
  return b.getDictionaryAttr(b.getNamedAttr(key, b.getStringAttr(value)));
}

/// The optimizer's element type: fp32, fp64 for fp64 gradients.
Type accumElement(Type element) {
  return element.isF64() ? element : Float32Type::get(element.getContext());
}

Value widen(OpBuilder &b, Location loc, Value x, Type element) {
  auto type = tensorOf(x);
  if (type.getElementType() == element)
    return x;
  return b.create<CastOp>(loc, type.clone(element), x);
}

/// The number of tokens the loss averages over, as a scalar of `element`:
/// the labels other than ignore_index when the loss is a mean-reduced
/// cross entropy (through casts), else 1 (the micro-batch is one item).
Value countedTokens(OpBuilder &b, Location loc, Value loss, Type element) {
  Value v = loss;
  while (auto cast = v.getDefiningOp<CastOp>())
    v = cast.getInput();
  // The fused LM head (kiln-fuse-linear-cross-entropy) is a mean cross
  // entropy too; after autodiff its gradient op yields the loss.
  Value labels;
  int64_t ignoreIndex = 0;
  if (auto ce = v.getDefiningOp<CrossEntropyOp>(); ce && ce.getReduction() == Reduction::mean) {
    labels = ce.getLabels();
    ignoreIndex = ce.getIgnoreIndex();
  } else if (auto head = v.getDefiningOp<LinearCrossEntropyOp>()) {
    labels = head.getLabels();
    ignoreIndex = head.getIgnoreIndex();
  } else if (auto grad = v.getDefiningOp<LinearCrossEntropyGradOp>()) {
    labels = grad.getLabels();
    ignoreIndex = grad.getIgnoreIndex();
  }
  if (!labels)
    return scalarConstant(b, loc, 1.0, element);
  Type labelType = tensorOf(labels).getElementType();
  Value ignore = scalarConstant(b, loc, static_cast<double>(ignoreIndex), labelType);
  Value keep = b.create<NeOp>(loc, labels, ignore);
  Value ones = b.create<SelectOp>(loc, keep, scalarConstant(b, loc, 1.0, element),
                                  scalarConstant(b, loc, 0.0, element));
  SmallVector<int64_t> axes;
  for (int64_t i = 0; i < tensorOf(ones).getRank(); ++i)
    axes.push_back(i);
  return b.create<ReduceSumOp>(loc, ones, b.getDenseI64ArrayAttr(axes), false);
}

/// Reads of the trained parameters become `kiln.param` arguments (appended
/// in `grads` order), as kiln-train-step makes them in the step.
void bindTrainable(func::FuncOp func, ArrayRef<Gradient> grads) {
  llvm::StringMap<SmallVector<ParameterOp>> reads;
  func.walk([&](ParameterOp p) { reads[p.getName()].push_back(p); });
  Builder b(func.getContext());
  for (const Gradient &g : grads) {
    auto it = reads.find(g.name);
    if (it == reads.end()) // not read here (eval after dead-code removal)
      continue;
    ParameterOp first = it->second.front();
    unsigned index = func.getNumArguments();
    func.insertArgument(index, first.getType(), tagged(b, "kiln.param", g.name), first.getLoc());
    for (ParameterOp read : it->second) {
      read.replaceAllUsesWith(func.getArgument(index));
      read.erase();
    }
  }
}

/// Replaces the terminator's operands and the function type's results.
void setResults(func::FuncOp func, ArrayRef<Value> values, ArrayRef<DictionaryAttr> attrs) {
  Block &body = func.getBody().front();
  Operation *ret = body.getTerminator();
  OpBuilder b(ret);
  b.create<func::ReturnOp>(ret->getLoc(), values);
  ret->erase();
  SmallVector<Type> types;
  for (Value v : values)
    types.push_back(v.getType());
  func.setType(FunctionType::get(func.getContext(), func.getArgumentTypes(), types));
  func.setAllResultAttrs(SmallVector<Attribute>(attrs.begin(), attrs.end()));
}

/// Drops every op whose results nothing uses (the backward pass of eval).
void eraseDead(func::FuncOp func) {
  // Users come after their operands' definitions: one pass from the end.
  SmallVector<Operation *> ops;
  for (Operation &op : func.getBody().front().without_terminator())
    ops.push_back(&op);
  for (Operation *op : llvm::reverse(ops))
    if (isOpTriviallyDead(op))
      op->erase();
}

struct LoopProgramsPass final : kiln::impl::LoopProgramsPassBase<LoopProgramsPass> {
  using LoopProgramsPassBase::LoopProgramsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (!main || main.isExternal()) {
      module.emitError("kiln-loop-programs: no @main step function");
      return signalPassFailure();
    }
    for (unsigned i = 0; i < main.getNumArguments(); ++i)
      if (main.getArgAttr(i, "kiln.micro_batch")) {
        main.emitError("kiln-loop-programs: @main already accumulates micro-batches "
                       "(compile-time --grad-accum); the loop programs accumulate at run time");
        return signalPassFailure();
      }
    SmallVector<Gradient> grads;
    for (unsigned i = 1; i < main.getNumResults(); ++i) {
      auto name = main.getResultAttrOfType<StringAttr>(i, "kiln.grad_of");
      if (!name) {
        main.emitError("kiln-loop-programs: result ")
            << i << " is not a gradient; run kiln-autodiff first";
        return signalPassFailure();
      }
      auto type = llvm::cast<RankedTensorType>(main.getResultTypes()[i]);
      grads.push_back({name.str(), type.clone(accumElement(type.getElementType()))});
    }
    if (grads.empty()) {
      main.emitError("kiln-loop-programs: nothing trains: no gradient results");
      return signalPassFailure();
    }
    for (StringRef suffix : {"__accum", "__apply", "__eval"})
      if (module.lookupSymbol(("main" + suffix).str())) {
        main.emitError("kiln-loop-programs: @main") << suffix << " exists already";
        return signalPassFailure();
      }
    Type element = grads.front().accumType.getElementType();
    for (const Gradient &g : grads)
      if (g.accumType.getElementType().isF64())
        element = g.accumType.getElementType();
    buildAccum(module, main, grads, element);
    buildApply(module, main, grads, element);
    buildEval(module, main, grads, element);
  }

  /// Arguments for the accumulators, `grad/<p>`..., `loss`, `tokens`.
  SmallVector<Value> addAccumulatorArgs(func::FuncOp func, ArrayRef<Gradient> grads, Type element) {
    Builder b(func.getContext());
    SmallVector<Value> args;
    auto add = [&](Type type, StringRef name) {
      unsigned index = func.getNumArguments();
      func.insertArgument(index, type, tagged(b, "kiln.accum", name), func.getLoc());
      args.push_back(func.getArgument(index));
    };
    for (const Gradient &g : grads)
      add(g.accumType, "grad/" + g.name);
    auto scalar = RankedTensorType::get({}, element);
    add(scalar, "loss");
    add(scalar, "tokens");
    return args;
  }

  SmallVector<DictionaryAttr> accumulatorAttrs(Builder &b, ArrayRef<Gradient> grads) {
    SmallVector<DictionaryAttr> attrs;
    for (const Gradient &g : grads)
      attrs.push_back(tagged(b, "kiln.accum", "grad/" + g.name));
    attrs.push_back(tagged(b, "kiln.accum", "loss"));
    attrs.push_back(tagged(b, "kiln.accum", "tokens"));
    return attrs;
  }

  void buildAccum(ModuleOp module, func::FuncOp main, ArrayRef<Gradient> grads, Type element) {
    func::FuncOp accum = main.clone();
    accum.setSymName("main__accum");
    module.push_back(accum);
    OpBuilder b(accum.getContext());
    accum->setAttr("kiln.loop_program", b.getStringAttr("accum"));
    accum->removeAttr("kiln.buckets");
    Block &body = accum.getBody().front();
    auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
    SmallVector<Value> outputs(ret.getOperands());
    SmallVector<Value> acc = addAccumulatorArgs(accum, grads, element);
    b.setInsertionPoint(ret);
    Location loc = accum.getLoc();
    Value loss = outputs.front();
    Value n = countedTokens(b, loc, loss, element);
    SmallVector<Value> results = {loss, n};
    SmallVector<DictionaryAttr> attrs = {tagged(b, "kiln.name", "loss"),
                                         tagged(b, "kiln.name", "tokens")};
    for (auto [i, g] : llvm::enumerate(grads)) {
      Value weighted = b.create<MulOp>(loc, widen(b, loc, outputs[i + 1], element), n);
      results.push_back(b.create<AddOp>(loc, acc[i], weighted));
    }
    // A micro-batch without counted tokens has a NaN mean (0/0, as in
    // PyTorch); it adds nothing.
    Value zero = scalarConstant(b, loc, 0.0, element);
    Value some = b.create<GtOp>(loc, n, zero);
    Value lossSum =
        b.create<SelectOp>(loc, some, b.create<MulOp>(loc, widen(b, loc, loss, element), n), zero);
    results.push_back(b.create<AddOp>(loc, acc[grads.size()], lossSum));
    results.push_back(b.create<AddOp>(loc, acc[grads.size() + 1], n));
    attrs.append(accumulatorAttrs(b, grads));
    setResults(accum, results, attrs);
    bindTrainable(accum, grads);
  }

  void buildApply(ModuleOp module, func::FuncOp main, ArrayRef<Gradient> grads, Type element) {
    OpBuilder b(module.getContext());
    b.setInsertionPointToEnd(module.getBody());
    Location loc = main.getLoc();
    auto apply =
        b.create<func::FuncOp>(loc, "main__apply", FunctionType::get(b.getContext(), {}, {}));
    apply->setAttr("kiln.loop_program", b.getStringAttr("apply"));
    Block *body = apply.addEntryBlock();
    b.setInsertionPointToEnd(body);
    b.create<func::ReturnOp>(loc);
    SmallVector<Value> acc = addAccumulatorArgs(apply, grads, element);
    b.setInsertionPoint(body->getTerminator());
    // kiln-train-step threads the parameters it finds read: one read each
    // (the optimizer's use replaces it).
    llvm::StringSet<> seen;
    main.walk([&](ParameterOp p) {
      if (p.getTrainable() && seen.insert(p.getName()).second)
        b.clone(*p.getOperation());
    });
    Value tokens = acc[grads.size() + 1];
    SmallVector<Value> results = {b.create<DivOp>(loc, acc[grads.size()], tokens)};
    SmallVector<DictionaryAttr> attrs = {tagged(b, "kiln.name", "loss")};
    for (auto [i, g] : llvm::enumerate(grads)) {
      results.push_back(b.create<DivOp>(loc, acc[i], tokens));
      attrs.push_back(tagged(b, "kiln.grad_of", g.name));
    }
    for (Value a : acc)
      results.push_back(splatLike(b, loc, 0.0, tensorOf(a)));
    attrs.append(accumulatorAttrs(b, grads));
    setResults(apply, results, attrs);
  }

  void buildEval(ModuleOp module, func::FuncOp main, ArrayRef<Gradient> grads, Type element) {
    func::FuncOp eval = main.clone();
    eval.setSymName("main__eval");
    module.push_back(eval);
    OpBuilder b(eval.getContext());
    eval->setAttr("kiln.loop_program", b.getStringAttr("eval"));
    eval->removeAttr("kiln.buckets");
    // Evaluation keeps every activation: dropout is the identity.
    eval.walk([](DropoutOp op) {
      op.replaceAllUsesWith(op.getInput());
      op.erase();
    });
    Block &body = eval.getBody().front();
    auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
    b.setInsertionPoint(ret);
    Value loss = ret.getOperand(0);
    Value n = countedTokens(b, eval.getLoc(), loss, element);
    setResults(eval, {loss, n}, {tagged(b, "kiln.name", "loss"), tagged(b, "kiln.name", "tokens")});
    eraseDead(eval);
    bindTrainable(eval, grads);
    // A seed argument only dropout read is left unused: it stays, so the
    // runtime feeds every program's seeds the same way.
  }
};

} // namespace
