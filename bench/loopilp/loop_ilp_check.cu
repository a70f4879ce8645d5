// Why main_k132_silu_mul_sigmoid (the SiLU·mul gradient: 3 bf16 inputs, 3
// bf16 outputs) moves ~2.9 TB/s where the 2-input silu_mul moves 3.8 TB/s:
// the same lane body as kiln's generated kernel (kiln compile --emit=cuda on
// the 1b bench model, main_k132_silu_mul_sigmoid.cu: one 16-byte vector per
// input and output per thread, one chunk per thread, grid = chunks / 256,
// 44 registers), launched in the shapes the code generator could choose,
// all on one [8192, 8192] problem, outputs compared bit for bit with the
// emitted shape's:
//   once      the emitted kernel (one chunk per thread)
//   ilp2/4    2 or 4 chunks per thread, every load issued before the math
//   persist   a grid of 6 blocks per SM striding over the chunks
//   fastdiv   `once` with __fdividef / __frcp-free division (how much of the
//             time is the IEEE division and reciprocal; not bit-identical)
//   silu_mul  the 2-input kernel (main_k9_silu_mul), the bandwidth bar
//
//   loop_ilp_check [rows cols reps]     (default 8192 8192 20)

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


__device__ __forceinline__ float rb(float x) { return __bfloat162float(__float2bfloat16(x)); }

/// The emitted lane body, eight lanes of one chunk (FastDiv: approximate
/// division instead of IEEE's).
template <bool FastDiv>
__device__ __forceinline__ void body(const uint4 &a, const uint4 &b, const uint4 &c, uint4 &o0,
                                     uint4 &o1, uint4 &o2) {
  __align__(16) __nv_bfloat16 in0[8], in1[8], in2[8], out0[8], out1[8], out2[8];
  *reinterpret_cast<uint4 *>(in0) = a;
  *reinterpret_cast<uint4 *>(in1) = b;
  *reinterpret_cast<uint4 *>(in2) = c;
#pragma unroll
  for (int lane = 0; lane < 8; ++lane) {
    const float v4 = __bfloat162float(in0[lane]);
    const float den = 1.f + expf(-v4);
    const float v5 = rb(FastDiv ? __fdividef(v4, den) : v4 / den);
    const float v6 = __bfloat162float(in1[lane]);
    const float v7 = rb(v5 * v6);
    out0[lane] = __float2bfloat16(v7);
    const float v8 = __bfloat162float(in2[lane]);
    const float v9 = rb(v8 * v5);
    out1[lane] = __float2bfloat16(v9);
    const float v10 = rb(v8 * v6);
    const float v11 = rb(FastDiv ? __fdividef(1.f, den) : 1.f / den);
    const float v12 = rb(1.f - v11);
    const float v13 = rb(v4 * v12);
    const float v14 = rb(v13 + 1.f);
    const float v15 = rb(v11 * v14);
    const float v16 = rb(v10 * v15);
    out2[lane] = __float2bfloat16(v16);
  }
  o0 = *reinterpret_cast<const uint4 *>(out0);
  o1 = *reinterpret_cast<const uint4 *>(out1);
  o2 = *reinterpret_cast<const uint4 *>(out2);
}

/// K chunks per thread per step of a grid-stride loop, loads first.
template <int K, bool FastDiv>
__global__ void gradKernel(const uint4 *__restrict__ in0, const uint4 *__restrict__ in1,
                           const uint4 *__restrict__ in2, uint4 *out0, uint4 *out1, uint4 *out2,
                           int64_t n) {
  const int64_t stride = (int64_t)gridDim.x * blockDim.x;
  for (int64_t c0 = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; c0 < n; c0 += K * stride) {
    uint4 a[K], b[K], c[K];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      int64_t i = c0 + k * stride;
      if (i < n)
        a[k] = in0[i], b[k] = in1[i], c[k] = in2[i];
    }
#pragma unroll
    for (int k = 0; k < K; ++k) {
      int64_t i = c0 + k * stride;
      if (i >= n)
        continue;
      uint4 o0, o1, o2;
      body<FastDiv>(a[k], b[k], c[k], o0, o1, o2);
      out0[i] = o0, out1[i] = o1, out2[i] = o2;
    }
  }
}

__global__ void siluMul(const uint4 *__restrict__ in0, const uint4 *__restrict__ in1, uint4 *out0,
                        int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    __align__(16) __nv_bfloat16 x[8], y[8], o[8];
    *reinterpret_cast<uint4 *>(x) = in0[i];
    *reinterpret_cast<uint4 *>(y) = in1[i];
#pragma unroll
    for (int lane = 0; lane < 8; ++lane) {
      const float v4 = __bfloat162float(x[lane]);
      const float v5 = rb(v4 / (1.f + expf(-v4)));
      o[lane] = __float2bfloat16(rb(v5 * __bfloat162float(y[lane])));
    }
    out0[i] = *reinterpret_cast<const uint4 *>(o);
  }
}

