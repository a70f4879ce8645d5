//===- Philox.h - Counter-based random numbers ------------------*- C++ -*-===//
//
// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2,
// 3", SC'11). A pure function of (key, counter), so every element of a
// dropout mask or an initializer is drawn independently — the same way by
// the interpreter, generated CUDA kernels and the runtime — and a step
// replayed with the same seed draws the same numbers. Header-only and free
// of MLIR so the runtime and the CUDA emitter can share it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_SUPPORT_PHILOX_H
#define KILN_SUPPORT_PHILOX_H

#include <array>
#include <cstdint>

namespace kiln {

using PhiloxBlock = std::array<uint32_t, 4>;

/// Ten rounds of Philox4x32 on `counter` with the 64-bit `seed` as key.
inline PhiloxBlock philox4x32(PhiloxBlock counter, uint64_t seed) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t key0 = static_cast<uint32_t>(seed);
  uint32_t key1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint64_t product0 = static_cast<uint64_t>(kMul0) * counter[0];
    uint64_t product1 = static_cast<uint64_t>(kMul1) * counter[2];
    uint32_t hi0 = static_cast<uint32_t>(product0 >> 32);
    uint32_t lo0 = static_cast<uint32_t>(product0);
    uint32_t hi1 = static_cast<uint32_t>(product1 >> 32);
    uint32_t lo1 = static_cast<uint32_t>(product1);
    counter = {hi1 ^ counter[1] ^ key0, lo1, hi0 ^ counter[3] ^ key1, lo0};
    key0 += kWeyl0;
    key1 += kWeyl1;
  }
  return counter;
}

/// The uniform number in [0, 1) of element `index` of random stream
/// `stream`: word `index % 4` of the block at counter
/// (index / 4 low, index / 4 high, stream, 0), top 24 bits (exact in fp32).
inline float philoxUniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t block = index / 4;
  PhiloxBlock words = philox4x32({static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                  static_cast<uint32_t>(stream), 0u},
                                 seed);
  return static_cast<float>(words[index % 4] >> 8) * (1.0f / 16777216.0f);
}

} // namespace kiln

#endif // KILN_SUPPORT_PHILOX_H
