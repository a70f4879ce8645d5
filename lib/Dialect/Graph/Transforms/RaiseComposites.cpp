//===- RaiseComposites.cpp - Rebuild RMSNorm, SiLU, attention -------------===//
//
// Exported graphs spell these ops with primitives; the rewrites here match
// the exact spellings and rebuild the unit ops. A near miss is left alone.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/MaskAnalysis.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "mlir/IR/Matchers.h"

#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include <cmath>

namespace kiln {
#define GEN_PASS_DEF_RAISECOMPOSITESPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// The value of a splat float constant, if `v` is one.
std::optional<double> splatValue(Value v) {
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat() ||
      !llvm::isa<FloatType>(attr.getElementType()))
    return std::nullopt;
  return attr.getSplatValue<APFloat>().convertToDouble();
}

RankedTensorType tensorOf(Value v) { return llvm::cast<RankedTensorType>(v.getType()); }

/// The operand of a commutative binary op other than `known`, or null.
template <typename OpT> Value otherOperand(OpT op, Value known) {
  if (op.getLhs() == known)
    return op.getRhs();
  if (op.getRhs() == known)
    return op.getLhs();
  return {};
}

//===----------------------------------------------------------------------===//
// SiLU
//===----------------------------------------------------------------------===//

struct RaiseSilu : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp mul, PatternRewriter &rewriter) const override {
    for (Value side : {mul.getLhs(), mul.getRhs()}) {
      auto sigmoid = side.getDefiningOp<SigmoidOp>();
      if (!sigmoid || otherOperand(mul, side) != sigmoid.getInput() ||
          sigmoid.getInput().getType() != mul.getType())
        continue;
      rewriter.replaceOpWithNewOp<SiluOp>(mul, sigmoid.getInput());
      return success();
    }
    return failure();
  }
};

//===----------------------------------------------------------------------===//
// RMSNorm
//===----------------------------------------------------------------------===//

/// Matches r = 1/sqrt(mean(x^2 over trailing dims, keepdim) + eps) and
/// returns the first normalized axis and eps.
std::optional<std::pair<int64_t, double>> matchInverseRms(Value r, Value x) {
  Value shifted;
  if (auto rsqrt = r.getDefiningOp<RsqrtOp>()) {
    shifted = rsqrt.getInput();
  } else if (auto reciprocal = r.getDefiningOp<ReciprocalOp>()) {
    auto sqrt = reciprocal.getInput().getDefiningOp<SqrtOp>();
    if (!sqrt)
      return std::nullopt;
    shifted = sqrt.getInput();
  } else {
    return std::nullopt;
  }
  auto add = shifted.getDefiningOp<AddOp>();
  if (!add)
    return std::nullopt;
  for (Value side : {add.getLhs(), add.getRhs()}) {
    auto mean = side.getDefiningOp<ReduceMeanOp>();
    std::optional<double> eps = splatValue(otherOperand(add, side));
    if (!mean || !eps || !mean.getKeepdim() || add.getType() != mean.getType())
      continue;
    Value squared = mean.getInput();
    bool isSquare = false;
    if (auto pow = squared.getDefiningOp<PowOp>())
      isSquare = pow.getLhs() == x && splatValue(pow.getRhs()) == 2.0;
    else if (auto sq = squared.getDefiningOp<MulOp>())
      isSquare = sq.getLhs() == x && sq.getRhs() == x;
    if (!isSquare || squared.getType() != x.getType())
      continue;
    // The reduced axes must be exactly the trailing ones.
    ArrayRef<int64_t> axes = mean.getAxes();
    int64_t rank = tensorOf(x).getRank();
    for (auto [i, axis] : llvm::enumerate(axes))
      if (axis != rank - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(i))
        return std::nullopt;
    return std::make_pair(axes.front(), *eps);
  }
  return std::nullopt;
}

