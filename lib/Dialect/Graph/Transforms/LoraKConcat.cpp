//===- LoraKConcat.cpp - A frozen and an adapter product as one GEMM ------===//
//
// y = x W + s (t B^T) and dX = dy W^T + dT A are sums of a frozen product
// and a LoRA product of the same shape. Concatenated along the contraction
// they are one product: y = [x | t] [W ; s B^T], dX = [dy | dT] [W | A^T]^T.
// The adapter's rank-r GEMM then no longer reads and writes the whole
// [tokens, out] output (the memory-bound part of the LoRA step); the frozen
// GEMM does r more columns of work. The concatenations are ordinary graph
// ops (the interpreter runs them as they are); they are cheap only when the
// lowering writes their inputs in place (docs/design/lora-k-concat.md).
// With group-frozen the sum's other frozen products over the same rows join
// too (q/k/v's input gradient: one GEMM over K = q + k + v + r).
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include <map>

namespace kiln {
#define GEN_PASS_DEF_LORAKCONCATPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

bool isLoraName(StringRef name) { return name.contains(".lora_A.") || name.contains(".lora_B."); }

/// Whether `v` is computed from LoRA parameters (and constants) alone:
/// the adapter side of a product (B padded and cast, A concatenated).
bool fromLoraParameters(Value v) {
  SmallVector<Value> work{v};
  llvm::SmallPtrSet<void *, 16> seen;
  bool lora = false;
  while (!work.empty()) {
    Value x = work.pop_back_val();
    if (!seen.insert(x.getAsOpaquePointer()).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(x)) {
      auto func = dyn_cast<func::FuncOp>(arg.getOwner()->getParentOp());
      auto name =
          func ? func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "kiln.param") : StringAttr();
      if (!name || !isLoraName(name.getValue()))
        return false;
      lora = true;
      continue;
    }
    Operation *def = x.getDefiningOp();
    if (auto param = dyn_cast<ParameterOp>(def)) {
      if (!isLoraName(param.getName()))
        return false;
      lora = true;
      continue;
    }
    if (isa<kiln::ConstantOp>(def))
      continue;
    if (def->getNumRegions() || def->getNumOperands() == 0)
      return false;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  return lora;
}

/// A term of a sum: matmul(a, b) or mul(matmul(a, b), s) with a scalar s,
/// each used once, b a static 2-D matrix and no transpose of a.
struct Product {
  Value term;
  MatmulOp matmul;
  Value scale; // rank-0, or null
  int64_t k = 0;
};

std::optional<Product> productOf(Value term) {
  if (!term.hasOneUse())
    return std::nullopt;
  Product p;
  p.term = term;
  Value v = term;
  if (auto mul = v.getDefiningOp<MulOp>()) {
    for (auto [x, s] :
         {std::pair(mul.getLhs(), mul.getRhs()), std::pair(mul.getRhs(), mul.getLhs())}) {
      auto st = cast<RankedTensorType>(s.getType());
      if (st.getRank() == 0 && x.getType() == mul.getType() && x.getDefiningOp<MatmulOp>()) {
        p.scale = s;
        v = x;
        break;
      }
    }
    if (!p.scale || !v.hasOneUse())
      return std::nullopt;
  }
  auto mm = v.getDefiningOp<MatmulOp>();
  if (!mm || mm.getTransposeA() || mm.getType() != term.getType())
    return std::nullopt;
  auto a = cast<RankedTensorType>(mm.getLhs().getType());
  auto b = cast<RankedTensorType>(mm.getRhs().getType());
  if (a.getRank() < 2 || b.getRank() != 2 || !b.hasStaticShape() ||
      ShapedType::isDynamic(a.getShape().back()) || a.getElementType() != b.getElementType())
    return std::nullopt;
  p.matmul = mm;
  p.k = a.getShape().back();
  return p;
}

/// An add of two terms of its own type (not a broadcast bias).
bool isSum(AddOp add) {
  return add && add.getLhs().getType() == add.getType() && add.getRhs().getType() == add.getType();
}

/// The terms of the sum `root` is the last add of (inner adds of one type,
/// each used once), in order.
void collectTerms(Value v, Type type, SmallVectorImpl<Value> &terms, SmallVectorImpl<AddOp> &adds) {
  auto add = v.getDefiningOp<AddOp>();
  if (isSum(add) && add.getType() == type && (adds.empty() || add->hasOneUse())) {
    adds.push_back(add);
    collectTerms(add.getLhs(), type, terms, adds);
    collectTerms(add.getRhs(), type, terms, adds);
    return;
  }
  terms.push_back(v);
}

/// A frozen 2-D parameter read as it is stored (no cast): the lowering
/// can keep several such side by side in one buffer.
bool isFrozenWeight(Value v) {
  auto param = v.getDefiningOp<ParameterOp>();
  auto type = cast<RankedTensorType>(v.getType());
  return param && !param.getTrainable() && type.getRank() == 2 && type.hasStaticShape();
}

/// Both left operands with the same dims but the last (the contraction).
bool sameRows(Value a, Value b) {
  auto ta = cast<RankedTensorType>(a.getType()), tb = cast<RankedTensorType>(b.getType());
  return ta.getRank() == tb.getRank() && ta.getElementType() == tb.getElementType() &&
         ta.getShape().drop_back() == tb.getShape().drop_back() &&
         ta.getEncoding() == tb.getEncoding();
}

/// The widest projection that still runs below the GEMM's rate alone.
constexpr int64_t kNarrowProjection = 1024;

struct LoraKConcatPass final : kiln::impl::LoraKConcatPassBase<LoraKConcatPass> {
  using LoraKConcatPassBase::LoraKConcatPassBase;

