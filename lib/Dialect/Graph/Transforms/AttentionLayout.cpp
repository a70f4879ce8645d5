//===- AttentionLayout.cpp - attention reads the heads' natural layout ----===//
//
// The projections produce heads as [B, S, H, D]; attention took [B, H, S, D],
// so every q/k/v (and the output, dO and the gradients) went through a
// transpose that only copies. This pass folds a [0, 2, 1, 3] transpose
// between a projection and an attention operand, or between an attention
// result and its users, into the op's `seq_major` flags: the op reads or
// writes that tensor [B, S, H, D] itself. Ops run in program order, so the
// forward's output, once seq-major, reaches attention_grad's `out` through a
// transpose this pass inserted and folds there too.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/Passes.h"

#include "mlir/IR/Builders.h"

namespace kiln {
#define GEN_PASS_DEF_ATTENTIONLAYOUTPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

constexpr int64_t kSwap[] = {0, 2, 1, 3};

/// A transpose that swaps [B, S, H, D] and [B, H, S, D].
bool isSeqHeadSwap(Operation *op) {
  auto transpose = dyn_cast_or_null<TransposeOp>(op);
  return transpose && transpose.getPerm() == ArrayRef<int64_t>(kSwap) &&
         transpose.getResult().getType() ==
             swapSeqAndHeads(llvm::cast<RankedTensorType>(transpose.getInput().getType()));
}

/// Operand index -> seq_major role (-1: the mask) of an attention op.
SmallVector<int> operandRoles(Operation *op) {
  if (auto attention = dyn_cast<AttentionOp>(op)) {
    SmallVector<int> roles = {kAttnQuery, kAttnKey, kAttnValue};
    if (attention.getMask())
      roles.push_back(-1);
    return roles;
  }
  auto grad = cast<AttentionGradOp>(op);
  SmallVector<int> roles = {kGradQuery, kGradKey, kGradValue};
  if (grad.getMask())
    roles.push_back(-1);
  roles.push_back(kGradDout);
  if (grad.getOut())
    roles.push_back(kGradOut);
  return roles;
}

SmallVector<unsigned> resultRoles(Operation *op) {
  if (isa<AttentionOp>(op))
    return {kAttnResult};
  return {kGradQueryGrad, kGradKeyGrad, kGradValueGrad};
}

void foldTransposes(Operation *op) {
  unsigned roles = isa<AttentionOp>(op) ? kAttnRoles : kGradRoles;
  SmallVector<bool> flags(roles, false);
  for (unsigned r = 0; r < roles; ++r)
    flags[r] = isSeqMajor(op, r);

  SmallVector<Value> operands(op->getOperands());
  SmallVector<Operation *> folded;
  for (auto [i, role] : llvm::enumerate(operandRoles(op))) {
    Operation *def = operands[i].getDefiningOp();
    if (role < 0 || !isSeqHeadSwap(def))
      continue;
    operands[i] = cast<TransposeOp>(def).getInput();
    flags[role] = !flags[role];
    folded.push_back(def);
  }
  SmallVector<Type> types(op->getResultTypes());
  SmallVector<bool> swapped;
  for (auto [i, role] : llvm::enumerate(resultRoles(op))) {
    bool any = llvm::any_of(op->getResult(i).getUsers(), isSeqHeadSwap);
    swapped.push_back(any);
    if (!any)
      continue;
    types[i] = swapSeqAndHeads(llvm::cast<RankedTensorType>(types[i]));
    flags[role] = !flags[role];
  }
  if (folded.empty() && !llvm::is_contained(swapped, true))
    return;

  OpBuilder builder(op);
  OperationState state(op->getLoc(), op->getName(), operands, types, op->getAttrs());
  Operation *rewritten = builder.create(state);
  rewritten->setAttr("seq_major", builder.getDenseBoolArrayAttr(flags));
  builder.setInsertionPointAfter(rewritten);
  for (auto [i, swap] : llvm::enumerate(swapped)) {
    Value old = op->getResult(i), now = rewritten->getResult(i);
    if (!swap) {
      old.replaceAllUsesWith(now);
      continue;
    }
    // Users that transposed the result back read it directly; the others
    // (attention_grad's `out`, a kept activation) get one transpose.
    Value back;
    for (OpOperand &use : llvm::make_early_inc_range(old.getUses())) {
      Operation *user = use.getOwner();
      if (isSeqHeadSwap(user)) {
        user->getResult(0).replaceAllUsesWith(now);
        user->erase();
        continue;
      }
      if (!back)
        back = builder.create<TransposeOp>(op->getLoc(), old.getType(), now,
                                           builder.getDenseI64ArrayAttr(kSwap));
      use.set(back);
    }
  }
  op->erase();
  for (Operation *def : folded)
    if (def->use_empty())
      def->erase();
}

struct AttentionLayoutPass final : kiln::impl::AttentionLayoutPassBase<AttentionLayoutPass> {
  void runOnOperation() override {
    SmallVector<Operation *> ops;
    getOperation().walk([&](Operation *op) {
      if (isa<AttentionOp, AttentionGradOp>(op))
        ops.push_back(op);
    });
    for (Operation *op : ops)
      foldTransposes(op);
  }
};

} // namespace
