//===- RecomputeDequantized.cpp - Dequantize again in the backward pass ---===//
//
// A quantized weight's full-precision copy is cheap to make again (its codes
// and scales are parameters) and large to keep: QLoRA exists to not hold it.
// So the backward pass dequantizes anew instead of reading the forward's
// copy, whatever the remat budget says.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/Passes.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <functional>

namespace kiln {
#define GEN_PASS_DEF_RECOMPUTEDEQUANTIZEDPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

bool isLeaf(Value v) {
  Operation *def = v.getDefiningOp();
  return def && isa<ParameterOp, ConstantOp>(def);
}

struct RecomputeDequantizedPass final
    : kiln::impl::RecomputeDequantizedPassBase<RecomputeDequantizedPass> {
  /// Ops whose results derive from quantized weights alone.
  llvm::DenseSet<Operation *> derived;

  bool isDerived(Value v) {
    Operation *def = v.getDefiningOp();
    return def && derived.contains(def);
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    std::optional<llvm::DenseSet<Operation *>> forwardOps = forwardPart(func);
    if (!forwardOps)
      return;
    const llvm::DenseSet<Operation *> &forward = *forwardOps;
    Block &body = func.getBody().front();

    for (Operation &op : body.without_terminator()) {
      bool dequantize = isa<Nf4DequantizeOp, DequantizeBlockwise8bitOp>(op);
      // What follows a dequantize on its way to the matmul: layout changes,
      // casts, and elementwise arithmetic with other stored values (double
      // quantization adds the absmax mean back to the 8-bit-dequantized
      // absmax before the NF4 dequantize reads it).
      bool follows = isa<TransposeOp, ReshapeOp, CastOp, AddOp, SubOp, MulOp>(op);
      if (!dequantize && !follows)
        continue;
      bool anyDerived = false, allKnown = true;
      for (Value operand : op.getOperands()) {
        anyDerived |= isDerived(operand);
        allKnown &= isDerived(operand) || isLeaf(operand);
      }
      if (allKnown && (dequantize || anyDerived))
        derived.insert(&op);
    }

    // Each derived forward value a backward op reads is cloned, once, right
    // before its first backward reader; every backward reader takes the clone.
    llvm::DenseMap<Value, Value> clones;
    std::function<Value(Value, OpBuilder &)> cloneOf = [&](Value v, OpBuilder &b) -> Value {
      if (!isDerived(v))
        return v;
      if (Value known = clones.lookup(v))
        return known;
      Operation *def = v.getDefiningOp();
      IRMapping map;
      for (Value operand : def->getOperands())
        map.map(operand, cloneOf(operand, b));
      Operation *copy = b.clone(*def, map);
      copy->setAttr("kiln.recomputed", b.getUnitAttr());
      for (auto [from, to] : llvm::zip(def->getResults(), copy->getResults()))
        clones[from] = to;
      return clones.lookup(v);
    };
    unsigned recomputed = 0;
    for (Operation &op : llvm::make_early_inc_range(body.without_terminator())) {
      if (forward.contains(&op) || op.hasAttr("kiln.recomputed"))
        continue;
      for (OpOperand &use : op.getOpOperands()) {
        Operation *def = use.get().getDefiningOp();
        if (!def || !derived.contains(def) || !forward.contains(def))
          continue;
        OpBuilder b(&op);
        size_t before = clones.size();
        use.set(cloneOf(use.get(), b));
        recomputed += clones.size() > before;
      }
    }
    if (recomputed)
      func->setAttr("kiln.recomputed_dequantized", OpBuilder(func).getI64IntegerAttr(recomputed));
  }
};

} // namespace
