//===- GemmAccumulate.cpp - Sums and scales that a GEMM computes ----------===//
//
// cuBLASLt computes D = alpha * op(A) op(B) + beta * C. Two patterns of the
// training step map onto alpha and beta = 1 instead of elementwise kernels:
// the LoRA output `y + s * (t B^T)` and every sum of matmul products that
// autodiff builds for an input read by several linear layers (q/k/v, gate/up,
// the frozen and the adapter path).
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kernel/FusionPolicy.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Kernel/KernelDialect.h"

using namespace mlir;

namespace kiln::kernel {

std::optional<double> scalarFactor(Value v) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || !type.hasStaticShape() || type.getNumElements() != 1 ||
      !isa<FloatType>(type.getElementType()))
    return std::nullopt;
  // A constant narrowed to the compute type: the value the graph multiplies by.
  auto element = cast<FloatType>(type.getElementType());
  // After kiln-fuse a scalar cast is a kernel without inputs: its body.
  if (auto fusion = v.getDefiningOp<FusionOp>()) {
    if (!fusion.getInputs().empty())
      return std::nullopt;
    v = fusion.getBody().front().getTerminator()->getOperand(
        cast<OpResult>(v).getResultNumber());
  }
  if (auto cast = v.getDefiningOp<CastOp>())
    v = cast.getOperand();
  auto constant = v.getDefiningOp<kiln::ConstantOp>();
  auto splat = constant ? dyn_cast<SplatElementsAttr>(constant.getValue()) : nullptr;
  if (!splat || !isa<FloatType>(splat.getElementType()))
    return std::nullopt;
  APFloat value = splat.getSplatValue<APFloat>();
  bool lost = false;
  value.convert(element.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
  value.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &lost);
  if (!value.isFinite())
    return std::nullopt;
  return value.convertToDouble();
}

namespace {

/// `mul(v, s)` or `mul(s, v)` with a scalar constant s: (v, s).
std::optional<std::pair<Value, double>> scaled(Operation *op) {
  auto mul = dyn_cast_or_null<MulOp>(op);
  if (!mul)
    return std::nullopt;
  for (auto [v, s] : {std::pair(mul.getLhs(), mul.getRhs()), std::pair(mul.getRhs(), mul.getLhs())})
    if (std::optional<double> factor = scalarFactor(s); factor && v.getType() == mul.getType())
      return std::pair(v, *factor);
  return std::nullopt;
}

bool gemmElement(Type t) {
  Type e = cast<RankedTensorType>(t).getElementType();
  return e.isF32() || e.isBF16() || e.isF16();
}

} // namespace

bool onlyFeedsAlpha(Operation *fusion) {
  auto f = dyn_cast<FusionOp>(fusion);
  if (!f || !f.getInputs().empty() || f->use_empty())
    return false;
  return llvm::all_of(f->getUsers(), [](Operation *user) {
    if (isFoldedScale(user))
      return true;
    std::optional<GemmAccumulate> acc = gemmAccumulateOf(user);
    return acc && acc->scale == user;
  });
}

bool isFoldedScale(Operation *op) {
  std::optional<std::pair<Value, double>> s = scaled(op);
  if (!s || op->use_empty() || !gemmElement(op->getResult(0).getType()))
    return false;
  return llvm::all_of(op->getUsers(), [](Operation *user) { return isa<MatmulOp>(user); });
}

std::optional<std::pair<Value, double>> foldedScaleOf(Operation *op) {
  if (!isFoldedScale(op))
    return std::nullopt;
  return scaled(op);
}

namespace {

/// `add` as into + alpha * matmul, trying the right side as the product
/// first (so a chain of sums accumulates into its first term).
std::optional<GemmAccumulate> accumulateOfAdd(AddOp add) {
  if (!gemmElement(add.getType()))
    return std::nullopt;
  for (auto [product, into] :
       {std::pair(add.getRhs(), add.getLhs()), std::pair(add.getLhs(), add.getRhs())}) {
    if (product == into || product.getType() != add.getType() ||
        into.getType() != add.getType() || !product.hasOneUse() || !into.hasOneUse())
      continue;
    GemmAccumulate acc;
    acc.add = add;
    Operation *def = product.getDefiningOp();
    if (std::optional<std::pair<Value, double>> s = scaled(def)) {
      acc.scale = def;
      acc.alpha = s->second;
      def = s->first.getDefiningOp();
      if (!def || !s->first.hasOneUse())
        continue;
    }
    auto mm = dyn_cast_or_null<MatmulOp>(def);
    if (!mm || mm.getType() != add.getType())
      continue;
    // C is written in place: a buffer of its own, read by nothing else.
    Operation *source = into.getDefiningOp();
    if (!source)
      continue;
    // (A kernel's output after kiln-fuse; before it, the op it fuses.)
    OpClass cls = classifyOp(source);
    if (!isa<FusionOp>(source) &&
        (cls == OpClass::Source || cls == OpClass::View || cls == OpClass::Unsupported))
      continue;
    acc.matmul = mm;
    acc.into = into;
    return acc;
  }
  return std::nullopt;
}

} // namespace

std::optional<GemmAccumulate> gemmAccumulateOf(Operation *op) {
  if (auto add = dyn_cast<AddOp>(op))
    return accumulateOfAdd(add);
  // The matmul or its scale: find the add they feed.
  if (isa<MatmulOp, MulOp>(op) && op->hasOneUse()) {
    Operation *user = *op->user_begin();
    if (isa<MatmulOp>(op) && isa<MulOp>(user) && user->hasOneUse())
      user = *user->user_begin();
    if (auto add = dyn_cast<AddOp>(user))
      if (std::optional<GemmAccumulate> acc = accumulateOfAdd(add);
          acc && (acc->matmul == op || acc->scale == op))
        return acc;
  }
  return std::nullopt;
}

} // namespace kiln::kernel
