//===- Nf4Gemm90.cuh - wgmma GEMM whose weight operand is NF4 codes -------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// C = alpha * A * op(W) + beta * C for Hopper (sm_90a: wgmma, setmaxnreg),
// the same function as Nf4Gemm.cuh (W a frozen [out, in] weight stored as
// kiln.nf4_quantize's codes: blocks of 64, two codes per byte, the even
// element in the high nibble; absmax fp32, or QLoRA's double quantization:
// uint8 dynamic-map codes, one fp32 scale per 256 blocks and an fp32 offset).
//
//   kForward = true : C[M, N] = A[M, K] * W^T,  W [N, K]  (x * W^T)
//   kForward = false: C[M, N] = A[M, K] * W,    W [K, N]  (dy * W)
//
// The weight is wgmma's A operand, from registers: a block computes the
// transposed tile C^T[128 weight rows][256 tokens] = W' * A^T, W' = W
// (forward) or W^T (gradient). So the 4-bit codes go from shared memory
// straight into the registers wgmma reads, dequantized there (fp32 value *
// absmax, rounded to bf16: kiln.nf4_dequantize's arithmetic, so the operand
// is bit-identical to dequantize + GEMM), and no bf16 copy of the weight is
// written anywhere, not even to shared memory. The activations are the B
// operand (K-major, 128-byte swizzle), read by the wgmma descriptors.
//
// Three warpgroups (as kiln_fa90): a producer copies the activation tile
// (256 tokens x 64 k, cp.async with the swizzle computed per 16-byte chunk),
// the codes of the 128 weight rows and their absmax (decoded from the
// double-quantized form here) into a 4-stage ring and hands each stage over
// on an mbarrier; two consumers of 64 weight rows each dequantize their A
// fragments for k tile t+1 while the wgmmas (m64n256k16) of tile t run. A
// fragment register holds a pair of elements adjacent in k: in the forward
// that is one code byte of a weight row; in the gradient the pair spans two
// weight rows, so the consumer dequantizes 8x8 blocks along the rows (one
// byte each) and transposes them in registers (movmatrix). The epilogue
// stages alpha * acc (fp32) in the ring, transposed back, and writes C in
// 16-byte rows, adding beta * C (one rounding, as cuBLASLt).
//
// Needs M % 256 == 0, N % 128 == 0, K % 64 == 0 and 16-byte aligned
// pointers (nf4Gemm90Supported); the caller falls back otherwise.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_KERNELS_NF4GEMM90_CUH
#define KILN_RUNTIME_KERNELS_NF4GEMM90_CUH

#include <cuda_bf16.h>
#ifdef __CUDACC_RTC__
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned char uint8_t;
typedef unsigned long long uintptr_t;
#else
#include <stdint.h>
#endif

