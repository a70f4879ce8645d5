// The fused NF4 GEMMs (runtime/lib/kernels/Nf4Gemm.cuh: mma.sync, sm_80;
// Nf4Gemm90.cuh: wgmma, sm_90a) against dequantize + cuBLASLt: correctness (relative L2 against a float64 reference on sampled
// rows, beside cuBLASLt's own error; outputs poisoned with NaN first) and
// time, for the bench 1b shapes, forward (x W^T) and input gradient (dy W).
// Fresh random codes, absmax and activations per case; the "dq" cases store
// the absmax double-quantized (8-bit dynamic-map codes, a scale per 256
// blocks, an offset), which the wgmma kernel decodes itself.
//
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I include \
//     -I runtime/lib/kernels bench/nf4gemm/nf4_gemm_check.cu -lcublasLt -lcuda -o nf4_gemm_check
//   ./nf4_gemm_check [REPS] [wgmma|tma|all]   (exit 1 when a case fails;
//       wgmma: the wgmma kernel; tma: also its TMA form; all: also the
//       mma.sync tilings)
//   Timing diagnostics (wrong results on purpose, every case FAILs):
//   -DKILN_NF4_90_ABLATE=1 skips the wgmma kernel's dequantization, =2 its
//   products (docs/benchmarks.md, "The wgmma NF4 GEMM on the H200").

#include "Nf4Gemm.cuh"
#include "Nf4Gemm90.cuh"
#include "kiln/Support/DynamicMap8.h"

#include <cublasLt.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#define CUDA_OK(x)                                                                   \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(2);                                                                  \
    }                                                                                \
  } while (0)
#define LT_OK(x)                                                                     \
  do {                                                                               \
    cublasStatus_t s_ = (x);                                                         \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                               \
      std::fprintf(stderr, "%s:%d: cublasLt status %d\n", __FILE__, __LINE__, (int)s_); \
      std::exit(2);                                                                  \
    }                                                                                \
  } while (0)

__device__ uint32_t hash32(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return (uint32_t)x;
}

__global__ void randomBytes(uint8_t *p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = (uint8_t)hash32(seed * 0x9e3779b97f4a7c15ull + i);
}
// absmax in [0.01, 0.06): the scale of a Llama weight block's largest value.
__global__ void randomAbsmax(float *p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = 0.01f + 0.05f * (hash32(seed * 0x9e3779b97f4a7c15ull + i) >> 8) * (1.f / 16777216.f);
}
__global__ void randomBf16(__nv_bfloat16 *p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = __float2bfloat16((hash32(seed * 0x9e3779b97f4a7c15ull + i) >> 8) * (2.f / 16777216.f) - 1.f);
}
__global__ void fillBits(uint16_t *p, size_t n, uint16_t bits) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = bits;
}

// Double quantization's absmax, as the wgmma kernel's producer decodes it.
__global__ void decodeAbsmax(const uint8_t *codes, const float *scale, float offset, float *absmax, size_t n,
                             const kiln_nf4_90::Map8 map) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    absmax[i] = fmaf(map.v[codes[i]], scale[i / 256], offset);
}
// Scales in [0.02, 0.03): with the offset 0.035 the absmax spans about [0.005, 0.065).
__global__ void randomScale(float *p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = 0.02f + 0.01f * (hash32(seed * 0x9e3779b97f4a7c15ull + i) >> 8) * (1.f / 16777216.f);
}

// kiln.nf4_dequantize's arithmetic, a coalesced stream (what the step runs
// before cuBLASLt today): one thread per code byte, two bf16 out.
__global__ void dequantize(const uint8_t *codes, const float *absmax, __nv_bfloat16 *w, size_t bytes) {
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < bytes; i += (size_t)gridDim.x * blockDim.x) {
    uint8_t byte = codes[i];
    float s = absmax[(2 * i) / 64];
    reinterpret_cast<__nv_bfloat162 *>(w)[i] =
        __floats2bfloat162_rn(kiln_nf4::kNf4Values[byte >> 4] * s, kiln_nf4::kNf4Values[byte & 15] * s);
  }
}

