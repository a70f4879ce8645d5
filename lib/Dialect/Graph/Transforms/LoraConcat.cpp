//===- LoraConcat.cpp - One down-projection GEMM per shared LoRA input ----===//
//
// Adapters on linear layers that read the same input (q/k/v, gate/up) each
// project it down to rank r: GEMMs with n = r (16) run at a small fraction
// of the GPU's rate. Their A matrices concatenated along the rank make one
// GEMM with n = sum of the ranks. Each adapter's up projection reads the
// whole product against its B padded with zero columns (t [0|B|0]^T), so no
// kernel copies columns out. The parameters stay separate (PEFT names,
// per-adapter optimizer state); the concat and pads are small loop kernels (they
// absorb the bf16 casts of the fp32 masters), and after autodiff the group
// has one dA GEMM and one dX GEMM, and the dT products add into one buffer.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include <map>

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

/// The value a down projection's input is, seen through its casts (each
/// adapter of a bf16 layer casts the input to its fp32 type itself, and
/// --precision=bf16 casts that back), with the types along the way: equal
/// keys are equal values.
std::pair<Value, std::string> inputKey(Value lhs) {
  std::string types;
  Value v = lhs;
  for (;;) {
    types += std::to_string(reinterpret_cast<uintptr_t>(v.getType().getAsOpaquePointer())) + ",";
    auto cast = v.getDefiningOp<CastOp>();
    if (!cast)
      break;
    v = cast.getOperand();
  }
  return {v, types};
}

/// `v` without casts that widen and narrow back to its type (bf16 -> f32 ->
/// bf16: exact), which the fp32 adapter path of a bf16 layer and
/// --precision=bf16 leave on the adapter's input.
Value withoutRoundTrips(Value v) {
  auto width = [](Value x) {
    return cast<RankedTensorType>(x.getType()).getElementType().getIntOrFloatBitWidth();
  };
  for (;;) {
    auto narrow = v.getDefiningOp<CastOp>();
    auto wide = narrow ? narrow.getOperand().getDefiningOp<CastOp>() : nullptr;
    if (!wide || wide.getOperand().getType() != v.getType())
      return v;
    Type inner = cast<RankedTensorType>(wide.getType()).getElementType();
    Type outer = cast<RankedTensorType>(v.getType()).getElementType();
    bool exact = (inner.isF32() && (outer.isBF16() || outer.isF16())) ||
                 (inner.isF64() && (outer.isF32() || outer.isBF16() || outer.isF16()));
    if (!exact || width(wide.getResult()) <= width(v))
      return v;
    v = wide.getOperand();
  }
}

/// Erases the casts that made `lhs` once nothing reads them.
void eraseDeadCasts(Value lhs) {
  while (lhs.use_empty()) {
    auto cast = lhs.getDefiningOp<CastOp>();
    if (!cast)
      return;
    lhs = cast.getOperand();
    cast.erase();
  }
}

/// Moves `v`'s defining chain (casts of a parameter: no other operands)
/// before `point` when it is after it.
void hoistBefore(Value v, Operation *point) {
  SmallVector<Operation *> chain;
  for (Operation *op = v.getDefiningOp(); op;) {
    chain.push_back(op);
    if (op->getNumOperands() == 0)
      break;
    op = op->getOperand(0).getDefiningOp();
  }
  for (Operation *op : llvm::reverse(chain))
    if (point->isBeforeInBlock(op))
      op->moveBefore(point);
}

/// The up projection t B^T that is the only use of down projection `mm`,
/// with a static 2-D B, or null.
MatmulOp upProjection(MatmulOp mm) {
  if (!mm->hasOneUse())
    return nullptr;
  auto up = dyn_cast<MatmulOp>(*mm->user_begin());
  if (!up || up.getLhs() != mm.getResult() || up.getRhs() == mm.getResult() || up.getTransposeA() ||
      !up.getTransposeB())
    return nullptr;
  auto b = cast<RankedTensorType>(up.getRhs().getType());
  if (b.getRank() != 2 || !b.hasStaticShape() ||
      b.getElementType() != cast<RankedTensorType>(mm.getType()).getElementType())
    return nullptr;
  return up;
}