namespace kiln_nf4_90 {

constexpr int kRows = 128;   // weight rows per block (C columns): two consumers x 64
constexpr int kTokens = 256; // tokens per block (C rows): wgmma's N
constexpr int kDepth = 64;   // k per stage
#ifndef KILN_NF4_90_ABLATE
#define KILN_NF4_90_ABLATE 0
#endif
#ifndef KILN_NF4_90_STAGES
#define KILN_NF4_90_STAGES 4
#endif
constexpr int kStages = KILN_NF4_90_STAGES;
constexpr int kThreads = 384;
// One stage: the activation tile (1024-aligned: the swizzle repeats every
// 8 rows of 128 bytes), the codes (rows padded so that a warp's reads of 8
// rows hit distinct banks), the absmax of the tile.
constexpr int kActBytes = kTokens * kDepth * 2;           // 32 KiB
constexpr int kCodePitchForward = 48, kCodePitchGradient = 72;
constexpr int kCodeBytes = kRows * kCodePitchForward;     // >= 64 * 72
constexpr int kAbsBytes = kRows * 4;
constexpr int kStageBytes = (kActBytes + kCodeBytes + kAbsBytes + 1023) / 1024 * 1024;
constexpr int kBarOffset = kStages * kStageBytes;
constexpr int kLutOffset = kBarOffset + 2 * kStages * 8;
constexpr int kMapOffset = kLutOffset + 16 * 4;
constexpr int kSharedBytes = kMapOffset + 256 * 4 + 1024; // + alignment slack
// Epilogue staging, per consumer: [256 tokens][64 rows + 4] fp32.
constexpr int kStagePitch = 68;
static_assert(2 * kTokens * kStagePitch * 4 <= kBarOffset, "epilogue staging exceeds the ring");
static_assert(kSharedBytes <= 227 * 1024, "more shared memory than an sm_90 block gets");
static_assert(64 * kCodePitchGradient <= kCodeBytes, "gradient codes exceed their stage slot");

// The 256 values of the 8-bit dynamic map (include/kiln/Support/DynamicMap8.h),
// passed by value: double-quantized absmax codes index it.
struct Map8 {
  float v[256];
};
// A CUtensorMap's 128 bytes (NVRTC has no <cuda.h>).
struct alignas(64) TensorMap {
  unsigned long long v[16];
};

__device__ __constant__ float kNf4Values90[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};

inline bool nf4Gemm90Supported(long long m, long long n, long long k) {
  return m > 0 && n > 0 && k > 0 && m % kTokens == 0 && n % kRows == 0 && k % kDepth == 0 &&
         m <= 0x7fffffff && n <= 0x7fffffff && k <= 0x7fffffff;
}

__device__ __forceinline__ uint32_t smemAddr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void cpAsync16(uint32_t dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cpAsync8(uint32_t dst, const void *src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
__device__ __forceinline__ void fenceProxyAsync() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void barrierInit(uint32_t bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void barrierArrive(uint32_t bar) {
  asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(bar)
               : "memory");
}
__device__ __forceinline__ void barrierExpectBytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
// The box at (column x, row y) of a 2-D tensor map into shared memory; its
// bytes complete the transaction count of mbarrier `bar`.
__device__ __forceinline__ void bulkTensorLoad(uint32_t dst, const TensorMap *map, int x, int y,
                                               uint32_t bar) {
  asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3}], [%4];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(map)), "r"(x), "r"(y), "r"(bar)
               : "memory");
}
__device__ __forceinline__ void barrierWait(uint32_t bar, uint32_t parity) {
  asm volatile("{\n.reg .pred done;\nwait_%=:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra wait_%=;\n}\n" ::"r"(bar),
               "r"(parity)
               : "memory");
}
__device__ __forceinline__ void namedSync(int id, int threads) {
  asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void mmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void mmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void mmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator accesses across the
// asynchronous products, and from reusing the registers of A fragments that
// a product in flight still reads.
template <int N> __device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
}
__device__ __forceinline__ void pinFragments(uint32_t (&a)[4][4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      asm volatile("" : "+r"(a[i][j])::"memory");
}
__device__ __forceinline__ uint32_t transpose8x8(uint32_t x) {
  uint32_t y;
  asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;\n" : "=r"(y) : "r"(x));
  return y;
}
// A 128-byte-swizzle, K-major wgmma descriptor (LBO unused, SBO 1024: the
// next 8 rows).
__device__ __forceinline__ uint64_t descriptor(uint32_t addr) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) |
         (1ull << 62);
}
// One code byte (bits [shift, shift + 8) of word) times absmax, as the bf16
// pair (even element low) that a fragment register holds.
__device__ __forceinline__ uint32_t pairOf(uint32_t word, uint32_t shift, float absmax,
                                           const float *lut) {
  const uint32_t byte = (word >> shift) & 0xffu;
  __nv_bfloat162 p = __floats2bfloat162_rn(lut[byte >> 4] * absmax, lut[byte & 15u] * absmax);
  return *reinterpret_cast<uint32_t *>(&p);
}

// D[64 x 256] (+)= A[64 x 16] (registers) * B[16 x 256] (shared, K-major,
// 128-byte swizzle): wgmma.m64n256k16, bf16 in, fp32 accumulators.
// Generated by bench/nf4gemm/gen_wgmma.py. scale-d from a register (NVRTC).
__device__ __forceinline__ void mma256(float (&d)[128], const uint32_t (&a)[4], uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]), "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scaleD));
}

template <int V> struct Int {
  static constexpr int value = V;
};