/// x * inverse_rms(x) -> rms_norm(x, ones).
struct RaiseRmsNorm : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp mul, PatternRewriter &rewriter) const override {
    for (Value x : {mul.getLhs(), mul.getRhs()}) {
      if (x.getType() != mul.getType())
        continue;
      auto match = matchInverseRms(otherOperand(mul, x), x);
      if (!match)
        continue;
      auto [axis, eps] = *match;
      RankedTensorType type = tensorOf(x);
      DimList dims = getDims(type);
      RankedTensorType weightType =
          makeTensorType(ArrayRef<Dim>(dims).drop_front(axis), type.getElementType());
      if (!weightType.hasStaticShape())
        continue; // A ones weight needs a static normalized shape.
      Value ones = rewriter.create<ConstantOp>(
          mul.getLoc(),
          DenseElementsAttr::get(weightType, rewriter.getFloatAttr(type.getElementType(), 1.0)));
      rewriter.replaceOpWithNewOp<RmsNormOp>(mul, mul.getType(), x, ones,
                                             rewriter.getI64IntegerAttr(axis),
                                             rewriter.getF64FloatAttr(eps));
      return success();
    }
    return failure();
  }
};

/// weight * rms_norm(x, ones) -> rms_norm(x, weight).
struct FoldRmsNormWeight : OpRewritePattern<MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MulOp mul, PatternRewriter &rewriter) const override {
    for (Value side : {mul.getLhs(), mul.getRhs()}) {
      auto norm = side.getDefiningOp<RmsNormOp>();
      if (!norm || splatValue(norm.getWeight()) != 1.0 || norm.getType() != mul.getType())
        continue;
      Value weight = otherOperand(mul, side);
      if (weight.getType() != norm.getWeight().getType())
        continue;
      rewriter.replaceOpWithNewOp<RmsNormOp>(mul, mul.getType(), norm.getInput(), weight,
                                             norm.getAxisAttr(), norm.getEpsilonAttr());
      return success();
    }
    return failure();
  }
};

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

/// k [B, Hkv, L, D] repeated to [B, Hkv*rep, L, D] by unsqueeze(2), expand,
/// reshape (HF's repeat_kv) -> the unrepeated k; otherwise `v` itself.
Value stripRepeatKv(Value v) {
  auto reshape = v.getDefiningOp<ReshapeOp>();
  if (!reshape)
    return v;
  auto expand = reshape.getInput().getDefiningOp<ExpandOp>();
  if (!expand)
    return v;
  auto unsqueeze = expand.getInput().getDefiningOp<UnsqueezeOp>();
  if (!unsqueeze || unsqueeze.getAxes() != ArrayRef<int64_t>{2})
    return v;
  Value kv = unsqueeze.getInput();
  RankedTensorType in = tensorOf(kv), out = tensorOf(v);
  if (in.getRank() != 4 || out.getRank() != 4 || in.isDynamicDim(1) || out.isDynamicDim(1) ||
      out.getDimSize(1) % in.getDimSize(1) != 0)
    return v;
  DimList inDims = getDims(in), outDims = getDims(out);
  if (inDims[0] != outDims[0] || inDims[2] != outDims[2] || inDims[3] != outDims[3])
    return v;
  return kv;
}

/// `v * c` (or `c * v`) with a splat constant c of v's type: multiplies
/// \p scale by c and returns v; otherwise `v` itself.
Value stripScale(Value v, double &scale) {
  auto mul = v.getDefiningOp<MulOp>();
  if (!mul)
    return v;
  for (Value side : {mul.getRhs(), mul.getLhs()}) {
    Value other = otherOperand(mul, side);
    std::optional<double> c = splatValue(side);
    if (c && other.getType() == mul.getType()) {
      scale *= *c;
      return other;
    }
  }
  return v;
}

