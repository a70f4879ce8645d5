//===- GemmAccumulate.cpp - Sums and scales that a GEMM computes ----------===//
//
// cuBLASLt computes D = alpha * op(A) op(B) + beta * C. Two patterns of the
// training step map onto alpha and beta = 1 instead of elementwise kernels:
// the LoRA output `y + s * (t B^T)` and every sum of matmul products that
// autodiff builds for an input read by several linear layers (q/k/v, gate/up,
// the frozen and the adapter path). Of two products, the one with the
// smaller k writes C: the LoRA up projection (k = r) writes s * t B^T and the
// frozen GEMM (k = in) adds into it, reading C behind its math, instead of
// the k = r GEMM reading and writing all of [tokens, out] again.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Kernel/FusionPolicy.h"
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
    v = fusion.getBody().front().getTerminator()->getOperand(cast<OpResult>(v).getResultNumber());
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
    return acc && (acc->scale == user || acc->intoScale == user);
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

/// A term of a sum as a GEMM product: the matmul, and the scale in front
/// of it (its alpha), each used once.
struct Product {
  MatmulOp matmul;
  Operation *scale = nullptr;
  double alpha = 1;
};

std::optional<Product> productOf(Value v, Type type) {
  if (v.getType() != type || !v.hasOneUse())
    return std::nullopt;
  Product p;
  Operation *def = v.getDefiningOp();
  if (std::optional<std::pair<Value, double>> s = scaled(def)) {
    p.scale = def;
    p.alpha = s->second;
    def = s->first.getDefiningOp();
    if (!def || !s->first.hasOneUse())
      return std::nullopt;
  }
  auto mm = dyn_cast_or_null<MatmulOp>(def);
  if (!mm || mm.getType() != type)
    return std::nullopt;
  p.matmul = mm;
  return p;
}

/// The contraction size of `mm` when it is static, or -1.
int64_t staticK(MatmulOp mm) {
  auto a = cast<RankedTensorType>(mm.getLhs().getType());
  int64_t k = a.getShape()[a.getRank() - (mm.getTransposeA() ? 2 : 1)];
  return ShapedType::isDynamic(k) ? -1 : k;
}

/// `add` as into + alpha * product with `product` the given side.
std::optional<GemmAccumulate> accumulateInto(AddOp add, Value product, Value into) {
  if (product == into || into.getType() != add.getType() || !into.hasOneUse())
    return std::nullopt;
  std::optional<Product> p = productOf(product, add.getType());
  if (!p)
    return std::nullopt;
  // C is written in place: a buffer of its own, read by nothing else.
  Operation *source = into.getDefiningOp();
  if (!source)
    return std::nullopt;
  // (A kernel's output after kiln-fuse; before it, the op it fuses.)
  OpClass cls = classifyOp(source);
  if (!isa<FusionOp>(source) &&
      (cls == OpClass::Source || cls == OpClass::View || cls == OpClass::Unsupported))
    return std::nullopt;
  GemmAccumulate acc;
  acc.add = add;
  acc.matmul = p->matmul;
  acc.scale = p->scale;
  acc.alpha = p->alpha;
  acc.into = into;
  // A scaled product as C: its GEMM writes it with the scale as alpha.
  if (std::optional<Product> c = productOf(into, add.getType()); c && c->scale) {
    acc.intoScale = c->scale;
    acc.intoAlpha = c->alpha;
  }
  return acc;
}

/// `add` as into + alpha * matmul. The right side is the product first (so
/// a chain of sums accumulates into its first term), unless both sides are
/// products and the right one has the smaller k: that one writes C.
std::optional<GemmAccumulate> accumulateOfAdd(AddOp add) {
  if (!gemmElement(add.getType()))
    return std::nullopt;
  std::optional<GemmAccumulate> intoLhs = accumulateInto(add, add.getRhs(), add.getLhs());
  std::optional<GemmAccumulate> intoRhs = accumulateInto(add, add.getLhs(), add.getRhs());
  if (intoLhs && intoRhs) {
    // Each orientation's product is the other's C.
    int64_t kl = staticK(cast<MatmulOp>(intoRhs->matmul));
    int64_t kr = staticK(cast<MatmulOp>(intoLhs->matmul));
    if (kl >= 0 && kr >= 0 && kr < kl)
      return intoRhs;
  }
  return intoLhs ? intoLhs : intoRhs;
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
          acc && (acc->matmul == op || acc->scale == op || acc->intoScale == op))
        return acc;
  }
  return std::nullopt;
}

std::optional<GemmAccumulate> gemmAccumulateIntoOf(Operation *mm) {
  if (!isa<MatmulOp>(mm) || !mm->hasOneUse())
    return std::nullopt;
  Operation *scale = *mm->user_begin();
  if (!isa<MulOp>(scale) || !scale->hasOneUse())
    return std::nullopt;
  auto add = dyn_cast<AddOp>(*scale->user_begin());
  if (!add)
    return std::nullopt;
  std::optional<GemmAccumulate> acc = accumulateOfAdd(add);
  if (!acc || acc->intoScale != scale)
    return std::nullopt;
  return acc;
}

} // namespace kiln::kernel
