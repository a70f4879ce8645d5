//===- FuseLinearCrossEntropy.cpp - LM head + loss, chunked over tokens ---===//
//
// The LM head's logits are the largest tensors of a decoder's step
// ([tokens × vocab], fp32 for the loss, and again for its gradient). They are
// consumed by nothing but the cross entropy, so the head matmul and the loss
// become one op that the interpreter and the runtime evaluate a chunk of
// tokens at a time (see Passes.td for the patterns).
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "mlir/IR/Matchers.h"

namespace kiln {
#define GEN_PASS_DEF_FUSELINEARCROSSENTROPYPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// The automatic chunk: the largest power of two of at most kMaxChunkTokens
/// rows whose logits (bf16 or fp32, as the chunk keeps them) fit
/// kChunkBytes: bf16 logits get twice the rows of fp32 ones (on the H200
/// the head GEMMs of a 128k vocabulary took 11.8 ms of the 1b step with 512
/// rows, 11.3 with 1024; 2048 rows would raise the 1b plan without remat by
/// 0.25 GiB, docs/benchmarks.md). The cap keeps a small vocabulary's chunk
/// small (the chunk is allocated whole, whatever the token count); GEMMs of
/// 4096 rows are long past their efficiency knee.
constexpr int64_t kChunkBytes = int64_t(256) << 20;
constexpr int64_t kMaxChunkTokens = 4096;

std::optional<double> splatValue(Value v) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat() ||
      !isa<FloatType>(attr.getElementType()) || cast<ShapedType>(attr.getType()).getRank() != 0)
    return std::nullopt;
  return attr.getSplatValue<APFloat>().convertToDouble();
}

/// What lies between the head matmul and the loss.
struct HeadChain {
  MatmulOp matmul;
  std::optional<double> softcap;
  SmallVector<Operation *> ops; // from the loss's operand back to the matmul
};

/// `x` is `c * tanh(y / c)` (either operand order of the mul): returns y.
Value matchSoftcap(Value x, double &cap) {
  auto mul = x.getDefiningOp<MulOp>();
  if (!mul)
    return {};
  for (auto [t, c] :
       {std::pair(mul.getLhs(), mul.getRhs()), std::pair(mul.getRhs(), mul.getLhs())}) {
    auto tanh = t.getDefiningOp<TanhOp>();
    std::optional<double> outer = splatValue(c);
    if (!tanh || !outer || !tanh->hasOneUse())
      continue;
    auto div = tanh.getOperand().getDefiningOp<DivOp>();
    if (!div || !div->hasOneUse())
      continue;
    std::optional<double> inner = splatValue(div.getRhs());
    if (!inner || *inner != *outer || !(*outer > 0))
      continue;
    cap = *outer;
    return div.getLhs();
  }
  return {};
}

/// Walks back from the loss's logits through reshapes, float casts (an
/// exporter's `.float()` and precision's casts around it) and at most one
/// soft-cap, each value used once, to the matmul.
std::optional<HeadChain> matchHead(Value logits) {
  HeadChain chain;
  Value v = logits;
  while (true) {
    if (!v.hasOneUse())
      return std::nullopt;
    Operation *def = v.getDefiningOp();
    if (!def)
      return std::nullopt;
    if (auto mm = dyn_cast<MatmulOp>(def)) {
      chain.matmul = mm;
      chain.ops.push_back(mm);
      break;
    }
    if (auto r = dyn_cast<ReshapeOp>(def)) {
      chain.ops.push_back(r);
      v = r.getInput();
      continue;
    }
    if (auto c = dyn_cast<CastOp>(def)) {
      auto from = dyn_cast<FloatType>(getElementTypeOrSelf(c.getInput().getType()));
      auto to = dyn_cast<FloatType>(getElementTypeOrSelf(c.getResult().getType()));
      if (!from || !to || from.getWidth() > 32 || to.getWidth() > 32)
        return std::nullopt;
      chain.ops.push_back(c);
      v = c.getInput();
      continue;
    }
    double cap = 0;
    if (Value inner = chain.softcap ? Value() : matchSoftcap(v, cap)) {
      chain.softcap = cap;
      auto mul = v.getDefiningOp<MulOp>();
      Operation *tanh = nullptr;
      for (Value operand : mul->getOperands())
        if (operand.getDefiningOp<TanhOp>())
          tanh = operand.getDefiningOp();
      chain.ops.append({mul, tanh, tanh->getOperand(0).getDefiningOp()});
      v = inner;
      continue;
    }
    return std::nullopt;
  }
  MatmulOp mm = chain.matmul;
  auto rhs = cast<RankedTensorType>(mm.getRhs().getType());
  auto lhs = cast<RankedTensorType>(mm.getLhs().getType());
  // Reshapes keep the row-major order: with the vocabulary last on both
  // ends, loss row r is matmul row r.
  auto result = cast<RankedTensorType>(mm.getResult().getType());
  auto loss = cast<RankedTensorType>(logits.getType());
  if (mm.getTransposeA() || rhs.getRank() != 2 || lhs.getRank() < 2 ||
      lhs.getElementType() != rhs.getElementType() ||
      result.getShape().back() != loss.getShape().back())
    return std::nullopt;
  return chain;
}