/// k [B, H, L, D] from its transpose k^T [B, H, D, L] spelled as
/// transpose(0, 1, 3, 2), or as PyTorch's export spells it: reshape to
/// [B*H, L, D], transpose(0, 2, 1), reshape to [B, H, D, L]. Null otherwise.
Value keyOfTranspose(Value keyT, PatternRewriter &rewriter) {
  if (auto t = keyT.getDefiningOp<TransposeOp>()) {
    if (t.getPerm() == ArrayRef<int64_t>{0, 1, 3, 2})
      return t.getInput();
    // The legacy exporter folds the head transpose of k [B, L, H, D] into
    // k^T: transpose(0, 2, 3, 1). The key is its (0, 2, 1, 3) transpose.
    if (t.getPerm() == ArrayRef<int64_t>{0, 2, 3, 1})
      return rewriter.create<TransposeOp>(t.getLoc(), t.getInput(),
                                          rewriter.getDenseI64ArrayAttr({0, 2, 1, 3}));
    return {};
  }
  auto outer = keyT.getDefiningOp<ReshapeOp>();
  auto t = outer ? outer.getInput().getDefiningOp<TransposeOp>() : TransposeOp();
  auto inner = t ? t.getInput().getDefiningOp<ReshapeOp>() : ReshapeOp();
  if (!inner || t.getPerm() != ArrayRef<int64_t>{0, 2, 1})
    return {};
  Value key = inner.getInput();
  RankedTensorType k = tensorOf(key), merged = tensorOf(inner), out = tensorOf(outer);
  int64_t r = k.getRank();
  if (r < 4 || merged.getRank() != 3 || out.getRank() != 4)
    return {};
  DimList kd = getDims(k), md = getDims(merged), od = getDims(out);
  if (md[1] != kd[r - 2] || md[2] != kd[r - 1] || od[0] != kd[0] || od[2] != kd[r - 1] ||
      od[3] != kd[r - 2])
    return {};
  if (r == 4)
    return od[1] == kd[1] ? key : Value();
  // A static export merges the GQA repeat [B, KV, rep, S, D] straight into
  // [B*H, S, D]: the key is that repeat as [B, H, S, D] (which the repeat
  // stripping then sees through), when the head dims multiply to H.
  std::optional<int64_t> heads = od[1] ? od[1].getConstantValue() : std::nullopt;
  int64_t product = 1;
  for (int64_t d = 1; d < r - 2; ++d) {
    std::optional<int64_t> c = kd[d] ? kd[d].getConstantValue() : std::nullopt;
    if (!c)
      return {};
    product *= *c;
  }
  if (!heads || *heads != product)
    return {};
  DimList keyDims = {od[0], od[1], od[3], od[2]};
  return rewriter.create<ReshapeOp>(keyT.getLoc(), makeTensorType(keyDims, k.getElementType()),
                                    key);
}

/// The exported causal mask: select(trilu(ones) == 0, lowest, 0) over
/// [S, L] (trilu keeping the lower triangle, diagonal 0), or its != 0
/// spelling with the branches swapped: position (i, j) is -inf for j > i.
bool isCausalMask(Value mask) {
  auto select = mask.getDefiningOp<SelectOp>();
  if (!select || tensorOf(mask).getRank() != 2)
    return false;
  Value cond = select.getCondition();
  Value lhs, rhs;
  bool keepWhenTrue;
  if (auto eq = cond.getDefiningOp<EqOp>()) {
    lhs = eq.getLhs(), rhs = eq.getRhs(), keepWhenTrue = false;
  } else if (auto ne = cond.getDefiningOp<NeOp>()) {
    lhs = ne.getLhs(), rhs = ne.getRhs(), keepWhenTrue = true;
  } else {
    return false;
  }
  std::optional<double> zero = splatValue(rhs);
  auto trilu = lhs.getDefiningOp<TriluOp>();
  if (!trilu || !zero || *zero != 0 || trilu.getUpper() || trilu.getDiagonal() != 0)
    return false;
  auto expand = trilu.getInput().getDefiningOp<ExpandOp>();
  std::optional<double> one = expand ? splatValue(expand.getInput()) : splatValue(trilu.getInput());
  if (!one || *one == 0)
    return false;
  std::optional<double> keep =
      splatValue(keepWhenTrue ? select.getTrueValue() : select.getFalseValue());
  std::optional<double> drop =
      splatValue(keepWhenTrue ? select.getFalseValue() : select.getTrueValue());
  // -inf, or the dtype's lowest value (torch.finfo(dtype).min; fp16's is
  // -65504): either makes exp() of the masked score exactly 0.
  return keep && drop && *keep == 0 && *drop <= -65504.0;
}

/// The softmax under PyTorch's guard of fully masked rows,
/// select(is_nan(p), 0, p), or null when `probs` is not guarded.
Value unguardedProbs(Value probs) {
  auto select = probs.getDefiningOp<SelectOp>();
  auto isNan = select ? select.getCondition().getDefiningOp<IsNanOp>() : IsNanOp();
  if (!isNan || isNan.getInput() != select.getFalseValue() ||
      splatValue(select.getTrueValue()) != 0.0 ||
      select.getType() != select.getFalseValue().getType())
    return {};
  return select.getFalseValue();
}

