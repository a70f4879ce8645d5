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
#include <limits>

using namespace mlir;

namespace kiln::interp {
namespace {

absl::StatusOr<Tensors> runMatmul(MatmulOp op, const HostTensor &a,
                                  const HostTensor &b) {
  size_t ra = a.shape.size(), rb = b.shape.size();
  // Stored matrix dims; a transpose flag swaps which is the row.
  int64_t aRows = a.shape[ra - 2], aCols = a.shape[ra - 1];
  int64_t bRows = b.shape[rb - 2], bCols = b.shape[rb - 1];
  bool ta = op.getTransposeA(), tb = op.getTransposeB();
  int64_t m = ta ? aCols : aRows, k = ta ? aRows : aCols;
  int64_t kRhs = tb ? bCols : bRows, n = tb ? bRows : bCols;
  if (k != kRhs)
    return absl::InvalidArgumentError(
        absl::StrCat("contraction dims differ: lhs ", a.shapeString(), " has ",
                     k, ", rhs ", b.shapeString(), " has ", kRhs));
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
  const HostTensor &q = *args[0], &k = *args[1], &v = *args[2];
  const HostTensor *mask = op.getMask() ? args[3] : nullptr;
  int64_t B = q.shape[0], Hq = q.shape[1], S = q.shape[2], D = q.shape[3];
  int64_t Hkv = k.shape[1], L = k.shape[2], Dv = v.shape[3];
  if (k.shape[0] != B || v.shape[0] != B || v.shape[1] != Hkv ||
      v.shape[2] != L || k.shape[3] != D)
    return absl::InvalidArgumentError(
        absl::StrCat("query ", q.shapeString(), ", key ", k.shapeString(),
                     " and value ", v.shapeString(),
                     " do not fit [B, Hq, S, D], [B, Hkv, L, D], "
                     "[B, Hkv, L, Dv]"));
  if (Hkv == 0 || Hq % Hkv != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "query heads ", Hq, " are not a multiple of key/value heads ", Hkv));
  Shape scoresShape = {B, Hq, S, L};
  std::optional<BroadcastMap> maskMap;
  if (mask) {
    absl::StatusOr<Shape> b = broadcastShapes({mask->shape, scoresShape});
    if (!b.ok() || *b != scoresShape)
      return absl::InvalidArgumentError(absl::StrCat(
          "mask ", mask->shapeString(), " does not broadcast to the scores ",
          shapeString(scoresShape)));
    maskMap.emplace(mask->shape, scoresShape);
  }
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), {B, Hq, S, Dv});
  if (!out.ok())
    return out.status();
  double scale = op.getScale() ? op.getScale()->convertToDouble()
                               : 1.0 / std::sqrt(static_cast<double>(D));
  const double kMasked = -std::numeric_limits<double>::infinity();
  std::vector<double> scores(L);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      int64_t kvh = h / (Hq / Hkv); // grouped-query: heads share kv heads
      const double *kb = k.floats.data() + (b * Hkv + kvh) * L * D;
      const double *vb = v.floats.data() + (b * Hkv + kvh) * L * Dv;
      for (int64_t i = 0; i < S; ++i) {
        const double *qi = q.floats.data() + ((b * Hq + h) * S + i) * D;
        double max = kMasked;
        for (int64_t j = 0; j < L; ++j) {
          double s = 0;
          for (int64_t d = 0; d < D; ++d)
            s += qi[d] * kb[j * D + d];
          s *= scale;
          if (mask) {
            int64_t at = (*maskMap)(((b * Hq + h) * S + i) * L + j);
            if (!mask->isFloat())
              s = mask->ints[at] ? s : kMasked;
            else
              s += mask->floats[at];
          }
          if (op.getCausal() && j > i)
            s = kMasked;
          scores[j] = s;
          max = std::max(max, s);
        }
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
          out->set(((b * Hq + h) * S + i) * Dv + e, acc / sum);
        }
      }
    }
  }
  return Tensors{std::move(*out)};
}

/// Checks a norm weight or bias against dims [axis, rank) of the input.
absl::Status checkNormParam(const HostTensor &in, int64_t axis,
                            const HostTensor &param, const char *what) {
  Shape expected(in.shape.begin() + axis, in.shape.end());
  if (param.shape != expected)
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", param.shapeString(), " does not match dims ",
                     shapeString(expected), " of input ", in.shapeString()));
  return absl::OkStatus();
}

/// layer_norm (centered, with optional bias) and rms_norm (not centered)
/// over the trailing dims [axis, rank), which are contiguous rows.
absl::StatusOr<Tensors> runNorm(Operation *op, const HostTensor &in,
                                const HostTensor &weight,
                                const HostTensor *bias, int64_t axis,
                                double epsilon, bool centered) {
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
  }
  return Tensors{std::move(*out)};
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
      .Case([&](AttentionOp a) { return runAttention(a, args); })
      .Case([&](LayerNormOp n) {
        return runNorm(op, *args[0], *args[1], n.getBias() ? args[2] : nullptr,
                       n.getAxis(), n.getEpsilon().convertToDouble(),
                       /*centered=*/true);
      })
      .Case([&](RmsNormOp n) {
        return runNorm(op, *args[0], *args[1], nullptr, n.getAxis(),
                       n.getEpsilon().convertToDouble(), /*centered=*/false);
      })
      .Case([&](TriluOp t) { return runTrilu(t, *args[0]); })
      .Default([](Operation *) { return std::nullopt; });
}

} // namespace kiln::interp
