//===- InitializerMaskPattern.cpp - Keep patterns of mask initializers ----===//
//
// A static-shape export folds the attention mask into an initializer
// ([S, S] or [B, 1, S, S], bool or 0/-inf float), which becomes a
// kiln.parameter without bytes. Its values are read here, once, and
// classified element by element (kiln::classifyMaskValues): a causal or
// all-keep pattern is recorded on the parameter, so kiln-raise-composites
// can drop the mask for `causal` (or no mask) as it does for masks built
// from iota.
//
//===----------------------------------------------------------------------===//

#include "InitializerMaskPattern.h"

#include "kiln/Dialect/Graph/MaskAnalysis.h"
#include "kiln/Import/TensorProto.h"

#include <cmath>
#include <cstring>

namespace kiln {
namespace {

/// Masks are small next to weights: a [64, 1, 4096, 4096] mask is the
/// largest read (and only when its first element can start a mask).
constexpr int64_t kMaxMaskElements = int64_t(1) << 30;
constexpr int64_t kMaxLeadingMatrices = 64;

/// Whether the first element, read from inline raw data without decoding
/// the tensor, can be the (0, 0) entry of a causal or all-keep mask: true
/// or nonzero for bool, 0 for an additive float. True when it cannot be
/// read cheaply (external or typed data): the full decode decides.
bool firstElementMayKeep(const onnx::TensorProto &proto, DType dtype) {
  if (proto.data_location() == onnx::TensorProto::EXTERNAL || !proto.has_raw_data())
    return true;
  const std::string &raw = proto.raw_data();
  switch (dtype) {
  case DType::Bool: return !raw.empty() && raw[0] != 0;
  case DType::F32: {
    float v;
    if (raw.size() < sizeof v)
      return false;
    std::memcpy(&v, raw.data(), sizeof v);
    return v == 0.0f;
  }
  case DType::F16:
  case DType::BF16: // +0 or -0: the sign bit alone
    return raw.size() >= 2 && (static_cast<unsigned char>(raw[0]) == 0 &&
                               (static_cast<unsigned char>(raw[1]) & 0x7f) == 0);
  default: return true;
  }
}

} // namespace

std::optional<std::string> initializerMaskPattern(const onnx::TensorProto &proto,
                                                  const std::string &folder, DType dtype,
                                                  llvm::ArrayRef<int64_t> shape) {
  size_t rank = shape.size();
  bool additive = isFloat(dtype);
  if (rank < 2 || shape[rank - 1] != shape[rank - 2] || shape[rank - 1] < 2 ||
      (!additive && dtype != DType::Bool))
    return std::nullopt;
  int64_t matrices = 1;
  for (size_t d = 0; d + 2 < rank; ++d)
    matrices *= shape[d];
  int64_t n = shape[rank - 1];
  // An empty tensor (a zero leading dimension) is no mask: nothing to read.
  if (matrices <= 0 || matrices > kMaxLeadingMatrices || n > (int64_t(1) << 15) ||
      matrices * n * n > kMaxMaskElements || !firstElementMayKeep(proto, dtype))
    return std::nullopt;
  absl::StatusOr<HostTensor> host = tensorFromProto(proto, folder);
  if (!host.ok())
    return std::nullopt; // the importer reports bad data where it reads it
  MaskKind kind = classifyMaskValues(shape, [&](int64_t i) -> std::optional<bool> {
    if (!additive)
      return host->getInt(i) != 0;
    double v = host->getDouble(i);
    if (v == 0)
      return true;
    if (v <= -1e4 || (std::isinf(v) && v < 0))
      return false;
    return std::nullopt;
  });
  if (kind == MaskKind::Causal)
    return std::string("causal");
  // A float initializer of zeros may as well be a zero-initialized bias a
  // full fine-tune trains: only a bool one is an all-keep mask for sure.
  if (kind == MaskKind::All && !additive)
    return std::string("all");
  return std::nullopt;
}

std::optional<double> initializerSplatValue(const onnx::TensorProto &proto,
                                            const std::string &folder, DType dtype,
                                            llvm::ArrayRef<int64_t> shape) {
  size_t rank = shape.size();
  if (!isFloat(dtype) || rank < 2 || shape[rank - 1] != shape[rank - 2] || shape[rank - 1] < 2)
    return std::nullopt;
  int64_t numel = 1;
  for (int64_t d : shape)
    numel *= d;
  if (numel <= 0) // empty: no value to splat
    return std::nullopt;
  // Inline data is decoded in memory; external data only when small.
  bool external = proto.data_location() == onnx::TensorProto::EXTERNAL;
  if (numel > (external ? int64_t(1) << 20 : kMaxMaskElements))
    return std::nullopt;
  absl::StatusOr<HostTensor> host = tensorFromProto(proto, folder);
  if (!host.ok() || host->numel() != numel)
    return std::nullopt;
  double first = host->getDouble(0);
  for (int64_t i = 1; i < numel; ++i)
    if (host->getDouble(i) != first)
      return std::nullopt;
  return first;
}

} // namespace kiln
