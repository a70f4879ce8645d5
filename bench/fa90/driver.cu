// Standalone check and timing of kiln_fa90::forward (FlashAttention90.cuh):
// random bf16 inputs, poisoned output, an fp32 reference kernel, events.
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "../../lib/Codegen/cuda/FlashAttention90.cuh"

#define CHECK(x)                                                                      \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                   \
    }                                                                                 \
  } while (0)

template <typename T, int D, int NC>
__global__ void __launch_bounds__(kiln_fa90::threads<NC>(), 1)
    fa90Forward(const T *q, const T *k, const T *v, T *o, float *lse, int64_t B, int64_t H,
                int64_t Hkv, int64_t Sq, int64_t L, float scale, bool causal) {
  extern __shared__ __align__(1024) unsigned char smem[];
  kiln_fa90::forward<T, D, NC>(q, k, v, o, lse, B, H, Hkv, Sq, L, scale, causal, smem);
}

// One block per query row: scores in shared memory, fp32 throughout.
__global__ void reference(const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v,
                          float *o, float *lse, int H, int Hkv, int Sq, int L, int D, float scale,
                          bool causal, int rowStride) {
  extern __shared__ float sc[];
  __shared__ float red[32], qf[128];
  const int row = blockIdx.x * rowStride, i = row % Sq, h = (row / Sq) % H, b = row / (Sq * H);
  const int hk = h / (H / Hkv);
  const __nv_bfloat16 *qr = q + (size_t)row * D;
  const __nv_bfloat16 *kb = k + ((size_t)b * Hkv + hk) * L * D, *vb = v + ((size_t)b * Hkv + hk) * L * D;
  for (int d = threadIdx.x; d < D; d += blockDim.x)
    qf[d] = __bfloat162float(qr[d]);
  __syncthreads();
  float mx = -INFINITY;
  for (int j = threadIdx.x; j < L; j += blockDim.x) {
    float s = 0.f;
    for (int d = 0; d < D; d += 8) {
      const uint4 raw = *reinterpret_cast<const uint4 *>(kb + (size_t)j * D + d);
      const __nv_bfloat16 *e = reinterpret_cast<const __nv_bfloat16 *>(&raw);
      for (int u = 0; u < 8; ++u)
        s += qf[d + u] * __bfloat162float(e[u]);
    }
    s *= scale;
    if (causal && j > i)
      s = -INFINITY;
    sc[j] = s;
    mx = fmaxf(mx, s);
  }
  for (int w = 16; w; w /= 2)
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, w));
  if (threadIdx.x % 32 == 0)
    red[threadIdx.x / 32] = mx;
  __syncthreads();
  mx = -INFINITY;
  for (int w = 0; w < blockDim.x / 32; ++w)
    mx = fmaxf(mx, red[w]);
  __syncthreads();
  float sum = 0.f;
  for (int j = threadIdx.x; j < L; j += blockDim.x) {
    const float p = expf(sc[j] - mx);
    sc[j] = p;
    sum += p;
  }
  for (int w = 16; w; w /= 2)
    sum += __shfl_xor_sync(0xffffffffu, sum, w);
  if (threadIdx.x % 32 == 0)
    red[threadIdx.x / 32] = sum;
  __syncthreads();
  sum = 0.f;
  for (int w = 0; w < blockDim.x / 32; ++w)
    sum += red[w];
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float a = 0.f;
    for (int j = 0; j < L; ++j)
      a += sc[j] * __bfloat162float(vb[(size_t)j * D + d]);
    o[(size_t)row * D + d] = a / sum;
  }
  if (threadIdx.x == 0)
    lse[row] = mx + logf(sum);
}

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float gauss() {
  auto u = [] {
    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
    return ((rng >> 11) + 0.5) * (1.0 / 9007199254740992.0);
  };
  return (float)(std::sqrt(-2.0 * std::log(u())) * std::cos(6.283185307179586 * u()));
}

