//===- OpClassification.cpp - How graph ops map onto kernels --------------===//

#include "kiln/Dialect/Kernel/OpClassification.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;

namespace kiln::kernel {

OpClass classifyOp(Operation *op) {
  if (op->hasTrait<OpTrait::Elementwise>())
    return OpClass::Elementwise;
  return llvm::TypeSwitch<Operation *, OpClass>(op)
      .Case<MatmulOp>([](auto) { return OpClass::Gemm; })
      .Case<kiln::AllReduceOp>([](auto) { return OpClass::Collective; })
      .Case<ParameterOp, kiln::ConstantOp>([](auto) { return OpClass::Source; })
      .Case<ReshapeOp, SqueezeOp, UnsqueezeOp>([](auto) { return OpClass::View; })
      .Case<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, EqOp, NeOp, LtOp, LeOp, GtOp, GeOp,
            AndOp, OrOp, XorOp, SelectOp, ExpandOp, TransposeOp, SliceOp, ConcatOp, PadOp, IotaOp,
            TriluOp, GatherOp, GatherElementsOp, GatherNdOp, DropoutOp, RandomUniformOp,
            Nf4DequantizeOp, DequantizeBlockwise8bitOp>([](auto) { return OpClass::Elementwise; })
      .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp>([](auto) { return OpClass::Reduce; })
      .Case<SoftmaxOp, LogSoftmaxOp, LayerNormOp, RmsNormOp, RmsNormWithRstdOp, SoftmaxGradOp,
            LogSoftmaxGradOp, LayerNormGradOp, RmsNormGradOp, RmsNormGradFromOutputOp,
            CrossEntropyOp, CrossEntropyGradOp>(
          [](Operation *row) { return rowAxis(row) >= 0 ? OpClass::Row : OpClass::Unsupported; })
      .Case<CumsumOp>([](auto) { return OpClass::Scan; })
      .Case<ScatterAddOp>([](auto) { return OpClass::Scatter; })
      .Case<AttentionOp>([](auto) { return OpClass::Attention; })
      .Case<AttentionGradOp>([](auto) { return OpClass::AttentionGrad; })
      .Case<Nf4QuantizeOp>([](Nf4QuantizeOp q) {
        return q.getBlockSize() % 2 == 0 ? OpClass::Quantize : OpClass::Unsupported;
      })
      .Case<QuantizeBlockwise8bitOp>([](auto) { return OpClass::Quantize; })
      .Case<kiln::LinearCrossEntropyOp, LinearCrossEntropyGradOp>(
          [](auto) { return OpClass::ChunkedHead; })
      .Default([](auto) { return OpClass::Unsupported; });
}

int64_t rowAxis(Operation *op) {
  auto rank = [&](Value v) { return cast<RankedTensorType>(v.getType()).getRank(); };
  // Softmax-like ops reduce one axis; the row kernel needs it innermost.
  auto last = [&](int64_t axis, Value v) {
    int64_t r = rank(v);
    if (axis < 0)
      axis += r;
    return axis == r - 1 ? axis : -1;
  };
  return llvm::TypeSwitch<Operation *, int64_t>(op)
      .Case<SoftmaxOp, LogSoftmaxOp>([&](auto o) { return last(o.getAxis(), o.getInput()); })
      .Case<SoftmaxGradOp, LogSoftmaxGradOp>(
          [&](auto o) { return last(o.getAxis(), o.getOutput()); })
      .Case<LayerNormOp, RmsNormOp, RmsNormWithRstdOp, LayerNormGradOp, RmsNormGradOp>(
          [&](auto o) {
            int64_t axis = o.getAxis();
            return axis < 0 ? axis + rank(o.getInput()) : axis;
          })
      .Case<RmsNormGradFromOutputOp>([&](auto o) {
        int64_t axis = o.getAxis();
        return axis < 0 ? axis + rank(o.getOutput()) : axis;
      })
      .Case<CrossEntropyOp, CrossEntropyGradOp>(
          [&](auto o) { return rank(o.getLogits()) == 2 ? int64_t(1) : int64_t(-1); })
      .Default([](auto) { return int64_t(-1); });
}

} // namespace kiln::kernel

