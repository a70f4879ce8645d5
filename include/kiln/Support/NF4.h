//===- NF4.h - The NormalFloat4 code ----------------------------*- C++ -*-===//
//
// The 16 values of QLoRA's NF4 data type (Dettmers et al., 2023, appendix
// E; the table bitsandbytes ships), and nearest-value rounding. Shared by
// the interpreter, the init program and the CUDA emitter so all of them
// quantize identically.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_SUPPORT_NF4_H
#define KILN_SUPPORT_NF4_H

#include <cstdint>

namespace kiln {

inline constexpr float kNf4Values[16] = {
    -1.0f,
    -0.6961928009986877f,
    -0.5250730514526367f,
    -0.39491748809814453f,
    -0.28444138169288635f,
    -0.18477343022823334f,
    -0.09105003625154495f,
    0.0f,
    0.07958029955625534f,
    0.16093020141124725f,
    0.24611230194568634f,
    0.33791524171829224f,
    0.44070982933044434f,
    0.5626170039176941f,
    0.7229568362236023f,
    1.0f,
};

/// The code whose value is nearest to `x` (x in [-1, 1], the element
/// divided by its block's absmax). Ties go to the lower code.
inline uint8_t nf4Encode(float x) {
  uint8_t code = 0;
  for (uint8_t c = 1; c < 16; ++c) {
    // Midpoints in fp32, the arithmetic a GPU kernel uses too.
    float midpoint = (kNf4Values[c - 1] + kNf4Values[c]) * 0.5f;
    if (x > midpoint)
      code = c;
  }
  return code;
}

} // namespace kiln

#endif // KILN_SUPPORT_NF4_H
