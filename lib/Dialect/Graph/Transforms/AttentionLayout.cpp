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
// First (through-elementwise), transposes move through layout-neutral ops
// toward the attention ops: RoPE sits between q's transpose and attention,
// and its gradient between dQ and the transpose back. Run in [B, H, S, D],
// its kernels read (backward) or write (forward) 128-byte pieces at
// head-sized strides; in [B, S, H, D] they stream.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "mlir/IR/Builders.h"
#include "llvm/ADT/SetVector.h"

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


/// Ops that compute the same thing in either layout once their operands
/// swap: elementwise ops (numpy broadcasting for the binary ones), slices
/// and concats, on rank-4 values.
bool isLayoutNeutral(Operation *op) {
  if (op->getNumResults() != 1)
    return false;
  auto type = llvm::dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!type || type.getRank() != 4)
    return false;
  if (isa<SliceOp, ConcatOp, CastOp, AddOp, SubOp, MulOp, DivOp, MaxOp, MinOp, PowOp>(op))
    return true;
  return op->hasTrait<OpTrait::Elementwise>() && op->getNumOperands() == 1;
}

/// A broadcast input of a neutral op whose head or sequence extent is 1
/// (right-aligned to rank 4): in the other layout it is a reshape of itself.
/// Returns false for inputs that span both (those belong to the group).
bool isSwappableBroadcast(Value v) {
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  if (!type || type.getRank() > 4)
    return false;
  DimList dims = getDims(type);
  while (dims.size() < 4)
    dims.insert(dims.begin(), dimConst(type.getContext(), 1));
  return isConst(dims[1], 1) || isConst(dims[2], 1);
}

/// The same input in the other layout: unchanged when both extents are 1,
/// else reshaped (the unit extent moves; no element moves).
Value swapBroadcast(OpBuilder &b, Location loc, Value v) {
  auto type = llvm::cast<RankedTensorType>(v.getType());
  DimList dims = getDims(type);
  while (dims.size() < 4)
    dims.insert(dims.begin(), dimConst(type.getContext(), 1));
  if (isConst(dims[1], 1) && isConst(dims[2], 1))
    return v;
  std::swap(dims[1], dims[2]);
  return b.create<ReshapeOp>(loc, makeTensorType(dims, type.getElementType()), v);
}

bool isAttention(Operation *op) { return isa_and_nonnull<AttentionOp, AttentionGradOp>(op); }

/// Whether operand `index` of an attention op is a tensor with a layout role
/// (not the mask).
bool isRoleOperand(Operation *op, unsigned index) {
  SmallVector<int> roles = operandRoles(op);
  return index < roles.size() && roles[index] >= 0;
}

/// A connected group of layout-neutral ops and what bounds it.
struct NeutralGroup {
  llvm::SetVector<Operation *> ops;
  llvm::SetVector<Value> values;     // rank-4 values that change layout
  llvm::SetVector<Value> broadcasts; // swappable broadcast inputs
  bool reachesAttention = false;
  bool hasTranspose = false;
};

/// Grows the group from `seed` (a value in the layout to leave); false when
/// anything but swap transposes, attention ops and swappable broadcasts
/// touches it.
bool growGroup(Value seed, NeutralGroup &g) {
  SmallVector<Value> work{seed};
  g.values.insert(seed);
  auto addOp = [&](Operation *op) -> bool {
    if (!g.ops.insert(op))
      return true;
    if (op->getBlock() != seed.getParentBlock())
      return false;
    bool axisBound = isa<SliceOp, ConcatOp>(op);
    for (Value operand : op->getOperands()) {
      if (!axisBound && !g.values.contains(operand) && isSwappableBroadcast(operand) &&
          operand.getType() != op->getResult(0).getType()) {
        g.broadcasts.insert(operand);
        continue;
      }
      if (g.values.insert(operand))
        work.push_back(operand);
    }
    Value result = op->getResult(0);
    if (g.values.insert(result))
      work.push_back(result);
    return true;
  };
  while (!work.empty()) {
    Value v = work.pop_back_val();
    auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
    if (!type || type.getRank() != 4)
      return false;
    Operation *def = v.getDefiningOp();
    if (isSeqHeadSwap(def)) {
      g.hasTranspose = true;
    } else if (isAttention(def)) {
      g.reachesAttention = true;
    } else if (def && isLayoutNeutral(def)) {
      if (!addOp(def))
        return false;
    } else {
      return false; // a block argument or another producer
    }
    for (OpOperand &use : v.getUses()) {
      Operation *user = use.getOwner();
      if (isSeqHeadSwap(user)) {
        g.hasTranspose = true;
      } else if (isAttention(user)) {
        if (!isRoleOperand(user, use.getOperandNumber()))
          return false;
        g.reachesAttention = true;
      } else if (isLayoutNeutral(user)) {
        if (!addOp(user))
          return false;
      } else {
        return false;
      }
    }
  }
  // A transpose inside the group (its input and result both members) would
  // need both layouts at once.
  return llvm::none_of(g.values, [&](Value v) {
    Operation *def = v.getDefiningOp();
    return isSeqHeadSwap(def) && g.values.contains(def->getOperand(0));
  });
}