  // One [x | t] per list of left operands: the adapters of a group share it.
  std::map<std::vector<void *>, Value> lhsConcats;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    lhsConcats.clear();
    fused.clear();
    // Roots of sums: adds whose result is not an inner term of a larger sum.
    SmallVector<AddOp> roots;
    func.walk([&](AddOp add) {
      if (!isSum(add))
        return;
      if (add->hasOneUse())
        if (auto user = dyn_cast<AddOp>(*add->user_begin());
            isSum(user) && user.getType() == add.getType())
          return;
      roots.push_back(add);
    });
    // A sum with several adapter products (adapters with dropout keep their
    // own) pairs each with another frozen product.
    groups.clear();
    for (AddOp root : roots)
      while (root)
        root = rewrite(root);
    for (ConcatOp group : groups)
      mergeForwards(group);
    // kiln-lower-to-step writes this function's concatenations in place
    // (docs/codegen.md); other steps keep their copy kernels until that is
    // measured.
    if (!fused.empty())
      func->setAttr("kiln.lora_k_concat", UnitAttr::get(func.getContext()));
  }

  llvm::SmallPtrSet<Operation *, 16> fused;
  /// The weight concatenations with several frozen members (group-frozen).
  SmallVector<ConcatOp> groups;

  /// Moves `v`'s pure computation before `point` where it is later (its
  /// operands first); false when an op on the way has effects or regions,
  /// or reads a value defined after `point` that cannot move.
  static bool hoistBefore(Value v, Operation *point) {
    Operation *def = v.getDefiningOp();
    if (!def || def->getBlock() != point->getBlock() || def->isBeforeInBlock(point))
      return true;
    if (def == point || def->getNumRegions() || !isPure(def))
      return false;
    for (Value operand : def->getOperands())
      if (!hoistBefore(operand, point))
        return false;
    def->moveBefore(point);
    return true;
  }

