//===- LoraGroupGrads.cpp - A group's adapter gradients from one GEMM each -===//
//
// After kiln-lora-k-concat's group-frozen, q/k/v's input gradient reads
// [dq | dk | dv | dT]. The adapters' own gradients still take six thin GEMMs
// over the same three pieces: dT = dq Bq' + dk Bk' + dv Bv' (each B padded
// to the group's rank, the last two accumulating into the first's output)
// and each dB' = d_i^T T. Over the concatenated pieces they are one GEMM
// each, [dq | dk | dv] [Bq' ; Bk' ; Bv'] and [dq | dk | dv]^T T (whose row
// blocks are the members' dB'), reading the same bytes in two launches
// instead of six; the input gradient's concatenation becomes
// [[dq | dk | dv] | dT], which the lowering writes in place as one buffer.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "mlir/Analysis/TopologicalSortUtils.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace kiln {
#define GEN_PASS_DEF_LORAGROUPGRADSPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// One piece of the concatenation and the adapter products that read it.
struct Member {
  Value piece;          // d_i, an operand of the concatenation
  Value scaled;         // d_i, or d_i * s
  MatmulOp dT;          // scaled R_i, a term of the concatenation's last operand
  MatmulOp dB;          // scaled^T T, or null
  ReduceSumOp dBSum;    // the sum of dB over the batch, or null
};

/// The terms of the sum ending at `v` (adds of one type, inner ones used
/// once), and the adds.
void collectTerms(Value v, Type type, SmallVectorImpl<Value> &terms, SmallVectorImpl<AddOp> &adds,
                  bool root = true) {
  auto add = v.getDefiningOp<AddOp>();
  if (add && add.getType() == type && add.getLhs().getType() == type &&
      add.getRhs().getType() == type && (root || add->hasOneUse())) {
    adds.push_back(add);
    collectTerms(add.getLhs(), type, terms, adds, false);
    collectTerms(add.getRhs(), type, terms, adds, false);
    return;
  }
  terms.push_back(v);
}

/// `scaled` without its rank-0 factor, and the factor (null if none).
std::pair<Value, Value> unscaled(Value scaled) {
  if (auto mul = scaled.getDefiningOp<MulOp>())
    for (auto [x, s] :
         {std::pair(mul.getLhs(), mul.getRhs()), std::pair(mul.getRhs(), mul.getLhs())})
      if (cast<RankedTensorType>(s.getType()).getRank() == 0 && x.getType() == mul.getType())
        return {x, s};
  return {scaled, Value()};
}

/// The widest piece whose adapter GEMMs alone run well below bandwidth.
constexpr int64_t kNarrowPiece = 1024;

