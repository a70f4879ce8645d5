// How much of the SiLU·mul gradient kernel's time is the bf16 rounding of
// its intermediates. Kiln's generated kernels round every intermediate to
// bf16 as PyTorch's op-by-op bf16 does: `__bfloat162float(__float2bfloat16(x))`,
// which ptxas issues as F2F.BF16.F32 (a conversion-pipe instruction) plus a
// shift. The 1b step's main_k133_silu_mul_sigmoid (kiln compile --emit=cuda
// on the bench 1b model: 3 bf16 inputs, 3 bf16 outputs, the second written at
// row stride 8224 into [d_up | dT]) rounds 10 intermediates per element. The
// same lane body with four roundings, all giving the same bits for finite
// values (NaN stays NaN):
//   cvt     the emitted round trip (F2F + shift)
//   cvt2    cvt.rn.bf16x2.f32 of the value with itself, the high half kept
//           (F2FP + a mask)
//   int     round to nearest even on the bit pattern (integer ops), NaN by a
//           select
//   pair    two lanes rounded by one cvt.rn.bf16x2.f32
// and `copy`, the same loads and stores with no math (the bandwidth bar).
// Outputs are compared bit for bit with `cvt`'s.
//
//   bf16_round_check [rows reps]      (default 8192 20; 8192 columns)

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../common/check_cuda.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {


constexpr int64_t kCols = 8192, kStride1 = 8224;

__device__ __forceinline__ float div16(float a, float b) {
  float r;
  asm("div.full.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

enum Variant { Cvt, Cvt2, Int, Pair, Copy };

template <int V> __device__ __forceinline__ float rb(float x) {
  if constexpr (V == Cvt) {
    return __bfloat162float(__float2bfloat16(x));
  } else if constexpr (V == Cvt2) {
    unsigned r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(r) : "f"(x));
    return __uint_as_float(r & 0xffff0000u);
  } else {
    unsigned u = __float_as_uint(x);
    unsigned r = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return x != x ? x : __uint_as_float(r);
  }
}

// Two values rounded by one packed conversion.
__device__ __forceinline__ void rb2(float &a, float &b) {
  unsigned r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(a), "f"(b));
  a = __uint_as_float(r & 0xffff0000u);
  b = __uint_as_float(r << 16);
}

template <int V>
__global__ void __launch_bounds__(256) kernel(const __nv_bfloat16 *__restrict__ in0,
                                              const __nv_bfloat16 *__restrict__ in1,
                                              const __nv_bfloat16 *__restrict__ in2,
                                              __nv_bfloat16 *out0, __nv_bfloat16 *out1,
                                              __nv_bfloat16 *out2, int64_t n) {
  for (int64_t chunk = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; chunk < n;
       chunk += (int64_t)gridDim.x * blockDim.x) {
    __align__(16) __nv_bfloat16 a[8], b[8], c[8], o0[8], o1[8], o2[8];
    *reinterpret_cast<uint4 *>(a) = reinterpret_cast<const uint4 *>(in0)[chunk];
    *reinterpret_cast<uint4 *>(b) = reinterpret_cast<const uint4 *>(in1)[chunk];
    *reinterpret_cast<uint4 *>(c) = reinterpret_cast<const uint4 *>(in2)[chunk];
    if constexpr (V == Copy) {
#pragma unroll
      for (int l = 0; l < 8; ++l) {
        o0[l] = a[l];
        o1[l] = b[l];
        o2[l] = c[l];
      }
    } else if constexpr (V == Pair) {
#pragma unroll
      for (int l = 0; l < 8; l += 2) {
        float v4[2], v5[2], v6[2], v7[2], v8[2], v9[2], v10[2], v11[2], v12[2], v13[2], v14[2],
            v15[2], v16[2];
        for (int h = 0; h < 2; ++h) {
          v4[h] = __bfloat162float(a[l + h]);
          v5[h] = div16(v4[h], 1.f + expf(-v4[h]));
        }
        rb2(v5[0], v5[1]);
        for (int h = 0; h < 2; ++h) {
          v6[h] = __bfloat162float(b[l + h]);
          v7[h] = v5[h] * v6[h];
          v8[h] = __bfloat162float(c[l + h]);
          v9[h] = v8[h] * v5[h];
          v10[h] = v8[h] * v6[h];
          v11[h] = div16(1.f, 1.f + expf(-v4[h]));
        }
        rb2(v7[0], v7[1]);
        rb2(v9[0], v9[1]);
        rb2(v10[0], v10[1]);
        rb2(v11[0], v11[1]);
        for (int h = 0; h < 2; ++h) {
          o0[l + h] = __float2bfloat16(v7[h]);
          o1[l + h] = __float2bfloat16(v9[h]);
          v12[h] = 1.f - v11[h];
        }
        rb2(v12[0], v12[1]);
        for (int h = 0; h < 2; ++h)
          v13[h] = v4[h] * v12[h];
        rb2(v13[0], v13[1]);
        for (int h = 0; h < 2; ++h)
          v14[h] = v13[h] + 1.f;
        rb2(v14[0], v14[1]);
        for (int h = 0; h < 2; ++h)
          v15[h] = v11[h] * v14[h];
        rb2(v15[0], v15[1]);
        for (int h = 0; h < 2; ++h)
          v16[h] = v10[h] * v15[h];
        rb2(v16[0], v16[1]);
        for (int h = 0; h < 2; ++h)
          o2[l + h] = __float2bfloat16(v16[h]);
      }
    } else {
#pragma unroll
      for (int l = 0; l < 8; ++l) {
        const float v4 = __bfloat162float(a[l]);
        const float v5 = rb<V>(div16(v4, 1.f + expf(-v4)));
        const float v6 = __bfloat162float(b[l]);
        const float v7 = rb<V>(v5 * v6);
        o0[l] = __float2bfloat16(v7);
        const float v8 = __bfloat162float(c[l]);
        const float v9 = rb<V>(v8 * v5);
        o1[l] = __float2bfloat16(v9);
        const float v10 = rb<V>(v8 * v6);
        const float v11 = rb<V>(div16(1.f, 1.f + expf(-v4)));
        const float v12 = rb<V>(1.f - v11);
        const float v13 = rb<V>(v4 * v12);
        const float v14 = rb<V>(v13 + 1.f);
        const float v15 = rb<V>(v11 * v14);
        const float v16 = rb<V>(v10 * v15);
        o2[l] = __float2bfloat16(v16);
      }
    }
    reinterpret_cast<uint4 *>(out0)[chunk] = *reinterpret_cast<const uint4 *>(o0);
    reinterpret_cast<uint4 *>(out1 + ((chunk * 8) / kCols * kStride1 + (chunk * 8) % kCols))[0] =
        *reinterpret_cast<const uint4 *>(o1);
    reinterpret_cast<uint4 *>(out2)[chunk] = *reinterpret_cast<const uint4 *>(o2);
  }
}

__global__ void fill(__nv_bfloat16 *p, int64_t n, unsigned seed, float scale) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    unsigned h = (unsigned)i * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = __float2bfloat16(((h & 0xffffff) / 16777216.f * 2.f - 1.f) * scale);
  }
}

} // namespace

