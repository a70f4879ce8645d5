//===- Common.cpp - Interpreter internals shared by the op families -------===//

#include "Common.h"

#include "absl/strings/str_cat.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>
#include <limits>

using namespace mlir;

namespace kiln::interp {

std::optional<int64_t> Env::evaluate(Dim dim) const {
  return evaluateDim(dim, [&](StringRef name) -> std::optional<int64_t> {
    auto it = symbols.find(name.str());
    if (it == symbols.end())
      return std::nullopt;
    return it->second;
  });
}

std::vector<std::optional<int64_t>> Env::evaluate(Type type) const {
  std::vector<std::optional<int64_t>> dims;
  for (Dim d : getDims(llvm::cast<RankedTensorType>(type)))
    dims.push_back(evaluate(d));
  return dims;
}

absl::StatusOr<Shape> Env::concreteShape(Value value) const {
  auto type = llvm::cast<RankedTensorType>(value.getType());
  std::vector<std::optional<int64_t>> dims = evaluate(type);
  Shape shape;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (!dims[i] || *dims[i] < 0)
      return absl::InvalidArgumentError(absl::StrCat("cannot determine dim ", i,
                                                     " of the result type ", shapeToString(type),
                                                     " from the bound symbols"));
    shape.push_back(*dims[i]);
  }
  return shape;
}

int64_t numel(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

absl::StatusOr<int64_t> checkedNumel(ArrayRef<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0)
      return absl::InvalidArgumentError(absl::StrCat("negative dim in shape ", shapeString(shape)));
    if (llvm::MulOverflow(n, d, n))
      return absl::InvalidArgumentError(
          absl::StrCat("shape ", shapeString(shape), " has more elements than int64 can count"));
  }
  return n;
}

Shape stridesOf(ArrayRef<int64_t> shape) {
  Shape strides(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * shape[i + 1];
  return strides;
}

std::string shapeString(ArrayRef<int64_t> shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    absl::StrAppend(&text, i ? ", " : "", shape[i]);
  return text + "]";
}

absl::StatusOr<DType> dtypeOf(Type type) {
  Type element = llvm::cast<ShapedType>(type).getElementType();
  if (std::optional<DType> dtype = fromMlirType(element))
    return *dtype;
  std::string text;
  llvm::raw_string_ostream os(text);
  os << element;
  return absl::InvalidArgumentError(absl::StrCat("unsupported element type ", text));
}

absl::StatusOr<HostTensor> makeResult(Value value, Shape shape) {
  absl::StatusOr<DType> dtype = dtypeOf(value.getType());
  if (!dtype.ok())
    return dtype.status();
  if (absl::StatusOr<int64_t> n = checkedNumel(shape); !n.ok())
    return n.status();
  return HostTensor(*dtype, std::move(shape));
}

absl::Status checkStorage(const HostTensor &tensor) {
  absl::StatusOr<int64_t> count = checkedNumel(tensor.shape);
  if (!count.ok())
    return count.status();
  size_t expected = static_cast<size_t>(*count);
  size_t floats = tensor.floats.size(), ints = tensor.ints.size();
  bool ok = tensor.isFloat() ? floats == expected && ints == 0 : ints == expected && floats == 0;
  if (!ok)
    return absl::InvalidArgumentError(
        absl::StrCat(dtypeName(tensor.dtype), " ", tensor.shapeString(), " tensor holds ", floats,
                     " floats and ", ints, " ints, expected ", expected,
                     tensor.isFloat() ? " floats" : " ints"));
  return absl::OkStatus();
}

HostTensor roundedToDType(HostTensor tensor) {
  for (double &value : tensor.floats)
    value = roundToFloat(tensor.dtype, value);
  return tensor;
}

int64_t truncToInt(double value) {
  if (std::isnan(value))
    return 0;
  // 2^63 is exactly representable; anything at or past it saturates.
  constexpr double limit = 9223372036854775808.0;
  if (value >= limit)
    return std::numeric_limits<int64_t>::max();
  if (value < -limit)
    return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(value);
}

absl::StatusOr<Shape> broadcastShapes(ArrayRef<Shape> shapes) {
  size_t rank = 0;
  for (const Shape &s : shapes)
    rank = std::max(rank, s.size());
  Shape result(rank, 1);
  for (const Shape &s : shapes) {
    size_t offset = rank - s.size();
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t &r = result[offset + i];
      if (s[i] == r || s[i] == 1)
        continue;
      if (r != 1) {
        std::string list;
        for (const Shape &t : shapes)
          absl::StrAppend(&list, list.empty() ? "" : " and ", shapeString(t));
        return absl::InvalidArgumentError(absl::StrCat("shapes ", list, " do not broadcast"));
      }
      r = s[i];
    }
  }
  return result;
}