// float64 reference of sampled rows: ref[r][j] = sum_l A[rows[r]][l] * B(l, j),
// B(l, j) = W[j][l] (forward) or W[l][j] (gradient), W the dequantized weight.
__global__ void referenceRows(const __nv_bfloat16 *a, const __nv_bfloat16 *w, const int *rows, double *ref,
                              int samples, int n, int k, bool forward) {
  int j = blockIdx.x * blockDim.x + threadIdx.x, r = blockIdx.y;
  if (j >= n || r >= samples)
    return;
  const __nv_bfloat16 *x = a + (size_t)rows[r] * k;
  double sum = 0;
  for (int l = 0; l < k; ++l) {
    double b = __bfloat162float(forward ? w[(size_t)j * k + l] : w[(size_t)l * n + j]);
    sum += (double)__bfloat162float(x[l]) * b;
  }
  ref[(size_t)r * n + j] = sum;
}

// Sums over sampled rows: |out - ref|^2, |ref|^2; and over the whole output
// the NaN/Inf count and |out - other|^2, |other|^2.
__global__ void compareRows(const __nv_bfloat16 *out, const int *rows, const double *ref, int samples, int n,
                            double *sums) {
  double d = 0, r2 = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (size_t)samples * n;
       i += (size_t)gridDim.x * blockDim.x) {
    size_t r = i / n, j = i % n;
    double o = __bfloat162float(out[(size_t)rows[r] * n + j]), x = ref[i];
    d += (o - x) * (o - x);
    r2 += x * x;
  }
  atomicAdd(&sums[0], d);
  atomicAdd(&sums[1], r2);
}
__global__ void compareAll(const __nv_bfloat16 *out, const __nv_bfloat16 *other, size_t count, double *sums,
                           unsigned long long *bad) {
  double d = 0, r2 = 0;
  unsigned long long nonfinite = 0;
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
    float o = __bfloat162float(out[i]), x = __bfloat162float(other[i]);
    if (!isfinite(o))
      ++nonfinite;
    d += (double)(o - x) * (o - x);
    r2 += (double)x * x;
  }
  atomicAdd(&sums[0], d);
  atomicAdd(&sums[1], r2);
  atomicAdd(bad, nonfinite);
}

struct Lt {
  cublasLtHandle_t handle;
  void *workspace;
  size_t workspaceBytes = 32u << 20;
};

// Row-major C[m, n] = alpha A[m, k] op(W) + beta C in cuBLASLt's column-major
// terms: C^T = op(W)^T A^T.
void ltGemm(Lt &lt, const __nv_bfloat16 *a, const __nv_bfloat16 *w, __nv_bfloat16 *c, int m, int n, int k,
            bool forward, float alpha, float beta, cudaStream_t stream) {
  cublasLtMatmulDesc_t desc;
  LT_OK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t transW = forward ? CUBLAS_OP_T : CUBLAS_OP_N, transA = CUBLAS_OP_N;
  LT_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transW, sizeof(transW)));
  LT_OK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &transA, sizeof(transA)));
  cublasLtMatrixLayout_t lw, la, lc;
  if (forward) // W [n, k] row-major = column-major k x n, ld k
    LT_OK(cublasLtMatrixLayoutCreate(&lw, CUDA_R_16BF, k, n, k));
  else // W [k, n] row-major = column-major n x k, ld n
    LT_OK(cublasLtMatrixLayoutCreate(&lw, CUDA_R_16BF, n, k, n));
  LT_OK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k, m, k));
  LT_OK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n));
  cublasLtMatmulPreference_t pref;
  LT_OK(cublasLtMatmulPreferenceCreate(&pref));
  LT_OK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &lt.workspaceBytes, sizeof(lt.workspaceBytes)));
  cublasLtMatmulHeuristicResult_t result;
  int found = 0;
  LT_OK(cublasLtMatmulAlgoGetHeuristic(lt.handle, desc, lw, la, lc, lc, pref, 1, &result, &found));
  if (!found) {
    std::fprintf(stderr, "no cuBLASLt algorithm\n");
    std::exit(2);
  }
  LT_OK(cublasLtMatmul(lt.handle, desc, &alpha, w, lw, a, la, &beta, c, lc, c, lc, &result.algo, lt.workspace,
                       lt.workspaceBytes, stream));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(lw);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(desc);
}

