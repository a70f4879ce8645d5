//===- LoraConcat.cpp - One down-projection GEMM per shared LoRA input ----===//
//
// Adapters on linear layers that read the same input (q/k/v, gate/up) each
// project it down to rank r: GEMMs with n = r (16) run at a small fraction
// of the GPU's rate. Their A matrices concatenated along the rank make one
// GEMM with n = sum of the ranks, and each adapter reads its columns of the
// product. The parameters stay separate (PEFT names, per-adapter optimizer
// state); the concat of A is a small loop kernel (it absorbs the bf16 cast
// of the fp32 masters), and autodiff turns the slices and the concat into
// one dA GEMM and one dX GEMM per group.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "llvm/ADT/MapVector.h"

namespace kiln {
#define GEN_PASS_DEF_LORACONCATPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// The lora_A parameter `v` is (directly or through casts), or null.
ParameterOp loraAParameter(Value v) {
  while (auto cast = v.getDefiningOp<CastOp>())
    v = cast.getOperand();
  auto param = v.getDefiningOp<ParameterOp>();
  if (!param || !param.getName().ends_with(".lora_A.weight"))
    return nullptr;
  return param;
}

/// The value a down projection's input is, seen through a cast (each
/// adapter of a bf16 layer casts the input to its fp32 type itself).
std::pair<Value, Type> inputKey(Value lhs) {
  if (auto cast = lhs.getDefiningOp<CastOp>())
    return {cast.getOperand(), lhs.getType()};
  return {lhs, lhs.getType()};
}

/// Moves `v`'s defining chain (casts of a parameter: no other operands)
/// before `point` when it is after it.
void hoistBefore(Value v, Operation *point) {
  SmallVector<Operation *> chain;
  for (Operation *op = v.getDefiningOp(); op; ) {
    chain.push_back(op);
    if (op->getNumOperands() == 0)
      break;
    op = op->getOperand(0).getDefiningOp();
  }
  for (Operation *op : llvm::reverse(chain))
    if (point->isBeforeInBlock(op))
      op->moveBefore(point);
}

struct LoraConcatPass final : kiln::impl::LoraConcatPassBase<LoraConcatPass> {
  using LoraConcatPassBase::LoraConcatPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    // Down projections x A^T of one input, in program order.
    llvm::MapVector<std::pair<Value, Type>, SmallVector<MatmulOp>> groups;
    func.walk([&](MatmulOp mm) {
      if (mm.getTransposeA() || !mm.getTransposeB() || !loraAParameter(mm.getRhs()))
        return;
      auto rhs = cast<RankedTensorType>(mm.getRhs().getType());
      if (rhs.getRank() != 2 || rhs.isDynamicDim(0) ||
          mm->getBlock() != mm.getRhs().getParentBlock())
        return;
      groups[inputKey(mm.getLhs())].push_back(mm);
    });
    for (auto &[key, members] : groups) {
      // Same block, same rhs element type (the concat needs one type).
      llvm::erase_if(members, [&](MatmulOp mm) {
        return mm->getBlock() != members.front()->getBlock() ||
               cast<RankedTensorType>(mm.getRhs().getType()).getElementType() !=
                   cast<RankedTensorType>(members.front().getRhs().getType()).getElementType();
      });
      if (members.size() < 2)
        continue;
      concatenate(members);
    }
  }

  static void concatenate(ArrayRef<MatmulOp> members) {
    MatmulOp first = members.front();
    MLIRContext *context = first.getContext();
    Location loc = first.getLoc();
    Value input = first.getLhs();
    SmallVector<Value> as;
    for (MatmulOp mm : members) {
      hoistBefore(mm.getRhs(), first);
      as.push_back(mm.getRhs());
    }
    OpBuilder b(first);
    Value catA = b.create<ConcatOp>(loc, as, static_cast<uint64_t>(0));
    Value down = b.create<MatmulOp>(loc, input, catA, false, true);
    auto downType = cast<RankedTensorType>(down.getType());
    int64_t rank = downType.getRank();
    int64_t offset = 0;
    for (MatmulOp mm : members) {
      auto type = cast<RankedTensorType>(mm.getType());
      DimList starts(rank, dimConst(context, 0));
      starts[rank - 1] = dimConst(context, offset);
      offset += type.getShape().back();
      SmallVector<int64_t> steps(rank, 1);
      // Each adapter's columns, right where its own projection was.
      b.setInsertionPoint(mm);
      Value columns = b.create<SliceOp>(mm.getLoc(), type, down,
                                        DimsAttr::get(context, starts),
                                        b.getDenseI64ArrayAttr(steps));
      Value lhs = mm.getLhs();
      mm.getResult().replaceAllUsesWith(columns);
      mm.erase();
      if (lhs != input && lhs.use_empty())
        lhs.getDefiningOp()->erase();
    }
  }
};

} // namespace
