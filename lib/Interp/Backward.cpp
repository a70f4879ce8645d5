//===- Backward.cpp - softmax/norm/attention/cross_entropy grads ----------===//
//
// The fused backward ops. Each kernel recomputes what it needs from the
// forward inputs in double, accumulates in double (weight and key/value
// gradients sum over many rows) and rounds once on store. They are the
// numeric reference for the VJP rules, so they follow the op descriptions
// term by term rather than sharing code with the forward kernels, except for
// the attention scores, whose masking must match the forward op exactly.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "absl/strings/str_cat.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace kiln::interp {
namespace {

/// Types with `?` dims only promise equal ranks; the kernels need equal
/// shapes.
absl::Status checkSameShape(const HostTensor &a, const char *aName, const HostTensor &b,
                            const char *bName) {
  if (a.shape == b.shape)
    return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(aName, " ", a.shapeString(), " and ", bName, " ", b.shapeString(), " differ"));
}

/// softmax_grad: dx = y * (dy - sum(dy * y)); log_softmax_grad:
/// dx = dy - exp(y) * sum(dy), both along `axis`.
absl::StatusOr<Tensors> runSoftmaxGrad(Operation *op, const HostTensor &y, const HostTensor &dy,
                                       int64_t axis, bool log) {
  if (absl::Status s = checkSameShape(y, "output", dy, "grad"); !s.ok())
    return s;
  absl::StatusOr<HostTensor> dx = makeResult(op->getResult(0), y.shape);
  if (!dx.ok())
    return dx.status();
  AxisSplit s(y.shape, axis);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      double sum = 0;
      for (int64_t k = 0; k < s.len; ++k) {
        int64_t at = s.at(o, k, i);
        sum += log ? dy.floats[at] : dy.floats[at] * y.floats[at];
      }
      for (int64_t k = 0; k < s.len; ++k) {
        int64_t at = s.at(o, k, i);
        double g = dy.floats[at], out = y.floats[at];
        dx->set(at, log ? g - std::exp(out) * sum : out * (g - sum));
      }
    }
  }
  return Tensors{std::move(*dx)};
}

/// layer_norm_grad (centered: dx, dweight, dbias) and rms_norm_grad (not
/// centered: dx, dweight). With xhat = (x - mean) * r, the rms form
/// r * (g - x * r^2 * mean(g * x)) is r * (g - xhat * mean(g * xhat)), so one
/// loop serves both; only the centered form subtracts mean(g).
absl::StatusOr<Tensors> runNormGrad(Operation *op, const HostTensor &x, const HostTensor &weight,
                                    const HostTensor &dy, int64_t axis, double epsilon,
                                    bool centered) {
  if (absl::Status s = checkNormParam(x, axis, weight, "weight"); !s.ok())
    return s;
  if (absl::Status s = checkSameShape(x, "input", dy, "grad"); !s.ok())
    return s;
  absl::StatusOr<HostTensor> dx = makeResult(op->getResult(0), x.shape);
  if (!dx.ok())
    return dx.status();
  int64_t cols = weight.numel();
  int64_t rows = cols ? x.numel() / cols : 0;
  std::vector<double> dweight(cols, 0.0), dbias(cols, 0.0), xhat(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double *xr = x.floats.data() + r * cols;
    const double *gr = dy.floats.data() + r * cols;
    double mean = 0;
    if (centered) {
      for (int64_t c = 0; c < cols; ++c)
        mean += xr[c];
      mean /= cols;
    }
    double meanSquare = 0; // biased variance when centered
    for (int64_t c = 0; c < cols; ++c)
      meanSquare += (xr[c] - mean) * (xr[c] - mean);
    meanSquare /= cols;
    double rstd = 1.0 / std::sqrt(meanSquare + epsilon);
    double meanG = 0, meanGXhat = 0;
    for (int64_t c = 0; c < cols; ++c) {
      xhat[c] = (xr[c] - mean) * rstd;
      double g = gr[c] * weight.floats[c];
      meanG += g;
      meanGXhat += g * xhat[c];
      dweight[c] += gr[c] * xhat[c];
      dbias[c] += gr[c];
    }
    meanG = centered ? meanG / cols : 0.0;
    meanGXhat /= cols;
    for (int64_t c = 0; c < cols; ++c) {
      double g = gr[c] * weight.floats[c];
      dx->set(r * cols + c, rstd * (g - meanG - xhat[c] * meanGXhat));
    }
  }
  Tensors results{std::move(*dx)};
  for (const std::vector<double> *sums : {&dweight, &dbias}) {
    if (results.size() == op->getNumResults())
      break; // rms_norm_grad has no bias gradient
    absl::StatusOr<HostTensor> t = makeResult(op->getResult(results.size()), weight.shape);
    if (!t.ok())
      return t.status();
    for (int64_t c = 0; c < cols; ++c)
      t->set(c, (*sums)[c]);
    results.push_back(std::move(*t));
  }
  return results;
}