struct LoraGroupGradsPass final : kiln::impl::LoraGroupGradsPassBase<LoraGroupGradsPass> {
  using LoraGroupGradsPassBase::LoraGroupGradsPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    SmallVector<ConcatOp> concats;
    func.walk([&](ConcatOp c) { concats.push_back(c); });
    bool changed = false;
    for (ConcatOp c : concats)
      changed |= rewrite(c);
    // The members' dB users sat after their own piece, some before the
    // last one the merged product needs.
    if (changed && !sortTopologically(&func.getBody().front())) {
      func.emitError("kiln-lora-group-grads left a cycle");
      return signalPassFailure();
    }
  }

  /// concat(d_1 .. d_n, sum_i d_i s R_i) along the last axis, with each
  /// d_i s also read by d_i s^T T, becomes concat(P, P s [R_1 ; ..; R_n])
  /// with P = concat(d_1 .. d_n) and the dB products row slices of P s^T T.
  bool rewrite(ConcatOp concat) {
    auto type = cast<RankedTensorType>(concat.getType());
    int64_t axis = type.getRank() - 1;
    unsigned n = concat->getNumOperands() - 1;
    if (static_cast<int64_t>(concat.getAxis()) != axis || n < 2 || type.isDynamicDim(axis))
      return false;
    // By default only groups with a narrow member (GQA's k and v), whose
    // own thin GEMMs run far from their floor.
    if (!allGroups && llvm::none_of(concat->getOperands().drop_back(), [&](Value piece) {
          return cast<RankedTensorType>(piece.getType()).getShape().back() <= kNarrowPiece;
        }))
      return false;
    Value sum = concat->getOperand(n);
    SmallVector<Value> terms;
    SmallVector<AddOp> adds;
    collectTerms(sum, sum.getType(), terms, adds);
    if (terms.size() != n)
      return false;
    // Each term reads one piece (times the one scale), in any order.
    SmallVector<Member> members(n);
    Value scale;
    bool firstTerm = true;
    for (Value term : terms) {
      auto mm = term.getDefiningOp<MatmulOp>();
      if (!mm || !term.hasOneUse() || mm.getTransposeA() || mm.getTransposeB())
        return false;
      auto rhs = cast<RankedTensorType>(mm.getRhs().getType());
      if (rhs.getRank() != 2 || !rhs.hasStaticShape())
        return false;
      auto [piece, s] = unscaled(mm.getLhs());
      if (!firstTerm && s != scale)
        return false;
      scale = s;
      firstTerm = false;
      auto it = llvm::find(concat->getOperands(), piece);
      unsigned i = it - concat->operand_begin();
      if (i >= n || members[i].dT)
        return false;
      members[i] = {piece, mm.getLhs(), mm, MatmulOp(), ReduceSumOp()};
    }
    // Each R_i is [width of d_i, r] with one r and element type.
    auto first = cast<RankedTensorType>(members[0].dT.getRhs().getType());
    for (Member &m : members) {
      auto rhs = cast<RankedTensorType>(m.dT.getRhs().getType());
      auto piece = cast<RankedTensorType>(m.piece.getType());
      if (rhs.getShape()[1] != first.getShape()[1] ||
          rhs.getElementType() != first.getElementType() ||
          rhs.getShape()[0] != piece.getShape().back())
        return false;
    }
    // The dB products: scaled^T T with one T for all members, each summed
    // over the batch by one reduce_sum (or unbatched): merged only when
    // every member has one of the same form.
    Value t;
    for (Member &m : members)
      for (Operation *user : m.scaled.getUsers()) {
        auto mm = dyn_cast<MatmulOp>(user);
        if (!mm || mm == m.dT || mm.getLhs() != m.scaled || !mm.getTransposeA() ||
            mm.getTransposeB() || mm.getRhs() == m.scaled || (t && mm.getRhs() != t))
          continue;
        t = mm.getRhs();
        m.dB = mm;
        if (mm->hasOneUse())
          m.dBSum = dyn_cast<ReduceSumOp>(*mm->user_begin());
        break;
      }
    auto dBForm = [](Member m) -> std::optional<ArrayRef<int64_t>> {
      if (!m.dB)
        return std::nullopt;
      bool batched = cast<RankedTensorType>(m.dB.getType()).getRank() > 2;
      if (!batched)
        return ArrayRef<int64_t>();
      if (!m.dBSum || m.dBSum.getKeepdim() ||
          cast<RankedTensorType>(m.dBSum.getType()).getRank() != 2)
        return std::nullopt;
      return m.dBSum.getAxes();
    };
    bool mergeDB = dBForm(members[0]).has_value() &&
                   llvm::all_of(members, [&](Member m) {
                     std::optional<ArrayRef<int64_t>> form = dBForm(m);
                     return form && *form == *dBForm(members[0]) &&
                            (m.dBSum != nullptr) == (members[0].dBSum != nullptr);
                   });

    OpBuilder b(concat);
    Location loc = concat.getLoc();
    SmallVector<Value> pieces, rhs;
    for (Member &m : members) {
      pieces.push_back(m.piece);
      rhs.push_back(m.dT.getRhs());
    }
    Value p = b.create<ConcatOp>(loc, pieces, static_cast<uint64_t>(axis));
    Value scaled = scale ? b.create<MulOp>(loc, p, scale).getResult() : p;
    Value stacked = b.create<ConcatOp>(loc, rhs, 0);
    Value dT = b.create<MatmulOp>(loc, scaled, stacked, false, false);
    if (mergeDB) {
      Value dB = b.create<MatmulOp>(loc, scaled, t, true, false);
      if (members[0].dBSum)
        dB = b.create<ReduceSumOp>(loc, dB, members[0].dBSum.getAxesAttr(), false);
      MLIRContext *ctx = b.getContext();
      int64_t row = 0;
      for (Member &m : members) {
        Operation *old = m.dBSum ? m.dBSum.getOperation() : m.dB.getOperation();
        auto oldType = cast<RankedTensorType>(old->getResult(0).getType());
        DimList starts(2, dimConst(ctx, 0));
        starts[0] = dimConst(ctx, row);
        row += oldType.getShape()[0];
        Value rows = b.create<SliceOp>(loc, oldType, dB, DimsAttr::get(ctx, starts),
                                       b.getDenseI64ArrayAttr({1, 1}));
        old->getResult(0).replaceAllUsesWith(rows);
        old->erase();
        if (m.dBSum)
          m.dB->erase();
      }
    }
    // dT's other readers (the group's dA) read the merged product.
    sum.replaceAllUsesWith(dT);
    Value joined = b.create<ConcatOp>(loc, ValueRange{p, dT}, static_cast<uint64_t>(axis));
    concat.getResult().replaceAllUsesWith(joined);
    concat->erase();
    for (AddOp add : adds)
      add->dropAllReferences();
    for (AddOp add : adds)
      add->erase();
    for (Member &m : members) {
      m.dT->erase();
      if (m.scaled != m.piece && m.scaled.use_empty())
        m.scaled.getDefiningOp()->erase();
    }
    return true;
  }
};

} // namespace
