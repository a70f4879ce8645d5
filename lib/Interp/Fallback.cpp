//===- Fallback.cpp - CPU fallbacks for ONNX ops left opaque --------------===//
//
// A graph break on a non-differentiated path still has to run: these are
// the reference implementations of ONNX ops Kiln keeps as kiln.opaque
// (today ArgMax and ArgMin, e.g. turning one-hot labels into indices). The
// runtime will run them the same way on the host, between compiled graphs.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "absl/strings/str_cat.h"

using namespace mlir;
using kiln::OpaqueOp;

namespace kiln::interp {
namespace {

int64_t intAttr(OpaqueOp op, StringRef name, int64_t fallback) {
  if (auto attr = op.getOnnxAttributes().getAs<IntegerAttr>(name))
    return attr.getInt();
  return fallback;
}

/// ONNX ArgMax/ArgMin: index of the extreme along `axis` (first or last on
/// ties), int64, keeping the axis as size 1 when `keepdims`.
absl::StatusOr<Tensors> runArgExtreme(OpaqueOp op, Operands args, bool max) {
  if (args.size() != 1)
    return absl::InvalidArgumentError("takes one input");
  const HostTensor &x = *args[0];
  int64_t rank = static_cast<int64_t>(x.shape.size());
  int64_t axis = intAttr(op, "axis", 0);
  if (axis < 0)
    axis += rank;
  if (axis < 0 || axis >= rank)
    return absl::InvalidArgumentError(absl::StrCat("axis out of range for rank ", rank));
  bool keep = intAttr(op, "keepdims", 1) != 0;
  bool last = intAttr(op, "select_last_index", 0) != 0;
  int64_t outer = 1, inner = 1, n = x.shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape[d];
  for (int64_t d = axis + 1; d < rank; ++d)
    inner *= x.shape[d];
  Shape shape;
  for (int64_t d = 0; d < rank; ++d)
    if (d != axis)
      shape.push_back(x.shape[d]);
    else if (keep)
      shape.push_back(1);
  HostTensor out(DType::I64, shape);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      double bestValue = x.getDouble(o * n * inner + i);
      for (int64_t k = 1; k < n; ++k) {
        double v = x.getDouble((o * n + k) * inner + i);
        bool better =
            max ? (last ? v >= bestValue : v > bestValue) : (last ? v <= bestValue : v < bestValue);
        if (better) {
          best = k;
          bestValue = v;
        }
      }
      out.setInt(o * inner + i, best);
    }
  return Tensors{std::move(out)};
}

} // namespace

std::optional<absl::StatusOr<Tensors>> runFallback(OpaqueOp op, Operands args) {
  StringRef type = op.getOpType();
  if (!op.getDomain().empty() && op.getDomain() != "ai.onnx")
    return std::nullopt;
  if (type == "ArgMax" || type == "ArgMin")
    return runArgExtreme(op, args, type == "ArgMax");
  return std::nullopt;
}

} // namespace kiln::interp