/// rms_norm's gradients from xhat = output / divisor and the kept rstd.
absl::StatusOr<Tensors> runNormGradFromOutput(RmsNormGradFromOutputOp op, Operands args) {
  const HostTensor &out = *args[0], &divisor = *args[1], &weight = *args[2], &rstd = *args[3],
                   &dy = *args[4];
  int64_t axis = op.getAxis();
  if (absl::Status s = checkNormParam(out, axis, divisor, "divisor"); !s.ok())
    return s;
  if (absl::Status s = checkNormParam(out, axis, weight, "weight"); !s.ok())
    return s;
  if (absl::Status s = checkSameShape(out, "output", dy, "grad"); !s.ok())
    return s;
  if (rstd.shape != Shape(out.shape.begin(), out.shape.begin() + axis))
    return absl::InvalidArgumentError(absl::StrCat("rstd ", rstd.shapeString(),
                                                   " is not the output's leading dims"));
  int64_t cols = divisor.numel();
  for (int64_t c = 0; c < cols; ++c)
    if (divisor.floats[c] == 0.0)
      return absl::InvalidArgumentError(absl::StrCat(
          "divisor element ", c,
          " is zero: the normalized input cannot be recovered from the output there "
          "(compile with --norm-grad-from-output=false)"));
  absl::StatusOr<HostTensor> dx = makeResult(op.getInputGrad(), out.shape);
  if (!dx.ok())
    return dx.status();
  int64_t rows = cols ? out.numel() / cols : 0;
  std::vector<double> dweight(cols, 0.0), xhat(cols);
  for (int64_t r = 0; r < rows; ++r) {
    const double *o = out.floats.data() + r * cols, *g = dy.floats.data() + r * cols;
    double meanGXhat = 0;
    for (int64_t c = 0; c < cols; ++c) {
      xhat[c] = o[c] / divisor.floats[c];
      meanGXhat += g[c] * weight.floats[c] * xhat[c];
      dweight[c] += g[c] * xhat[c];
    }
    meanGXhat /= cols;
    for (int64_t c = 0; c < cols; ++c)
      dx->set(r * cols + c, rstd.floats[r] * (g[c] * weight.floats[c] - xhat[c] * meanGXhat));
  }
  absl::StatusOr<HostTensor> dw = makeResult(op.getWeightGrad(), weight.shape);
  if (!dw.ok())
    return dw.status();
  for (int64_t c = 0; c < cols; ++c)
    dw->set(c, dweight[c]);
  Tensors results{std::move(*dx)};
  results.push_back(std::move(*dw));
  return results;
}

absl::StatusOr<Tensors> runAttentionGrad(AttentionGradOp op, Operands args) {
  const HostTensor *mask = op.getMask() ? args[3] : nullptr;
  const HostTensor &q = *args[0], &k = *args[1], &v = *args[2];
  const HostTensor &dout = *args[op.getMask() ? 4 : 3];
  std::optional<double> scale;
  if (op.getScale())
    scale = op.getScale()->convertToDouble();
  absl::StatusOr<Attention> a = makeAttention(q, k, v, mask, op.getCausal(), scale);
  if (!a.ok())
    return a.status();
  int64_t B = a->B, Hq = a->Hq, S = a->S, D = a->D, Hkv = a->Hkv, L = a->L, Dv = a->Dv;
  if (dout.shape != Shape{B, Hq, S, Dv})
    return absl::InvalidArgumentError(absl::StrCat(
        "grad ", dout.shapeString(), " is not the output shape ", shapeString({B, Hq, S, Dv})));
  absl::StatusOr<HostTensor> dq = makeResult(op.getQueryGrad(), q.shape);
  if (!dq.ok())
    return dq.status();
  // Query heads sharing a kv head all add into it, so keep double sums.
  std::vector<double> dk(k.numel(), 0.0), dv(v.numel(), 0.0);
  std::vector<double> p(L), dS(L);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      int64_t kvBase = b * Hkv + a->kvHead(h);
      const double *kb = k.floats.data() + kvBase * L * D;
      const double *vb = v.floats.data() + kvBase * L * Dv;
      for (int64_t i = 0; i < S; ++i) {
        int64_t row = (b * Hq + h) * S + i;
        const double *qi = q.floats.data() + row * D;
        const double *gi = dout.floats.data() + row * Dv;
        double max = a->scoreRow(b, h, i, p.data());
        // A row with every key masked attends to nothing: P = 0 there, so it
        // passes no gradient (the forward's NaN must not leak backwards).
        bool empty = max == -std::numeric_limits<double>::infinity();
        double sum = 0;
        for (int64_t j = 0; j < L; ++j) {
          p[j] = empty ? 0.0 : std::exp(p[j] - max);
          sum += p[j];
        }
        // dS = P * (dP - rowsum(dP * P)) with dP = dout v^T.
        double rowDot = 0;
        for (int64_t j = 0; j < L; ++j) {
          if (!empty)
            p[j] /= sum;
          double dp = 0;
          for (int64_t e = 0; e < Dv; ++e) {
            dp += gi[e] * vb[j * Dv + e];
            dv[(kvBase * L + j) * Dv + e] += p[j] * gi[e];
          }
          dS[j] = dp;
          rowDot += dp * p[j];
        }
        for (int64_t j = 0; j < L; ++j)
          dS[j] = p[j] * (dS[j] - rowDot) * a->scale;
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t j = 0; j < L; ++j) {
            acc += dS[j] * kb[j * D + d];
            dk[(kvBase * L + j) * D + d] += dS[j] * qi[d];
          }
          dq->set(row * D + d, acc);
        }
      }
    }
  }
  Tensors results{std::move(*dq)};
  for (auto [value, shape, sums] :
       {std::tuple(op.getKeyGrad(), &k.shape, &dk), std::tuple(op.getValueGrad(), &v.shape, &dv)}) {
    absl::StatusOr<HostTensor> t = makeResult(value, *shape);
    if (!t.ok())
      return t.status();
    for (size_t i = 0; i < sums->size(); ++i)
      t->set(i, (*sums)[i]);
    results.push_back(std::move(*t));
  }
  return results;
}

