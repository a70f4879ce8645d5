// Deterministic bf16 fills for the standalone GPU harnesses under bench/:
// element i of a fill with seed s is a hash of (i, s), uniform in
// [-scale, scale).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

__global__ void fillUniformBf16(__nv_bfloat16 *p, int64_t n, uint32_t seed, float scale) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed * 40503u;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    p[i] = __float2bfloat16(((h >> 8) / 16777216.0f * 2 - 1) * scale);
  }
}