template <int kWarpsM>
void fusedTiles(const __nv_bfloat16 *a, const uint8_t *codes, const float *absmax, __nv_bfloat16 *c, int m, int n,
                int k, bool forward, float alpha, float beta, cudaStream_t stream) {
  using T = kiln_nf4::Tiles<kWarpsM>;
  dim3 grid(n / kiln_nf4::kTileN, m / T::kTileM);
  if (forward)
    kiln_nf4::nf4Gemm<true, kWarpsM><<<grid, kiln_nf4::kThreads, T::kSharedBytes, stream>>>(a, codes, absmax, c, m,
                                                                                            n, k, alpha, beta);
  else
    kiln_nf4::nf4Gemm<false, kWarpsM><<<grid, kiln_nf4::kThreads, T::kSharedBytes, stream>>>(a, codes, absmax, c,
                                                                                             m, n, k, alpha, beta);
  CUDA_OK(cudaGetLastError());
}
kiln_nf4_90::Map8 hostMap() {
  kiln_nf4_90::Map8 map;
  for (int i = 0; i < 256; ++i)
    map.v[i] = kiln::kDynamicMap8[i];
  return map;
}
// The wgmma kernel; dq: the absmax double-quantized (scale per 256 blocks in
// `absmax`, codes, offset).
struct DoubleQuant {
  const uint8_t *codes = nullptr;
  const float *scale = nullptr;
  float offset = 0.f;
};
// The activations' tensor map for the TMA form: A [m, k] bf16, a box of 64
// k x 256 rows, the 128-byte swizzle (the layout the B descriptor reads).
kiln_nf4_90::TensorMap activationMap(const __nv_bfloat16 *a, int m, int k) {
  CUtensorMap map;
  cuuint64_t dims[2] = {(cuuint64_t)k, (cuuint64_t)m};
  cuuint64_t strides[1] = {(cuuint64_t)k * 2};
  cuuint32_t box[2] = {64, 256}, elementStrides[2] = {1, 1};
  CUresult r = cuTensorMapEncodeTiled(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<__nv_bfloat16 *>(a),
                                      dims, strides, box, elementStrides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    std::fprintf(stderr, "cuTensorMapEncodeTiled: %d\n", (int)r);
    std::exit(2);
  }
  kiln_nf4_90::TensorMap out;
  static_assert(sizeof(out) == sizeof(map), "a CUtensorMap is 128 bytes");
  std::memcpy(&out, &map, sizeof(map));
  return out;
}
kiln_nf4_90::TensorMap gActivationMap; // set per case (the TMA form)