struct LoraConcatPass final : kiln::impl::LoraConcatPassBase<LoraConcatPass> {
  using LoraConcatPassBase::LoraConcatPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    // Down projections x A^T of one input, in program order.
    std::map<std::pair<void *, std::string>, size_t> groupOf;
    SmallVector<SmallVector<MatmulOp>> groups;
    func.walk([&](MatmulOp mm) {
      if (mm.getTransposeA() || !mm.getTransposeB() || !loraAParameter(mm.getRhs()))
        return;
      // Every adapter reads its input without exact cast round trips: its
      // input gradient is then a GEMM product the layer's other products
      // add into (beta = 1) instead of a cast kernel.
      if (Value plain = withoutRoundTrips(mm.getLhs()); plain != mm.getLhs()) {
        Value old = mm.getLhs();
        mm.getLhsMutable().assign(plain);
        eraseDeadCasts(old);
      }
      auto rhs = cast<RankedTensorType>(mm.getRhs().getType());
      if (rhs.getRank() != 2 || rhs.isDynamicDim(0) ||
          mm->getBlock() != mm.getRhs().getParentBlock())
        return;
      auto [root, types] = inputKey(mm.getLhs());
      auto [it, fresh] = groupOf.try_emplace({root.getAsOpaquePointer(), types}, groups.size());
      if (fresh)
        groups.emplace_back();
      groups[it->second].push_back(mm);
    });
    for (SmallVector<MatmulOp> &members : groups) {
      // Same block, same rhs element type (the concat needs one type).
      Block *block = members.front()->getBlock();
      Type element = cast<RankedTensorType>(members.front().getRhs().getType()).getElementType();
      llvm::erase_if(members, [&](MatmulOp mm) {
        return mm->getBlock() != block ||
               cast<RankedTensorType>(mm.getRhs().getType()).getElementType() != element;
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
    int64_t total = downType.getShape().back();
    int64_t offset = 0;
    for (MatmulOp mm : members) {
      auto type = cast<RankedTensorType>(mm.getType());
      int64_t width = type.getShape().back();
      if (MatmulOp up = upProjection(mm)) {
        // t_i B_i^T = t [0 | B_i | 0]^T: the up projection reads the whole
        // product against B_i padded with zero columns, so no kernel copies
        // the adapter's columns out, and in the backward the products of
        // the group add into one [tokens, sum r] gradient (beta = 1).
        b.setInsertionPoint(up);
        int64_t pads[] = {0, offset, 0, total - offset - width};
        Value padded = b.create<PadOp>(up.getLoc(), up.getRhs(), b.getDenseI64ArrayAttr(pads),
                                       b.getF64FloatAttr(0.0));
        Value product = b.create<MatmulOp>(up.getLoc(), down, padded, false, true);
        up.getResult().replaceAllUsesWith(product);
        up.erase();
        Value lhs = mm.getLhs();
        mm.erase();
        eraseDeadCasts(lhs);
        offset += width;
        continue;
      }
      DimList starts(rank, dimConst(context, 0));
      starts[rank - 1] = dimConst(context, offset);
      offset += width;
      SmallVector<int64_t> steps(rank, 1);
      // Each adapter's columns, right where its own projection was.
      b.setInsertionPoint(mm);
      Value columns = b.create<SliceOp>(mm.getLoc(), type, down, DimsAttr::get(context, starts),
                                        b.getDenseI64ArrayAttr(steps));
      Value lhs = mm.getLhs();
      mm.getResult().replaceAllUsesWith(columns);
      mm.erase();
      eraseDeadCasts(lhs);
    }
  }
};

} // namespace