absl::StatusOr<Tensors> runCrossEntropyGrad(CrossEntropyGradOp op, const HostTensor &logits,
                                            const HostTensor &labels, const HostTensor &grad) {
  int64_t rows = logits.shape[0], classes = logits.shape[1];
  if (labels.shape[0] != rows)
    return absl::InvalidArgumentError(
        absl::StrCat("logits have ", rows, " rows but labels have ", labels.shape[0]));
  Reduction reduction = op.getReduction();
  if (reduction == Reduction::none && grad.shape[0] != rows)
    return absl::InvalidArgumentError(
        absl::StrCat("logits have ", rows, " rows but grad has ", grad.shape[0]));
  // I64Attr getters return uint64_t; the cast restores negative values.
  int64_t ignore = static_cast<int64_t>(op.getIgnoreIndex());
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t label = labels.ints[r];
    if (label == ignore)
      continue;
    if (label < 0 || label >= classes)
      return absl::InvalidArgumentError(
          absl::StrCat("label ", label, " in row ", r, " is out of range [0, ", classes, ")"));
    ++counted;
  }
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), logits.shape);
  if (!out.ok())
    return out.status();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t label = labels.ints[r];
    if (label == ignore)
      continue; // the result starts zeroed
    // `counted` > 0 here, so mean never divides by zero.
    double g = reduction == Reduction::none   ? grad.floats[r]
               : reduction == Reduction::mean ? grad.floats[0] / counted
                                              : grad.floats[0];
    const double *row = logits.floats.data() + r * classes;
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < classes; ++c)
      max = std::max(max, row[c]);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c)
      sum += std::exp(row[c] - max);
    for (int64_t c = 0; c < classes; ++c) {
      double p = std::exp(row[c] - max) / sum;
      out->set(r * classes + c, (p - (c == label ? 1.0 : 0.0)) * g);
    }
  }
  return Tensors{std::move(*out)};
}

} // namespace

MaybeResults runBackward(Operation *op, Operands args) {
  return llvm::TypeSwitch<Operation *, MaybeResults>(op)
      .Case([&](SoftmaxGradOp s) {
        return runSoftmaxGrad(op, *args[0], *args[1], s.getAxis(),
                              /*log=*/false);
      })
      .Case([&](LogSoftmaxGradOp s) {
        return runSoftmaxGrad(op, *args[0], *args[1], s.getAxis(),
                              /*log=*/true);
      })
      .Case([&](LayerNormGradOp n) {
        return runNormGrad(op, *args[0], *args[1], *args[2], n.getAxis(),
                           n.getEpsilon().convertToDouble(),
                           /*centered=*/true);
      })
      .Case([&](RmsNormGradOp n) {
        return runNormGrad(op, *args[0], *args[1], *args[2], n.getAxis(),
                           n.getEpsilon().convertToDouble(),
                           /*centered=*/false);
      })
      .Case([&](RmsNormGradFromOutputOp n) { return runNormGradFromOutput(n, args); })
      .Case([&](AttentionGradOp a) -> absl::StatusOr<Tensors> {
        if (!hasSeqMajorRole(a))
          return runAttentionGrad(a, args);
        SmallVector<int> roles = {kGradQuery, kGradKey, kGradValue};
        if (a.getMask())
          roles.push_back(-1);
        roles.push_back(kGradDout);
        roles.push_back(kGradOut);
        return runHeadMajor(a, args, roles, {kGradQueryGrad, kGradKeyGrad, kGradValueGrad},
                            [&](Operands views) { return runAttentionGrad(a, views); });
      })
      .Case([&](CrossEntropyGradOp c) {
        return runCrossEntropyGrad(c, *args[0], *args[1], *args[2]);
      })
      .Default([](Operation *) { return std::nullopt; });
}

} // namespace kiln::interp
