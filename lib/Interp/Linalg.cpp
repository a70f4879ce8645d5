//===- Linalg.cpp - matmul, attention, layer_norm, rms_norm, trilu --------===//
//
// Dot products and statistics accumulate in double and are rounded once on
// store. Dims that the IR only knows symbolically are checked here, at run
// time, with the concrete sizes.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "absl/strings/str_cat.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;

namespace kiln::interp {
namespace {

absl::StatusOr<Tensors> runMatmul(MatmulOp op, const HostTensor &a, const HostTensor &b) {
  size_t ra = a.shape.size(), rb = b.shape.size();
  // Stored matrix dims; a transpose flag swaps which is the row.
  int64_t aRows = a.shape[ra - 2], aCols = a.shape[ra - 1];
  int64_t bRows = b.shape[rb - 2], bCols = b.shape[rb - 1];
  bool ta = op.getTransposeA(), tb = op.getTransposeB();
  int64_t m = ta ? aCols : aRows, k = ta ? aRows : aCols;
  int64_t kRhs = tb ? bCols : bRows, n = tb ? bRows : bCols;
  if (k != kRhs)
    return absl::InvalidArgumentError(absl::StrCat("contraction dims differ: lhs ", a.shapeString(),
                                                   " has ", k, ", rhs ", b.shapeString(), " has ",
                                                   kRhs));
  Shape batchA(a.shape.begin(), a.shape.end() - 2);
  Shape batchB(b.shape.begin(), b.shape.end() - 2);
  absl::StatusOr<Shape> batch = broadcastShapes({batchA, batchB});
  if (!batch.ok())
    return batch.status();
  Shape shape = *batch;
  shape.push_back(m);
  shape.push_back(n);
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), shape);
  if (!out.ok())
    return out.status();
  BroadcastMap mapA(batchA, *batch), mapB(batchB, *batch);
  for (int64_t bi = 0; bi < numel(*batch); ++bi) {
    const double *pa = a.floats.data() + mapA(bi) * aRows * aCols;
    const double *pb = b.floats.data() + mapB(bi) * bRows * bCols;
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (int64_t p = 0; p < k; ++p) {
          double x = ta ? pa[p * aCols + i] : pa[i * aCols + p];
          double y = tb ? pb[j * bCols + p] : pb[p * bCols + j];
          sum += x * y;
        }
        out->set((bi * m + i) * n + j, sum);
      }
    }
  }
  return Tensors{std::move(*out)};
}

absl::StatusOr<Tensors> runAttention(AttentionOp op, Operands args) {
  std::optional<double> scale;
  if (op.getScale())
    scale = op.getScale()->convertToDouble();
  absl::StatusOr<Attention> a = makeAttention(
      *args[0], *args[1], *args[2], op.getMask() ? args[3] : nullptr, op.getCausal(), scale);
  if (!a.ok())
    return a.status();
  int64_t L = a->L, Dv = a->Dv;
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), {a->B, a->Hq, a->S, Dv});
  if (!out.ok())
    return out.status();
  std::vector<double> scores(L);
  for (int64_t b = 0; b < a->B; ++b) {
    for (int64_t h = 0; h < a->Hq; ++h) {
      const double *vb = args[2]->floats.data() + (b * a->Hkv + a->kvHead(h)) * L * Dv;
      for (int64_t i = 0; i < a->S; ++i) {
        double max = a->scoreRow(b, h, i, scores.data());
        // A row with every key masked has no softmax: 0/0 gives NaN, which
        // the loop below produces by itself (exp(-inf - -inf) is NaN).
        double sum = 0;
        for (int64_t j = 0; j < L; ++j) {
          scores[j] = std::exp(scores[j] - max);
          sum += scores[j];
        }
        for (int64_t e = 0; e < Dv; ++e) {
          double acc = 0;
          for (int64_t j = 0; j < L; ++j)
            acc += scores[j] * vb[j * Dv + e];
          out->set(((b * a->Hq + h) * a->S + i) * Dv + e, acc / sum);
        }
      }
    }
  }
  return Tensors{std::move(*out)};
}

