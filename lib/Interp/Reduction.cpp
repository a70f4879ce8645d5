//===- Reduction.cpp - reduce_*, softmax, cumsum, cross_entropy -----------===//
//
// Sums accumulate in double (floats) or wrapping int64 (integers) and are
// rounded once on store; softmax-like ops subtract the row maximum first so
// exp never overflows.
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

enum class ReduceKind { Sum, Mean, Max };

absl::StatusOr<Tensors> runReduce(Operation *op, const HostTensor &in, ReduceKind kind,
                                  ArrayRef<int64_t> axes, bool keepdim) {
  // Reduced dims become size 1; dropping them (no keepdim) does not change
  // the row-major layout, so one index map serves both forms.
  Shape kept = in.shape, outShape;
  int64_t count = 1;
  for (int64_t axis : axes) {
    count *= in.shape[axis];
    kept[axis] = 1;
  }
  for (int64_t i = 0; i < static_cast<int64_t>(in.shape.size()); ++i)
    if (keepdim || !llvm::is_contained(axes, i))
      outShape.push_back(kept[i]);
  absl::StatusOr<HostTensor> out = makeResult(op->getResult(0), outShape);
  if (!out.ok())
    return out.status();
  BroadcastMap toOut(kept, in.shape);
  int64_t n = out->numel();

  if (in.isFloat()) {
    double init = kind == ReduceKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
    std::vector<double> acc(n, init);
    for (int64_t i = 0; i < in.numel(); ++i) {
      double x = in.floats[i], &a = acc[toOut(i)];
      if (kind != ReduceKind::Max)
        a += x;
      else if (std::isnan(x) || x > a) // NaN propagates
        a = x;
    }
    for (int64_t j = 0; j < n; ++j)
      out->set(j, kind == ReduceKind::Mean ? acc[j] / count : acc[j]);
    return Tensors{std::move(*out)};
  }

  if (count == 0 && kind != ReduceKind::Sum)
    return absl::InvalidArgumentError("integer mean/max over an empty dimension has no value");
  std::vector<uint64_t> acc(n, 0);
  std::vector<bool> seen(n, false);
  for (int64_t i = 0; i < in.numel(); ++i) {
    int64_t j = toOut(i), x = in.ints[i];
    if (kind != ReduceKind::Max)
      acc[j] += static_cast<uint64_t>(x);
    else if (!seen[j] || x > static_cast<int64_t>(acc[j]))
      acc[j] = static_cast<uint64_t>(x);
    seen[j] = true;
  }
  for (int64_t j = 0; j < n; ++j) {
    int64_t v = static_cast<int64_t>(acc[j]);
    out->setInt(j, kind == ReduceKind::Mean ? v / count : v);
  }
  return Tensors{std::move(*out)};
}

absl::StatusOr<Tensors> runSoftmax(Operation *op, const HostTensor &in, int64_t axis, bool log) {
  absl::StatusOr<HostTensor> out = makeResult(op->getResult(0), in.shape);
  if (!out.ok())
    return out.status();
  AxisSplit s(in.shape, axis);
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      double max = -std::numeric_limits<double>::infinity();
      for (int64_t k = 0; k < s.len; ++k)
        max = std::max(max, in.floats[s.at(o, k, i)]);
      double sum = 0;
      for (int64_t k = 0; k < s.len; ++k)
        sum += std::exp(in.floats[s.at(o, k, i)] - max);
      for (int64_t k = 0; k < s.len; ++k) {
        double shifted = in.floats[s.at(o, k, i)] - max;
        out->set(s.at(o, k, i), log ? shifted - std::log(sum) : std::exp(shifted) / sum);
      }
    }
  }
  return Tensors{std::move(*out)};
}

absl::StatusOr<Tensors> runCumsum(CumsumOp op, const HostTensor &in) {
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), in.shape);
  if (!out.ok())
    return out.status();
  AxisSplit s(in.shape, op.getAxis());
  for (int64_t o = 0; o < s.outer; ++o) {
    for (int64_t i = 0; i < s.inner; ++i) {
      double floatSum = 0;
      uint64_t intSum = 0;
      auto store = [&](int64_t at) {
        if (in.isFloat())
          out->set(at, floatSum);
        else
          out->setInt(at, static_cast<int64_t>(intSum));
      };
      for (int64_t step = 0; step < s.len; ++step) {
        int64_t at = s.at(o, op.getReverse() ? s.len - 1 - step : step, i);
        if (op.getExclusive())
          store(at); // the sum of the elements before this one
        if (in.isFloat())
          floatSum += in.floats[at];
        else
          intSum += static_cast<uint64_t>(in.ints[at]);
        if (!op.getExclusive())
          store(at);
      }
    }
  }
  return Tensors{std::move(*out)};
}

absl::StatusOr<Tensors> runCrossEntropy(CrossEntropyOp op, const HostTensor &logits,
                                        const HostTensor &labels) {
  int64_t rows = logits.shape[0], classes = logits.shape[1];
  if (labels.shape[0] != rows)
    return absl::InvalidArgumentError(
        absl::StrCat("logits have ", rows, " rows but labels have ", labels.shape[0]));
  Reduction reduction = op.getReduction();
  Shape shape;
  if (reduction == Reduction::none)
    shape.push_back(rows);
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), shape);
  if (!out.ok())
    return out.status();
  double total = 0;
  int64_t counted = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t label = labels.ints[r];
    // I64Attr getters return uint64_t; the cast restores negative values.
    if (label == static_cast<int64_t>(op.getIgnoreIndex()))
      continue; // a `none` result keeps its 0
    if (label < 0 || label >= classes)
      return absl::InvalidArgumentError(
          absl::StrCat("label ", label, " in row ", r, " is out of range [0, ", classes, ")"));
    const double *row = logits.floats.data() + r * classes;
    double max = -std::numeric_limits<double>::infinity();
    for (int64_t c = 0; c < classes; ++c)
      max = std::max(max, row[c]);
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c)
      sum += std::exp(row[c] - max);
    double loss = std::log(sum) + max - row[label];
    if (reduction == Reduction::none)
      out->set(r, loss);
    total += loss;
    ++counted;
  }
  // Mean over zero counted rows is 0/0 = NaN, as in PyTorch.
  if (reduction == Reduction::mean)
    out->set(0, total / static_cast<double>(counted));
  else if (reduction == Reduction::sum)
    out->set(0, total);
  return Tensors{std::move(*out)};
}

} // namespace

MaybeResults runReduction(Operation *op, Operands args) {
  return llvm::TypeSwitch<Operation *, MaybeResults>(op)
      .Case([&](ReduceSumOp r) {
        return runReduce(op, *args[0], ReduceKind::Sum, r.getAxes(), r.getKeepdim());
      })
      .Case([&](ReduceMeanOp r) {
        return runReduce(op, *args[0], ReduceKind::Mean, r.getAxes(), r.getKeepdim());
      })
      .Case([&](ReduceMaxOp r) {
        return runReduce(op, *args[0], ReduceKind::Max, r.getAxes(), r.getKeepdim());
      })
      .Case([&](SoftmaxOp s) { return runSoftmax(op, *args[0], s.getAxis(), /*log=*/false); })
      .Case([&](LogSoftmaxOp s) { return runSoftmax(op, *args[0], s.getAxis(), /*log=*/true); })
      .Case([&](CumsumOp c) { return runCumsum(c, *args[0]); })
      .Case([&](CrossEntropyOp c) { return runCrossEntropy(c, *args[0], *args[1]); })
      .Default([](Operation *) { return std::nullopt; });
}

} // namespace kiln::interp