/// Rebuilds the group's ops in the other layout. Its swap transposes
/// vanish; at attention ends a swap transpose is left for foldTransposes.
void swapGroup(NeutralGroup &g) {
  SmallVector<Operation *> ops(g.ops.begin(), g.ops.end());
  llvm::sort(ops, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  DenseMap<Value, Value> swapped;
  OpBuilder b(ops.front()->getContext());
  DenseSet<Operation *> created;
  auto swapTranspose = [&](Value v) -> Value {
    auto type = swapSeqAndHeads(llvm::cast<RankedTensorType>(v.getType()));
    auto t = b.create<TransposeOp>(v.getLoc(), type, v, b.getDenseI64ArrayAttr(kSwap));
    created.insert(t);
    return t;
  };
  // The group's inputs: a transpose's input, or an attention result read
  // through a new transpose.
  SmallVector<Operation *> inputTransposes;
  for (Value v : g.values) {
    Operation *def = v.getDefiningOp();
    if (isSeqHeadSwap(def)) {
      swapped[v] = cast<TransposeOp>(def).getInput();
      inputTransposes.push_back(def);
    } else if (isAttention(def)) {
      b.setInsertionPointAfter(def);
      swapped[v] = swapTranspose(v);
    }
  }
  DenseMap<Value, Value> broadcasts;
  for (Operation *op : ops) {
    b.setInsertionPoint(op);
    SmallVector<Value> operands;
    for (Value operand : op->getOperands()) {
      if (g.broadcasts.contains(operand) && !g.values.contains(operand)) {
        Value &s = broadcasts[operand];
        if (!s)
          s = swapBroadcast(b, op->getLoc(), operand);
        operands.push_back(s);
        continue;
      }
      operands.push_back(swapped.lookup(operand));
    }
    Type type = swapSeqAndHeads(llvm::cast<RankedTensorType>(op->getResult(0).getType()));
    OperationState state(op->getLoc(), op->getName(), operands, {type}, op->getAttrs());
    Operation *rebuilt = b.create(state);
    // Axis-bound attributes follow dims 1 and 2.
    if (auto slice = dyn_cast<SliceOp>(rebuilt)) {
      SmallVector<Dim> starts(slice.getStarts().getDims());
      SmallVector<int64_t> steps(slice.getSteps());
      std::swap(starts[1], starts[2]);
      std::swap(steps[1], steps[2]);
      slice.setStartsAttr(DimsAttr::get(b.getContext(), starts));
      slice.setSteps(steps);
    } else if (auto concat = dyn_cast<ConcatOp>(rebuilt)) {
      int64_t axis = concat.getAxis();
      concat.setAxis(axis == 1 ? 2 : axis == 2 ? 1 : axis);
    }
    swapped[op->getResult(0)] = rebuilt->getResult(0);
  }
  // The group's outputs: transposes back vanish, attention operands read
  // the rebuilt value through a transpose.
  for (Value v : g.values) {
    Value now = swapped.lookup(v);
    Value back;
    for (OpOperand &use : llvm::make_early_inc_range(v.getUses())) {
      Operation *user = use.getOwner();
      if (g.ops.contains(user) || created.contains(user))
        continue;
      if (isSeqHeadSwap(user)) {
        user->getResult(0).replaceAllUsesWith(now);
        user->erase();
        continue;
      }
      if (!back) {
        b.setInsertionPointAfterValue(now);
        back = swapTranspose(now);
      }
      use.set(back);
    }
  }
  for (Operation *op : llvm::reverse(ops))
    op->erase();
  for (Operation *def : inputTransposes)
    if (def->use_empty())
      def->erase();
}

/// Moves every swap transpose that a neutral group separates from attention.
void moveThroughNeutralGroups(func::FuncOp func) {
  SmallVector<TransposeOp> transposes;
  func.walk([&](TransposeOp t) {
    if (isSeqHeadSwap(t))
      transposes.push_back(t);
  });
  DenseSet<Operation *> erased;
  for (TransposeOp t : transposes) {
    if (erased.contains(t))
      continue;
    // A group hangs off either side: RoPE after the transpose (forward),
    // or before it (the gradient).
    for (Value seed : {t.getResult(), t.getInput()}) {
      bool neutralNeighbour =
          seed == t.getResult()
              ? llvm::any_of(seed.getUsers(), [](Operation *u) { return isLayoutNeutral(u); })
              : seed.getDefiningOp() && isLayoutNeutral(seed.getDefiningOp());
      if (!neutralNeighbour)
        continue;
      NeutralGroup g;
      if (!growGroup(seed, g) || !g.hasTranspose || !g.reachesAttention)
        continue;
      for (Value v : g.values)
        for (Operation *u : v.getUsers())
          if (isSeqHeadSwap(u))
            erased.insert(u);
      for (Value v : g.values)
        if (isSeqHeadSwap(v.getDefiningOp()))
          erased.insert(v.getDefiningOp());
      swapGroup(g);
      break;
    }
  }
}

struct AttentionLayoutPass final : kiln::impl::AttentionLayoutPassBase<AttentionLayoutPass> {
  using AttentionLayoutPassBase::AttentionLayoutPassBase;
  void runOnOperation() override {
    if (throughElementwise)
      moveThroughNeutralGroups(getOperation());
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
