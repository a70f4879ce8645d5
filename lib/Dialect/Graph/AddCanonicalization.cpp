//===- AddCanonicalization.cpp - Sums of zero-padded concatenations -------===//
//
// Autodiff sums the gradients of a tensor read by several slices: each
// slice's gradient is a concatenation of its piece with zeros, so RoPE's
// rotate-half backward is `concat(0, a) + concat(b, 0)`. The sum is the
// concatenation of the pieces that are not zero, `concat(b, a)`: no adds
// of zeros, and one concatenation that a kernel prints as one branch per
// piece instead of two.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"

using namespace mlir;
using namespace kiln;

namespace {

/// A splat zero constant, or one broadcast by expand.
bool isZero(Value v) {
  if (auto expand = v.getDefiningOp<ExpandOp>())
    v = expand.getInput();
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)) || !attr.isSplat())
    return false;
  if (isa<FloatType>(attr.getElementType()))
    return attr.getSplatValue<APFloat>().isZero();
  if (isa<IntegerType>(attr.getElementType()))
    return attr.getSplatValue<APInt>().isZero();
  return false;
}

/// add(concat(a_1..a_n), concat(b_1..b_n)) along one axis with pieces of
/// equal sizes, where a_i or b_i is zero for every i ->
/// concat(the nonzero of each pair). Exact but for the sign of a zero
/// (-0 + 0 is +0; the concatenation keeps -0).
struct AddOfZeroPaddedConcats : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(AddOp add, PatternRewriter &rewriter) const override {
    auto lhs = add.getLhs().getDefiningOp<ConcatOp>();
    auto rhs = add.getRhs().getDefiningOp<ConcatOp>();
    if (!lhs || !rhs || lhs.getAxis() != rhs.getAxis() || lhs.getType() != add.getType() ||
        rhs.getType() != add.getType() || lhs.getInputs().size() != rhs.getInputs().size())
      return failure();
    int64_t axis = lhs.getAxis();
    SmallVector<Value> pieces;
    for (auto [a, b] : llvm::zip(lhs.getInputs(), rhs.getInputs())) {
      auto ta = cast<RankedTensorType>(a.getType()), tb = cast<RankedTensorType>(b.getType());
      if (getDim(ta, axis) != getDim(tb, axis))
        return failure();
      bool za = isZero(a), zb = isZero(b);
      if (!za && !zb)
        return failure();
      pieces.push_back(za ? b : a);
    }
    // Each piece has its pair's size along the axis and the result's
    // elsewhere (both concatenations verified): the sum's type.
    rewriter.replaceOpWithNewOp<ConcatOp>(add, add.getType(), pieces,
                                          static_cast<uint64_t>(axis));
    return success();
  }
};

} // namespace

void AddOp::getCanonicalizationPatterns(RewritePatternSet &patterns, MLIRContext *context) {
  patterns.add<AddOfZeroPaddedConcats>(context);
}
