//===- Elementwise.cpp - Unary, binary, compare, select, cast -------------===//
//
// Floats compute in double and are rounded to the result dtype on store.
// Integers compute in int64 with two's-complement wrap-around (via uint64, so
// overflow is defined) and are wrapped to the result dtype on store.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "absl/strings/str_cat.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <functional>
#include <limits>

using namespace mlir;

namespace kiln::interp {
namespace {

using FloatUnary = std::function<double(double)>;
using IntUnary = std::function<int64_t(int64_t)>;

double sigmoid(double x) {
  // Both branches only exponentiate non-positive numbers: no overflow.
  if (x >= 0)
    return 1.0 / (1.0 + std::exp(-x));
  double e = std::exp(x);
  return e / (1.0 + e);
}

double gelu(double x, bool tanhForm) {
  if (!tanhForm)
    return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
  constexpr double kPi = 3.14159265358979323846;
  double c = std::sqrt(2.0 / kPi);
  return 0.5 * x * (1.0 + std::tanh(c * (x + 0.044715 * x * x * x)));
}

int64_t wrapNeg(int64_t x) { return static_cast<int64_t>(0 - uint64_t(x)); }

FloatUnary floatUnary(Operation *op) {
  return llvm::TypeSwitch<Operation *, FloatUnary>(op)
      .Case([](NegOp) { return [](double x) { return -x; }; })
      .Case([](AbsOp) { return [](double x) { return std::fabs(x); }; })
      .Case([](ExpOp) { return [](double x) { return std::exp(x); }; })
      .Case([](LogOp) { return [](double x) { return std::log(x); }; })
      .Case([](SqrtOp) { return [](double x) { return std::sqrt(x); }; })
      .Case([](RsqrtOp) { return [](double x) { return 1.0 / std::sqrt(x); }; })
      .Case([](ReciprocalOp) { return [](double x) { return 1.0 / x; }; })
      .Case([](TanhOp) { return [](double x) { return std::tanh(x); }; })
      .Case([](SigmoidOp) { return sigmoid; })
      .Case([](SiluOp) { return [](double x) { return x * sigmoid(x); }; })
      // NaN stays NaN (std::max would return 0 for max(NaN, 0)).
      .Case([](ReluOp) { return [](double x) { return x < 0 ? 0.0 : x; }; })
      .Case([](ErfOp) { return [](double x) { return std::erf(x); }; })
      .Case([](SinOp) { return [](double x) { return std::sin(x); }; })
      .Case([](CosOp) { return [](double x) { return std::cos(x); }; })
      .Case([](GeluOp g) {
        bool tanhForm = g.getApproximate() == GeluApproximation::tanh;
        return [tanhForm](double x) { return gelu(x, tanhForm); };
      })
      .Default([](Operation *) { return nullptr; });
}

IntUnary intUnary(Operation *op) {
  return llvm::TypeSwitch<Operation *, IntUnary>(op)
      .Case([](NegOp) { return wrapNeg; })
      .Case([](AbsOp) { return [](int64_t x) { return x < 0 ? wrapNeg(x) : x; }; })
      .Case([](NotOp) { return [](int64_t x) -> int64_t { return x == 0; }; })
      .Default([](Operation *) { return nullptr; });
}

absl::StatusOr<Tensors> runUnary(Operation *op, const HostTensor &in) {
  if (isa<StopGradientOp>(op))
    return Tensors{in};
  absl::StatusOr<HostTensor> out = makeResult(op->getResult(0), in.shape);
  if (!out.ok())
    return out.status();
  if (in.isFloat()) {
    FloatUnary fn = floatUnary(op);
    if (!fn)
      return absl::InvalidArgumentError("no float implementation");
    for (int64_t i = 0; i < in.numel(); ++i)
      out->set(i, fn(in.floats[i]));
  } else {
    IntUnary fn = intUnary(op);
    if (!fn)
      return absl::InvalidArgumentError("no integer implementation");
    for (int64_t i = 0; i < in.numel(); ++i)
      out->setInt(i, fn(in.ints[i]));
  }
  return Tensors{std::move(*out)};
}

/// Runs `fn(outIndex, lhsIndex, rhsIndex)` over the broadcast of two shapes.
template <typename Fn>
absl::StatusOr<HostTensor> broadcastLoop(Operation *op, const HostTensor &a, const HostTensor &b,
                                         Fn fn) {
  absl::StatusOr<Shape> shape = broadcastShapes({a.shape, b.shape});
  if (!shape.ok())
    return shape.status();
  absl::StatusOr<HostTensor> out = makeResult(op->getResult(0), *shape);
  if (!out.ok())
    return out.status();
  BroadcastMap mapA(a.shape, *shape), mapB(b.shape, *shape);
  for (int64_t i = 0; i < out->numel(); ++i)
    fn(*out, i, mapA(i), mapB(i));
  return out;
}

std::optional<double> floatArith(Operation *op, double a, double b) {
  return llvm::TypeSwitch<Operation *, std::optional<double>>(op)
      .Case([&](AddOp) { return a + b; })
      .Case([&](SubOp) { return a - b; })
      .Case([&](MulOp) { return a * b; })
      .Case([&](DivOp) { return a / b; })
      .Case([&](PowOp) { return std::pow(a, b); })
      // NaN propagates, like torch.maximum / torch.minimum.
      .Case([&](MaxOp) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); })
      .Case([&](MinOp) { return std::isnan(a) || std::isnan(b) ? NAN : std::min(a, b); })
      .Default([](Operation *) { return std::nullopt; });
}