  /// With group-frozen: the members' forward products, `L [W_i ; Y_i]`
  /// (K-concatenated, one per member, the same L), become one product over
  /// the members' columns, `L [W_1 .. W_n ; Y_1 .. Y_n]`, whose column
  /// slices replace them: q/k/v's projections as one GEMM. The weights are
  /// the group's own members side by side (the lowering's one buffer holds
  /// the adapters' rows below them), so nothing is copied.
  void mergeForwards(ConcatOp group) {
    int64_t axis = static_cast<int64_t>(group.getAxis());
    unsigned n = group->getNumOperands() - 1;
    SmallVector<MatmulOp> products;
    SmallVector<ConcatOp> weights;
    // The members by name: the forward reads its own op of each weight.
    auto func = group->getParentOfType<func::FuncOp>();
    for (unsigned i = 0; i < n; ++i) {
      StringRef name = group->getOperand(i).getDefiningOp<ParameterOp>().getName();
      SmallVector<Operation *> users;
      func.walk([&](ParameterOp param) {
        if (param.getName() == name)
          users.append(param->user_begin(), param->user_end());
      });
      for (Operation *user : users) {
        auto c = dyn_cast<ConcatOp>(user);
        if (!c || c == group || static_cast<int64_t>(c.getAxis()) != 1 - axis ||
            c->getNumOperands() != 2 || !c->getOperand(0).getDefiningOp<ParameterOp>() ||
            !c->hasOneUse())
          continue;
        auto mm = dyn_cast<MatmulOp>(*c->user_begin());
        if (!mm || mm.getRhs() != c.getResult() || mm.getLhs() == c.getResult() ||
            mm.getTransposeA() || mm.getTransposeB() != (axis == 0))
          continue;
        products.push_back(mm);
        weights.push_back(c);
        break;
      }
      if (products.size() != i + 1)
        return;
    }
    // Only where a member runs narrow (GQA's k and v: N = 512 of 2048):
    // gate/up's two 8192-wide products merged along N measured slower on
    // the H200 than apart (docs/benchmarks.md, twelfth session).
    if (llvm::none_of(products, [](MatmulOp mm) {
          return cast<RankedTensorType>(mm.getType()).getShape().back() <= kNarrowProjection;
        }))
      return;
    MatmulOp first = products.front();
    auto resultType = cast<RankedTensorType>(first.getType());
    auto adapterType = cast<RankedTensorType>(weights.front()->getOperand(1).getType());
    for (auto [mm, w] : llvm::zip(products, weights)) {
      auto type = cast<RankedTensorType>(mm.getType());
      auto adapter = cast<RankedTensorType>(w->getOperand(1).getType());
      if (mm.getLhs() != first.getLhs() || type.getElementType() != resultType.getElementType() ||
          type.getShape().drop_back() != resultType.getShape().drop_back() ||
          type.getEncoding() != resultType.getEncoding() ||
          adapter.getElementType() != adapterType.getElementType() ||
          adapter.getDimSize(1 - axis) != adapterType.getDimSize(1 - axis))
        return;
      if (mm->isBeforeInBlock(first))
        first = mm;
    }
    // At the first product: the weights and the adapters' rows (pure ops
    // on parameters) move before it where they come later.
    for (ConcatOp w : weights)
      for (Value v : w->getOperands())
        if (!hoistBefore(v, first))
          return;
    OpBuilder b(first);
    Location loc = first.getLoc();
    SmallVector<Value> members, adapters;
    for (ConcatOp w : weights) {
      members.push_back(w->getOperand(0));
      adapters.push_back(w->getOperand(1));
    }
    auto along = static_cast<uint64_t>(axis), across = static_cast<uint64_t>(1 - axis);
    Value block = b.create<ConcatOp>(loc, members, along);
    Value rows = b.create<ConcatOp>(loc, adapters, along);
    Value rhs = b.create<ConcatOp>(loc, ValueRange{block, rows}, across);
    Value merged = b.create<MatmulOp>(loc, first.getLhs(), rhs, false, axis == 0);
    MLIRContext *ctx = b.getContext();
    int64_t rank = resultType.getRank(), offset = 0;
    for (MatmulOp mm : products) {
      DimList starts(rank, dimConst(ctx, 0));
      starts[rank - 1] = dimConst(ctx, offset);
      offset += cast<RankedTensorType>(mm.getType()).getShape().back();
      Value columnsOf = b.create<SliceOp>(mm.getLoc(), mm.getType(), merged,
                                          DimsAttr::get(ctx, starts),
                                          b.getDenseI64ArrayAttr(SmallVector<int64_t>(rank, 1)));
      mm.getResult().replaceAllUsesWith(columnsOf);
    }
    for (auto [mm, w] : llvm::zip(products, weights)) {
      mm->erase();
      w->erase();
    }
  }