int main(int argc, char **argv) {
  const int64_t rows = argc > 1 ? std::atoll(argv[1]) : 8192;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 20;
  const int64_t elems = rows * kCols, chunks = elems / 8;
  __nv_bfloat16 *in[3], *out[3], *ref[3];
  for (int i = 0; i < 3; ++i) {
    int64_t size = (i == 1 ? rows * kStride1 : elems) * 2;
    CHECK_CUDA(cudaMalloc(&in[i], elems * 2));
    CHECK_CUDA(cudaMalloc(&out[i], size));
    CHECK_CUDA(cudaMalloc(&ref[i], size));
    CHECK_CUDA(cudaMemset(out[i], 0xff, size)); // NaN-poisoned
    CHECK_CUDA(cudaMemset(ref[i], 0xff, size));
    fill<<<4096, 256>>>(in[i], elems, 17u + i, i == 0 ? 6.f : 2.f);
  }
  auto launch = [&](int v, __nv_bfloat16 **o) {
    const unsigned grid = (unsigned)(chunks / 256);
    switch (v) {
    case Cvt: kernel<Cvt><<<grid, 256>>>(in[0], in[1], in[2], o[0], o[1], o[2], chunks); break;
    case Cvt2: kernel<Cvt2><<<grid, 256>>>(in[0], in[1], in[2], o[0], o[1], o[2], chunks); break;
    case Int: kernel<Int><<<grid, 256>>>(in[0], in[1], in[2], o[0], o[1], o[2], chunks); break;
    case Pair: kernel<Pair><<<grid, 256>>>(in[0], in[1], in[2], o[0], o[1], o[2], chunks); break;
    default: kernel<Copy><<<grid, 256>>>(in[0], in[1], in[2], o[0], o[1], o[2], chunks); break;
    }
  };
  launch(Cvt, ref);
  CHECK_CUDA(cudaDeviceSynchronize());
  std::vector<uint16_t> a, b;
  const char *names[] = {"cvt", "cvt2", "int", "pair", "copy"};
  double bytes = 6.0 * elems * 2;
  for (int v = 0; v <= Copy; ++v) {
    launch(v, out);
    CHECK_CUDA(cudaDeviceSynchronize());
    const double med = medianEventMs(reps, [&] { launch(v, out); });
    int64_t diff = 0;
    if (v != Copy)
      for (int i = 0; i < 3; ++i) {
        int64_t n = i == 1 ? rows * kStride1 : elems;
        a.resize(n);
        b.resize(n);
        CHECK_CUDA(cudaMemcpy(a.data(), out[i], n * 2, cudaMemcpyDeviceToHost));
        CHECK_CUDA(cudaMemcpy(b.data(), ref[i], n * 2, cudaMemcpyDeviceToHost));
        for (int64_t j = 0; j < n; ++j)
          diff += a[j] != b[j];
      }
    std::printf("%-5s %8.4f ms  %5.2f TB/s  %s\n", names[v], med, bytes / (med * 1e-3) / 1e12,
                v == Copy ? "(no math)" : diff ? "DIFFERS" : "bit-identical");
    if (v != Copy && diff)
      std::printf("      %lld elements differ\n", (long long)diff);
  }
  return 0;
}
