//===- ElementwiseVJP.cpp - VJPs of elementwise ops -----------------------===//
//
// Derivatives are written with the op's own result where that is cheaper
// (exp, tanh, sigmoid, ...), so the backward pass reuses the forward value.
// Integer and boolean results have no gradient.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Graph/VJP.h"

#include "llvm/Support/MathExtras.h"

using namespace mlir;

namespace kiln {
namespace {

bool isFloatTensor(Value v) { return llvm::isa<FloatType>(tensorOf(v).getElementType()); }

/// Shared plumbing: the model's buildVJP forwards to `vjp(op, ...)`, except
/// that an op with a non-float result has no gradient at all.
template <typename Derived, typename OpT>
struct FloatVJPModel : DifferentiableOpInterface::ExternalModel<FloatVJPModel<Derived, OpT>, OpT> {
  LogicalResult buildVJP(Operation *op, OpBuilder &b, ArrayRef<Value> resultGrads,
                         ArrayRef<bool> want, SmallVectorImpl<Value> &grads) const {
    if (!isFloatTensor(op->getResult(0))) {
      grads.append(op->getNumOperands(), Value());
      return success();
    }
    return Derived::vjp(llvm::cast<OpT>(op), b, resultGrads, want, grads);
  }
};

/// Terse arithmetic for derivative formulas; constants are rank-0 tensors
/// that numpy broadcasting stretches to the other operand.
struct Math {
  OpBuilder &b;
  Location loc;