BroadcastMap::BroadcastMap(ArrayRef<int64_t> in, ArrayRef<int64_t> out)
    : outShape(out.begin(), out.end()), inStrides(out.size(), 0) {
  Shape strides = stridesOf(in);
  size_t offset = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    if (in[i] != 1)
      inStrides[offset + i] = strides[i];
}

int64_t BroadcastMap::operator()(int64_t outIndex) const {
  int64_t inIndex = 0;
  for (int64_t d = static_cast<int64_t>(outShape.size()) - 1; d >= 0; --d) {
    inIndex += (outIndex % outShape[d]) * inStrides[d];
    outIndex /= outShape[d];
  }
  return inIndex;
}

AxisSplit::AxisSplit(ArrayRef<int64_t> shape, int64_t axis) {
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (i < axis)
      outer *= shape[i];
    else if (i == axis)
      len = shape[i];
    else
      inner *= shape[i];
  }
}

absl::StatusOr<int64_t> wrapIndex(int64_t index, int64_t size) {
  int64_t wrapped = index < 0 ? index + size : index;
  if (wrapped < 0 || wrapped >= size)
    return absl::InvalidArgumentError(
        absl::StrCat("index ", index, " is out of range for a dim of size ", size));
  return wrapped;
}

absl::Status checkNormParam(const HostTensor &in, int64_t axis, const HostTensor &param,
                            const char *what) {
  Shape expected(in.shape.begin() + axis, in.shape.end());
  if (param.shape != expected)
    return absl::InvalidArgumentError(absl::StrCat(what, " ", param.shapeString(),
                                                   " does not match dims ", shapeString(expected),
                                                   " of input ", in.shapeString()));
  return absl::OkStatus();
}

absl::StatusOr<Attention> makeAttention(const HostTensor &q, const HostTensor &k,
                                        const HostTensor &v, const HostTensor *mask, bool causal,
                                        std::optional<double> scale) {
  int64_t B = q.shape[0], Hq = q.shape[1], S = q.shape[2], D = q.shape[3];
  int64_t Hkv = k.shape[1], L = k.shape[2], Dv = v.shape[3];
  if (k.shape[0] != B || v.shape[0] != B || v.shape[1] != Hkv || v.shape[2] != L || k.shape[3] != D)
    return absl::InvalidArgumentError(absl::StrCat("query ", q.shapeString(), ", key ",
                                                   k.shapeString(), " and value ", v.shapeString(),
                                                   " do not fit [B, Hq, S, D], [B, Hkv, L, D], "
                                                   "[B, Hkv, L, Dv]"));
  if (Hkv == 0 || Hq % Hkv != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("query heads ", Hq, " are not a multiple of key/value heads ", Hkv));
  if (!scale)
    scale = 1.0 / std::sqrt(static_cast<double>(D));
  Attention a{&q, &k, &v, mask, causal, *scale, B, Hq, S, D, Hkv, L, Dv, {}};
  if (mask) {
    Shape scoresShape = {B, Hq, S, L};
    absl::StatusOr<Shape> b = broadcastShapes({mask->shape, scoresShape});
    if (!b.ok() || *b != scoresShape)
      return absl::InvalidArgumentError(absl::StrCat("mask ", mask->shapeString(),
                                                     " does not broadcast to the scores ",
                                                     shapeString(scoresShape)));
    a.maskMap.emplace(mask->shape, scoresShape);
  }
  return a;
}

double Attention::scoreRow(int64_t b, int64_t h, int64_t i, double *scores) const {
  const double kMasked = -std::numeric_limits<double>::infinity();
  const double *qi = q->floats.data() + ((b * Hq + h) * S + i) * D;
  const double *kb = k->floats.data() + (b * Hkv + kvHead(h)) * L * D;
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
    if (causal && j > i)
      s = kMasked;
    scores[j] = s;
    max = std::max(max, s);
  }
  return max;
}

} // namespace kiln::interp