/// base^exponent by squaring, wrapping like repeated int64 multiplication.
std::optional<int64_t> intPow(int64_t base, int64_t exponent) {
  if (exponent < 0) {
    // The true value is 1 / base^-exponent, truncated toward zero.
    if (base == 0)
      return std::nullopt;
    if (base == 1)
      return 1;
    if (base == -1)
      return exponent % 2 ? -1 : 1;
    return 0;
  }
  uint64_t result = 1, factor = static_cast<uint64_t>(base);
  for (uint64_t e = static_cast<uint64_t>(exponent); e; e >>= 1) {
    if (e & 1)
      result *= factor;
    factor *= factor;
  }
  return static_cast<int64_t>(result);
}

/// Integer semantics; nullopt means division by zero.
std::optional<int64_t> intArith(Operation *op, int64_t a, int64_t b) {
  uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  return llvm::TypeSwitch<Operation *, std::optional<int64_t>>(op)
      .Case([&](AddOp) { return static_cast<int64_t>(ua + ub); })
      .Case([&](SubOp) { return static_cast<int64_t>(ua - ub); })
      .Case([&](MulOp) { return static_cast<int64_t>(ua * ub); })
      .Case([&](DivOp) -> std::optional<int64_t> {
        if (b == 0)
          return std::nullopt;
        if (b == -1) // INT64_MIN / -1 overflows; negation wraps instead.
          return wrapNeg(a);
        return a / b; // C++ truncates toward zero.
      })
      .Case([&](PowOp) { return intPow(a, b); })
      .Case([&](MaxOp) { return std::max(a, b); })
      .Case([&](MinOp) { return std::min(a, b); })
      .Default([](Operation *) { return std::nullopt; });
}

absl::StatusOr<Tensors> runArith(Operation *op, const HostTensor &a, const HostTensor &b) {
  bool failed = false;
  absl::StatusOr<HostTensor> out =
      broadcastLoop(op, a, b, [&](HostTensor &o, int64_t i, int64_t ia, int64_t ib) {
        if (a.isFloat()) {
          o.set(i, *floatArith(op, a.floats[ia], b.floats[ib]));
          return;
        }
        std::optional<int64_t> r = intArith(op, a.ints[ia], b.ints[ib]);
        failed |= !r;
        o.setInt(i, r.value_or(0));
      });
  if (failed)
    return absl::InvalidArgumentError("integer division by zero");
  if (!out.ok())
    return out.status();
  return Tensors{std::move(*out)};
}

template <typename T> bool compare(Operation *op, T a, T b) {
  return llvm::TypeSwitch<Operation *, bool>(op)
      .Case([&](EqOp) { return a == b; })
      .Case([&](NeOp) { return a != b; })
      .Case([&](LtOp) { return a < b; })
      .Case([&](LeOp) { return a <= b; })
      .Case([&](GtOp) { return a > b; })
      .Case([&](GeOp) { return a >= b; })
      .Case([&](AndOp) { return a != 0 && b != 0; })
      .Case([&](OrOp) { return a != 0 || b != 0; })
      .Case([&](XorOp) { return (a != 0) != (b != 0); })
      .Default([](Operation *) { return false; });
}

