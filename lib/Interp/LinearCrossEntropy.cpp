//===- LinearCrossEntropy.cpp - The fused LM head and its gradient --------===//
//
// The reference for kiln.linear_cross_entropy(_grad): the same chunked
// order the runtime uses (logits of `chunk_tokens` rows, their statistics,
// the gradient over the same chunk), in fp64. Only one chunk of logits is
// ever held, as on the device; under bf16_logits its logits are rounded to
// bf16 as the device's bf16 chunk rounds them.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "absl/strings/str_cat.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace kiln::interp {
namespace {

template <typename OpT>
absl::StatusOr<Tensors> runFused(OpT op, const HostTensor &hidden, const HostTensor &weight,
                                 const HostTensor &labels, const HostTensor *grad) {
  bool transpose = op.getTransposeWeight();
  int64_t rows = hidden.shape[0], width = hidden.shape[1];
  int64_t vocab = transpose ? weight.shape[0] : weight.shape[1];
  if ((transpose ? weight.shape[1] : weight.shape[0]) != width)
    return absl::InvalidArgumentError(
        absl::StrCat("hidden is ", hidden.shapeString(), " but weight is ", weight.shapeString()));
  if (labels.shape[0] != rows)
    return absl::InvalidArgumentError(
        absl::StrCat("hidden has ", rows, " rows but labels have ", labels.shape[0]));
  // I64Attr getters return uint64_t; the cast restores negative values.
  int64_t ignore = static_cast<int64_t>(op.getIgnoreIndex());
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t label = labels.ints[r];
    if (label == ignore)
      continue;
    if (label < 0 || label >= vocab)
      return absl::InvalidArgumentError(
          absl::StrCat("label ", label, " in row ", r, " is out of range [0, ", vocab, ")"));
    ++counted;
  }
  std::optional<double> cap;
  if (std::optional<APFloat> c = op.getSoftcap())
    cap = c->convertToDouble();
  auto w = [&](int64_t h, int64_t v) {
    return transpose ? weight.floats[v * width + h] : weight.floats[h * vocab + v];
  };
  int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(op.getChunkTokens()));
  bool bf16 = op.getBf16Logits();
  double scale = grad && counted ? grad->floats[0] / static_cast<double>(counted) : 0;
  std::vector<double> hiddenGrad, weightGrad;
  if (grad) {
    hiddenGrad.assign(rows * width, 0);
    weightGrad.assign(width * vocab, 0);
  }
  std::vector<double> logits;
  double total = 0;
  for (int64_t first = 0; first < rows; first += chunk) {
    int64_t count = std::min(chunk, rows - first);
    // The logits chunk [count, vocab]: hidden rows · W.
    logits.assign(count * vocab, 0);
    for (int64_t r = 0; r < count; ++r) {
      const double *x = hidden.floats.data() + (first + r) * width;
      double *z = logits.data() + r * vocab;
      for (int64_t h = 0; h < width; ++h)
        for (int64_t v = 0; v < vocab; ++v)
          z[v] += x[h] * w(h, v);
      if (bf16) // the device's bf16 chunk holds the rounded logits
        for (int64_t v = 0; v < vocab; ++v)
          z[v] = roundToFloat(DType::BF16, z[v]);
      if (cap)
        for (int64_t v = 0; v < vocab; ++v)
          z[v] = *cap * std::tanh(z[v] / *cap);
    }
    // Statistics and loss; the chunk becomes its gradient in place.
    for (int64_t r = 0; r < count; ++r) {
      double *z = logits.data() + r * vocab;
      int64_t label = labels.ints[first + r];
      if (label == ignore) {
        std::fill(z, z + vocab, 0.0);
        continue;
      }
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t v = 0; v < vocab; ++v)
        max = std::max(max, z[v]);
      double sum = 0;
      for (int64_t v = 0; v < vocab; ++v)
        sum += std::exp(z[v] - max);
      double lse = std::log(sum) + max;
      total += lse - z[label];
      if (!grad)
        continue;
      for (int64_t v = 0; v < vocab; ++v) {
        double capped = z[v];
        double d = std::exp(capped - lse) - (v == label ? 1.0 : 0.0);
        if (cap) { // d/dx c·tanh(x/c) = 1 − tanh², tanh = capped / c
          double t = capped / *cap;
          d *= 1 - t * t;
        }
        z[v] = d * scale;
      }
    }
    if (!grad)
      continue;
    // dHidden rows = dlogits · Wᵀ; dW += hiddenᵀ · dlogits.
    for (int64_t r = 0; r < count; ++r) {
      const double *dz = logits.data() + r * vocab;
      const double *x = hidden.floats.data() + (first + r) * width;
      double *dx = hiddenGrad.data() + (first + r) * width;
      for (int64_t h = 0; h < width; ++h) {
        double acc = 0;
        double *dw = weightGrad.data() + h * vocab;
        for (int64_t v = 0; v < vocab; ++v) {
          acc += dz[v] * w(h, v);
          dw[v] += x[h] * dz[v];
        }
        dx[h] = acc;
      }
    }
  }
  Tensors results;
  absl::StatusOr<HostTensor> loss = makeResult(op.getLoss(), {});
  if (!loss.ok())
    return loss.status();
  // Mean over zero counted rows is 0/0 = NaN, as in PyTorch.
  loss->set(0, total / static_cast<double>(counted));
  results.push_back(std::move(*loss));
  if (!grad)
    return results;
  auto grads = cast<LinearCrossEntropyGradOp>(op.getOperation());
  absl::StatusOr<HostTensor> dx = makeResult(grads.getHiddenGrad(), hidden.shape);
  if (!dx.ok())
    return dx.status();
  for (size_t i = 0; i < hiddenGrad.size(); ++i)
    dx->set(i, hiddenGrad[i]);
  results.push_back(std::move(*dx));
  if (Value result = grads.getWeightGrad()) {
    absl::StatusOr<HostTensor> dw = makeResult(result, weight.shape);
    if (!dw.ok())
      return dw.status();
    for (int64_t h = 0; h < width; ++h)
      for (int64_t v = 0; v < vocab; ++v)
        dw->set(transpose ? v * width + h : h * vocab + v, weightGrad[h * vocab + v]);
    results.push_back(std::move(*dw));
  }
  return results;
}

} // namespace

MaybeResults runLinearCrossEntropy(Operation *op, Operands args) {
  return llvm::TypeSwitch<Operation *, MaybeResults>(op)
      .Case([&](LinearCrossEntropyOp o) {
        return runFused(o, *args[0], *args[1], *args[2], nullptr);
      })
      .Case([&](LinearCrossEntropyGradOp o) {
        return runFused(o, *args[0], *args[1], *args[2], args[3]);
      })
      .Default([](Operation *) { return std::nullopt; });
}

} // namespace kiln::interp