/// The i1 condition of a float mask select(keep, 0, lowest), else null.
/// `exact` says whether the mask is that condition everywhere: with -inf a
/// row whose every key is dropped is NaN either way; with a finite lowest
/// (torch.finfo(dtype).min) the softmax of such a row is uniform, so the
/// condition stands for the mask only where no row is fully dropped, or
/// where the exporter's NaN guard says those rows are meant to be 0 (SDPA's
/// semantics for a boolean mask, which it spells with finfo.min).
Value boolOfFloatMask(Value mask, bool &exact) {
  auto select = mask.getDefiningOp<SelectOp>();
  if (!select || !tensorOf(select.getCondition()).getElementType().isInteger(1))
    return {};
  std::optional<double> keep = splatValue(select.getTrueValue());
  std::optional<double> drop = splatValue(select.getFalseValue());
  if (!keep || !drop || *keep != 0 || *drop > -65504.0)
    return {};
  exact = std::isinf(*drop);
  return select.getCondition();
}

/// softmax(q k^T * scale + mask) v -> attention(q, k, v, mask).
struct RaiseAttention : OpRewritePattern<MatmulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(MatmulOp pv, PatternRewriter &rewriter) const override {
    if (pv.getTransposeA() || pv.getTransposeB() || tensorOf(pv).getRank() != 4)
      return failure();
    Value probs = pv.getLhs();
    bool guarded = false;
    if (Value inner = unguardedProbs(probs)) {
      probs = inner;
      guarded = true;
    }
    auto softmax = probs.getDefiningOp<SoftmaxOp>();
    if (!softmax || softmax.getAxis() != 3)
      return failure();
    Value scores = softmax.getInput();
    Value mask;
    if (auto add = scores.getDefiningOp<AddOp>()) {
      // The side that is a q k^T product (possibly scaled) is the scores.
      for (Value side : {add.getLhs(), add.getRhs()})
        if (side.getType() == add.getType() &&
            (side.getDefiningOp<MatmulOp>() || side.getDefiningOp<MulOp>() ||
             side.getDefiningOp<DivOp>())) {
          mask = otherOperand(add, side);
          scores = side;
          break;
        }
      if (!mask)
        return failure();
    }
    double scale = 1.0;
    if (auto mul = scores.getDefiningOp<MulOp>()) {
      std::optional<double> c = splatValue(mul.getRhs());
      if (!c || mul.getLhs().getType() != mul.getType())
        return failure();
      scale = *c;
      scores = mul.getLhs();
    } else if (auto div = scores.getDefiningOp<DivOp>()) {
      std::optional<double> c = splatValue(div.getRhs());
      if (!c || *c == 0 || div.getLhs().getType() != div.getType())
        return failure();
      scale = 1.0 / *c;
      scores = div.getLhs();
    }
    auto qk = scores.getDefiningOp<MatmulOp>();
    if (!qk || qk.getTransposeA())
      return failure();
    // PyTorch's export splits the scale as sqrt(scale) on q and on k^T.
    Value query = stripScale(qk.getLhs(), scale);
    Value key = stripScale(qk.getRhs(), scale);
    Value value = pv.getRhs();
    if (tensorOf(query).getRank() != 4 || tensorOf(key).getRank() != 4 ||
        tensorOf(value).getRank() != 4)
      return failure();
    if (mask) {
      Type element = tensorOf(mask).getElementType();
      if (!llvm::isa<FloatType>(element) && !element.isInteger(1))
        return failure();
    }
    // Last, as it may build the key's transpose: nothing fails after it.
    if (!qk.getTransposeB()) { // k^T spelled as a transpose of k.
      key = keyOfTranspose(key, rewriter);
      if (!key)
        return failure();
    }
    Value strippedKey = stripRepeatKv(key), strippedValue = stripRepeatKv(value);
    if (tensorOf(strippedKey).getDimSize(1) == tensorOf(strippedValue).getDimSize(1)) {
      key = strippedKey;
      value = strippedValue;
    }
    // A float mask that only selects 0 or -inf is its i1 condition: no
    // S x S float tensor in the step.
    bool sameLength = getDims(tensorOf(query))[2] == getDims(tensorOf(key))[2];
    MaskKind kind = !mask                ? MaskKind::All
                    : isCausalMask(mask) ? MaskKind::Causal
                                         : classifyMask(mask);
    // A float mask whose values are known (a static export's folded
    // constant or initializer) is judged by its values.
    if (mask && kind == MaskKind::Unknown)
      kind = classifyAdditiveMask(mask);
    bool exact = false;
    if (Value keep = mask && kind == MaskKind::Unknown ? boolOfFloatMask(mask, exact) : Value()) {
      kind = classifyMask(keep);
      if (kind == MaskKind::Unknown && (exact || guarded))
        mask = keep;
    }
    bool causal = kind == MaskKind::Causal && sameLength;
    if (causal || kind == MaskKind::All)
      mask = {};
    Value result = rewriter.create<AttentionOp>(pv.getLoc(), pv.getType(), query, key, value, mask,
                                                causal, rewriter.getF64FloatAttr(scale),
                                                DenseBoolArrayAttr());
    // The guard turns a fully masked row (NaN) into 0. Without a mask, or
    // with the causal one, every row keeps a key: the guard is a no-op.
    if (guarded && mask) {
      Value nan = rewriter.create<IsNanOp>(pv.getLoc(), result);
      Value zero = rewriter.create<ConstantOp>(
          pv.getLoc(),
          DenseElementsAttr::get(RankedTensorType::get({}, tensorOf(result).getElementType()),
                                 rewriter.getFloatAttr(tensorOf(result).getElementType(), 0.0)));
      result = rewriter.create<SelectOp>(pv.getLoc(), pv.getType(), nan, zero, result);
    }
    rewriter.replaceOp(pv, result);
    return success();
  }
};

