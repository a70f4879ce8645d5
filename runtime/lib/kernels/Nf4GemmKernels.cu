// Kiln's fused NF4 GEMM (Nf4Gemm90.cuh) as the runtime runs it in a step:
// extern "C" entry points for the forward (x W^T) and the input gradient
// (dy W), with fp32 absmax or QLoRA's double quantization. Built by nvcc
// for sm_90a only and embedded in the runtime (runtime/lib/CMakeLists.txt);
// other devices never load it, so the fused kernel is simply not a
// candidate there. The dynamic map lives in constant memory, the mean of
// the absmax is read from its device buffer (a parameter the init program
// writes, so no host copy is needed when the step is prepared).

#include "Nf4Gemm90.cuh"

#include "kiln/Support/DynamicMap8.h"

namespace {
constexpr kiln_nf4_90::Map8 makeMap() {
  kiln_nf4_90::Map8 map{};
  for (int i = 0; i < 256; ++i)
    map.v[i] = kiln::kDynamicMap8[i];
  return map;
}
__constant__ kiln_nf4_90::Map8 kMap8 = makeMap();
__constant__ kiln_nf4_90::TensorMap kNoTensorMap = {}; // the cp.async form reads none
} // namespace

extern "C" {

__global__ void __launch_bounds__(kiln_nf4_90::kThreads, 1)
    kiln_nf4_gemm90_fwd(const __nv_bfloat16 *a, const uint8_t *codes, const float *absmax,
                        __nv_bfloat16 *c, int m, int n, int k, float alpha, float beta) {
  kiln_nf4_90::nf4Gemm90Body<true, false, false>(a, codes, absmax, nullptr, 0.f, kMap8, c, m, n,
                                                 k, alpha, beta, kNoTensorMap);
}

__global__ void __launch_bounds__(kiln_nf4_90::kThreads, 1)
    kiln_nf4_gemm90_dgrad(const __nv_bfloat16 *a, const uint8_t *codes, const float *absmax,
                          __nv_bfloat16 *c, int m, int n, int k, float alpha, float beta) {
  kiln_nf4_90::nf4Gemm90Body<false, false, false>(a, codes, absmax, nullptr, 0.f, kMap8, c, m, n,
                                                  k, alpha, beta, kNoTensorMap);
}

// absmax = map8[absmaxCodes[i]] * scale[i / 256] + offset[0].
__global__ void __launch_bounds__(kiln_nf4_90::kThreads, 1)
    kiln_nf4_gemm90_fwd_dq(const __nv_bfloat16 *a, const uint8_t *codes,
                           const uint8_t *absmaxCodes, const float *scale, const float *offset,
                           __nv_bfloat16 *c, int m, int n, int k, float alpha, float beta) {
  kiln_nf4_90::nf4Gemm90Body<true, true, false>(a, codes, scale, absmaxCodes, *offset, kMap8, c,
                                                m, n, k, alpha, beta, kNoTensorMap);
}

__global__ void __launch_bounds__(kiln_nf4_90::kThreads, 1)
    kiln_nf4_gemm90_dgrad_dq(const __nv_bfloat16 *a, const uint8_t *codes,
                             const uint8_t *absmaxCodes, const float *scale, const float *offset,
                             __nv_bfloat16 *c, int m, int n, int k, float alpha, float beta) {
  kiln_nf4_90::nf4Gemm90Body<false, true, false>(a, codes, scale, absmaxCodes, *offset, kMap8, c,
                                                 m, n, k, alpha, beta, kNoTensorMap);
}

} // extern "C"

// The runtime launches these with kiln::runtime::kNf4GemmSharedBytes of
// dynamic shared memory, 384 threads and a grid of (n / 128, m / 256)
// (kiln/runtime/Nf4Gemm.h): the build stops here if the kernel's change.
static_assert(kiln_nf4_90::kSharedBytes == 161920, "update kNf4GemmSharedBytes in Nf4Gemm.h");
static_assert(kiln_nf4_90::kThreads == 384 && kiln_nf4_90::kRows == 128 &&
                  kiln_nf4_90::kTokens == 256 && kiln_nf4_90::kDepth == 64,
              "update the launch geometry in Nf4Gemm.h and Nf4Pairing.cpp");