/// layer_norm (centered, with optional bias) and rms_norm (not centered)
/// over the trailing dims [axis, rank), which are contiguous rows.
absl::StatusOr<Tensors> runNorm(Operation *op, const HostTensor &in, const HostTensor &weight,
                                const HostTensor *bias, int64_t axis, double epsilon,
                                bool centered) {
  if (absl::Status s = checkNormParam(in, axis, weight, "weight"); !s.ok())
    return s;
  if (bias)
    if (absl::Status s = checkNormParam(in, axis, *bias, "bias"); !s.ok())
      return s;
  absl::StatusOr<HostTensor> out = makeResult(op->getResult(0), in.shape);
  if (!out.ok())
    return out.status();
  int64_t cols = weight.numel();
  int64_t rows = cols ? in.numel() / cols : 0;
  // rms_norm_with_rstd also returns each row's 1 / sqrt(mean(x^2) + eps).
  std::optional<HostTensor> rstd;
  if (op->getNumResults() > 1) {
    absl::StatusOr<HostTensor> t =
        makeResult(op->getResult(1), Shape(in.shape.begin(), in.shape.begin() + axis));
    if (!t.ok())
      return t.status();
    rstd = std::move(*t);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const double *x = in.floats.data() + r * cols;
    double mean = 0;
    if (centered) {
      for (int64_t c = 0; c < cols; ++c)
        mean += x[c];
      mean /= cols;
    }
    double meanSquare = 0; // biased variance when centered
    for (int64_t c = 0; c < cols; ++c)
      meanSquare += (x[c] - mean) * (x[c] - mean);
    meanSquare /= cols;
    double invStd = 1.0 / std::sqrt(meanSquare + epsilon);
    for (int64_t c = 0; c < cols; ++c) {
      double y = (x[c] - mean) * invStd * weight.floats[c];
      out->set(r * cols + c, bias ? y + bias->floats[c] : y);
    }
    if (rstd)
      rstd->set(r, invStd);
  }
  Tensors results{std::move(*out)};
  if (rstd)
    results.push_back(std::move(*rstd));
  return results;
}

absl::StatusOr<Tensors> runTrilu(TriluOp op, const HostTensor &in) {
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), in.shape);
  if (!out.ok())
    return out.status();
  int64_t rows = in.shape[in.shape.size() - 2], cols = in.shape.back();
  int64_t diagonal = op.getDiagonal();
  for (int64_t idx = 0; idx < in.numel(); ++idx) {
    int64_t j = idx % cols, i = (idx / cols) % rows;
    bool keep = op.getUpper() ? j - i >= diagonal : j - i <= diagonal;
    if (keep) // the result starts zeroed
      copyElement(*out, idx, in, idx);
  }
  return Tensors{std::move(*out)};
}

} // namespace

MaybeResults runLinalg(Operation *op, Operands args) {
  return llvm::TypeSwitch<Operation *, MaybeResults>(op)
      .Case([&](MatmulOp m) { return runMatmul(m, *args[0], *args[1]); })
      .Case([&](AttentionOp a) -> absl::StatusOr<Tensors> {
        if (!hasSeqMajorRole(a))
          return runAttention(a, args);
        SmallVector<int> roles = {kAttnQuery, kAttnKey, kAttnValue, -1};
        return runHeadMajor(a, args, roles, {kAttnResult},
                            [&](Operands views) { return runAttention(a, views); });
      })
      .Case([&](LayerNormOp n) {
        return runNorm(op, *args[0], *args[1], n.getBias() ? args[2] : nullptr, n.getAxis(),
                       n.getEpsilon().convertToDouble(),
                       /*centered=*/true);
      })
      .Case([&](RmsNormOp n) {
        return runNorm(op, *args[0], *args[1], nullptr, n.getAxis(),
                       n.getEpsilon().convertToDouble(), /*centered=*/false);
      })
      .Case([&](RmsNormWithRstdOp n) {
        return runNorm(op, *args[0], *args[1], nullptr, n.getAxis(),
                       n.getEpsilon().convertToDouble(), /*centered=*/false);
      })
      .Case([&](TriluOp t) { return runTrilu(t, *args[0]); })
      .Default([](Operation *) { return std::nullopt; });
}

} // namespace kiln::interp
