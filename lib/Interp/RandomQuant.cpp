//===- RandomQuant.cpp - Dropout, random init, NF4 ------------------------===//
//
// Counter-based randomness (kiln/Support/Philox.h) and NF4 quantization
// (kiln/Support/NF4.h), with the fp32 arithmetic the GPU kernels use, so the
// interpreter draws the same masks and codes as the generated code.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "absl/strings/str_cat.h"
#include "kiln/Support/DynamicMap8.h"
#include "kiln/Support/NF4.h"
#include "kiln/Support/Philox.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;

namespace kiln::interp {
namespace {

uint64_t seedOf(const HostTensor &seed) { return static_cast<uint64_t>(seed.ints.at(0)); }

absl::StatusOr<Tensors> runDropout(DropoutOp op, Operands args) {
  const HostTensor &x = *args[0];
  uint64_t seed = seedOf(*args[1]);
  float p = static_cast<float>(op.getP().convertToDouble());
  float scale = 1.0f / (1.0f - p);
  HostTensor out(x.dtype, x.shape);
  for (int64_t i = 0, n = x.numel(); i < n; ++i) {
    bool keep = philoxUniform(seed, op.getStream(), i) >= p;
    out.set(i, keep ? static_cast<float>(x.floats[i]) * scale : 0.0);
  }
  return Tensors{std::move(out)};
}

absl::StatusOr<Tensors> runRandomUniform(RandomUniformOp op, Operands args, const Env &env) {
  absl::StatusOr<Shape> shape = env.concreteShape(op.getResult());
  if (!shape.ok())
    return shape.status();
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), *shape);
  if (!out.ok())
    return out.status();
  uint64_t seed = seedOf(*args[0]);
  float low = static_cast<float>(op.getLow().convertToDouble());
  float width = static_cast<float>(op.getHigh().convertToDouble()) - low;
  for (int64_t i = 0, n = out->numel(); i < n; ++i) {
    // Two statements: clang fuses `low + width * u` into an FMA only
    // within one expression; generated kernels use __fmul_rn/__fadd_rn.
    float scaled = width * philoxUniform(seed, op.getStream(), i);
    out->set(i, low + scaled);
  }
  return Tensors{std::move(*out)};
}

absl::StatusOr<Tensors> runNf4Quantize(Nf4QuantizeOp op, Operands args) {
  const HostTensor &x = *args[0];
  int64_t n = x.numel(), blockSize = op.getBlockSize();
  int64_t blocks = (n + blockSize - 1) / blockSize;
  HostTensor codes(DType::U8, {(n + 1) / 2});
  HostTensor absmax(DType::F32, {blocks});
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t begin = b * blockSize, end = std::min(n, begin + blockSize);
    float amax = 0.0f;
    for (int64_t i = begin; i < end; ++i)
      amax = std::max(amax, std::fabs(static_cast<float>(x.floats[i])));
    absmax.set(b, amax);
    // bitsandbytes scales by the fp32 reciprocal; an all-zero block
    // encodes 0.0 (code 7).
    float inverse = amax > 0.0f ? 1.0f / amax : 0.0f;
    for (int64_t i = begin; i < end; ++i) {
      uint8_t code = nf4Encode(static_cast<float>(x.floats[i]) * inverse);
      int64_t byte = i / 2;
      int64_t packed = codes.ints[byte];
      packed = (i % 2 == 0) ? (packed & 0x0F) | (code << 4) : (packed & 0xF0) | code;
      codes.ints[byte] = packed;
    }
  }
  // An odd element count leaves the last low nibble as padding: code 0.
  return Tensors{std::move(codes), std::move(absmax)};
}

absl::StatusOr<Tensors> runNf4Dequantize(Nf4DequantizeOp op, Operands args, const Env &env) {
  const HostTensor &codes = *args[0], &absmax = *args[1];
  absl::StatusOr<Shape> shape = env.concreteShape(op.getResult());
  if (!shape.ok())
    return shape.status();
  absl::StatusOr<HostTensor> out = makeResult(op.getResult(), *shape);
  if (!out.ok())
    return out.status();
  int64_t n = out->numel(), blockSize = op.getBlockSize();
  if (codes.numel() != (n + 1) / 2 || absmax.numel() != (n + blockSize - 1) / blockSize)
    return absl::InvalidArgumentError(absl::StrCat("codes ", codes.shapeString(), " and absmax ",
                                                   absmax.shapeString(), " do not hold ", n,
                                                   " elements in blocks of ", blockSize));
  for (int64_t i = 0; i < n; ++i) {
    int64_t byte = codes.ints[i / 2];
    int code = (i % 2 == 0) ? (byte >> 4) & 0xF : byte & 0xF;
    out->set(i, kNf4Values[code] * static_cast<float>(absmax.floats[i / blockSize]));
  }
  return Tensors{std::move(*out)};
}

absl::StatusOr<Tensors> runQuantize8bit(QuantizeBlockwise8bitOp op, Operands args) {
  const HostTensor &x = *args[0];
  int64_t n = x.numel(), blockSize = op.getBlockSize();
  int64_t blocks = (n + blockSize - 1) / blockSize;
  HostTensor codes(DType::U8, {n});
  HostTensor absmax(DType::F32, {blocks});
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t begin = b * blockSize, end = std::min(n, begin + blockSize);
    float amax = 0.0f;
    for (int64_t i = begin; i < end; ++i)
      amax = std::max(amax, std::fabs(static_cast<float>(x.floats[i])));
    absmax.set(b, amax);
    float inverse = amax > 0.0f ? 1.0f / amax : 0.0f;
    for (int64_t i = begin; i < end; ++i)
      codes.ints[i] = dynamicMap8Encode(static_cast<float>(x.floats[i]) * inverse);
  }
  return Tensors{std::move(codes), std::move(absmax)};
}

absl::StatusOr<Tensors> runDequantize8bit(DequantizeBlockwise8bitOp op, Operands args) {
  const HostTensor &codes = *args[0], &absmax = *args[1];
  int64_t n = codes.numel(), blockSize = op.getBlockSize();
  if (absmax.numel() != (n + blockSize - 1) / blockSize)
    return absl::InvalidArgumentError(absl::StrCat(
        "absmax ", absmax.shapeString(), " does not cover ", n, " codes in blocks of ", blockSize));
  HostTensor out(DType::F32, {n});
  for (int64_t i = 0; i < n; ++i)
    out.set(i,
            kDynamicMap8[codes.ints[i] & 0xFF] * static_cast<float>(absmax.floats[i / blockSize]));
  return Tensors{std::move(out)};
}

} // namespace

MaybeResults runRandomQuant(Operation *op, Operands args, const Env &env) {
  return llvm::TypeSwitch<Operation *, MaybeResults>(op)
      .Case([&](DropoutOp o) { return runDropout(o, args); })
      .Case([&](RandomUniformOp o) { return runRandomUniform(o, args, env); })
      .Case([&](Nf4QuantizeOp o) { return runNf4Quantize(o, args); })
      .Case([&](Nf4DequantizeOp o) { return runNf4Dequantize(o, args, env); })
      .Case([&](QuantizeBlockwise8bitOp o) { return runQuantize8bit(o, args); })
      .Case([&](DequantizeBlockwise8bitOp o) { return runDequantize8bit(o, args); })
      .Default([](Operation *) { return std::nullopt; });
}

} // namespace kiln::interp
