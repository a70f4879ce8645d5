// The rotate-half RoPE with the head transpose, as kiln's loop kernels run it
// on the 1b step (q: [B, S, 32, 64] -> [B, 32, S, 64] forward, the gradient
// back), in three orders of the vector chunks over the threads:
//   out: the output's flat order (what the generated kernels do today),
//   in:  the input's flat order (reads contiguous, writes 128-byte pieces),
//   tile: a block per T sequence rows, every head (both sides contiguous
//         runs of T * 128 bytes or more).
// Prints each variant's median time and bandwidth, and checks all three
// write the same bytes.  nvcc -O3 -arch=sm_90 rope_order.cu -o rope_order
#include <cuda_bf16.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cstring>

constexpr int H = 32, D = 64, T = 8;

__device__ __forceinline__ void rope8(const __nv_bfloat16 *x, const __nv_bfloat16 *partner,
                                      const __nv_bfloat16 *c, const __nv_bfloat16 *s, bool low,
                                      __nv_bfloat16 *o) {
#pragma unroll
  for (int l = 0; l < 8; ++l) {
    float a = __bfloat162float(x[l]) * __bfloat162float(c[l]);
    float b = __bfloat162float(partner[l]) * __bfloat162float(s[l]);
    o[l] = __float2bfloat16(low ? a - b : a + b);
  }
}

// One chunk: 8 elements of head h, row (b, s), columns dc*8.. of the 64.
// fwd: in [B,S,H,D] -> out [B,H,S,D]; bwd (transposed roles): in [B,H,S,D] -> out [B,S,H,D].
template <bool Fwd>
__device__ __forceinline__ void chunkAt(const __nv_bfloat16 *in, const __nv_bfloat16 *cs,
                                        const __nv_bfloat16 *sn, __nv_bfloat16 *out, int64_t b,
                                        int64_t h, int64_t s, int dc, int64_t S) {
  int d = dc * 8, dp = d < 32 ? d + 32 : d - 32;
  int64_t bshd = ((b * S + s) * H + h) * D, bhsd = ((b * H + h) * S + s) * D;
  int64_t src = Fwd ? bshd : bhsd, dst = Fwd ? bhsd : bshd;
  __align__(16) __nv_bfloat16 x[8], p[8], c[8], sv[8], o[8];
  *reinterpret_cast<uint4 *>(x) = *reinterpret_cast<const uint4 *>(in + src + d);
  *reinterpret_cast<uint4 *>(p) = *reinterpret_cast<const uint4 *>(in + src + dp);
  *reinterpret_cast<uint4 *>(c) = *reinterpret_cast<const uint4 *>(cs + s * 32 + (d % 32));
  *reinterpret_cast<uint4 *>(sv) = *reinterpret_cast<const uint4 *>(sn + s * 32 + (d % 32));
  rope8(x, p, c, sv, d < 32, o);
  *reinterpret_cast<uint4 *>(out + dst + d) = *reinterpret_cast<const uint4 *>(o);
}