static bool run(const char *name, int B, int H, int Hkv, int Sq, int L, int D, bool causal,
                int iters, int stride = 1, int nc = 0) {
  // FA90_ONLY=name[,name...]: only those cases (the GPU call's A/B runs).
  if (const char *only = std::getenv("FA90_ONLY"))
    if (std::string("," + std::string(only) + ",").find("," + std::string(name) + ",") ==
        std::string::npos)
      return true;
  if (!nc)
    nc = D == 64 ? kiln_fa90::defaultConsumers<64>() : kiln_fa90::defaultConsumers<128>();
  const size_t nq = (size_t)B * H * Sq * D, nk = (size_t)B * Hkv * L * D;
  std::vector<__nv_bfloat16> hq(nq), hk(nk), hv(nk);
  for (auto &x : hq) x = __float2bfloat16(gauss());
  for (auto &x : hk) x = __float2bfloat16(gauss());
  for (auto &x : hv) x = __float2bfloat16(gauss());
  __nv_bfloat16 *q, *k, *v, *o;
  float *lse, *oRef, *lseRef;
  CHECK(cudaMalloc(&q, nq * 2)); CHECK(cudaMalloc(&k, nk * 2)); CHECK(cudaMalloc(&v, nk * 2));
  CHECK(cudaMalloc(&o, nq * 2)); CHECK(cudaMalloc(&oRef, nq * 4));
  const size_t rows = (size_t)B * H * Sq;
  CHECK(cudaMalloc(&lse, rows * 4)); CHECK(cudaMalloc(&lseRef, rows * 4));
  CHECK(cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(k, hk.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(v, hv.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(o, 0xff, nq * 2)); // NaN
  CHECK(cudaMemset(lse, 0xff, rows * 4));
  const float scale = 1.f / std::sqrt((float)D);
  auto launch = [&] {
    const int blocks = (int)((Sq + 64 * nc - 1) / (64 * nc)) * B * H;
    auto go = [&](auto kernel, int bytes, int threads) {
      CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
      kernel<<<blocks, threads, bytes>>>(q, k, v, o, lse, B, H, Hkv, Sq, L, scale, causal);
    };
    if (D == 64 && nc == 2)
      go(fa90Forward<__nv_bfloat16, 64, 2>, kiln_fa90::Smem<64, 2>::bytes, kiln_fa90::threads<2>());
    else if (D == 64)
      go(fa90Forward<__nv_bfloat16, 64, 3>, kiln_fa90::Smem<64, 3>::bytes, kiln_fa90::threads<3>());
    else
      go(fa90Forward<__nv_bfloat16, 128, 2>, kiln_fa90::Smem<128, 2>::bytes, kiln_fa90::threads<2>());
    CHECK(cudaGetLastError());
  };
  launch();
  CHECK(cudaDeviceSynchronize());
  reference<<<(int)((rows + stride - 1) / stride), 128, L * 4>>>(q, k, v, oRef, lseRef, H, Hkv, Sq,
                                                                  L, D, scale, causal, stride);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> ho(nq);
  std::vector<float> hr(nq), hl(rows), hlr(rows);
  CHECK(cudaMemcpy(ho.data(), o, nq * 2, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hr.data(), oRef, nq * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hl.data(), lse, rows * 4, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(hlr.data(), lseRef, rows * 4, cudaMemcpyDeviceToHost));
  double num = 0, den = 0, numRound = 0, lseErr = 0;
  size_t bad = 0;
  for (size_t x = 0; x < nq; ++x) {
    if (!std::isfinite((double)__bfloat162float(ho[x]))) ++bad;
    if ((x / D) % stride) continue; // rows the reference skipped
    const double a = __bfloat162float(ho[x]), r = hr[x];
    num += (a - r) * (a - r);
    den += r * r;
    const double rr = __bfloat162float(__float2bfloat16(hr[x]));
    numRound += (rr - r) * (rr - r);
  }
  for (size_t x = 0; x < rows; ++x) {
    if (!std::isfinite(hl[x])) ++bad;
    if (x % stride) continue;
    lseErr = std::max(lseErr, (double)std::fabs(hl[x] - hlr[x]));
  }
  const double err = std::sqrt(num / den), errRound = std::sqrt(numRound / den);
  // A bf16 kernel: its error is the output's rounding plus P's; 4x the
  // output rounding alone is far above a right kernel and far below a wrong one.
  const bool ok = bad == 0 && err < 4 * errRound + 1e-3 && lseErr < 1e-2;
  float ms = 0;
  if (iters > 0) {
    cudaEvent_t e0, e1;
    CHECK(cudaEventCreate(&e0)); CHECK(cudaEventCreate(&e1));
    for (int w = 0; w < 3; ++w) launch();
    std::vector<float> times;
    for (int it = 0; it < iters; ++it) {
      CHECK(cudaEventRecord(e0));
      launch();
      CHECK(cudaEventRecord(e1));
      CHECK(cudaEventSynchronize(e1));
      float t;
      CHECK(cudaEventElapsedTime(&t, e0, e1));
      times.push_back(t);
    }
    std::sort(times.begin(), times.end());
    ms = times[times.size() / 2];
  }
  const double flop = 4.0 * B * H * (double)Sq * L * D / (causal ? 2 : 1);
  std::fflush(stdout);
  std::printf("%-10s nc%d b%d h%d kv%d sq%d l%d d%d %s: relL2 %.3e (bf16 rounding %.3e) lse max|d| %.2e "
              "nonfinite %zu %s",
              name, nc, B, H, Hkv, Sq, L, D, causal ? "causal" : "full", err, errRound, lseErr, bad,
              ok ? "PASS" : "FAIL");
  if (iters > 0)
    std::printf("  %.3f ms %.1f TFLOP/s", ms, flop / ms / 1e9);
  std::printf("\n");
  cudaFree(q); cudaFree(k); cudaFree(v); cudaFree(o); cudaFree(oRef); cudaFree(lse); cudaFree(lseRef);
  return ok;
}

// bench/attention.py's mode: `fa90 io B H KV S D q.bin k.bin v.bin o.bin ITERS`
// reads raw bf16 q, k, v ([B, H|KV, S, D]), writes the causal forward's O
// (raw bf16) and prints the median time of ITERS launches.
static int ioMode(char **argv) {
  const int B = std::atoi(argv[2]), H = std::atoi(argv[3]), Hkv = std::atoi(argv[4]),
            S = std::atoi(argv[5]), D = std::atoi(argv[6]), iters = std::atoi(argv[11]);
  if (B <= 0 || H <= 0 || Hkv <= 0 || H % Hkv || S <= 0 || (D != 64 && D != 128)) {
    std::fprintf(stderr, "fa90 io: unsupported shape b%d h%d kv%d s%d d%d\n", B, H, Hkv, S, D);
    return 2;
  }
  const size_t nq = (size_t)B * H * S * D, nk = (size_t)B * Hkv * S * D;
  auto readRaw = [](const char *path, size_t count, std::vector<__nv_bfloat16> &data) {
    data.resize(count);
    FILE *f = std::fopen(path, "rb");
    const bool ok = f && std::fread(data.data(), 2, count, f) == count;
    if (f)
      std::fclose(f);
    if (!ok)
      std::fprintf(stderr, "fa90 io: cannot read %zu bf16 values from %s\n", count, path);
    return ok;
  };
  std::vector<__nv_bfloat16> hq, hk, hv;
  if (!readRaw(argv[7], nq, hq) || !readRaw(argv[8], nk, hk) || !readRaw(argv[9], nk, hv))
    return 2;
  __nv_bfloat16 *q, *k, *v, *o;
  CHECK(cudaMalloc(&q, nq * 2)); CHECK(cudaMalloc(&k, nk * 2)); CHECK(cudaMalloc(&v, nk * 2));
  CHECK(cudaMalloc(&o, nq * 2));
  CHECK(cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(k, hk.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(v, hv.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(o, 0xff, nq * 2)); // NaN: an unwritten element shows
  const float scale = 1.f / std::sqrt((float)D);
  const int nc = D == 64 ? kiln_fa90::defaultConsumers<64>() : kiln_fa90::defaultConsumers<128>();
  const int blocks = (S + 64 * nc - 1) / (64 * nc) * B * H;
  auto launch = [&] {
    if (D == 64) {
      constexpr int bytes = kiln_fa90::Smem<64>::bytes;
      CHECK(cudaFuncSetAttribute(fa90Forward<__nv_bfloat16, 64, kiln_fa90::defaultConsumers<64>()>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
      fa90Forward<__nv_bfloat16, 64, kiln_fa90::defaultConsumers<64>()>
          <<<blocks, kiln_fa90::threads<kiln_fa90::defaultConsumers<64>()>(), bytes>>>(
              q, k, v, o, nullptr, B, H, Hkv, S, S, scale, true);
    } else {
      constexpr int bytes = kiln_fa90::Smem<128>::bytes;
      CHECK(cudaFuncSetAttribute(fa90Forward<__nv_bfloat16, 128, kiln_fa90::defaultConsumers<128>()>,
                                 cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
      fa90Forward<__nv_bfloat16, 128, kiln_fa90::defaultConsumers<128>()>
          <<<blocks, kiln_fa90::threads<kiln_fa90::defaultConsumers<128>()>(), bytes>>>(
              q, k, v, o, nullptr, B, H, Hkv, S, S, scale, true);
    }
    CHECK(cudaGetLastError());
  };
  launch();
  CHECK(cudaDeviceSynchronize());
  std::vector<__nv_bfloat16> ho(nq);
  CHECK(cudaMemcpy(ho.data(), o, nq * 2, cudaMemcpyDeviceToHost));
  FILE *f = std::fopen(argv[10], "wb");
  if (!f || std::fwrite(ho.data(), 2, nq, f) != nq) {
    std::fprintf(stderr, "fa90 io: cannot write %s\n", argv[10]);
    return 2;
  }
  std::fclose(f);
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0)); CHECK(cudaEventCreate(&e1));
  for (int w = 0; w < 3; ++w)
    launch();
  std::vector<float> times;
  for (int it = 0; it < std::max(iters, 1); ++it) {
    CHECK(cudaEventRecord(e0));
    launch();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  std::printf("median %.4f ms\n", times[times.size() / 2]);
  return 0;
}

int main(int argc, char **argv) {
  if (argc == 12 && std::string(argv[1]) == "io")
    return ioMode(argv);
  if (argc != 1) {
    std::fprintf(stderr, "usage: fa90 (the checks and timings) | fa90 io B H KV S D q k v o ITERS\n");
    return 2;
  }
  bool ok = true;
  ok &= run("tail64", 1, 4, 2, 300, 300, 64, true, 0);
  ok &= run("tail64", 1, 4, 2, 300, 300, 64, true, 0, 1, 2);
  ok &= run("full64", 2, 4, 1, 200, 333, 64, false, 0, 1, 2);
  ok &= run("full64", 2, 4, 1, 200, 333, 64, false, 0);
  ok &= run("tail128", 1, 4, 2, 300, 300, 128, true, 0);
  ok &= run("full128", 1, 2, 2, 130, 257, 128, false, 0);
  ok &= run("1b", 4, 32, 8, 2048, 2048, 64, true, 30, 61);
  ok &= run("8b", 2, 32, 8, 4096, 4096, 128, true, 30, 127);
  ok &= run("small", 8, 12, 12, 1024, 1024, 64, true, 30, 31);
  ok &= run("1b", 4, 32, 8, 2048, 2048, 64, true, 30, 61, 2);
  ok &= run("small", 8, 12, 12, 1024, 1024, 64, true, 30, 31, 2);
  ok &= run("1b-full", 4, 32, 8, 2048, 2048, 64, false, 20, 61);
  ok &= run("8b-full", 2, 32, 8, 4096, 4096, 128, false, 20, 127);
  std::printf(ok ? "ALL PASS\n" : "SOME FAILED\n");
  return ok ? 0 : 1;
}
