//===- AttentionMask.cpp - What an attention's mask keeps -----------------===//
//
// An exporter that builds the causal mask from iota/compare/where chains
// leaves kiln.attention with a mask operand instead of `causal`, and one
// that has no padding input still builds an all-keep mask; the shapes of
// the two are the same. A mask computed from sizes and constants alone is
// therefore cloned into a function of its own, specialized to a small
// size, and run on the reference interpreter; the kept entries say which
// it is.
//
//===----------------------------------------------------------------------===//

#include "kiln/Analysis/ModelSummary.h"

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Interp/Interpreter.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

#include <cmath>

using namespace mlir;

namespace kiln {
namespace {

/// Every symbol of the mask becomes this (batch too: one row of masks is
/// as good as many).
constexpr int64_t kProbeSize = 5;

/// A weight source for a mask that reads no weights.
struct NoWeights final : WeightSource {
  absl::StatusOr<HostTensor> load(llvm::StringRef) override {
    return absl::NotFoundError("no weights");
  }
};

/// The ops `mask` is computed by, in program order; none when one of them
/// reads a weight, an argument or an op with regions.
std::optional<SmallVector<Operation *>> maskSlice(Value mask) {
  llvm::DenseSet<Operation *> slice;
  SmallVector<Value> work = {mask};
  while (!work.empty()) {
    Value v = work.pop_back_val();
    Operation *def = v.getDefiningOp();
    if (!def)
      return std::nullopt;
    if (isa<ParameterOp, OpaqueOp>(def) || def->getNumRegions() > 0)
      return std::nullopt;
    if (!slice.insert(def).second)
      continue;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  SmallVector<Operation *> ordered(slice.begin(), slice.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  return ordered;
}

/// Whether entry (i, j) of the last two dims keeps the score: true for an
/// i1 mask, 0 for an additive one (a large negative drops it).
std::optional<bool> keeps(const HostTensor &mask, int64_t index) {
  if (!mask.isFloat())
    return mask.getInt(index) != 0;
  double v = mask.getDouble(index);
  if (v == 0)
    return true;
  if (v <= -1e4 || std::isinf(v))
    return false;
  return std::nullopt; // a soft bias: no keep/drop pattern
}

AttentionMask evaluate(Value mask) {
  std::optional<SmallVector<Operation *>> slice = maskSlice(mask);
  if (!slice)
    return AttentionMask::Pattern;
  MLIRContext *context = mask.getContext();
  OwningOpRef<ModuleOp> module = ModuleOp::create(UnknownLoc::get(context));
  OpBuilder b(module->getBodyRegion());
  auto probe =
      b.create<func::FuncOp>(mask.getLoc(), "mask_probe", b.getFunctionType({}, {mask.getType()}));
  b.setInsertionPointToStart(probe.addEntryBlock());
  IRMapping mapping;
  for (Operation *op : *slice)
    b.clone(*op, mapping);
  b.create<func::ReturnOp>(mask.getLoc(), mapping.lookup(mask));
  llvm::StringMap<int64_t> values;
  probe.walk([&](Operation *op) {
    for (Type type : op->getResultTypes())
      if (auto tensor = dyn_cast<RankedTensorType>(type))
        for (Dim d : getDims(tensor))
          for (StringRef symbol : dimSymbols(d))
            values[symbol] = kProbeSize;
  });
  specializeSymbols(probe, values);
  NoWeights weights;
  absl::StatusOr<InterpreterResult> result = interpret(probe, {}, weights);
  if (!result.ok() || result->outputs.size() != 1)
    return AttentionMask::Pattern;
  const HostTensor &out = result->outputs.front();
  size_t rank = out.shape.size();
  if (rank < 2 || out.shape[rank - 1] != out.shape[rank - 2])
    return AttentionMask::Pattern;
  int64_t n = out.shape[rank - 1], matrices = out.numel() / std::max<int64_t>(n * n, 1);
  bool all = true, causal = true;
  for (int64_t m = 0; m < matrices; ++m)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        std::optional<bool> keep = keeps(out, (m * n + i) * n + j);
        if (!keep)
          return AttentionMask::Pattern;
        all &= *keep;
        causal &= *keep == (j <= i);
      }
  return all ? AttentionMask::AllKeep : causal ? AttentionMask::Causal : AttentionMask::Pattern;
}

} // namespace

bool dependsOnArgument(Value value, func::FuncOp func) {
  llvm::DenseSet<Value> seen;
  SmallVector<Value> work = {value};
  Block *entry = &func.getBody().front();
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (arg.getOwner() == entry)
        return true;
      continue;
    }
    for (Value operand : v.getDefiningOp()->getOperands())
      work.push_back(operand);
  }
  return false;
}

StringRef attentionMaskName(AttentionMask mask) {
  switch (mask) {
  case AttentionMask::None: return "none";
  case AttentionMask::Causal: return "causal pattern";
  case AttentionMask::AllKeep: return "all-keep";
  case AttentionMask::Pattern: return "fixed pattern";
  case AttentionMask::Input: return "input";
  }
  return "none";
}

AttentionMask classifyAttentionMask(Value mask, func::FuncOp func) {
  if (dependsOnArgument(mask, func))
    return AttentionMask::Input;
  return evaluate(mask);
}

} // namespace kiln