  /// Rewrites the sum ending at `root`; returns the new sum's last add, or
  /// null when nothing changed.
  AddOp rewrite(AddOp root) {
    Type type = root.getType();
    SmallVector<Value> terms;
    SmallVector<AddOp> adds;
    collectTerms(root.getResult(), type, terms, adds);
    // The adapter product (its right operand from LoRA parameters alone) and
    // the frozen product with the largest k that reads rows like it.
    std::optional<Product> thin, wide;
    for (Value term : terms) {
      std::optional<Product> p = productOf(term);
      if (p && !thin && fromLoraParameters(p->matmul.getRhs()))
        thin = p;
    }
    if (!thin || thin->matmul->getBlock() != root->getBlock())
      return nullptr;
    for (Value term : terms) {
      std::optional<Product> p = productOf(term);
      if (!p || p->scale || term == thin->term || fused.contains(p->matmul) ||
          p->matmul->getBlock() != root->getBlock() || fromLoraParameters(p->matmul.getRhs()) ||
          p->k <= thin->k || !sameRows(p->matmul.getLhs(), thin->matmul.getLhs()))
        continue;
      if (!wide || p->k > wide->k)
        wide = p;
    }
    if (!wide)
      return nullptr;
    // With group-frozen: the other frozen products over the same rows whose
    // weights stand beside the wide one's (the same rows of W in the
    // contraction's orientation), in program order.
    SmallVector<Product> extras;
    MatmulOp w = wide->matmul;
    if (groupFrozen && isFrozenWeight(w.getRhs())) {
      auto wideType = cast<RankedTensorType>(w.getRhs().getType());
      int64_t side = w.getTransposeB() ? 0 : 1; // the dim the weights share
      for (Value term : terms) {
        std::optional<Product> p = productOf(term);
        if (!p || p->scale || term == thin->term || term == wide->term ||
            fused.contains(p->matmul) || p->matmul->getBlock() != root->getBlock() ||
            p->matmul.getTransposeB() != w.getTransposeB() || !isFrozenWeight(p->matmul.getRhs()) ||
            !sameRows(p->matmul.getLhs(), thin->matmul.getLhs()))
          continue;
        auto type = cast<RankedTensorType>(p->matmul.getRhs().getType());
        if (type.getElementType() != wideType.getElementType() ||
            type.getDimSize(side) != wideType.getDimSize(side))
          continue;
        extras.push_back(*p);
      }
      llvm::sort(extras, [](const Product &x, const Product &y) {
        return x.matmul->isBeforeInBlock(y.matmul);
      });
    }
    OpBuilder b(root);
    Location loc = root.getLoc();
    Value fusedValue = concatenated(b, loc, *wide, extras, *thin);
    auto joined = [&](Value term) {
      return term == thin->term ||
             llvm::any_of(extras, [&](const Product &p) { return p.term == term; });
    };
    // The sum of the other terms and the fused product, in their order.
    Value sum;
    for (Value term : terms) {
      if (joined(term))
        continue;
      Value v = term == wide->term ? fusedValue : term;
      sum = sum ? b.create<AddOp>(loc, sum, v).getResult() : v;
    }
    root.getResult().replaceAllUsesWith(sum);
    for (AddOp add : adds)
      add->dropAllReferences();
    for (AddOp add : adds)
      add->erase();
    SmallVector<Product *> gone{&*thin, &*wide};
    for (Product &p : extras)
      gone.push_back(&p);
    for (Product *p : gone) {
      Operation *term = p->term.getDefiningOp();
      if (term != p->matmul.getOperation() && term->use_empty())
        term->erase();
      if (p->matmul->use_empty())
        p->matmul->erase();
    }
    fused.insert(fusedValue.getDefiningOp());
    return sum.getDefiningOp<AddOp>();
  }

  /// matmul([a_w | a_e... | a_t], [b_w ; b_e... ; op(b_t) * s] in b_w's
  /// orientation).
  Value concatenated(OpBuilder &b, Location loc, const Product &wide, ArrayRef<Product> extras,
                     const Product &thin) {
    MatmulOp w = wide.matmul, t = thin.matmul;
    int64_t axis = cast<RankedTensorType>(w.getLhs().getType()).getRank() - 1;
    SmallVector<Value> lhsParts{w.getLhs()};
    for (const Product &p : extras)
      lhsParts.push_back(MatmulOp(p.matmul).getLhs());
    lhsParts.push_back(t.getLhs());
    std::vector<void *> key;
    for (Value v : lhsParts)
      key.push_back(v.getAsOpaquePointer());
    Value &lhs = lhsConcats[key];
    if (!lhs || !lhs.getParentBlock()) {
      // Where the latest of the operands is defined, so that every product
      // of the group can read it.
      OpBuilder at(b);
      Operation *later = nullptr;
      for (Value v : lhsParts)
        if (Operation *def = v.getDefiningOp(); def && (!later || later->isBeforeInBlock(def)))
          later = def;
      if (later && later->getBlock() == b.getInsertionBlock())
        at.setInsertionPointAfter(later);
      else
        at.setInsertionPointToStart(b.getInsertionBlock());
      lhs = at.create<ConcatOp>(loc, lhsParts, static_cast<uint64_t>(axis));
    }
    // The adapter's matrix as rows (k-major) when the frozen one is not
    // transposed, as columns when it is.
    Value rhs = t.getRhs();
    if (t.getTransposeB() != w.getTransposeB())
      rhs = b.create<TransposeOp>(loc, rhs, b.getDenseI64ArrayAttr({1, 0}));
    if (thin.scale)
      rhs = b.create<MulOp>(loc, rhs, thin.scale);
    SmallVector<Value> rhsParts{w.getRhs()};
    for (const Product &p : extras)
      rhsParts.push_back(MatmulOp(p.matmul).getRhs());
    rhsParts.push_back(rhs);
    auto weights =
        b.create<ConcatOp>(loc, rhsParts, static_cast<uint64_t>(w.getTransposeB() ? 1 : 0));
    if (!extras.empty())
      groups.push_back(weights);
    return b.create<MatmulOp>(loc, lhs, weights, false, w.getTransposeB());
  }
};

} // namespace