// absmax: fp32 absmax per block, or with kDouble the fp32 scale per 256
// blocks; absmaxCodes and absmaxOffset: the double-quantized codes and
// offset (absmax = map[code] * scale + offset, one fused multiply-add);
// map: the dynamic map (read only with kDouble). kTma: the activation tile
// comes by one bulk tensor copy per stage (the TMA engine, through
// `activations`, a tensor map of A [m, k] bf16 with a 64 x 256 box and the
// 128-byte swizzle: tensorMapOfActivations), not by 2048 16-byte cp.async.
// The kernel's body as a device function, so that the runtime's entry points
// (kernels/Nf4GemmKernels.cu: extern "C", the map in constant memory) and the
// template kernel below share it; `map` and `activations` must live in
// parameter, constant or global memory (the tensor map: TMA reads it there).
template <bool kForward, bool kDouble, bool kTma>
__device__ __forceinline__ void
nf4Gemm90Body(const __nv_bfloat16 *__restrict__ a, const uint8_t *__restrict__ codes,
              const float *__restrict__ absmax, const uint8_t *__restrict__ absmaxCodes,
              float absmaxOffset, const Map8 &map, __nv_bfloat16 *c, int m, int n, int k,
              float alpha, float beta, const TensorMap &activations) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap(); // built for another target (sm_90a only: wgmma, setmaxnreg)
#else
  extern __shared__ unsigned char smemRaw[];
  unsigned char *smem = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(smemRaw) + 1023) & ~static_cast<uintptr_t>(1023));
  const uint32_t base = smemAddr(smem), bars = base + kBarOffset;
  float *lut = reinterpret_cast<float *>(smem + kLutOffset);
  float *map8 = reinterpret_cast<float *>(smem + kMapOffset);
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (kStages + s); };
  const int n0 = blockIdx.x * kRows, m0 = blockIdx.y * kTokens;
  const int tiles = k / kDepth;
  const int group = threadIdx.x / 128, tid = threadIdx.x % 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      // every producer thread (+ thread 0's expected-bytes arrival with TMA)
      barrierInit(full(s), kTma ? 129 : 128);
      barrierInit(empty(s), 8);  // lane 0 of every consumer warp
    }
  }
  if (threadIdx.x < 16)
    lut[threadIdx.x] = kNf4Values90[threadIdx.x];
  if (kDouble)
    for (int i = threadIdx.x; i < 256; i += kThreads)
      map8[i] = map.v[i];
  __syncthreads();

  if (group == 0) { // producer
    // Registers move to the consumers. setmaxnreg.inc waits until the pool
    // has them, so the budget is the launch's 168 x 384: 128 x 56 + 256 x 224.
    asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n");
    for (int t = 0; t < tiles; ++t) {
      const int s = t % kStages, k0 = t * kDepth;
      // This thread's absmax: weight row n0 + tid (forward), or row
      // k0 + tid / 2 and 64-column block tid % 2 (gradient).
      const long long block = kForward
                                  ? (long long)(n0 + tid) * (k / 64) + k0 / 64
                                  : (long long)(k0 + (tid >> 1)) * (n / 64) + n0 / 64 + (tid & 1);
      float scale;
      if (kDouble)
        scale = fmaf(map8[__ldg(absmaxCodes + block)], __ldg(absmax + block / 256), absmaxOffset);
      else
        scale = __ldg(absmax + block);
      if (t >= kStages)
        barrierWait(empty(s), ((t / kStages) - 1) & 1);
      const uint32_t act = base + s * kStageBytes, cod = act + kActBytes;
      if (kTma) {
        if (tid == 0) {
          barrierExpectBytes(full(s), kActBytes);
          bulkTensorLoad(act, &activations, k0, m0, full(s));
        }
      } else {
#pragma unroll
        for (int u = 0; u < kTokens * 8 / 128; ++u) {
          const int e = tid + 128 * u, r = e >> 3, ch = e & 7;
          cpAsync16(act + r * 128 + ((ch ^ (r & 7)) << 4), a + (size_t)(m0 + r) * k + k0 + ch * 8);
        }
      }
      if (kForward) {
#pragma unroll
        for (int u = 0; u < 2; ++u) { // 128 rows x 32 bytes
          const int e = tid + 128 * u, r = e >> 1, h = e & 1;
          cpAsync16(cod + r * kCodePitchForward + 16 * h,
                    codes + ((size_t)(n0 + r) * k + k0) / 2 + 16 * h);
        }
      } else {
#pragma unroll
        for (int u = 0; u < 4; ++u) { // 64 rows x 64 bytes
          const int e = tid + 128 * u, r = e >> 3, q = e & 7;
          cpAsync8(cod + r * kCodePitchGradient + 8 * q,
                   codes + ((size_t)(k0 + r) * n + n0) / 2 + 8 * q);
        }
      }
      cpAsyncCommit();
      reinterpret_cast<float *>(smem + s * kStageBytes + kActBytes + kCodeBytes)[tid] = scale;
      if (t > 0) { // the previous stage has landed: hand it over
        cpAsyncWait<1>();
        fenceProxyAsync();
        barrierArrive(full((t - 1) % kStages));
      }
    }
    cpAsyncWait<0>();
    fenceProxyAsync();
    barrierArrive(full((tiles - 1) % kStages));
    return;
  }

  // consumers: 64 weight rows each
  asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n");
  const int cg = group - 1, warp = tid / 32, lane = tid % 32, g = lane >> 2, quad = lane & 3;
  const uint32_t shift = 8 * quad;
  float acc[128];
