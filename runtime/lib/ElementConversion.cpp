//===- ElementConversion.cpp - Element conversion between dtypes ---------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "ElementConversion.h"
#include "kiln/runtime/StepExecutor.h"

#include <cmath>
#include <cstring>

using namespace kiln::runtime;
using namespace kiln::artifact;

bool kiln::runtime::isFloat(DType t) {
  return t == DType::F64 || t == DType::F32 || t == DType::BF16 || t == DType::F16;
}
bool kiln::runtime::isInteger(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::U32 || t == DType::U16 ||
         t == DType::I16 || t == DType::U8 || t == DType::I8 || t == DType::BOOL || t == DType::U64;
}

namespace {

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t toBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffff) > 0x7f800000)
    return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float fromF16(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0)
    return (sign ? -1.f : 1.f) * std::ldexp(static_cast<float>(mant), -24);
  if (exp == 31)
    return bitsFloat(sign | 0x7f800000u | (mant << 13));
  return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}
uint16_t toF16(float f) {
  // Round to nearest even through the magnitude's scaled integer value.
  uint32_t u = floatBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  float a = std::fabs(f);
  if (std::isnan(f))
    return sign | 0x7e00;
  if (a >= 65520.f)
    return sign | 0x7c00;
  if (a < 6.103515625e-05f) // subnormal: units of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.f));
  int e;
  float m = std::frexp(a, &e);               // a = m * 2^e, m in [0.5, 1)
  float scaled = std::nearbyint(m * 2048.f); // 11 significant bits
  if (scaled >= 2048.f) {
    scaled /= 2;
    ++e;
  }
  uint32_t mant = static_cast<uint32_t>(scaled) - 1024;
  uint32_t exp = static_cast<uint32_t>(e - 1 + 15);
  if (exp >= 31)
    return sign | 0x7c00;
  return sign | static_cast<uint16_t>((exp << 10) | mant);
}

double readFloat(const unsigned char *p, DType t) {
  switch (t) {
  case DType::F64: {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  case DType::F32: {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  case DType::BF16: {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bitsFloat(static_cast<uint32_t>(h) << 16);
  }
  default: {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fromF16(h);
  }
  }
}
int64_t readInt(const unsigned char *p, DType t) {
  switch (t) {
  case DType::I64:
  case DType::U64: {
    int64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  case DType::I32: {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case DType::U32: {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case DType::I16: {
    int16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  case DType::U16: {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  case DType::I8: return static_cast<int8_t>(*p);
  default: return *p;
  }
}

} // namespace

void kiln::runtime::writeFloat(unsigned char *p, DType t, double v) {
  switch (t) {
  case DType::F64: std::memcpy(p, &v, 8); break;
  case DType::F32: {
    float f = static_cast<float>(v);
    std::memcpy(p, &f, 4);
    break;
  }
  case DType::BF16: {
    uint16_t h = toBf16(static_cast<float>(v));
    std::memcpy(p, &h, 2);
    break;
  }
  default: {
    uint16_t h = toF16(static_cast<float>(v));
    std::memcpy(p, &h, 2);
  }
  }
}
void kiln::runtime::writeInt(unsigned char *p, DType t, int64_t v) {
  size_t size = dtypeSize(t);
  if (t == DType::BOOL)
    v = v != 0;
  std::memcpy(p, &v, size); // little-endian: the low bytes
}

Expected<std::string> kiln::runtime::convertElements(const void *data, DType from, DType to,
                                                     size_t count) {
  const auto *in = static_cast<const unsigned char *>(data);
  size_t inSize = dtypeSize(from), outSize = dtypeSize(to);
  if (from == to)
    return std::string(reinterpret_cast<const char *>(in), count * inSize);
  std::string out(count * outSize, '\0');
  auto *o = reinterpret_cast<unsigned char *>(out.data());
  if (isFloat(from) && isFloat(to)) {
    for (size_t i = 0; i < count; ++i)
      writeFloat(o + i * outSize, to, readFloat(in + i * inSize, from));
  } else if (isInteger(from) && isInteger(to)) {
    for (size_t i = 0; i < count; ++i)
      writeInt(o + i * outSize, to, readInt(in + i * inSize, from));
  } else if (isInteger(from) && isFloat(to)) {
    for (size_t i = 0; i < count; ++i)
      writeFloat(o + i * outSize, to, static_cast<double>(readInt(in + i * inSize, from)));
  } else {
    return Error{std::string("cannot convert ") + dtypeName(from) + " to " + dtypeName(to)};
  }
  return out;
}

std::string kiln::runtime::scalarBytes(DType dtype, double value) {
  unsigned char bits[8] = {};
  if (isFloat(dtype))
    writeFloat(bits, dtype, value);
  else
    writeInt(bits, dtype, static_cast<int64_t>(value));
  return std::string(reinterpret_cast<char *>(bits), dtypeSize(dtype));
}
