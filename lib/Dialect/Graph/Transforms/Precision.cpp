//===- Precision.cpp - bf16 compute with fp32 master weights --------------===//
//
// Retypes the forward graph in place: each float value gets one cast to the
// precision its users need, so the IR shows every conversion explicitly and
// autodiff differentiates them like any other op. Index arithmetic —
// values computed from integer positions and small constants alone (RoPE's
// angles and their cos/sin) — stays fp32 (findIndexArithmetic).
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/InitProgram.h"
#include "kiln/Dialect/Graph/Passes.h"

#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

namespace kiln {
#define GEN_PASS_DEF_PRECISIONPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

bool isF32Tensor(Type type) {
  auto t = llvm::dyn_cast<RankedTensorType>(type);
  return t && t.getElementType().isF32();
}

RankedTensorType withElement(Type type, Type element) {
  return llvm::cast<RankedTensorType>(type).clone(element);
}

/// Frozen parameters up to this many elements that index arithmetic reads
/// stay fp32: RoPE's inv_freq, ALiBi's slopes (the artifact's inline values
/// go to 4096 too). Weights are far larger.
constexpr int64_t kSmallConstantElements = 4096;

bool isFloatTensor(Type type) {
  auto t = llvm::dyn_cast<RankedTensorType>(type);
  return t && llvm::isa<FloatType>(t.getElementType());
}

/// Index arithmetic: float values computed from integer data — a cast of
/// i8..i64 (positions), a float iota — and small constants, never from
/// activations or weights: RoPE's pos * inv_freq and its cos/sin, ALiBi's
/// slope * distance. bf16 holds integers exactly only up to 256, so
/// position 2001 would be 2000 and its highest-frequency angle off by a
/// radian; PyTorch computes these tables in fp32 (transformers turns
/// autocast off for rotary embeddings) and casts cos/sin to the
/// activations' dtype where they are used, which castTo does here. Returns
/// the ops (and small parameters) that stay fp32: the index arithmetic and
/// the constant chains feeding it. Boolean masks are not seeds: their
/// float forms are 0/-inf, exact in bf16.
llvm::DenseSet<Operation *> findIndexArithmetic(Block &body) {
  llvm::DenseSet<Operation *> index, constant;
  auto isConstantLike = [&](Value v) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return false;
    if (llvm::isa<ConstantOp>(def) || constant.contains(def))
      return true;
    auto param = llvm::dyn_cast<ParameterOp>(def);
    return param && !param.getTrainable() && param.getType().hasStaticShape() &&
           param.getType().getNumElements() <= kSmallConstantElements;
  };
  for (Operation &op : body.without_terminator()) {
    if (llvm::isa<ParameterOp, ConstantOp>(op) || !llvm::any_of(op.getResultTypes(), isFloatTensor))
      continue;
    if (auto cast = llvm::dyn_cast<CastOp>(op)) {
      auto from = llvm::cast<RankedTensorType>(cast.getInput().getType()).getElementType();
      if (from.isInteger() && from.getIntOrFloatBitWidth() > 1) {
        index.insert(&op);
        continue;
      }
    }
    if (llvm::isa<IotaOp>(op)) {
      index.insert(&op);
      continue;
    }
    bool anyIndex = false, anyFloat = false, allKnown = true;
    for (Value v : op.getOperands()) {
      if (!isFloatTensor(v.getType()))
        continue;
      anyFloat = true;
      Operation *def = v.getDefiningOp();
      if (def && index.contains(def))
        anyIndex = true;
      else if (!isConstantLike(v))
        allKnown = false;
    }
    if (!anyFloat || !allKnown)
      continue;
    (anyIndex ? index : constant).insert(&op);
  }
  // What stays fp32: the index arithmetic, and the constants it reads.
  llvm::DenseSet<Operation *> keep = index;
  SmallVector<Operation *> work(index.begin(), index.end());
  while (!work.empty()) {
    Operation *op = work.pop_back_val();
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp(); def && !keep.contains(def) &&
                                              isFloatTensor(v.getType()) && isConstantLike(v) &&
                                              !llvm::isa<ConstantOp>(def))
        if (keep.insert(def).second)
          work.push_back(def);
  }
  return keep;
}