  Value c(double value, Value like) {
    return scalarConstant(b, loc, value, tensorOf(like).getElementType());
  }
  Value add(Value x, Value y) { return b.create<AddOp>(loc, x, y); }
  Value sub(Value x, Value y) { return b.create<SubOp>(loc, x, y); }
  Value mul(Value x, Value y) { return b.create<MulOp>(loc, x, y); }
  Value div(Value x, Value y) { return b.create<DivOp>(loc, x, y); }
  Value neg(Value x) { return b.create<NegOp>(loc, x); }
  Value scale(Value x, double k) { return mul(x, c(k, x)); }
  Value plus(Value x, double k) { return add(x, c(k, x)); }
  /// k - x.
  Value rsub(double k, Value x) { return sub(c(k, x), x); }
  /// cond ? x : 0 (or 0 : x with `inverted`), broadcast to cond's shape.
  Value keepWhere(Value cond, Value x, bool inverted = false) {
    Value zero = c(0.0, x);
    return inverted ? b.create<SelectOp>(loc, cond, zero, x)
                    : b.create<SelectOp>(loc, cond, x, zero);
  }
};

//===--- binary arithmetic ------------------------------------------------===//

/// d(a + b) = (dy, dy), each summed to its operand's shape.
struct AddVJP : FloatVJPModel<AddVJP, AddOp> {
  static LogicalResult vjp(AddOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Location loc = op.getLoc();
    Value dy = gradOrZeros(b, loc, dys[0], tensorOf(op));
    grads.push_back(want[0] ? sumToShape(b, loc, dy, tensorOf(op.getLhs())) : Value());
    grads.push_back(want[1] ? sumToShape(b, loc, dy, tensorOf(op.getRhs())) : Value());
    return success();
  }
};

/// d(a * b) = (dy * b, dy * a).
struct MulVJP : FloatVJPModel<MulVJP, MulOp> {
  static LogicalResult vjp(MulOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Location loc = op.getLoc();
    Value dy = gradOrZeros(b, loc, dys[0], tensorOf(op));
    Value da, db;
    if (want[0])
      da = sumToShape(b, loc, b.create<MulOp>(loc, dy, op.getRhs()), tensorOf(op.getLhs()));
    if (want[1])
      db = sumToShape(b, loc, b.create<MulOp>(loc, dy, op.getLhs()), tensorOf(op.getRhs()));
    grads.append({da, db});
    return success();
  }
};

/// The binary ops below share the plumbing: no result gradient means no
/// operand gradients; `Derived::grads` builds only the wanted ones at the
/// broadcast shape, and they are summed down to each operand here.
template <typename Derived, typename OpT> struct BinaryVJP : FloatVJPModel<Derived, OpT> {
  static LogicalResult vjp(OpT op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Value da, db;
    if (dys[0] && (want[0] || want[1])) {
      Math m{b, op.getLoc()};
      Derived::grads(op, m, dys[0], want[0] ? &da : nullptr, want[1] ? &db : nullptr);
      if (da)
        da = sumToShape(b, m.loc, da, tensorOf(op.getLhs()));
      if (db)
        db = sumToShape(b, m.loc, db, tensorOf(op.getRhs()));
    }
    grads.append({da, db});
    return success();
  }
};

/// d(a - b) = (dy, -dy); the negation runs after the sum, on fewer elements.
struct SubVJP : FloatVJPModel<SubVJP, SubOp> {
  static LogicalResult vjp(SubOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Value da, db;
    if (dys[0]) {
      Location loc = op.getLoc();
      if (want[0])
        da = sumToShape(b, loc, dys[0], tensorOf(op.getLhs()));
      if (want[1])
        db = b.create<NegOp>(loc, sumToShape(b, loc, dys[0], tensorOf(op.getRhs())));
    }
    grads.append({da, db});
    return success();
  }
};

/// d(a / b) = (dy / b, -dy * y / b) with y = a / b.
struct DivVJP : BinaryVJP<DivVJP, DivOp> {
  static void grads(DivOp op, Math &m, Value dy, Value *da, Value *db) {
    if (da)
      *da = m.div(dy, op.getRhs());
    if (db)
      *db = m.neg(m.div(m.mul(dy, op.getResult()), op.getRhs()));
  }
};

/// d(a ^ b) = (dy * b * a^(b-1), dy * y * log(a)); a^(b-1) rather than y / a
/// keeps a = 0 finite.
struct PowVJP : BinaryVJP<PowVJP, PowOp> {
  static void grads(PowOp op, Math &m, Value dy, Value *da, Value *db) {
    Value a = op.getLhs(), e = op.getRhs();
    if (da)
      *da = m.mul(m.mul(dy, e), m.b.create<PowOp>(m.loc, a, m.plus(e, -1.0)));
    if (db)
      *db = m.mul(m.mul(dy, op.getResult()), m.b.create<LogOp>(m.loc, a));
  }
};

/// The gradient goes to the operand the op selected: lhs on ties.
template <typename OpT, typename CompareOpT>
struct MinMaxVJP : BinaryVJP<MinMaxVJP<OpT, CompareOpT>, OpT> {
  static void grads(OpT op, Math &m, Value dy, Value *da, Value *db) {
    Value lhsWins = m.b.create<CompareOpT>(m.loc, op.getLhs(), op.getRhs());
    if (da)
      *da = m.keepWhere(lhsWins, dy);
    if (db)
      *db = m.keepWhere(lhsWins, dy, /*inverted=*/true);
  }
};

/// dy flows to the branch the condition took; the condition has none.
struct SelectVJP : FloatVJPModel<SelectVJP, SelectOp> {
  static LogicalResult vjp(SelectOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Value dt, df;
    if (dys[0]) {
      Math m{b, op.getLoc()};
      if (want[1])
        dt = sumToShape(b, m.loc, m.keepWhere(op.getCondition(), dys[0]),
                        tensorOf(op.getTrueValue()));
      if (want[2])
        df = sumToShape(b, m.loc, m.keepWhere(op.getCondition(), dys[0], /*inverted=*/true),
                        tensorOf(op.getFalseValue()));
    }
    grads.append({Value(), dt, df});
    return success();
  }
};

//===--- unary ------------------------------------------------------------===//

/// dx = Grad(op, m, dy) for x -> y, built only when wanted and dy exists.
template <typename OpT, Value (*Grad)(OpT, Math &, Value)>
struct UnaryVJP : FloatVJPModel<UnaryVJP<OpT, Grad>, OpT> {
  static LogicalResult vjp(OpT op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Value dx;
    if (want[0] && dys[0]) {
      Math m{b, op.getLoc()};
      // Equal shapes may still be spelled differently (unknown dims).
      dx = sumToShape(b, m.loc, Grad(op, m, dys[0]), tensorOf(op.getInput()));
    }
    grads.push_back(dx);
    return success();
  }
};

Value negGrad(NegOp, Math &m, Value dy) { return m.neg(dy); }

/// sign(x) is 0 at 0, like torch's subgradient.
Value absGrad(AbsOp op, Math &m, Value dy) {
  Value x = op.getInput(), zero = m.c(0.0, x);
  Value negSign = m.b.create<SelectOp>(m.loc, m.b.create<LtOp>(m.loc, x, zero), m.c(-1.0, x), zero);
  Value sign = m.b.create<SelectOp>(m.loc, m.b.create<GtOp>(m.loc, x, zero), m.c(1.0, x), negSign);
  return m.mul(dy, sign);
}

Value expGrad(ExpOp op, Math &m, Value dy) { return m.mul(dy, op.getResult()); }
Value logGrad(LogOp op, Math &m, Value dy) { return m.div(dy, op.getInput()); }

/// d sqrt(x) = 1 / (2 sqrt(x)).
Value sqrtGrad(SqrtOp op, Math &m, Value dy) { return m.div(dy, m.scale(op.getResult(), 2.0)); }

/// d x^(-1/2) = -x^(-3/2) / 2 = -y^3 / 2.
Value rsqrtGrad(RsqrtOp op, Math &m, Value dy) {
  Value y = op.getResult();
  return m.mul(m.scale(dy, -0.5), m.mul(m.mul(y, y), y));
}

Value reciprocalGrad(ReciprocalOp op, Math &m, Value dy) {
  Value y = op.getResult();
  return m.neg(m.mul(dy, m.mul(y, y)));
}

Value tanhGrad(TanhOp op, Math &m, Value dy) {
  Value y = op.getResult();
  return m.mul(dy, m.rsub(1.0, m.mul(y, y)));
}

Value sigmoidGrad(SigmoidOp op, Math &m, Value dy) {
  Value y = op.getResult();
  return m.mul(dy, m.mul(y, m.rsub(1.0, y)));
}

/// d(x s) = s (1 + x (1 - s)) with s = sigmoid(x).
Value siluGrad(SiluOp op, Math &m, Value dy) {
  Value x = op.getInput();
  Value s = m.b.create<SigmoidOp>(m.loc, x);
  return m.mul(dy, m.mul(s, m.plus(m.mul(x, m.rsub(1.0, s)), 1.0)));
}

Value reluGrad(ReluOp op, Math &m, Value dy) {
  Value x = op.getInput();
  return m.keepWhere(m.b.create<GtOp>(m.loc, x, m.c(0.0, x)), dy);
}

/// d erf(x) = 2 / sqrt(pi) exp(-x^2).
Value erfGrad(ErfOp op, Math &m, Value dy) {
  Value x = op.getInput();
  return m.mul(m.scale(dy, 2.0 * llvm::numbers::inv_sqrtpi),
               m.b.create<ExpOp>(m.loc, m.neg(m.mul(x, x))));
}

Value sinGrad(SinOp op, Math &m, Value dy) {
  return m.mul(dy, m.b.create<CosOp>(m.loc, op.getInput()));
}

Value cosGrad(CosOp op, Math &m, Value dy) {
  return m.neg(m.mul(dy, m.b.create<SinOp>(m.loc, op.getInput())));
}

Value geluGrad(GeluOp op, Math &m, Value dy) {
  using namespace llvm::numbers;
  Value x = op.getInput();
  if (op.getApproximate() == GeluApproximation::none) {
    // d(x Phi(x)) = Phi(x) + x phi(x).
    Value erf = m.b.create<ErfOp>(m.loc, m.scale(x, inv_sqrt2));
    Value cdf = m.scale(m.plus(erf, 1.0), 0.5);
    Value pdf =
        m.scale(m.b.create<ExpOp>(m.loc, m.scale(m.mul(x, x), -0.5)), inv_sqrtpi * inv_sqrt2);
    return m.mul(dy, m.add(cdf, m.mul(x, pdf)));
  }
  // y = x/2 (1 + t), t = tanh(k (x + c x^3)):
  // dy/dx = (1 + t)/2 + x/2 (1 - t^2) k (1 + 3c x^2).
  const double k = sqrt2 * inv_sqrtpi, c = 0.044715;
  Value x2 = m.mul(x, x);
  Value t = m.b.create<TanhOp>(m.loc, m.mul(m.scale(x, k), m.plus(m.scale(x2, c), 1.0)));
  Value inner = m.mul(m.rsub(1.0, m.mul(t, t)), m.plus(m.scale(x2, 3.0 * c), 1.0));
  Value d = m.add(m.plus(t, 1.0), m.mul(m.scale(x, k), inner));
  return m.mul(m.scale(dy, 0.5), d);
}

/// A float-to-float cast passes the gradient back in the input's precision;
/// an integer on either side has none.
struct CastVJP : FloatVJPModel<CastVJP, CastOp> {
  static LogicalResult vjp(CastOp op, OpBuilder &b, ArrayRef<Value> dys, ArrayRef<bool> want,
                           SmallVectorImpl<Value> &grads) {
    Value dx;
    if (want[0] && dys[0] && isFloatTensor(op.getInput()))
      dx = b.create<CastOp>(op.getLoc(), op.getInput().getType(), dys[0]);
    grads.push_back(dx);
    return success();
  }
};

/// stop_gradient exists to cut differentiation.
struct StopGradientVJP : FloatVJPModel<StopGradientVJP, StopGradientOp> {
  static LogicalResult vjp(StopGradientOp, OpBuilder &, ArrayRef<Value>, ArrayRef<bool>,
                           SmallVectorImpl<Value> &grads) {
    grads.push_back(Value());
    return success();
  }
};

} // namespace

void attachElementwiseVJPModels(MLIRContext &context) {
  AddOp::attachInterface<AddVJP>(context);
  MulOp::attachInterface<MulVJP>(context);
  SubOp::attachInterface<SubVJP>(context);
  DivOp::attachInterface<DivVJP>(context);
  PowOp::attachInterface<PowVJP>(context);
  MaxOp::attachInterface<MinMaxVJP<MaxOp, GeOp>>(context);
  MinOp::attachInterface<MinMaxVJP<MinOp, LeOp>>(context);
  SelectOp::attachInterface<SelectVJP>(context);
  NegOp::attachInterface<UnaryVJP<NegOp, negGrad>>(context);
  AbsOp::attachInterface<UnaryVJP<AbsOp, absGrad>>(context);
  ExpOp::attachInterface<UnaryVJP<ExpOp, expGrad>>(context);
  LogOp::attachInterface<UnaryVJP<LogOp, logGrad>>(context);
  SqrtOp::attachInterface<UnaryVJP<SqrtOp, sqrtGrad>>(context);
  RsqrtOp::attachInterface<UnaryVJP<RsqrtOp, rsqrtGrad>>(context);
  ReciprocalOp::attachInterface<UnaryVJP<ReciprocalOp, reciprocalGrad>>(context);
  TanhOp::attachInterface<UnaryVJP<TanhOp, tanhGrad>>(context);
  SigmoidOp::attachInterface<UnaryVJP<SigmoidOp, sigmoidGrad>>(context);
  SiluOp::attachInterface<UnaryVJP<SiluOp, siluGrad>>(context);
  ReluOp::attachInterface<UnaryVJP<ReluOp, reluGrad>>(context);
  ErfOp::attachInterface<UnaryVJP<ErfOp, erfGrad>>(context);
  SinOp::attachInterface<UnaryVJP<SinOp, sinGrad>>(context);
  CosOp::attachInterface<UnaryVJP<CosOp, cosGrad>>(context);
  GeluOp::attachInterface<UnaryVJP<GeluOp, geluGrad>>(context);
  CastOp::attachInterface<CastVJP>(context);
  StopGradientOp::attachInterface<StopGradientVJP>(context);
  attachReductionVJPModels(context);
}

} // namespace kiln