/// An attention whose i1 mask keeps no key after its query (transformers'
/// packed documents: causal and the same document; a sliding window) is
/// also `causal`: the keep set is the same (mask and causal = mask), and
/// the kernels skip the key tiles above the diagonal instead of computing
/// and dropping them. The mask's query and key dims must be the op's own:
/// a mask broadcast along the keys proves nothing about them. Of `and(c,
/// m)` with c exactly causal only m stays the mask.
struct CausalFromMask final : OpRewritePattern<AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AttentionOp op, PatternRewriter &rewriter) const override {
    Value mask = op.getMask();
    if (op.getCausal() || !mask || !tensorOf(mask).getElementType().isInteger(1))
      return failure();
    DimList q = getDims(tensorOf(op.getQuery())), k = getDims(tensorOf(op.getKey())),
            m = getDims(tensorOf(mask));
    size_t r = m.size();
    // (An unknown dim is null: equal to another unknown, yet proves nothing.)
    if (r < 2 || !q[2] || !(q[2] == k[2]) || !(m[r - 2] == q[2]) || !(m[r - 1] == k[2]) ||
        !maskImpliesCausal(mask))
      return failure();
    // A conjunct that is exactly key <= query over the op's dims says
    // nothing `causal` does not: the mask keeps the other one (no per-score
    // loads of the positions it compares), or none when that keeps all.
    Value rest = mask;
    if (auto both = mask.getDefiningOp<AndOp>())
      for (auto [c, other] : {std::pair{both.getLhs(), both.getRhs()}, {both.getRhs(), both.getLhs()}}) {
        DimList cd = getDims(tensorOf(c));
        size_t n = cd.size();
        if (n < 2 || !(cd[n - 2] == q[2]) || !(cd[n - 1] == k[2]) ||
            classifyMask(c) != MaskKind::Causal || tensorOf(other).getRank() < 2)
          continue;
        rest = classifyMask(other) == MaskKind::All ? Value() : other;
        break;
      }
    rewriter.modifyOpInPlace(op, [&] {
      op.setCausal(true);
      if (rest != mask) {
        if (rest)
          op.getMaskMutable().assign(rest);
        else
          op.getMaskMutable().clear();
      }
    });
    return success();
  }
};

struct RaiseCompositesPass final : kiln::impl::RaiseCompositesPassBase<RaiseCompositesPass> {
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    populateRaiseCompositesPatterns(patterns);
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace

void kiln::populateRaiseCompositesPatterns(RewritePatternSet &patterns) {
  patterns.add<RaiseSilu, RaiseRmsNorm, FoldRmsNormWeight, RaiseAttention, CausalFromMask>(
      patterns.getContext());
}