absl::StatusOr<Tensors> runCompare(Operation *op, const HostTensor &a, const HostTensor &b) {
  // Integers compare as int64: going through double would merge large values.
  absl::StatusOr<HostTensor> out =
      broadcastLoop(op, a, b, [&](HostTensor &o, int64_t i, int64_t ia, int64_t ib) {
        o.setInt(i, a.isFloat() ? compare(op, a.floats[ia], b.floats[ib])
                                : compare(op, a.ints[ia], b.ints[ib]));
      });
  if (!out.ok())
    return out.status();
  return Tensors{std::move(*out)};
}

absl::StatusOr<Tensors> runSelect(SelectOp op, Operands args) {
  const HostTensor &cond = *args[0], &t = *args[1], &f = *args[2];
  absl::StatusOr<Shape> shape = broadcastShapes({cond.shape, t.shape, f.shape});
  if (!shape.ok())
    return shape.status();
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), *shape);
  if (!out.ok())
    return out.status();
  BroadcastMap mapC(cond.shape, *shape), mapT(t.shape, *shape), mapF(f.shape, *shape);
  for (int64_t i = 0; i < out->numel(); ++i) {
    if (cond.ints[mapC(i)])
      copyElement(*out, i, t, mapT(i));
    else
      copyElement(*out, i, f, mapF(i));
  }
  return Tensors{std::move(*out)};
}

absl::StatusOr<Tensors> runCast(CastOp op, const HostTensor &in) {
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), in.shape);
  if (!out.ok())
    return out.status();
  for (int64_t i = 0; i < in.numel(); ++i) {
    if (!in.isFloat())
      out->setInt(i, in.ints[i]); // int->float rounds, int->int wraps
    else if (out->isFloat())
      out->set(i, in.floats[i]);
    else if (out->dtype == DType::Bool)
      out->setInt(i, in.floats[i] != 0); // NaN is true, as in C and torch
    else
      out->setInt(i, truncToInt(in.floats[i]));
  }
  return Tensors{std::move(*out)};
}

/// IsNaN / IsInf: a bool per element.
absl::StatusOr<Tensors> runFloatClass(Operation *op, const HostTensor &in) {
  absl::StatusOr<HostTensor> out = makeResult(op->getResult(0), in.shape);
  if (!out.ok())
    return out.status();
  bool nan = isa<IsNanOp>(op), positive = true, negative = true;
  if (auto inf = dyn_cast<IsInfOp>(op)) {
    positive = inf.getDetectPositive();
    negative = inf.getDetectNegative();
  }
  for (int64_t i = 0; i < in.numel(); ++i) {
    double x = in.isFloat() ? in.floats[i] : 0.0;
    bool hit = nan ? std::isnan(x) : std::isinf(x) && (x > 0 ? positive : negative);
    out->setInt(i, hit);
  }
  return Tensors{std::move(*out)};
}

} // namespace

MaybeResults runElementwise(Operation *op, Operands args) {
  if (isa<NegOp, AbsOp, ExpOp, LogOp, SqrtOp, RsqrtOp, ReciprocalOp, TanhOp, SigmoidOp, SiluOp,
          ReluOp, ErfOp, SinOp, CosOp, NotOp, StopGradientOp, GeluOp>(op))
    return runUnary(op, *args[0]);
  if (isa<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp>(op))
    return runArith(op, *args[0], *args[1]);
  if (isa<EqOp, NeOp, LtOp, LeOp, GtOp, GeOp, AndOp, OrOp, XorOp>(op))
    return runCompare(op, *args[0], *args[1]);
  if (auto select = dyn_cast<SelectOp>(op))
    return runSelect(select, args);
  if (auto cast = dyn_cast<CastOp>(op))
    return runCast(cast, *args[0]);
  if (isa<IsNanOp, IsInfOp>(op))
    return runFloatClass(op, *args[0]);
  return std::nullopt;
}

} // namespace kiln::interp
