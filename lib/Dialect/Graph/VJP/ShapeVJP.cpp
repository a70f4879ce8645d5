//===- ShapeVJP.cpp - VJPs of shape and indexing ops ----------------------===//
//
// These ops only move elements, so each gradient moves dy back the other
// way (the transpose of the data movement). Indices get no gradient.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Graph/VJP.h"

using namespace mlir;

namespace kiln {
namespace {

/// Single-input ops whose gradient is `Derived::grad(op, b, dy)`, built only
/// when wanted and dy exists, then given the input's exact spelling.
template <typename Derived, typename OpT> struct MoveVJP : VJPModel<Derived, OpT> {
  static LogicalResult vjp(OpT op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Value dx;
    if (want[0] && dys[0]) {
      FailureOr<Value> g = Derived::grad(op, b, dys[0]);
      if (failed(g))
        return failure();
      dx = sumToShape(b, op.getLoc(), *g, tensorOf(op.getInput()));
    }
    grads.push_back(dx);
    return success();
  }
};

/// A reshape's gradient is the gradient reshaped back.
struct ReshapeVJP : VJPModel<ReshapeVJP, ReshapeOp> {
  static LogicalResult vjp(ReshapeOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Value dx;
    if (want[0] && dys[0])
      dx = b.create<ReshapeOp>(op.getLoc(), op.getInput().getType(), dys[0]);
    grads.push_back(dx);
    return success();
  }
};

/// Transposing back uses the inverse permutation.
struct TransposeVJP : MoveVJP<TransposeVJP, TransposeOp> {
  static FailureOr<Value> grad(TransposeOp op, OpBuilder &b, Value dy) {
    ArrayRef<int64_t> perm = op.getPerm();
    SmallVector<int64_t> inverse(perm.size());
    for (auto [i, p] : llvm::enumerate(perm))
      inverse[p] = i;
    return Value(b.create<TransposeOp>(op.getLoc(), dy, inverse));
  }
};

struct SqueezeVJP : MoveVJP<SqueezeVJP, SqueezeOp> {
  static FailureOr<Value> grad(SqueezeOp op, OpBuilder &b, Value dy) {
    return Value(b.create<UnsqueezeOp>(op.getLoc(), dy, op.getAxesAttr()));
  }
};

struct UnsqueezeVJP : MoveVJP<UnsqueezeVJP, UnsqueezeOp> {
  static FailureOr<Value> grad(UnsqueezeOp op, OpBuilder &b, Value dy) {
    return Value(b.create<SqueezeOp>(op.getLoc(), dy, op.getAxesAttr()));
  }
};

/// Broadcasting copies each element, so the copies' gradients add up
/// (MoveVJP's sumToShape does it).
struct ExpandVJP : MoveVJP<ExpandVJP, ExpandOp> {
  static FailureOr<Value> grad(ExpandOp, OpBuilder &, Value dy) { return dy; }
};

/// Along strided dim `d` (step k, n elements taken from `first`): dy
/// interleaved with k - 1 zeros after each element, [.., n, ..] ->
/// [.., n, 1, ..] ++ zeros [.., n, k - 1, ..] -> [.., n * k, ..], cut to the
/// (n - 1) * k + 1 positions from the first taken one to the last. A
/// negative step walks dy backwards from the lowest position. Updates
/// `first` and `dims[d]` to the span the result covers.
FailureOr<Value> spreadStrided(SliceOp op, OpBuilder &b, Value g, int64_t d, int64_t k, Dim &first,
                               DimList &dims) {
  Location loc = op.getLoc();
  MLIRContext *context = op.getContext();
  Type element = tensorOf(g).getElementType();
  int64_t rank = dims.size();
  Dim n = dims[d];
  Dim last = dimMul(dimSub(n, dimConst(context, 1)), dimConst(context, k < 0 ? -k : k));
  if (!n || !first || !last)
    return op.emitOpError("has no gradient: the bounds of strided dim ") << d << " are unknown";
  SmallVector<int64_t> unit(rank, 1);
  if (k < 0) { // Reverse dy along d: the lowest position comes first.
    DimList reverseStarts(rank, dimConst(context, 0));
    reverseStarts[d] = dimSub(n, dimConst(context, 1));
    SmallVector<int64_t> backwards = unit;
    backwards[d] = -1;
    g = b.create<SliceOp>(loc, g.getType(), g, DimsAttr::get(context, reverseStarts), backwards);
    first = dimSub(first, last);
    k = -k;
  }
  DimList inserted = dims;
  inserted.insert(inserted.begin() + d + 1, dimConst(context, k - 1));
  Value spread = b.create<UnsqueezeOp>(loc, g, b.getDenseI64ArrayAttr({d + 1}));
  Value zeros = splatLike(b, loc, 0.0, makeTensorType(inserted, element));
  spread = b.create<ConcatOp>(loc, ValueRange{spread, zeros}, static_cast<uint64_t>(d + 1));
  DimList flat = dims;
  flat[d] = dimMul(n, dimConst(context, k));
  spread = b.create<ReshapeOp>(loc, makeTensorType(flat, element), spread);
  DimList span = dims;
  span[d] = dimAdd(last, dimConst(context, 1));
  spread = b.create<SliceOp>(loc, makeTensorType(span, element), spread,
                             DimsAttr::get(context, DimList(rank, dimConst(context, 0))), unit);
  dims = span;
  return spread;
}

/// The elements a slice skipped get zero: dy is surrounded by zeros along
/// every sliced dim, concat(zeros[start], dy, zeros[size - start - len]),
/// which keeps symbolic bounds exact where a scatter would need indices.
struct SliceVJP : MoveVJP<SliceVJP, SliceOp> {
  static FailureOr<Value> grad(SliceOp op, OpBuilder &b, Value dy) {
    Location loc = op.getLoc();
    DimList in = getDims(op.getInput().getType()), dims = getDims(tensorOf(dy));
    Type element = tensorOf(dy).getElementType();
    ArrayRef<SymExprAttr> starts = op.getStarts().getDims();
    ArrayRef<int64_t> steps = op.getSteps();
    Value g = dy;
    for (int64_t d = 0, rank = in.size(); d < rank; ++d) {
      Dim before = starts[d];
      // With one element taken, the step never matters.
      if (steps[d] != 1 && !isConst(dims[d], 1)) {
        FailureOr<Value> spread = spreadStrided(op, b, g, d, steps[d], before, dims);
        if (failed(spread))
          return failure();
        g = *spread;
      }
      // An untouched dim needs no zeros, even when its size is unknown.
      if (isConst(before, 0) && dims[d] == in[d])
        continue;
      Dim after = dimSub(in[d], dimAdd(before, dims[d]));
      if (!after)
        return op.emitOpError("has no gradient: the bounds of dim ") << d << " are unknown";
      auto zeros = [&](Dim length) {
        DimList shape = dims;
        shape[d] = length;
        return splatLike(b, loc, 0.0, makeTensorType(shape, element));
      };
      SmallVector<Value, 3> pieces;
      if (!isConst(before, 0))
        pieces.push_back(zeros(before));
      pieces.push_back(g);
      if (!isConst(after, 0))
        pieces.push_back(zeros(after));
      if (pieces.size() > 1)
        g = b.create<ConcatOp>(loc, pieces, static_cast<uint64_t>(d));
      dims[d] = in[d];
    }
    return g;
  }
};

/// pads = [low..., high...]: the input sits at offset `low` in the result.
struct PadVJP : MoveVJP<PadVJP, PadOp> {
  static FailureOr<Value> grad(PadOp op, OpBuilder &b, Value dy) {
    RankedTensorType inType = op.getInput().getType();
    int64_t rank = inType.getRank();
    SmallVector<SymExprAttr> starts;
    for (int64_t low : op.getPads().take_front(rank))
      starts.push_back(dimConst(op.getContext(), low));
    SmallVector<int64_t> steps(rank, 1);
    return Value(
        b.create<SliceOp>(op.getLoc(), inType, dy, DimsAttr::get(op.getContext(), starts), steps));
  }
};

/// Each input gets its slice of dy along the axis.
struct ConcatVJP : VJPModel<ConcatVJP, ConcatOp> {
  static LogicalResult vjp(ConcatOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    MLIRContext *context = op.getContext();
    int64_t axis = op.getAxis();
    Dim offset = dimConst(context, 0);
    for (auto [i, input] : llvm::enumerate(op.getInputs())) {
      RankedTensorType type = tensorOf(input);
      Value dx;
      if (want[i] && dys[0]) {
        if (!offset)
          return op.emitOpError("has no gradient: the size of an input along "
                                "the axis is unknown");
        SmallVector<SymExprAttr> starts(type.getRank(), dimConst(context, 0));
        starts[axis] = offset;
        SmallVector<int64_t> steps(type.getRank(), 1);
        dx = b.create<SliceOp>(op.getLoc(), type, dys[0], DimsAttr::get(context, starts), steps);
      }
      grads.push_back(dx);
      offset = dimAdd(offset, getDim(type, axis));
    }
    return success();
  }
};

/// The pieces' gradients joined back; a piece without one contributes zeros.
struct SplitVJP : VJPModel<SplitVJP, SplitOp> {
  static LogicalResult vjp(SplitOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Value dx;
    if (want[0] && llvm::any_of(dys, [](Value dy) { return bool(dy); })) {
      Location loc = op.getLoc();
      SmallVector<Value> pieces;
      for (auto [result, dy] : llvm::zip(op.getResults(), dys))
        pieces.push_back(gradOrZeros(b, loc, dy, tensorOf(result)));
      dx = b.create<ConcatOp>(loc, pieces, op.getAxisAttr());
      dx = sumToShape(b, loc, dx, op.getInput().getType());
    }
    grads.push_back(dx);
    return success();
  }
};

/// A gather's transpose: rows read several times get their gradients added.
struct GatherVJP : VJPModel<GatherVJP, GatherOp> {
  static LogicalResult vjp(GatherOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Value ddata;
    if (want[0] && dys[0]) {
      Location loc = op.getLoc();
      RankedTensorType dataType = tensorOf(op.getData());
      ddata = b.create<ScatterAddOp>(loc, splatLike(b, loc, 0.0, dataType), op.getIndices(), dys[0],
                                     op.getAxisAttr());
      ddata = sumToShape(b, loc, ddata, dataType);
    }
    grads.append({ddata, Value()});
    return success();
  }
};

/// dest passes through; each update reads back the dy element it went to.
struct ScatterAddVJP : VJPModel<ScatterAddVJP, ScatterAddOp> {
  static LogicalResult vjp(ScatterAddOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Location loc = op.getLoc();
    Value ddest, dupdates;
    if (want[0] && dys[0])
      ddest = sumToShape(b, loc, dys[0], tensorOf(op.getDest()));
    if (want[2] && dys[0])
      dupdates =
          sumToShape(b, loc, b.create<GatherOp>(loc, dys[0], op.getIndices(), op.getAxisAttr()),
                     tensorOf(op.getUpdates()));
    grads.append({ddest, Value(), dupdates});
    return success();
  }
};

/// Element gathers have no scatter counterpart yet: an error only when a
/// gradient is actually needed, so they still work on constant data.
template <typename OpT> struct NoDataGradVJP : VJPModel<NoDataGradVJP<OpT>, OpT> {
  static LogicalResult vjp(OpT op, OpBuilder &, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    if (want[0] && dys[0])
      return op.emitOpError("has no gradient for its data operand yet");
    grads.append(op->getNumOperands(), Value());
    return success();
  }
};

} // namespace

void attachShapeVJPModels(MLIRContext &context) {
  ReshapeOp::attachInterface<ReshapeVJP>(context);
  TransposeOp::attachInterface<TransposeVJP>(context);
  SqueezeOp::attachInterface<SqueezeVJP>(context);
  UnsqueezeOp::attachInterface<UnsqueezeVJP>(context);
  ExpandOp::attachInterface<ExpandVJP>(context);
  SliceOp::attachInterface<SliceVJP>(context);
  PadOp::attachInterface<PadVJP>(context);
  ConcatOp::attachInterface<ConcatVJP>(context);
  SplitOp::attachInterface<SplitVJP>(context);
  GatherOp::attachInterface<GatherVJP>(context);
  ScatterAddOp::attachInterface<ScatterAddVJP>(context);
  GatherElementsOp::attachInterface<NoDataGradVJP<GatherElementsOp>>(context);
  GatherNdOp::attachInterface<NoDataGradVJP<GatherNdOp>>(context);
}

} // namespace kiln