#pragma unroll
  for (int i = 0; i < 128; ++i)
    acc[i] = 0.f;
  uint32_t frag[2][4][4];

  // The A fragments of k tile `tile` (registers i of k step kk: rows g + 8 (i & 1),
  // k 2 quad + 8 (i >> 1), pairs adjacent in k).
  auto dequantize = [&](int tile, uint32_t (&f)[4][4]) {
    const int s = tile % kStages;
    barrierWait(full(s), (tile / kStages) & 1);
    const unsigned char *cs = smem + s * kStageBytes + kActBytes;
    const float *as = reinterpret_cast<const float *>(cs + kCodeBytes);
#if KILN_NF4_90_ABLATE == 1 // timing diagnostic only: no dequantization (wrong results)
#pragma unroll
    for (int kk = 0; kk < 4; ++kk)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        f[kk][i] = 0x3c003c00u ^ (uint32_t)(tile + kk + i);
    return;
#endif
    if (kForward) {
      // Word j of a row holds k 8j..8j+7; its byte `quad` is this thread's pair.
      const int lo = 64 * cg + 16 * warp + g, hi = lo + 8;
      const float sLo = as[lo], sHi = as[hi];
      const uint4 l0 = *reinterpret_cast<const uint4 *>(cs + lo * kCodePitchForward);
      const uint4 l1 = *reinterpret_cast<const uint4 *>(cs + lo * kCodePitchForward + 16);
      const uint4 h0 = *reinterpret_cast<const uint4 *>(cs + hi * kCodePitchForward);
      const uint4 h1 = *reinterpret_cast<const uint4 *>(cs + hi * kCodePitchForward + 16);
      const uint32_t lw[8] = {l0.x, l0.y, l0.z, l0.w, l1.x, l1.y, l1.z, l1.w};
      const uint32_t hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        f[kk][0] = pairOf(lw[2 * kk], shift, sLo, lut);
        f[kk][1] = pairOf(hw[2 * kk], shift, sHi, lut);
        f[kk][2] = pairOf(lw[2 * kk + 1], shift, sLo, lut);
        f[kk][3] = pairOf(hw[2 * kk + 1], shift, sHi, lut);
      }
    } else {
      // 8x8 blocks (k row g, n pair quad) of W, one byte each, transposed
      // into (n row g, k pair quad). This warp's 16 columns start at byte
      // 32 cg + 8 warp of a stored row.
      const int offset = 32 * cg + 8 * warp;
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int row = 16 * kk + 8 * h + g;
          const float sc = as[row * 2 + cg];
          const uint2 v =
              *reinterpret_cast<const uint2 *>(cs + row * kCodePitchGradient + offset);
          f[kk][2 * h] = transpose8x8(pairOf(v.x, shift, sc, lut));
          f[kk][2 * h + 1] = transpose8x8(pairOf(v.y, shift, sc, lut));
        }
    }
  };
  auto issue = [&](int tile, const uint32_t (&f)[4][4]) {
    const uint32_t act = base + (tile % kStages) * kStageBytes;
    mmaFence();
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
#if KILN_NF4_90_ABLATE == 2 // timing diagnostic only: no products (wrong results)
      acc[kk] += __uint_as_float((f[kk][0] ^ f[kk][1] ^ f[kk][2] ^ f[kk][3]) & 0x3fffffffu);
#else
      mma256(acc, f[kk], descriptor(act + kk * 32), 1);
#endif
    }
    mmaCommit();
  };
  auto release = [&](int tile) {
    __syncwarp();
    if (lane == 0)
      barrierArrive(empty(tile % kStages));
  };
  // Tile t's products run while tile t+1 is dequantized into the other
  // fragment set (the one tile t-1's products read, done by then).
  auto step = [&](int t, auto cur) {
    constexpr int b = decltype(cur)::value;
    issue(t, frag[b]);
    mmaWait<1>();
    pinFragments(frag[b ^ 1]);
    if (t > 0)
      release(t - 1);
    if (t + 1 < tiles)
      dequantize(t + 1, frag[b ^ 1]);
  };
  dequantize(0, frag[0]);
  for (int t = 0; t < tiles; t += 2) {
    step(t, Int<0>());
    if (t + 1 < tiles)
      step(t + 1, Int<1>());
  }
  mmaWait<0>();
  pin(acc);
  pinFragments(frag[0]);
  pinFragments(frag[1]);
  release(tiles - 1);

  // Epilogue: both consumers are done with the ring; each stages its
  // alpha * acc transposed ([token][weight row], fp32) and writes C rows of
  // 8 elements (16 bytes) per thread.
  namedSync(1, 256);
  float *stage = reinterpret_cast<float *>(smem + cg * kTokens * kStagePitch * 4);