namespace kiln::kernel {

OutputInit outputInit(Value yielded, Value *copyFrom) {
  Operation *def = yielded.getDefiningOp();
  if (!def)
    return OutputInit::None;
  // An fp32 accumulator for a bf16/f16 result (see LowerToStep).
  if (auto cast = dyn_cast<CastOp>(def))
    if (cast.getType().getElementType().isF32() && cast.getInput().getDefiningOp() &&
        !isa<CastOp>(cast.getInput().getDefiningOp()) &&
        outputInit(cast.getInput()) == OutputInit::Zero)
      return OutputInit::Zero;
  unsigned index = cast<OpResult>(yielded).getResultNumber();
  if (isa<LayerNormGradOp, RmsNormGradOp, RmsNormGradFromOutputOp, AttentionGradOp>(def))
    return index > 0 ? OutputInit::Zero : OutputInit::None;
  if (auto ce = dyn_cast<CrossEntropyOp>(def))
    return ce.getReduction() == Reduction::none ? OutputInit::None : OutputInit::Zero;
  if (auto scatter = dyn_cast<ScatterAddOp>(def)) {
    if (copyFrom)
      *copyFrom = scatter.getDest();
    return OutputInit::CopyOperand;
  }
  return OutputInit::None;
}

Operation *anchorOp(FusionKind kind, Block &body) {
  if (kind == FusionKind::loop)
    return nullptr;
  for (Operation &op : body) {
    OpClass cls = classifyOp(&op);
    if ((kind == FusionKind::row && cls == OpClass::Row) ||
        (kind == FusionKind::scan && cls == OpClass::Scan) ||
        (kind == FusionKind::scatter && cls == OpClass::Scatter) ||
        (kind == FusionKind::attention && cls == OpClass::Attention) ||
        (kind == FusionKind::attention_grad && cls == OpClass::AttentionGrad) ||
        (kind == FusionKind::quantize && cls == OpClass::Quantize))
      return &op;
  }
  return nullptr;
}

static Dim numelOf(Value v) {
  return dimProduct(getDims(cast<RankedTensorType>(v.getType())), v.getContext());
}

SmallVector<Dim> loopSegments(Block &body) {
  SmallVector<Dim> segments;
  for (Value v : body.getTerminator()->getOperands()) {
    Dim n = numelOf(v);
    if (!llvm::is_contained(segments, n))
      segments.push_back(n);
  }
  return segments;
}

int64_t loopVectorWidth(Block &body) {
  SmallVector<Dim> segments = loopSegments(body);
  if (segments.size() != 1)
    return 1;
  unsigned widest = 1;
  auto widen = [&](Type t) {
    Type element = cast<RankedTensorType>(t).getElementType();
    unsigned bits = element.getIntOrFloatBitWidth();
    widest = std::max(widest, bits < 8 ? 1u : bits / 8);
  };
  for (Type t : body.getArgumentTypes())
    widen(t);
  for (Type t : body.getTerminator()->getOperandTypes())
    widen(t);
  int64_t width = 16 / widest;
  // Every coefficient divisible: a multiple for all symbol values.
  if (width < 2 || !dimDivExact(segments.front(), width))
    return 1;
  return width;
}

RowLayout rowLayout(Block &body) {
  RowLayout layout;
  Operation *anchor = anchorOp(FusionKind::row, body);
  if (!anchor || rowAxis(anchor) < 0)
    return layout;
  auto type = cast<RankedTensorType>(anchor->getOperand(0).getType());
  int64_t axis = rowAxis(anchor);
  int64_t cols = 1;
  for (int64_t i = axis; i < type.getRank(); ++i) {
    if (type.isDynamicDim(i))
      return layout;
    cols *= type.getDimSize(i);
  }
  unsigned widest = 1;
  auto widen = [&](Type t) {
    Type element = cast<RankedTensorType>(t).getElementType();
    unsigned bits = element.getIntOrFloatBitWidth();
    widest = std::max(widest, bits < 8 ? 1u : bits / 8);
  };
  for (Type t : body.getArgumentTypes())
    widen(t);
  for (Type t : body.getTerminator()->getOperandTypes())
    widen(t);
  int64_t width = 16 / widest;
  if (width < 2 || cols % width)
    return layout;
  int64_t vectors = cols / width;
  // Short rows: a warp each; longer ones: the block. The last vectors of a
  // row that does not split evenly over the threads are guarded.
  layout.threadsPerRow = vectors < 256 ? 32 : 256;
  layout.chunks = (vectors + layout.threadsPerRow - 1) / layout.threadsPerRow;
  layout.ragged = vectors % layout.threadsPerRow != 0;
  if (layout.chunks * width > kRowRegisterElements)
    return RowLayout();
  layout.width = width;
  layout.cols = cols;
  return layout;
}

bool isFlashAttention(Operation *op) {
  if (!isa<AttentionOp, AttentionGradOp>(op))
    return false;
  auto type = [](Value v) { return cast<RankedTensorType>(v.getType()); };
  RankedTensorType q = type(op->getOperand(0)), k = type(op->getOperand(1)),
                   v = type(op->getOperand(2));
  Type element = q.getElementType();
  if (!element.isBF16() && !element.isF16())
    return false;
  if (k.getElementType() != element || v.getElementType() != element)
    return false;
  if (auto grad = dyn_cast<AttentionGradOp>(op))
    if (type(grad.getGrad()).getElementType() != element)
      return false;
  int64_t d = q.getDimSize(3);
  return !q.isDynamicDim(3) && d % 16 == 0 && d <= 128 && k.getDimSize(3) == d &&
         v.getDimSize(3) == d;
}

int64_t flashAttentionSharedBytes(int64_t headDim, bool backward) {
  const int64_t rows = kFlashAttentionRows, cols = 64, warps = 4;
  const int64_t ld = headDim + 8, lds = cols + 4, ldp = cols + 8, ldo = headDim + 4;
  if (!backward) // Q, K, V; S (fp32); P; O's staging unless S's rows hold it
    return 2 * (rows * ld + 2 * cols * ld) + 4 * rows * lds + 2 * rows * ldp +
           (ldo <= lds ? 0 : 4 * rows * ldo);
  // Q, dO, K, V; S, dP (fp32, dQ's staging at the end); P, dS; a 16 x 16
  // stage per warp.
  return 2 * (2 * rows * ld + 2 * cols * ld) + 4 * 2 * rows * lds + 2 * 2 * rows * ldp +
         4 * warps * 256;
}

LaunchShape launchShape(FusionKind kind, Block &body) {
  MLIRContext *context = body.getParentOp()->getContext();
  LaunchShape shape;
  shape.shared = dimConst(context, 0);
  Operation *anchor = anchorOp(kind, body);
  auto type = [](Value v) { return cast<RankedTensorType>(v.getType()); };
  switch (kind) {
  case FusionKind::loop:
    for (Operation &op : body)
      if (auto mm = dyn_cast<MatmulOp>(op)) { // kiln-row-dot: a block per 32 rows
        DimList dims = getDims(type(mm.getLhs()));
        shape.items = dimProduct(ArrayRef<Dim>(dims).drop_back(), context);
        shape.itemsPerBlock = rowDotRowsPerBlock(cast<KernelOp>(body.getParentOp()));
        shape.block = kRowDotThreads;
        return shape;
      }
    shape.items = dimConst(context, 0);
    for (Dim segment : loopSegments(body))
      shape.items = dimAdd(shape.items, segment);
    if (int64_t width = loopVectorWidth(body); width > 1)
      shape.items = dimDivExact(shape.items, width);
    break;
  case FusionKind::row: {
    DimList dims = getDims(type(anchor->getOperand(0)));
    int64_t axis = rowAxis(anchor);
    shape.items = dimProduct(ArrayRef<Dim>(dims).take_front(axis), context);
    shape.itemsPerBlock = rowLayout(body).rowsPerBlock();
    break;
  }
  case FusionKind::scan: {
    auto scan = cast<CumsumOp>(anchor);
    int64_t axis = scan.getAxis();
    if (axis < 0)
      axis += type(scan.getInput()).getRank();
    DimList dims = getDims(type(scan.getInput()));
    dims.erase(dims.begin() + axis);
    shape.items = dimProduct(dims, context);
    break;
  }
  case FusionKind::scatter: shape.items = numelOf(cast<ScatterAddOp>(anchor).getUpdates()); break;
  case FusionKind::quantize: {
    // One block of threads per quantization block.
    shape.items = getDim(type(anchor->getResult(1)), 0); // absmax: one per block
    shape.itemsPerBlock = 1;
    shape.block = 64;
    break;
  }
  case FusionKind::attention:
  case FusionKind::attention_grad: {
    Value query = anchor->getOperand(0), key = anchor->getOperand(1);
    DimList q = getDims(type(query));
    if (isFlashAttention(anchor)) {
      // A block per 64 query rows of a head (the kernel loops over tiles).
      shape.items = dimProduct(ArrayRef<Dim>(q).drop_back(), context);
      shape.itemsPerBlock = kFlashAttentionRows;
      shape.block = 128;
      shape.shared =
          dimConst(context, flashAttentionSharedBytes(type(query).getDimSize(3),
                                                      kind == FusionKind::attention_grad));
      break;
    }
    shape.items = dimProduct(ArrayRef<Dim>(q).drop_back(), context);
    shape.itemsPerBlock = 1;
    shape.block = 128;
    // One score row (and its gradient) in shared memory: no S x S buffer.
    // (The key's role is 1 in both ops' seq_major.)
    int64_t rows = kind == FusionKind::attention ? 1 : 2;
    shape.shared = dimMul(getDim(type(key), attentionSeqDim(isSeqMajor(anchor, kAttnKey))),
                          dimConst(context, 4 * rows));
    break;
  }
  }
  return shape;
}

bool isRowDotKernel(KernelOp kernel) {
  return kernel.getKind() == FusionKind::loop && kernel->hasAttr("kiln.row_dot");
}

bool rowDotPrefetches(KernelOp kernel) { return kernel->hasAttr("kiln.row_dot_prefetch"); }

int64_t rowDotRowsPerBlock(KernelOp kernel) {
  auto rows = kernel->getAttrOfType<IntegerAttr>("kiln.row_dot");
  return rows && rows.getInt() == 16 ? 16 : 32;
}

} // namespace kiln::kernel
