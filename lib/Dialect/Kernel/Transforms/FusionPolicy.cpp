//===- FusionPolicy.cpp - Reductions and bias adds that join a GEMM -------===//

#include "kiln/Dialect/Kernel/FusionPolicy.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

using namespace mlir;

namespace kiln::kernel {

Operation *gemmOfBatchSum(Operation *op) {
  auto sum = dyn_cast<ReduceSumOp>(op);
  if (!sum || sum.getKeepdim())
    return nullptr;
  auto mm = sum.getInput().getDefiningOp<MatmulOp>();
  if (!mm || !mm.getTransposeA() || mm.getTransposeB() || !mm->hasOneUse())
    return nullptr;
  auto type = [](Value v) { return cast<RankedTensorType>(v.getType()); };
  RankedTensorType a = type(mm.getLhs()), b = type(mm.getRhs()), c = type(mm.getResult());
  if (a.getRank() < 3 || a.getRank() != b.getRank() || a.getRank() != c.getRank())
    return nullptr;
  int64_t batchRank = c.getRank() - 2;
  if ((int64_t)sum.getAxes().size() != batchRank)
    return nullptr;
  for (int64_t i = 0; i < batchRank; ++i)
    if (sum.getAxes()[i] != i)
      return nullptr;
  // Same batch dims on both sides: rows of consecutive batches are
  // consecutive rows of one [B*S, K] / [B*S, N] matrix.
  DimList da = getDims(a), db = getDims(b);
  for (int64_t i = 0; i < batchRank; ++i)
    if (da[i] != db[i])
      return nullptr;
  return mm;
}

} // namespace kiln::kernel

namespace kiln::kernel {

std::optional<GemmEpilogue> gemmEpilogueOf(Operation *op) {
  // Walk back to the matmul, then check the chain forward from it.
  Operation *start = op;
  if (isa<ReluOp, GeluOp>(start) && start->getOperand(0).getDefiningOp<AddOp>())
    start = start->getOperand(0).getDefiningOp();
  if (auto add = dyn_cast<AddOp>(start)) {
    for (Value side : {add.getLhs(), add.getRhs()})
      if (auto mm = side.getDefiningOp<MatmulOp>()) {
        start = mm;
        break;
      }
  }
  auto mm = dyn_cast<MatmulOp>(start);
  if (!mm || !mm->hasOneUse())
    return std::nullopt;
  auto add = dyn_cast<AddOp>(*mm->user_begin());
  if (!add)
    return std::nullopt;
  Value bias = add.getLhs() == mm.getResult() ? add.getRhs() : add.getLhs();
  auto type = [](Value v) { return cast<RankedTensorType>(v.getType()); };
  RankedTensorType out = type(mm.getResult()), biasType = type(bias);
  if (bias == mm.getResult() || biasType.getRank() != 1 || add.getType() != out ||
      biasType.getElementType() != out.getElementType() ||
      getDim(biasType, 0) != getDim(out, out.getRank() - 1))
    return std::nullopt;
  // No batch left after lowering: 2-D, or the right operand is shared.
  RankedTensorType a = type(mm.getLhs()), b = type(mm.getRhs());
  bool plain = a.getRank() == 2 && b.getRank() == 2;
  bool folded = b.getRank() == 2 && !mm.getTransposeA();
  if (!plain && !folded)
    return std::nullopt;
  GemmEpilogue epilogue;
  epilogue.matmul = mm;
  epilogue.bias = bias;
  epilogue.last = add;
  epilogue.kind = Epilogue::bias;
  if (add->hasOneUse()) {
    Operation *next = *add->user_begin();
    if (isa<ReluOp>(next)) {
      epilogue.last = next;
      epilogue.kind = Epilogue::bias_relu;
    } else if (auto gelu = dyn_cast<GeluOp>(next);
               gelu && gelu.getApproximate() == GeluApproximation::tanh) {
      epilogue.last = next;
      epilogue.kind = Epilogue::bias_gelu;
    }
  }
  // `op` must be on the chain.
  if (op != mm && op != add && op != epilogue.last)
    return std::nullopt;
  return epilogue;
}

} // namespace kiln::kernel