template <bool Fwd, int Order>
__global__ void rope(const __nv_bfloat16 *in, const __nv_bfloat16 *cs, const __nv_bfloat16 *sn,
                     __nv_bfloat16 *out, int64_t B, int64_t S) {
  if (Order == 2) { // tile: block (b, s0..s0+T), all heads
    int64_t tiles = S / T;
    for (int64_t t = blockIdx.x; t < B * tiles; t += gridDim.x) {
      int64_t b = t / tiles, s0 = (t % tiles) * T;
      for (int i = threadIdx.x; i < H * T * 8; i += blockDim.x) {
        // output-side contiguous runs: dc fastest, then the side that is
        // contiguous in the output (s for fwd, h for bwd)
        int dc = i % 8, j = (i / 8);
        int64_t h, s;
        if (Fwd) { s = s0 + j % T; h = j / T; }
        else { h = j % H; s = s0 + j / H; }
        chunkAt<Fwd>(in, cs, sn, out, b, h, s, dc, S);
      }
    }
    return;
  }
  int64_t n = B * S * H * 8;
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < n;
       c += int64_t(gridDim.x) * blockDim.x) {
    int dc = c % 8;
    int64_t r = c / 8, b, h, s;
    // Order 0 follows the output, 1 the input.
    bool bhsdOrder = (Order == 0) == Fwd;
    if (bhsdOrder) { s = r % S; r /= S; h = r % H; b = r / H; }
    else { h = r % H; r /= H; s = r % S; b = r / S; }
    chunkAt<Fwd>(in, cs, sn, out, b, h, s, dc, S);
  }
}

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { std::printf("%s: %s\n", #x, cudaGetErrorString(e)); std::exit(2); } } while (0)

int main(int argc, char **argv) {
  int64_t B = argc > 1 ? std::atol(argv[1]) : 4, S = argc > 2 ? std::atol(argv[2]) : 2048;
  int reps = argc > 3 ? std::atoi(argv[3]) : 50;
  size_t n = size_t(B) * S * H * D;
  std::vector<uint16_t> h(n), hc(S * 32), hs(S * 32);
  for (size_t i = 0; i < n; ++i) h[i] = 0x3f80 + (i * 2654435761u >> 20) % 512;
  for (size_t i = 0; i < hc.size(); ++i) { hc[i] = 0x3f00 + i % 200; hs[i] = 0x3e00 + i % 180; }
  __nv_bfloat16 *in, *out, *cs, *sn, *flush;
  CHECK(cudaMalloc(&in, n * 2)); CHECK(cudaMalloc(&out, n * 2));
  CHECK(cudaMalloc(&cs, S * 64)); CHECK(cudaMalloc(&sn, S * 64));
  CHECK(cudaMalloc(&flush, 256 << 20));
  CHECK(cudaMemcpy(in, h.data(), n * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(cs, hc.data(), S * 64, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(sn, hs.data(), S * 64, cudaMemcpyHostToDevice));
  const char *names[] = {"out", "in", "tile"};
  for (int fwd = 1; fwd >= 0; --fwd) {
    std::vector<uint16_t> ref;
    for (int order = 0; order < 3; ++order) {
      auto launch = [&] {
        int64_t chunks = B * S * H * 8;
        unsigned grid = order == 2 ? unsigned(B * (S / T)) : unsigned((chunks + 255) / 256);
        if (fwd) {
          if (order == 0) rope<true, 0><<<grid, 256>>>(in, cs, sn, out, B, S);
          if (order == 1) rope<true, 1><<<grid, 256>>>(in, cs, sn, out, B, S);
          if (order == 2) rope<true, 2><<<grid, 256>>>(in, cs, sn, out, B, S);
        } else {
          if (order == 0) rope<false, 0><<<grid, 256>>>(in, cs, sn, out, B, S);
          if (order == 1) rope<false, 1><<<grid, 256>>>(in, cs, sn, out, B, S);
          if (order == 2) rope<false, 2><<<grid, 256>>>(in, cs, sn, out, B, S);
        }
      };
      CHECK(cudaMemset(out, 0xff, n * 2));
      launch();
      CHECK(cudaDeviceSynchronize());
      std::vector<uint16_t> got(n);
      CHECK(cudaMemcpy(got.data(), out, n * 2, cudaMemcpyDeviceToHost));
      bool same = true;
      if (order == 0) ref = got; else same = std::memcmp(ref.data(), got.data(), n * 2) == 0;
      std::vector<float> ms;
      cudaEvent_t e0, e1;
      CHECK(cudaEventCreate(&e0)); CHECK(cudaEventCreate(&e1));
      for (int r = 0; r < reps; ++r) {
        CHECK(cudaMemset(flush, r, 256 << 20)); // L2 cold, as in the step
        CHECK(cudaEventRecord(e0)); launch(); CHECK(cudaEventRecord(e1));
        CHECK(cudaEventSynchronize(e1));
        float t; CHECK(cudaEventElapsedTime(&t, e0, e1)); ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      double med = ms[reps / 2];
      std::printf("%s order %-4s  %7.1f us  %5.2f TB/s (read + write %zu MiB)%s\n",
                  fwd ? "forward " : "backward", names[order], med * 1e3, 2.0 * n * 2 / (med * 1e-3) / 1e12,
                  (2 * n * 2) >> 20, same ? "" : "  MISMATCH");
    }
  }
  return 0;
}