struct FuseLinearCrossEntropyPass final
    : kiln::impl::FuseLinearCrossEntropyPassBase<FuseLinearCrossEntropyPass> {
  using FuseLinearCrossEntropyPassBase::FuseLinearCrossEntropyPassBase;

  void runOnOperation() override {
    if (chunkTokens < 0) {
      getOperation().emitError("kiln-fuse-linear-cross-entropy: chunk-tokens must be >= 0, got ")
          << int64_t(chunkTokens);
      return signalPassFailure();
    }
    SmallVector<CrossEntropyOp> losses;
    getOperation().walk([&](CrossEntropyOp ce) { losses.push_back(ce); });
    for (CrossEntropyOp ce : losses)
      rewrite(ce);
  }

  void rewrite(CrossEntropyOp ce) {
    auto logits = cast<RankedTensorType>(ce.getLogits().getType());
    auto loss = cast<RankedTensorType>(ce.getResult().getType());
    if (ce.getReduction() != Reduction::mean || !logits.getElementType().isF32() ||
        !loss.getElementType().isF32())
      return;
    std::optional<HeadChain> chain = matchHead(ce.getLogits());
    if (!chain)
      return;
    MatmulOp mm = chain->matmul;
    auto vocab = logits.getDimSize(1);
    if (ShapedType::isDynamic(vocab))
      return;
    OpBuilder b(ce);
    Location loc = ce.getLoc();
    // The weight: [H, V], or [V, H] under transpose_b; a 2-D transpose
    // of the weight (a tied embedding) flips the flag instead.
    Value weight = mm.getRhs();
    bool transpose = mm.getTransposeB();
    if (auto t = weight.getDefiningOp<TransposeOp>();
        t && t.getPerm().size() == 2 && t.getPerm()[0] == 1 && t.getPerm()[1] == 0) {
      weight = t.getInput();
      transpose = !transpose;
    }
    Value hidden = mm.getLhs();
    auto hiddenType = cast<RankedTensorType>(hidden.getType());
    Dim rows = getDim(logits, 0);
    if (hiddenType.getRank() != 2 || getDim(hiddenType, 0) != rows) {
      DimList lead = getDims(hiddenType);
      Dim h = lead.back();
      lead.pop_back();
      if (dimProduct(lead, b.getContext()) != rows)
        return;
      hidden =
          b.create<ReshapeOp>(loc, makeTensorType({rows, h}, hiddenType.getElementType()), hidden);
    }
    FloatAttr softcap = chain->softcap ? b.getF64FloatAttr(*chain->softcap) : FloatAttr();
    // The graph rounds its logits to bf16 here: the chunk may too.
    bool bf16 =
        bf16Logits &&
        cast<RankedTensorType>(mm.getResult().getType()).getElementType().isBF16() &&
        hiddenType.getElementType().isBF16();
    int64_t chunk = chunkTokens;
    if (chunk == 0) {
      int64_t bytes = bf16 ? 2 : 4;
      chunk = 1;
      while (chunk * 2 <= kMaxChunkTokens && chunk * 2 * vocab * bytes <= kChunkBytes)
        chunk *= 2;
    }
    Value fused = b.create<LinearCrossEntropyOp>(
        loc, loss, hidden, weight, ce.getLabels(), transpose ? b.getUnitAttr() : UnitAttr(),
        ce.getIgnoreIndexAttr(), softcap, b.getI64IntegerAttr(chunk),
        bf16 ? b.getUnitAttr() : UnitAttr());
    ce.getResult().replaceAllUsesWith(fused);
    ce.erase();
    for (Operation *op : chain->ops)
      if (op->use_empty())
        op->erase();
  }
};

} // namespace