template <bool kTma>
void fused90(const __nv_bfloat16 *a, const uint8_t *codes, const float *absmax, const DoubleQuant &dq,
             __nv_bfloat16 *c, int m, int n, int k, bool forward, float alpha, float beta, cudaStream_t stream) {
  static const kiln_nf4_90::Map8 map = hostMap();
  const kiln_nf4_90::TensorMap &tm = gActivationMap;
  dim3 grid(n / kiln_nf4_90::kRows, m / kiln_nf4_90::kTokens);
  const int threads = kiln_nf4_90::kThreads, bytes = kiln_nf4_90::kSharedBytes;
  if (dq.codes) {
    if (forward)
      kiln_nf4_90::nf4Gemm90<true, true, kTma><<<grid, threads, bytes, stream>>>(
          a, codes, dq.scale, dq.codes, dq.offset, map, c, m, n, k, alpha, beta, tm);
    else
      kiln_nf4_90::nf4Gemm90<false, true, kTma><<<grid, threads, bytes, stream>>>(
          a, codes, dq.scale, dq.codes, dq.offset, map, c, m, n, k, alpha, beta, tm);
  } else if (forward) {
    kiln_nf4_90::nf4Gemm90<true, false, kTma><<<grid, threads, bytes, stream>>>(
        a, codes, absmax, nullptr, 0.f, map, c, m, n, k, alpha, beta, tm);
  } else {
    kiln_nf4_90::nf4Gemm90<false, false, kTma><<<grid, threads, bytes, stream>>>(
        a, codes, absmax, nullptr, 0.f, map, c, m, n, k, alpha, beta, tm);
  }
  CUDA_OK(cudaGetLastError());
}
// variant 0: 128x128 tiles; 1: 256x128 (mma.sync); 2: wgmma; 3: wgmma, TMA.
void fused(int variant, const __nv_bfloat16 *a, const uint8_t *codes, const float *absmax, const DoubleQuant &dq,
           __nv_bfloat16 *c, int m, int n, int k, bool forward, float alpha, float beta, cudaStream_t stream) {
  if (variant == 3)
    fused90<true>(a, codes, absmax, dq, c, m, n, k, forward, alpha, beta, stream);
  else if (variant == 2)
    fused90<false>(a, codes, absmax, dq, c, m, n, k, forward, alpha, beta, stream);
  else if (variant == 0)
    fusedTiles<2>(a, codes, absmax, c, m, n, k, forward, alpha, beta, stream);
  else
    fusedTiles<4>(a, codes, absmax, c, m, n, k, forward, alpha, beta, stream);
}
template <int kWarpsM> void allowShared() {
  int bytes = kiln_nf4::Tiles<kWarpsM>::kSharedBytes;
  CUDA_OK(cudaFuncSetAttribute(kiln_nf4::nf4Gemm<true, kWarpsM>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  CUDA_OK(cudaFuncSetAttribute(kiln_nf4::nf4Gemm<false, kWarpsM>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <class F> float medianMs(F &&f, int warmup, int reps) {
  cudaEvent_t b, e;
  CUDA_OK(cudaEventCreate(&b));
  CUDA_OK(cudaEventCreate(&e));
  for (int i = 0; i < warmup; ++i)
    f();
  std::vector<float> t;
  for (int i = 0; i < reps; ++i) {
    CUDA_OK(cudaEventRecord(b));
    f();
    CUDA_OK(cudaEventRecord(e));
    CUDA_OK(cudaEventSynchronize(e));
    float ms;
    CUDA_OK(cudaEventElapsedTime(&ms, b, e));
    t.push_back(ms);
  }
  CUDA_OK(cudaEventDestroy(b));
  CUDA_OK(cudaEventDestroy(e));
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// A kernel that has not finished after 10 s is reported and ends the run
// (a deadlocked pipeline would otherwise hang it).
void finishOrDie(const char *what) {
  for (int i = 0; i < 10000; ++i) {
    cudaError_t e = cudaStreamQuery(0);
    if (e == cudaSuccess)
      return;
    if (e != cudaErrorNotReady)
      CUDA_OK(e);
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, nullptr);
  }
  std::printf("HANG: %s did not finish within 10 s\n", what);
  std::fflush(stdout);
  std::_Exit(3);
}

int main(int argc, char **argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  const std::string mode = argc > 2 ? argv[2] : "wgmma";
  const bool all = mode == "all", tma = all || mode == "tma";
  if (!all && !tma && mode != "wgmma") {
    std::fprintf(stderr, "nf4_gemm_check: unknown mode '%s' (wgmma, tma, all)\n", mode.c_str());
    return 2;
  }
  allowShared<2>();
  allowShared<4>();
  {
    const int bytes = kiln_nf4_90::kSharedBytes;
    const auto attr = cudaFuncAttributeMaxDynamicSharedMemorySize;
    CUDA_OK(cudaFuncSetAttribute(kiln_nf4_90::nf4Gemm90<true, false, false>, attr, bytes));
    CUDA_OK(cudaFuncSetAttribute(kiln_nf4_90::nf4Gemm90<false, false, false>, attr, bytes));
    CUDA_OK(cudaFuncSetAttribute(kiln_nf4_90::nf4Gemm90<true, true, false>, attr, bytes));
    CUDA_OK(cudaFuncSetAttribute(kiln_nf4_90::nf4Gemm90<false, true, false>, attr, bytes));
    CUDA_OK(cudaFuncSetAttribute(kiln_nf4_90::nf4Gemm90<true, false, true>, attr, bytes));
    CUDA_OK(cudaFuncSetAttribute(kiln_nf4_90::nf4Gemm90<false, false, true>, attr, bytes));
    CUDA_OK(cudaFuncSetAttribute(kiln_nf4_90::nf4Gemm90<true, true, true>, attr, bytes));
    CUDA_OK(cudaFuncSetAttribute(kiln_nf4_90::nf4Gemm90<false, true, true>, attr, bytes));
  }
  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  Lt lt;
  LT_OK(cublasLtCreate(&lt.handle));
  CUDA_OK(cudaMalloc(&lt.workspace, lt.workspaceBytes));

  // The bench 1b linear layers (tokens 8192): {m, out, in}. Forward:
  // m x out x in; gradient: m x in x out, over the same weight.
  struct Shape { int m, out, in; const char *name; };
  const Shape shapes[] = {{8192, 2048, 2048, "q/o_proj"}, {8192, 8192, 2048, "gate/up_proj"},
                          {8192, 2048, 8192, "down_proj"}, {8192, 512, 2048, "k/v_proj"}};
  std::printf("%-13s %-8s %-18s %-8s %9s %9s %9s %9s %8s %8s %10s %7s %s\n", "layer", "pass", "m x n x k", "tiles",
              "err fused", "err cublas", "fused-lt", "fused ms", "deq ms", "lt ms", "deq+lt ms", "TFLOP/s", "result");
  bool allPass = true;
  uint64_t seed = 12345;
  for (const Shape &s : shapes)
    for (int pass = 0; pass < 5; ++pass) {
      // pass 0: forward; 1: input gradient; 2: forward with alpha 0.5, beta 1
      // (the accumulating form); 3, 4: forward and gradient with the absmax
      // double-quantized.
      bool forward = pass != 1 && pass != 4, doubleQuant = pass >= 3;
      float alpha = pass == 2 ? 0.5f : 1.f, beta = pass == 2 ? 1.f : 0.f;
      if ((pass == 2 && s.out != 2048) || (doubleQuant && s.out == 512))
        continue;
      int m = s.m, n = forward ? s.out : s.in, k = forward ? s.in : s.out;
      size_t weights = (size_t)s.out * s.in;
      uint8_t *codes;
      float *absmax;
      __nv_bfloat16 *w, *a, *c, *cRef, *cInit;
      CUDA_OK(cudaMalloc(&codes, weights / 2));
      CUDA_OK(cudaMalloc(&absmax, weights / 64 * sizeof(float)));
      CUDA_OK(cudaMalloc(&w, weights * 2));
      CUDA_OK(cudaMalloc(&a, (size_t)m * k * 2));
      CUDA_OK(cudaMalloc(&c, (size_t)m * n * 2));
      CUDA_OK(cudaMalloc(&cRef, (size_t)m * n * 2));
      CUDA_OK(cudaMalloc(&cInit, (size_t)m * n * 2));
      ++seed;
      randomBytes<<<1024, 256>>>(codes, weights / 2, seed * 3);
      DoubleQuant dq;
      uint8_t *dqCodes = nullptr;
      float *dqScale = nullptr;
      if (doubleQuant) {
        CUDA_OK(cudaMalloc(&dqCodes, weights / 64));
        CUDA_OK(cudaMalloc(&dqScale, (weights / 64 + 255) / 256 * sizeof(float)));
        randomBytes<<<1024, 256>>>(dqCodes, weights / 64, seed * 3 + 1);
        randomScale<<<64, 256>>>(dqScale, (weights / 64 + 255) / 256, seed * 5 + 1);
        dq.codes = dqCodes;
        dq.scale = dqScale;
        dq.offset = 0.035f;
        decodeAbsmax<<<1024, 256>>>(dqCodes, dqScale, dq.offset, absmax, weights / 64, hostMap());
      } else {
        randomAbsmax<<<1024, 256>>>(absmax, weights / 64, seed * 3 + 1);
      }
      randomBf16<<<1024, 256>>>(a, (size_t)m * k, seed * 3 + 2);
      randomBf16<<<1024, 256>>>(cInit, (size_t)m * n, seed * 3 + 3);
      CUDA_OK(cudaGetLastError());
      dequantize<<<2048, 256>>>(codes, absmax, w, weights / 2);
      CUDA_OK(cudaGetLastError());

      // Outputs: poisoned (NaN) for beta = 0, the random initial C for beta = 1.
      auto prepare = [&](__nv_bfloat16 *out) {
        if (beta == 0.f)
          fillBits<<<1024, 256>>>(reinterpret_cast<uint16_t *>(out), (size_t)m * n, 0x7fc1);
        else
          CUDA_OK(cudaMemcpy(out, cInit, (size_t)m * n * 2, cudaMemcpyDeviceToDevice));
        CUDA_OK(cudaGetLastError());
      };
      prepare(cRef);
      ltGemm(lt, a, w, cRef, m, n, k, forward, alpha, beta, 0);
      CUDA_OK(cudaDeviceSynchronize());

      // float64 reference on 64 sampled rows: alpha A op(W) + beta C_init.
      const int samples = 64;
      std::vector<int> rows(samples);
      for (int r = 0; r < samples; ++r)
        rows[r] = (int)((seed * 2654435761ull + r * 40503ull) % m);
      int *dRows;
      double *ref, *sums;
      unsigned long long *bad;
      CUDA_OK(cudaMalloc(&dRows, samples * sizeof(int)));
      CUDA_OK(cudaMalloc(&ref, (size_t)samples * n * sizeof(double)));
      CUDA_OK(cudaMalloc(&sums, 6 * sizeof(double)));
      CUDA_OK(cudaMalloc(&bad, sizeof(unsigned long long)));
      CUDA_OK(cudaMemcpy(dRows, rows.data(), samples * sizeof(int), cudaMemcpyHostToDevice));
      referenceRows<<<dim3((n + 127) / 128, samples), 128>>>(a, w, dRows, ref, samples, n, k, forward);
      CUDA_OK(cudaGetLastError());
      std::vector<double> hostRef((size_t)samples * n);
      CUDA_OK(cudaMemcpy(hostRef.data(), ref, hostRef.size() * sizeof(double), cudaMemcpyDeviceToHost));
      std::vector<__nv_bfloat16> init((size_t)m * n);
      CUDA_OK(cudaMemcpy(init.data(), cInit, init.size() * 2, cudaMemcpyDeviceToHost));
      for (int r = 0; r < samples; ++r)
        for (int j = 0; j < n; ++j)
          hostRef[(size_t)r * n + j] = alpha * hostRef[(size_t)r * n + j] +
                                       beta * (double)__bfloat162float(init[(size_t)rows[r] * n + j]);
      CUDA_OK(cudaMemcpy(ref, hostRef.data(), hostRef.size() * sizeof(double), cudaMemcpyHostToDevice));

      float deqMs = medianMs([&] { dequantize<<<2048, 256>>>(codes, absmax, w, weights / 2); }, 3, reps);
      float ltMs = medianMs([&] { ltGemm(lt, a, w, cRef, m, n, k, forward, alpha, beta, 0); },
                            3, reps);
      float bothMs = medianMs(
          [&] {
            dequantize<<<2048, 256>>>(codes, absmax, w, weights / 2);
            ltGemm(lt, a, w, cRef, m, n, k, forward, alpha, beta, 0);
          },
          3, reps);
      gActivationMap = activationMap(a, m, k);
      for (int variant = all ? 0 : 2; variant < (tma ? 4 : 3); ++variant) {
        if (variant == 1 && !kiln_nf4::nf4GemmSupported<4>(m, n, k))
          continue;
        if (variant >= 2 && (prop.major != 9 || !kiln_nf4_90::nf4Gemm90Supported(m, n, k)))
          continue;
        if (doubleQuant && variant < 2)
          continue;
        // The library's output again (the timing above accumulated into it).
        prepare(cRef);
        ltGemm(lt, a, w, cRef, m, n, k, forward, alpha, beta, 0);
        prepare(c);
        fused(variant, a, codes, absmax, dq, c, m, n, k, forward, alpha, beta, 0);
        finishOrDie("the fused kernel");
        CUDA_OK(cudaMemset(sums, 0, 6 * sizeof(double)));
        CUDA_OK(cudaMemset(bad, 0, sizeof(unsigned long long)));
        compareRows<<<256, 256>>>(c, dRows, ref, samples, n, sums);
        compareRows<<<256, 256>>>(cRef, dRows, ref, samples, n, sums + 2);
        compareAll<<<1024, 256>>>(c, cRef, (size_t)m * n, sums + 4, bad);
        CUDA_OK(cudaGetLastError());
        double h[6];
        unsigned long long nonfinite;
        CUDA_OK(cudaMemcpy(h, sums, sizeof(h), cudaMemcpyDeviceToHost));
        CUDA_OK(cudaMemcpy(&nonfinite, bad, sizeof(nonfinite), cudaMemcpyDeviceToHost));
        double errFused = std::sqrt(h[0] / h[1]), errLt = std::sqrt(h[2] / h[3]), diff = std::sqrt(h[4] / h[5]);
        // The bf16 policy (docs/codegen.md): no worse than the library's own
        // bf16 GEMM on the same operands (1.5x margin, as the attention
        // check), every element written and finite.
        bool ok = nonfinite == 0 && std::isfinite(errFused) && errFused <= 1.5 * errLt + 1e-6 && errFused < 1e-2;
        allPass &= ok;
        float fusedMs = medianMs([&] { fused(variant, a, codes, absmax, dq, c, m, n, k, forward, alpha, beta, 0); }, 3,
                                 reps);
        char dims[32];
        std::snprintf(dims, sizeof(dims), "%dx%dx%d", m, n, k);
        const char *passName = pass == 0 ? "fwd" : pass == 1 ? "dgrad" : pass == 2 ? "fwd+acc" : pass == 3 ? "fwd dq" : "dgrad dq";
        std::printf("%-13s %-8s %-18s %-8s %9.2e %9.2e %9.2e %9.3f %8.3f %8.3f %10.3f %7.1f %s%s\n", s.name, passName,
                    dims, variant == 3 ? "wgmmaTMA" : variant == 2 ? "wgmma" : variant ? "256x128" : "128x128", errFused, errLt, diff, fusedMs, deqMs, ltMs, bothMs,
                    2.0 * m * n * k / (fusedMs * 1e9), ok ? "PASS" : "FAIL", nonfinite ? " (non-finite outputs)" : "");
        std::fflush(stdout);
      }
      cudaFree(dqCodes); cudaFree(dqScale);
      cudaFree(codes); cudaFree(absmax); cudaFree(w); cudaFree(a); cudaFree(c); cudaFree(cRef); cudaFree(cInit);
      cudaFree(dRows); cudaFree(ref); cudaFree(sums); cudaFree(bad);
    }
  std::printf("%s\n", allPass ? "all cases PASS" : "SOME CASES FAILED");
  return allPass ? 0 : 1;
}
