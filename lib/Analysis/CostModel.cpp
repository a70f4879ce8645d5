//===- CostModel.cpp - FLOPs of graph ops ---------------------------------===//

#include "kiln/Analysis/CostModel.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

using namespace mlir;

namespace kiln {
namespace {

std::optional<int64_t> evaluate(Dim d, const SymbolValues &symbols) {
  return evaluateDim(d, [&](StringRef name) -> std::optional<int64_t> {
    auto it = symbols.find(name);
    if (it == symbols.end())
      return std::nullopt;
    return it->second;
  });
}

int64_t elements(Value v, const SymbolValues &symbols) {
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  if (!type)
    return 0;
  int64_t count = 1;
  for (Dim d : getDims(type))
    count *= std::max<int64_t>(evaluate(d, symbols).value_or(0), 0);
  return count;
}

int64_t dimAt(Value v, int64_t index, const SymbolValues &symbols) {
  auto type = llvm::cast<RankedTensorType>(v.getType());
  if (index < 0)
    index += type.getRank();
  return evaluate(getDim(type, index), symbols).value_or(0);
}

} // namespace

bool isExpensiveToRecompute(Operation *op) { return llvm::isa<MatmulOp, AttentionOp>(op); }

int64_t estimateFlops(Operation *op, const SymbolValues &symbols) {
  if (auto matmul = llvm::dyn_cast<MatmulOp>(op)) {
    // 2 * (result elements) * contraction length.
    int64_t k = dimAt(matmul.getLhs(), matmul.getTransposeA() ? -2 : -1, symbols);
    return 2 * elements(matmul.getResult(), symbols) * k;
  }
  if (auto attention = llvm::dyn_cast<AttentionOp>(op)) {
    // Scores q k^T and the weighted sum with v, per query head.
    int64_t keys = dimAt(attention.getKey(),
                         attentionSeqDim(isSeqMajor(attention, kAttnKey)), symbols);
    int64_t d = dimAt(attention.getQuery(), -1, symbols);
    int64_t dv = dimAt(attention.getValue(), -1, symbols);
    int64_t rows = elements(attention.getQuery(), symbols) / std::max<int64_t>(d, 1);
    return 2 * rows * keys * (d + dv) + 5 * rows * keys;
  }
  // The fused LM head: the logits GEMM (and the hidden / weight gradient
  // GEMMs), plus the row statistics.
  auto head = [&](Value hidden, Value weight, bool transpose, int64_t gemms) {
    int64_t rows = dimAt(hidden, 0, symbols), width = dimAt(hidden, 1, symbols);
    int64_t vocab = dimAt(weight, transpose ? 0 : 1, symbols);
    return gemms * 2 * rows * width * vocab + 5 * rows * vocab;
  };
  if (auto fused = llvm::dyn_cast<LinearCrossEntropyOp>(op))
    return head(fused.getHidden(), fused.getWeight(), fused.getTransposeWeight(), 1);
  if (auto fused = llvm::dyn_cast<LinearCrossEntropyGradOp>(op))
    return head(fused.getHidden(), fused.getWeight(), fused.getTransposeWeight(),
                fused.getWeightGrad() ? 3 : 2);
  if (llvm::isa<ReshapeOp, SqueezeOp, UnsqueezeOp, TransposeOp, SliceOp, ConcatOp, SplitOp,
                ExpandOp, PadOp, GatherOp, GatherElementsOp, GatherNdOp, ParameterOp, ConstantOp,
                CastOp, IotaOp>(op))
    return 0; // Data movement only.
  if (llvm::isa<SoftmaxOp, LogSoftmaxOp, LayerNormOp, RmsNormOp, RmsNormWithRstdOp,
                CrossEntropyOp>(op))
    return 5 * elements(op->getOperand(0), symbols);
  if (llvm::isa<ReduceSumOp, ReduceMeanOp, ReduceMaxOp, CumsumOp>(op))
    return elements(op->getOperand(0), symbols);
  int64_t flops = 0;
  for (Value result : op->getResults())
    flops += elements(result, symbols);
  return flops;
}

} // namespace kiln