struct PrecisionPass final : kiln::impl::PrecisionPassBase<PrecisionPass> {
  using PrecisionPassBase::PrecisionPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (isInitProgram(func)) // runs once at load, not in the step
      return;
    if (compute == "fp32")
      return;
    if (compute != "bf16") {
      func.emitError("unknown compute precision '") << compute << "' (bf16 or fp32)";
      return signalPassFailure();
    }
    llvm::StringSet<> keep;
    if (fp32Ops.empty())
      keep = {"softmax", "log_softmax", "layer_norm", "rms_norm", "cross_entropy"};
    for (const std::string &name : fp32Ops)
      keep.insert(name);

    MLIRContext *ctx = &getContext();
    Type low = BFloat16Type::get(ctx), high = Float32Type::get(ctx);
    OpBuilder b(ctx);
    // One cast per (value, precision), placed right after the value.
    llvm::DenseMap<std::pair<Value, Type>, Value> casts;
    auto castTo = [&](Value v, Type element) -> Value {
      auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
      if (!type || !llvm::isa<FloatType>(type.getElementType()) || type.getElementType() == element)
        return v;
      auto [it, inserted] = casts.try_emplace({v, element}, Value());
      if (inserted) {
        b.setInsertionPointAfterValue(v);
        it->second = b.create<CastOp>(v.getLoc(), type.clone(element), v);
      }
      return it->second;
    };

    Block &body = func.getBody().front();
    llvm::DenseSet<Operation *> indexArithmetic = findIndexArithmetic(body);
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator())
      ops.push_back(&op);
    for (Operation *op : ops) {
      if (auto param = llvm::dyn_cast<ParameterOp>(op)) {
        // Trainable weights stay fp32 masters; frozen ones are stored low,
        // but for the small constants of index arithmetic.
        if (!param.getTrainable() && isF32Tensor(param.getType()) && !indexArithmetic.contains(op))
          param.getResult().setType(withElement(param.getType(), low));
        continue;
      }
      if (llvm::isa<ConstantOp>(op))
        continue; // Cast where used, so integer/float literals stay exact.
      bool anyFloat = llvm::any_of(op->getResultTypes(), [](Type t) {
        auto tensor = llvm::dyn_cast<RankedTensorType>(t);
        return tensor && llvm::isa<FloatType>(tensor.getElementType());
      });
      if (llvm::isa<CastOp>(op))
        continue; // A cast already says its precision.
      if (auto gather = llvm::dyn_cast<GatherOp>(op)) {
        // A gather moves data: it keeps its table's precision. An fp32
        // master embedding is then not cast whole every step (the users cast
        // the gathered rows), and its gradient, a scatter-add, accumulates
        // in fp32 as PyTorch's (autocast leaves embedding in fp32).
        auto data = llvm::cast<RankedTensorType>(gather.getData().getType());
        gather.getResult().setType(withElement(gather.getType(), data.getElementType()));
        continue;
      }
      if (!anyFloat) {
        // Comparisons and the like: float operands must agree with each
        // other, so mixed ones meet in fp32.
        llvm::SmallPtrSet<Type, 2> elements;
        for (Value v : op->getOperands())
          if (auto t = llvm::dyn_cast<RankedTensorType>(v.getType());
              t && llvm::isa<FloatType>(t.getElementType()))
            elements.insert(t.getElementType());
        if (elements.size() > 1)
          for (OpOperand &operand : op->getOpOperands())
            operand.set(castTo(operand.get(), high));
        continue;
      }
      StringRef name = op->getName().stripDialect();
      Type element = keep.contains(name) || indexArithmetic.contains(op) ? high : low;
      for (OpOperand &operand : op->getOpOperands())
        operand.set(castTo(operand.get(), element));
      for (Value r : op->getResults())
        if (isF32Tensor(r.getType()) ||
            llvm::isa<BFloat16Type>(llvm::cast<RankedTensorType>(r.getType()).getElementType()))
          r.setType(withElement(r.getType(), element));
    }
    // Results keep the function's signature.
    auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
    for (auto [operand, type] : llvm::zip(ret->getOpOperands(), func.getResultTypes())) {
      auto tensor = llvm::dyn_cast<RankedTensorType>(type);
      if (tensor && llvm::isa<FloatType>(tensor.getElementType()))
        operand.set(castTo(operand.get(), tensor.getElementType()));
    }
    // Users of a value whose type changed may still expect the old one:
    // re-verify so a mismatch is an error at its op, not a silent miscompile.
    if (failed(verify(func)))
      signalPassFailure();
  }
};

} // namespace