#pragma unroll
  for (int jb = 0; jb < 32; ++jb)
#pragma unroll
    for (int h = 0; h < 2; ++h)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        stage[(8 * jb + 2 * quad + e) * kStagePitch + 16 * warp + g + 8 * h] =
            alpha * acc[4 * jb + 2 * h + e];
  namedSync(2 + cg, 128);
#pragma unroll 4
  for (int i = 0; i < kTokens * 8 / 128; ++i) {
    const int item = tid + 128 * i, j = item >> 3, q = item & 7;
    const float4 x0 = *reinterpret_cast<const float4 *>(stage + j * kStagePitch + 8 * q);
    const float4 x1 = *reinterpret_cast<const float4 *>(stage + j * kStagePitch + 8 * q + 4);
    float v[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    __nv_bfloat16 *out = c + (size_t)(m0 + j) * n + n0 + 64 * cg + 8 * q;
    if (beta != 0.f) {
      const uint4 old = *reinterpret_cast<const uint4 *>(out);
      const uint32_t ow[4] = {old.x, old.y, old.z, old.w};
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const float2 o = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(&ow[p]));
        v[2 * p] = fmaf(beta, o.x, v[2 * p]);
        v[2 * p + 1] = fmaf(beta, o.y, v[2 * p + 1]);
      }
    }
    uint32_t w[4];
#pragma unroll
    for (int p = 0; p < 4; ++p) {
      __nv_bfloat162 pair = __floats2bfloat162_rn(v[2 * p], v[2 * p + 1]);
      w[p] = *reinterpret_cast<uint32_t *>(&pair);
    }
    *reinterpret_cast<uint4 *>(out) = make_uint4(w[0], w[1], w[2], w[3]);
  }
#endif
}

template <bool kForward, bool kDouble, bool kTma = false>
__global__ void __launch_bounds__(kThreads, 1)
    nf4Gemm90(const __nv_bfloat16 *__restrict__ a, const uint8_t *__restrict__ codes,
              const float *__restrict__ absmax, const uint8_t *__restrict__ absmaxCodes,
              float absmaxOffset, const __grid_constant__ Map8 map, __nv_bfloat16 *c, int m,
              int n, int k, float alpha, float beta,
              const __grid_constant__ TensorMap activations) {
  nf4Gemm90Body<kForward, kDouble, kTma>(a, codes, absmax, absmaxCodes, absmaxOffset, map, c, m,
                                         n, k, alpha, beta, activations);
}

} // namespace kiln_nf4_90

#endif // KILN_RUNTIME_KERNELS_NF4GEMM90_CUH