uint16_t randomBf16(uint64_t &s) {
  s = s * 6364136223846793005ull + 1442695040888963407ull;
  float f = ((s >> 40) * 0x1.0p-24f - 0.5f) * 8.f; // [-4, 4)
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return uint16_t(u >> 16);
}

} // namespace

int main(int argc, char **argv) {
  int64_t rows = argc > 1 ? std::atol(argv[1]) : 8192, cols = argc > 2 ? std::atol(argv[2]) : 8192;
  int reps = argc > 3 ? std::atoi(argv[3]) : 20;
  int64_t elements = rows * cols, n = elements / 8;
  size_t bytes = elements * 2;
  std::vector<uint16_t> host(elements);
  uint64_t seed = 1;
  uint4 *in[3], *out[3];
  for (auto &p : in) {
    for (auto &x : host)
      x = randomBf16(seed);
    CHECK_CUDA(cudaMalloc(&p, bytes));
    CHECK_CUDA(cudaMemcpy(p, host.data(), bytes, cudaMemcpyHostToDevice));
  }
  for (auto &p : out)
    CHECK_CUDA(cudaMalloc(&p, bytes));
  int sms = 0, device = 0;
  CHECK_CUDA(cudaGetDevice(&device));
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  auto blocksFor = [&](int64_t perThread) { return unsigned((n + 256 * perThread - 1) / (256 * perThread)); };
  struct Variant {
    const char *name;
    void (*launch)(unsigned, uint4 **, uint4 **, int64_t);
    unsigned grid;
    bool exact;
  } variants[] = {
      {"once", [](unsigned g, uint4 **i, uint4 **o, int64_t n) { gradKernel<1, false><<<g, 256>>>(i[0], i[1], i[2], o[0], o[1], o[2], n); }, blocksFor(1), true},
      {"ilp2", [](unsigned g, uint4 **i, uint4 **o, int64_t n) { gradKernel<2, false><<<g, 256>>>(i[0], i[1], i[2], o[0], o[1], o[2], n); }, blocksFor(2), true},
      {"ilp4", [](unsigned g, uint4 **i, uint4 **o, int64_t n) { gradKernel<4, false><<<g, 256>>>(i[0], i[1], i[2], o[0], o[1], o[2], n); }, blocksFor(4), true},
      {"persist", [](unsigned g, uint4 **i, uint4 **o, int64_t n) { gradKernel<1, false><<<g, 256>>>(i[0], i[1], i[2], o[0], o[1], o[2], n); }, unsigned(6 * sms), true},
      {"persist-ilp2", [](unsigned g, uint4 **i, uint4 **o, int64_t n) { gradKernel<2, false><<<g, 256>>>(i[0], i[1], i[2], o[0], o[1], o[2], n); }, unsigned(6 * sms), true},
      {"fastdiv", [](unsigned g, uint4 **i, uint4 **o, int64_t n) { gradKernel<1, true><<<g, 256>>>(i[0], i[1], i[2], o[0], o[1], o[2], n); }, blocksFor(1), false},
  };
  std::vector<uint16_t> reference[3], got(elements);
  double moved = 6.0 * bytes;
  std::printf("[%ld, %ld] bf16, %d reps, median:\n", long(rows), long(cols), reps);
  int failures = 0;
  for (const Variant &v : variants) {
    for (auto &p : out)
      CHECK_CUDA(cudaMemset(p, 0, bytes));
    v.launch(v.grid, in, out, n);
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    int64_t differ = 0;
    for (int j = 0; j < 3; ++j) {
      CHECK_CUDA(cudaMemcpy(got.data(), out[j], bytes, cudaMemcpyDeviceToHost));
      if (reference[j].empty())
        reference[j] = got;
      else
        for (int64_t e = 0; e < elements; ++e)
          differ += got[e] != reference[j][e];
    }
    float t = medianEventMs(reps, [&] { v.launch(v.grid, in, out, n); });
    bool bad = v.exact && differ;
    failures += bad;
    std::printf("  %-13s grid %7u  %.4f ms  %.2f TB/s  %ld elements differ from once%s\n", v.name,
                v.grid, t, moved / (t * 1e-3) / 1e12, long(differ), bad ? "  FAIL" : "");
  }
  float bar = medianEventMs(reps, [&] { siluMul<<<blocksFor(1), 256>>>(in[0], in[1], out[0], n); });
  std::printf("  %-13s grid %7u  %.4f ms  %.2f TB/s  (2 in, 1 out: the bar)\n", "silu_mul",
              blocksFor(1), bar, 3.0 * bytes / (bar * 1e-3) / 1e12);
  return failures ? 1 : 0;
}
