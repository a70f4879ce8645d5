//===- DynamicMap8.h - The signed 8-bit dynamic quantization map -*- C++ -*-===//
//
// The "dynamic" 8-bit data type of Dettmers et al. (8-bit optimizers, 2022)
// that QLoRA's double quantization stores the NF4 absmax values in: for
// exponent e = 0..6, 2^e fraction values (midpoints of 2^e + 1 points
// spaced evenly over [0.1, 1]) scaled by 10^(e-6), both signs, plus 0 and
// 1 — 256 values in ascending order. Kept as literals: computing them
// (0.1f + step * k, ...) lets compilers fuse multiply-adds (clang's
// constant folder and nvcc do), which moves 28 of them by one ulp between
// host and device. test/utils/nf4_reference.py derives the table from the
// definition with unfused fp32 arithmetic and checks it matches.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_SUPPORT_DYNAMICMAP8_H
#define KILN_SUPPORT_DYNAMICMAP8_H

#include <algorithm>
#include <cstdint>

namespace kiln {

inline constexpr float kDynamicMap8[256] = {
    -0x1.fc66660000000p-1f,  -0x1.f533340000000p-1f,
    -0x1.ee00000000000p-1f,  -0x1.e6cccc0000000p-1f,
    -0x1.df999a0000000p-1f,  -0x1.d866660000000p-1f,
    -0x1.d133340000000p-1f,  -0x1.ca00000000000p-1f,
    -0x1.c2cccc0000000p-1f,  -0x1.bb999a0000000p-1f,
    -0x1.b466660000000p-1f,  -0x1.ad33340000000p-1f,
    -0x1.a600000000000p-1f,  -0x1.9ecccc0000000p-1f,
    -0x1.97999a0000000p-1f,  -0x1.9066660000000p-1f,
    -0x1.8933340000000p-1f,  -0x1.8200000000000p-1f,
    -0x1.7acccc0000000p-1f,  -0x1.73999a0000000p-1f,
    -0x1.6c66680000000p-1f,  -0x1.6533340000000p-1f,
    -0x1.5e00000000000p-1f,  -0x1.56cccc0000000p-1f,
    -0x1.4f999a0000000p-1f,  -0x1.4866680000000p-1f,
    -0x1.4133340000000p-1f,  -0x1.3a00000000000p-1f,
    -0x1.32cccc0000000p-1f,  -0x1.2b999a0000000p-1f,
    -0x1.2466660000000p-1f,  -0x1.1d33340000000p-1f,
    -0x1.1600000000000p-1f,  -0x1.0ecccc0000000p-1f,
    -0x1.07999a0000000p-1f,  -0x1.0066660000000p-1f,
    -0x1.f266640000000p-2f,  -0x1.e400000000000p-2f,
    -0x1.d599980000000p-2f,  -0x1.c733320000000p-2f,
    -0x1.b8cccc0000000p-2f,  -0x1.aa66640000000p-2f,
    -0x1.9c00000000000p-2f,  -0x1.8d99980000000p-2f,
    -0x1.7f33340000000p-2f,  -0x1.70cccc0000000p-2f,
    -0x1.6266640000000p-2f,  -0x1.5400000000000p-2f,
    -0x1.4599980000000p-2f,  -0x1.3733340000000p-2f,
    -0x1.28cccc0000000p-2f,  -0x1.1a66660000000p-2f,
    -0x1.0c00000000000p-2f,  -0x1.fb33320000000p-3f,
    -0x1.de66660000000p-3f,  -0x1.c1999a0000000p-3f,
    -0x1.a4cccc0000000p-3f,  -0x1.8800000000000p-3f,
    -0x1.6b33320000000p-3f,  -0x1.4e66660000000p-3f,
    -0x1.31999a0000000p-3f,  -0x1.14cccc0000000p-3f,
    -0x1.f000000000000p-4f,  -0x1.b666680000000p-4f,
    -0x1.93d70a0000000p-4f,  -0x1.8851ee0000000p-4f,
    -0x1.7cccce0000000p-4f,  -0x1.7147ae0000000p-4f,
    -0x1.65c2900000000p-4f,  -0x1.5a3d700000000p-4f,
    -0x1.4eb8540000000p-4f,  -0x1.4333340000000p-4f,
    -0x1.37ae140000000p-4f,  -0x1.2c28f60000000p-4f,
    -0x1.20a3d60000000p-4f,  -0x1.151eba0000000p-4f,
    -0x1.09999a0000000p-4f,  -0x1.fc28f60000000p-5f,
    -0x1.e51eba0000000p-5f,  -0x1.ce147a0000000p-5f,
    -0x1.b70a400000000p-5f,  -0x1.a000000000000p-5f,
    -0x1.88f5c20000000p-5f,  -0x1.71eb840000000p-5f,
    -0x1.5ae1460000000p-5f,  -0x1.43d70a0000000p-5f,
    -0x1.2cccce0000000p-5f,  -0x1.15c28e0000000p-5f,
    -0x1.fd70a40000000p-6f,  -0x1.cf5c260000000p-6f,
    -0x1.a147ae0000000p-6f,  -0x1.7333340000000p-6f,
    -0x1.451eb80000000p-6f,  -0x1.170a3e0000000p-6f,
    -0x1.d1eb860000000p-7f,  -0x1.75c2900000000p-7f,
    -0x1.3e76c80000000p-7f,  -0x1.2c08300000000p-7f,
    -0x1.19999a0000000p-7f,  -0x1.072b020000000p-7f,
    -0x1.e978d40000000p-8f,  -0x1.c49ba60000000p-8f,
    -0x1.9fbe760000000p-8f,  -0x1.7ae1480000000p-8f,
    -0x1.56041a0000000p-8f,  -0x1.3126e80000000p-8f,
    -0x1.0c49ba0000000p-8f,  -0x1.ced9140000000p-9f,
    -0x1.851eb80000000p-9f,  -0x1.3b645a0000000p-9f,
    -0x1.e353f80000000p-10f, -0x1.4fdf3a0000000p-10f,
    -0x1.eecbfe0000000p-11f, -0x1.b3d07c0000000p-11f,
    -0x1.78d5000000000p-11f, -0x1.3dd9820000000p-11f,
    -0x1.02de000000000p-11f, -0x1.8fc5040000000p-12f,
    -0x1.19ce0a0000000p-12f, -0x1.47ae160000000p-13f,
    -0x1.743e960000000p-14f, -0x1.15df660000000p-14f,
    -0x1.6f00680000000p-15f, -0x1.64840c0000000p-16f,
    -0x1.040bfe0000000p-17f, -0x1.b435280000000p-19f,
    -0x1.27476e0000000p-21f, 0.0f,
    0x1.27476e0000000p-21f,  0x1.b435280000000p-19f,
    0x1.040bfe0000000p-17f,  0x1.64840c0000000p-16f,
    0x1.6f00680000000p-15f,  0x1.15df660000000p-14f,
    0x1.743e960000000p-14f,  0x1.47ae160000000p-13f,
    0x1.19ce0a0000000p-12f,  0x1.8fc5040000000p-12f,
    0x1.02de000000000p-11f,  0x1.3dd9820000000p-11f,
    0x1.78d5000000000p-11f,  0x1.b3d07c0000000p-11f,
    0x1.eecbfe0000000p-11f,  0x1.4fdf3a0000000p-10f,
    0x1.e353f80000000p-10f,  0x1.3b645a0000000p-9f,
    0x1.851eb80000000p-9f,   0x1.ced9140000000p-9f,
    0x1.0c49ba0000000p-8f,   0x1.3126e80000000p-8f,
    0x1.56041a0000000p-8f,   0x1.7ae1480000000p-8f,
    0x1.9fbe760000000p-8f,   0x1.c49ba60000000p-8f,
    0x1.e978d40000000p-8f,   0x1.072b020000000p-7f,
    0x1.19999a0000000p-7f,   0x1.2c08300000000p-7f,
    0x1.3e76c80000000p-7f,   0x1.75c2900000000p-7f,
    0x1.d1eb860000000p-7f,   0x1.170a3e0000000p-6f,
    0x1.451eb80000000p-6f,   0x1.7333340000000p-6f,
    0x1.a147ae0000000p-6f,   0x1.cf5c260000000p-6f,
    0x1.fd70a40000000p-6f,   0x1.15c28e0000000p-5f,
    0x1.2cccce0000000p-5f,   0x1.43d70a0000000p-5f,
    0x1.5ae1460000000p-5f,   0x1.71eb840000000p-5f,
    0x1.88f5c20000000p-5f,   0x1.a000000000000p-5f,
    0x1.b70a400000000p-5f,   0x1.ce147a0000000p-5f,
    0x1.e51eba0000000p-5f,   0x1.fc28f60000000p-5f,
    0x1.09999a0000000p-4f,   0x1.151eba0000000p-4f,
    0x1.20a3d60000000p-4f,   0x1.2c28f60000000p-4f,
    0x1.37ae140000000p-4f,   0x1.4333340000000p-4f,
    0x1.4eb8540000000p-4f,   0x1.5a3d700000000p-4f,
    0x1.65c2900000000p-4f,   0x1.7147ae0000000p-4f,
    0x1.7cccce0000000p-4f,   0x1.8851ee0000000p-4f,
    0x1.93d70a0000000p-4f,   0x1.b666680000000p-4f,
    0x1.f000000000000p-4f,   0x1.14cccc0000000p-3f,
    0x1.31999a0000000p-3f,   0x1.4e66660000000p-3f,
    0x1.6b33320000000p-3f,   0x1.8800000000000p-3f,
    0x1.a4cccc0000000p-3f,   0x1.c1999a0000000p-3f,
    0x1.de66660000000p-3f,   0x1.fb33320000000p-3f,
    0x1.0c00000000000p-2f,   0x1.1a66660000000p-2f,
    0x1.28cccc0000000p-2f,   0x1.3733340000000p-2f,
    0x1.4599980000000p-2f,   0x1.5400000000000p-2f,
    0x1.6266640000000p-2f,   0x1.70cccc0000000p-2f,
    0x1.7f33340000000p-2f,   0x1.8d99980000000p-2f,
    0x1.9c00000000000p-2f,   0x1.aa66640000000p-2f,
    0x1.b8cccc0000000p-2f,   0x1.c733320000000p-2f,
    0x1.d599980000000p-2f,   0x1.e400000000000p-2f,
    0x1.f266640000000p-2f,   0x1.0066660000000p-1f,
    0x1.07999a0000000p-1f,   0x1.0ecccc0000000p-1f,
    0x1.1600000000000p-1f,   0x1.1d33340000000p-1f,
    0x1.2466660000000p-1f,   0x1.2b999a0000000p-1f,
    0x1.32cccc0000000p-1f,   0x1.3a00000000000p-1f,
    0x1.4133340000000p-1f,   0x1.4866680000000p-1f,
    0x1.4f999a0000000p-1f,   0x1.56cccc0000000p-1f,
    0x1.5e00000000000p-1f,   0x1.6533340000000p-1f,
    0x1.6c66680000000p-1f,   0x1.73999a0000000p-1f,
    0x1.7acccc0000000p-1f,   0x1.8200000000000p-1f,
    0x1.8933340000000p-1f,   0x1.9066660000000p-1f,
    0x1.97999a0000000p-1f,   0x1.9ecccc0000000p-1f,
    0x1.a600000000000p-1f,   0x1.ad33340000000p-1f,
    0x1.b466660000000p-1f,   0x1.bb999a0000000p-1f,
    0x1.c2cccc0000000p-1f,   0x1.ca00000000000p-1f,
    0x1.d133340000000p-1f,   0x1.d866660000000p-1f,
    0x1.df999a0000000p-1f,   0x1.e6cccc0000000p-1f,
    0x1.ee00000000000p-1f,   0x1.f533340000000p-1f,
    0x1.fc66660000000p-1f,   0x1.0000000000000p+0f,
};

/// The code whose value is nearest to `x` (ties: the lower code).
inline uint8_t dynamicMap8Encode(float x) {
  const float *begin = kDynamicMap8, *end = kDynamicMap8 + 256;
  const float *upper = std::lower_bound(begin, end, x);
  if (upper == begin)
    return 0;
  if (upper == end)
    return 255;
  const float *lower = upper - 1;
  // |x - lower| <= |upper - x|: the lower code wins ties.
  return static_cast<uint8_t>((x - *lower <= *upper - x) ? lower - begin : upper - begin);
}

} // namespace kiln

#endif // KILN_SUPPORT_DYNAMICMAP8_H
