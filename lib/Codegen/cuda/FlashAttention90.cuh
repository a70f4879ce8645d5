// Kiln's attention forward for Hopper (lib/Codegen/cuda/FlashAttention90.cuh).
//
// sm_90a only (wgmma, setmaxnreg): the artifact carries this image beside
// the portable kiln_flash kernels (FlashAttention.cuh), and the runtime runs
// it on sm_90 when the shape fits (docs/codegen.md, "Attention on Hopper").
//
// A block owns 64 NC query rows of one (batch, head): a producer warpgroup
// and NC consumer warpgroups of 64 rows each (NC = 3 at head dim 64, 2 at
// 128). The producer copies K and V
// tiles of 128 keys (16-byte cp.async, zero-filled past the keys) into a
// 3-stage ring of shared memory in the 128-byte-swizzled layout wgmma reads,
// and hands each stage over on an mbarrier ("full"); the consumers hand it
// back ("empty") after their products. A consumer computes S = Q K^T with
// wgmma from shared memory (m64n128k16), the online softmax in registers
// (exp2 with scale * log2(e) folded in), and O += P V with P straight from
// the accumulator registers as wgmma's A operand (m64nDk16, V N-major).
// P is rounded once to bf16/f16, as FlashAttention does (the numerics
// policy of docs/codegen.md). Grouped-query attention reads K/V head
// h / (H / Hkv) directly. The row log-sum-exp (natural log, of the scaled
// scores) is written for the backward when the caller passes a buffer:
// [B, H, Sq] fp32, the layout of cuDNN's Stats.
//
// Why cp.async and not TMA: a tensor map must be built on the host per
// tensor, and Kiln's generated kernels get plain pointers; cp.async with the
// swizzle computed per 16-byte chunk needs nothing but the pointer. The
// producer fences the async proxy (fence.proxy.async) before it signals,
// since wgmma reads shared memory through it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#ifdef __CUDACC_RTC__ // NVRTC has no <stdint.h>
typedef long long int64_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned long long uintptr_t;
#else
#include <stdint.h>
#endif
namespace kiln_fa90 {
constexpr int BN = 128, kStages = 3;
// Consumer warpgroups per block (64 query rows each): three for head dim
// 64 (the softmax is a larger share of the work there), two for 128 (whose
// accumulators need the registers).
template <int D> __host__ __device__ constexpr int defaultConsumers() { return D == 64 ? 3 : 2; }
template <int NC> __host__ __device__ constexpr int threads() { return 128 * (NC + 1); }
// Whether tile t's S = Q K^T overlaps tile t-1's O += P V within a
// warpgroup. Measured on the H200 (docs/benchmarks.md): +8% at head dim 64;
// at 128 the second live accumulator set costs more than it hides (-22%).
// (-DKILN_FA90_OVERLAP128=1 builds the overlap at 128 too, for bench/fa90's
// A/B runs.)
#ifndef KILN_FA90_OVERLAP128
#define KILN_FA90_OVERLAP128 0
#endif
template <int D> constexpr bool kOverlap = D == 64 || KILN_FA90_OVERLAP128 != 0;
#ifndef KILN_FA90_MASKED_SHFL
#define KILN_FA90_MASKED_SHFL 0
#endif

// Without kOverlap (two consumer warpgroups, which then walk the same key
// tiles: 128 rows, tiles of 128 keys), whether the two warpgroups issue their
// products by turns (FlashAttention-3's pingpong): named barriers 3 and 4
// hand the tensor cores from one to the other, so that one warpgroup's
// softmax runs under the other's products. bench/fa90 builds both ways
// (-DKILN_FA90_PINGPONG=0/1) to compare.
#ifndef KILN_FA90_PINGPONG
#define KILN_FA90_PINGPONG 0
#endif
template <int D, int NC> constexpr bool kPingpong = KILN_FA90_PINGPONG != 0 && !kOverlap<D> && NC == 2;
// V's descriptor (N-major, 128-byte swizzle): LBO steps to the next 64
// columns of the head dim (the next column block), SBO to the next 8 keys.
// (Measured on the H200: the swapped assignment reads wrong keys.)
constexpr uint32_t kVLbo = BN * 128, kVSbo = 1024;

// Dynamic shared memory: Q (64 NC rows), the K and V rings, the mbarriers;
// 1024 bytes of slack let the tiles start on a 1024-byte boundary (the
// swizzle pattern repeats every 8 rows of 128 bytes).
template <int D, int NC = defaultConsumers<D>()> struct Smem {
  static constexpr int tile = BN * D * 2;
  static constexpr int q = 0, k = q + 64 * NC * D * 2, v = k + kStages * tile,
                       bars = v + kStages * tile, bytes = bars + 2 * kStages * 8 + 1024;
  static_assert(bytes <= 227 * 1024, "more shared memory than an sm_90 block gets");
};

__device__ __forceinline__ uint32_t smemAddr(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Byte offset of 16-byte chunk c (8 elements) of row r in a tile of `rows`
// rows: 64-element column blocks one after another, each row 128 bytes,
// chunk c stored at position c ^ (r % 8).
__device__ __forceinline__ uint32_t swizzled(int rows, int r, int c) {
  return (uint32_t)((c / 8) * rows * 128 + r * 128 + (((c % 8) ^ (r % 8)) << 4));
}

// A wgmma shared-memory descriptor, 128-byte swizzle.
__device__ __forceinline__ uint64_t descriptor(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) |
         ((uint64_t)(sbo >> 4) << 32) | (1ull << 62);
}

__device__ __forceinline__ void cpAsync16(uint32_t dst, const void *src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
               "r"(valid ? 16 : 0)
               : "memory");
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
__device__ __forceinline__ void barrierWait(uint32_t bar, uint32_t parity) {
  asm volatile("{\n.reg .pred done;\nwait_%=:\n"
               "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
               "@!done bra wait_%=;\n}\n" ::"r"(bar),
               "r"(parity)
               : "memory");
}
// Named barrier of one warpgroup (ids 1, 2; 0 is __syncthreads).
__device__ __forceinline__ void groupSync(int id) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}
__device__ __forceinline__ void mmaFence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void mmaCommit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void mmaWait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving accumulator reads or writes across the
// asynchronous products.
template <int N> __device__ __forceinline__ void pin(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
    asm volatile("" : "+f"(d[i])::"memory");
}
// The same for P's registers, which a product in flight still reads.
template <int N> __device__ __forceinline__ void pinU(uint32_t (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i)
#pragma unroll
    for (int j = 0; j < 4; ++j)
      asm volatile("" : "+r"(a[i][j])::"memory");
}
__device__ __forceinline__ float exp2Approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}
template <typename T> __device__ __forceinline__ uint32_t pack(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack<__nv_bfloat16>(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
template <> __device__ __forceinline__ uint32_t pack<__half>(float lo, float hi) {
  __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<uint32_t *>(&v);
}
// Generated wrappers (one per shape and type): S = Q K^T from shared memory
// (both K-major), O += P V with P from registers (V N-major, imm-trans-b 1).
// scale-d is a predicate set from a register (NVRTC needs that).
template <int N, typename T> __device__ void mmaSS(float (&)[N / 2], uint64_t, uint64_t, int);
template <int N, typename T> __device__ void mmaRS(float (&)[N / 2], const uint32_t (&)[4], uint64_t, int);
template <> __device__ __forceinline__ void mmaSS<128, __nv_bfloat16>(float (&d)[64], uint64_t a, uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(a), "l"(b), "r"(scaleD));
}
template <> __device__ __forceinline__ void mmaRS<64, __nv_bfloat16>(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scaleD));
}
template <> __device__ __forceinline__ void mmaRS<128, __nv_bfloat16>(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scaleD));
}
template <> __device__ __forceinline__ void mmaSS<128, __half>(float (&d)[64], uint64_t a, uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "l"(a), "l"(b), "r"(scaleD));
}
template <> __device__ __forceinline__ void mmaRS<64, __half>(float (&d)[32], const uint32_t (&a)[4], uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scaleD));
}
template <> __device__ __forceinline__ void mmaRS<128, __half>(float (&d)[64], const uint32_t (&a)[4], uint64_t b, int scaleD) {
  asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
               "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scaleD));
}


// Which tensors are stored [B, S, H, D] (kiln-attention-layout's seq_major
// operands: the heads of a token side by side) rather than dense
// [B, H, S, D]: the bits of a Layout, in the order of the step program's
// attention roles (kiln/artifact/HopperAttention.h names the kernels by
// them). A compile-time Layout: the dense tensors' row stride stays the
// constant D, and only a seq-major one reads its rows H D apart.
enum LayoutBit : unsigned {
  kSeqQ = 1, kSeqK = 2, kSeqV = 4, kSeqO = 8, kSeqDout = 16, kSeqDq = 32, kSeqDk = 64, kSeqDv = 128
};
template <unsigned Bits> struct Layout {
  static constexpr unsigned bits = Bits;
};
// Element strides of a tensor's [B, H, S, D] view (the head dim contiguous).
struct Strides {
  int64_t batch, head, seq;
};
template <bool SeqMajor, int D>
__device__ __forceinline__ Strides stridesOf(int64_t heads, int64_t rows) {
  if constexpr (SeqMajor)
    return {rows * heads * D, D, heads * D};
  else
    return {heads * rows * D, rows * D, D};
}

// The mask operand. A mask adds a term to each scaled score (0 keeps it,
// -inf drops it, anything else is a bias): mask(b, h, i, j), evaluated only
// for i < Sq and j < L, as kiln_flash's rowScores does. rows(b, h, iLo, iHi)
// summarizes a non-empty block of rows [iLo, iHi) within Sq once (the
// kernels hoist it out of their key loops: registers are scarce there), and
// tile(rows, b, jLo, jHi) classifies those rows against keys [jLo, jHi) within
// L: kKeep (every term 0: no element work),
// kDrop (every term -inf: the tile is skipped, not even loaded, when the
// whole block's rows drop it) or kMixed (evaluate every element). A row all
// of whose keys are dropped comes out 0 with lse -inf, what the portable
// kernel gives (its sum is 0 and it writes O as 0).
enum TileClass { kKeep = 0, kMixed = 1, kDrop = 2 };
struct NoRows {};
struct NoMask { // unmasked attention: compiles to the code without a mask
  static constexpr bool kNone = true;
  __device__ NoRows rows(int64_t, int64_t, int64_t, int64_t) const { return {}; }
  __device__ int tile(NoRows, int64_t, int64_t, int64_t) const { return kKeep; }
  __device__ float operator()(int64_t, int64_t, int64_t, int64_t) const { return 0.f; }
};
// A mask the tile cannot be classified for: the generated kernel's mask
// functor (the fused producers of an i1 or additive mask, as the portable
// kernels get it), evaluated at every element of every tile.
template <typename F> struct ElementMask {
  static constexpr bool kNone = false;
  F f;
  __device__ NoRows rows(int64_t, int64_t, int64_t, int64_t) const { return {}; }
  __device__ int tile(NoRows, int64_t, int64_t, int64_t) const { return kMixed; }
  __device__ float operator()(int64_t b, int64_t h, int64_t i, int64_t j) const {
    return f(b, h, i, j);
  }
};
template <typename F> __host__ __device__ ElementMask<F> elementMask(F f) { return ElementMask<F>{f}; }
// Packed documents: key j is visible to query i iff doc[b, i] == doc[b, j],
// with doc[b, 0 .. S) the document index of each token, non-decreasing
// along the sequence (documents are contiguous; the caller guarantees it,
// as FlashAttention's cu_seqlens does). Monotone ids make a tile's class
// four loads: rows [iLo, iHi) span documents doc[iLo] .. doc[iHi - 1],
// keys doc[jLo] .. doc[jHi - 1]; disjoint spans drop the tile, one shared
// document keeps it. (A query and its keys share doc's length: self-attention.)
struct DocumentMask {
  static constexpr bool kNone = false;
  const int *doc;
  int64_t batchStride; // elements between two sequences' ids
  struct Rows {
    int first, last; // the documents of the first and the last row
  };
  __device__ Rows rows(int64_t b, int64_t, int64_t iLo, int64_t iHi) const {
    const int *d = doc + b * batchStride;
    return {__ldg(d + iLo), __ldg(d + iHi - 1)};
  }
  __device__ int tile(const Rows &r, int64_t b, int64_t jLo, int64_t jHi) const {
    const int *d = doc + b * batchStride;
    const int ka = __ldg(d + jLo), kb = __ldg(d + jHi - 1);
    if (r.last < ka || kb < r.first)
      return kDrop;
    return r.first == r.last && ka == kb && r.first == ka ? kKeep : kMixed;
  }
  __device__ float operator()(int64_t b, int64_t, int64_t i, int64_t j) const {
    const int *d = doc + b * batchStride;
    return __ldg(d + i) == __ldg(d + j) ? 0.f : -__int_as_float(0x7f800000);
  }
};
// Key padding: key j of sequence b is kept iff keep[b, j] != 0 (a [B, L]
// bool/uint8 tensor, HF's attention_mask). Classified per element only: a
// tile's class would need all its keys.
struct KeyPaddingMask {
  static constexpr bool kNone = false;
  const unsigned char *keep;
  int64_t batchStride;
  __device__ NoRows rows(int64_t, int64_t, int64_t, int64_t) const { return {}; }
  __device__ int tile(NoRows, int64_t, int64_t, int64_t) const { return kMixed; }
  __device__ float operator()(int64_t b, int64_t, int64_t, int64_t j) const {
    return __ldg(keep + b * batchStride + j) ? 0.f : -__int_as_float(0x7f800000);
  }
};

// The forward of one block: 64 NC query rows of one (batch, head). q, o:
// [B, H, Sq, D]; k, v: [B, Hkv, L, D], each dense or, where Layout says
// so, [B, Sq, H, D] / [B, L, Hkv, D]; lse: [B, H, Sq] or null.
// Blocks take the query tiles longest first (causal rows near the end see
// the most keys), so the last wave is made of short tiles.
template <typename T, int D, int NC = defaultConsumers<D>(), typename Mask = NoMask,
          unsigned Bits = 0>
__device__ __forceinline__ void forward(const T *q, const T *k, const T *v, T *out, float *lse,
                                        int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t L,
                                        float scale, bool causal, unsigned char *smemRaw,
                                        Mask mask = Mask(), Layout<Bits> = Layout<Bits>()) {
  static_assert(D == 64 || D == 128, "kiln_fa90 handles head dims 64 and 128");
  using S = Smem<D, NC>;
  constexpr int BM = 64 * NC, QROWS = BM;
  constexpr int C = D / 8; // 16-byte chunks per row
  unsigned char *smem = reinterpret_cast<unsigned char *>(
      (reinterpret_cast<uintptr_t>(smemRaw) + 1023) & ~static_cast<uintptr_t>(1023));
  const uint32_t qAddr = smemAddr(smem + S::q), kAddr = smemAddr(smem + S::k),
                 vAddr = smemAddr(smem + S::v), bars = smemAddr(smem + S::bars);
  auto full = [&](int s) { return bars + 8 * s; };
  auto empty = [&](int s) { return bars + 8 * (kStages + s); };
  const int64_t qTiles = (Sq + BM - 1) / BM, BH = B * H;
  const int64_t qt = qTiles - 1 - (int64_t)blockIdx.x / BH, bh = (int64_t)blockIdx.x % BH;
  const int64_t h = bh % H, b = bh / H, hk = h / (H / Hkv), i0 = qt * BM;
  const int64_t jEnd = causal ? (L < i0 + BM ? L : i0 + BM) : L;
  const int nTiles = jEnd > 0 ? (int)((jEnd + BN - 1) / BN) : 0;
  // Unmasked, the warpgroup comes through a shuffle from lane 0 (what
  // CUTLASS does): ptxas then knows it is uniform over each warp, so a
  // branch on it (a warpgroup's causal end) is no divergent path around the
  // products, and schedules the consumers' wgmma better (measured on the
  // H200: 1b 0.221 -> 0.214 ms, 8B-like 0.586 -> 0.554 ms). With a mask the
  // shuffle's extra live state makes the consumers spill more, which costs
  // more than it gains (1b packed documents 0.344 -> 0.383 ms), so masked
  // forwards keep threadIdx.x / 128 (-DKILN_FA90_MASKED_SHFL=1 gives them
  // the shuffle too, for bench/fa90's A/B builds with two consumers).
  const int group = [] {
    if constexpr (Mask::kNone || KILN_FA90_MASKED_SHFL != 0)
      return __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    else
      return (int)(threadIdx.x / 128);
  }();
  const int tid = threadIdx.x % 128;
  const Strides qs = stridesOf<(Bits & kSeqQ) != 0, D>(H, Sq),
                ks = stridesOf<(Bits & kSeqK) != 0, D>(Hkv, L),
                vs = stridesOf<(Bits & kSeqV) != 0, D>(Hkv, L),
                os = stridesOf<(Bits & kSeqO) != 0, D>(H, Sq);
  // Key tiles the mask drops for every row of the block: neither loaded nor
  // multiplied (producer and consumers skip the same ones, and number the
  // ring's stages by the tiles they do take).
  const auto blockRows = mask.rows(b, h, i0, min(i0 + BM, Sq));
  auto blockDrops = [&](int t) {
    if constexpr (Mask::kNone)
      return false;
    const int64_t j0 = (int64_t)t * BN;
    return mask.tile(blockRows, b, j0, min(j0 + BN, L)) == kDrop;
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrierInit(full(s), 128); // every producer thread
      barrierInit(empty(s), 4 * NC); // lane 0 of every consumer warp
    }
  }
  __syncthreads();
  if (group == 0) { // producer
    // Registers move to the consumers: 128 x 24 + 128 NC x R <= 65536.
    if constexpr (NC == 2)
      asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
    else
      asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
    const T *kBase = k + b * ks.batch + hk * ks.head, *vBase = v + b * vs.batch + hk * vs.head;
    int n = 0; // tiles loaded
    for (int t = 0; t < nTiles; ++t) {
      if (blockDrops(t))
        continue;
      const int s = n % kStages;
      if (n >= kStages)
        barrierWait(empty(s), ((n / kStages) - 1) & 1);
      const int64_t j0 = (int64_t)t * BN;
#pragma unroll
      for (int u = 0; u < BN * C / 128; ++u) {
        const int e = tid + 128 * u, r = e / C, c = e % C;
        const bool valid = j0 + r < L;
        const int64_t row = valid ? j0 + r : 0;
        const uint32_t at = swizzled(BN, r, c) + s * S::tile;
        cpAsync16(kAddr + at, kBase + row * ks.seq + c * 8, valid);
        cpAsync16(vAddr + at, vBase + row * vs.seq + c * 8, valid);
      }
      cpAsyncCommit();
      if (n > 0) { // the previous tile has landed: hand it over
        cpAsyncWait<1>();
        fenceProxyAsync();
        barrierArrive(full((n - 1) % kStages));
      }
      ++n;
    }
    if (n > 0) {
      cpAsyncWait<0>();
      fenceProxyAsync();
      barrierArrive(full((n - 1) % kStages));
    }
    return;
  }
  // consumers
  if constexpr (NC == 2)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
  else
    asm volatile("setmaxnreg.inc.sync.aligned.u32 160;\n");
  const int cg = group - 1, warp = tid / 32, lane = tid % 32;
  const int64_t r0 = i0 + 64 * cg;
  const T *qBase = q + b * qs.batch + h * qs.head;
  for (int e = tid; e < 64 * C; e += 128) {
    const int r = e / C, c = e % C;
    const bool valid = r0 + r < Sq;
    cpAsync16(qAddr + swizzled(BM, 64 * cg + r, c),
              qBase + (valid ? r0 + r : 0) * qs.seq + c * 8, valid);
  }
  cpAsyncCommit();
  cpAsyncWait<0>();
  fenceProxyAsync();
  groupSync(1 + cg);
  float acc[BN / 2], o[D / 2];
#pragma unroll
  for (int x = 0; x < BN / 2; ++x)
    acc[x] = 0.f;
#pragma unroll
  for (int x = 0; x < D / 2; ++x)
    o[x] = 0.f;
  const float kNegInf = -__int_as_float(0x7f800000), scaleLog2 = scale * 1.4426950408889634f,
              invScale = 1.f / scale;
  float m[2] = {kNegInf, kNegInf}, l[2] = {0.f, 0.f};
  const int64_t rowA = r0 + 16 * warp + lane / 4; // this thread's rows: rowA, rowA + 8
  const auto ownRows = mask.rows(b, h, min(r0, Sq - 1), min(r0 + 64, Sq)); // used when r0 < Sq
  // Causal: a warpgroup stops at its own rows' last key tile. It skips at
  // most the block's last tile (its rows are 64 of the block's 64 NC), which
  // the producer never waits to refill, so its missing "empty" arrival
  // blocks nobody.
  const int64_t ownEnd = causal ? (L < r0 + 64 ? L : r0 + 64) : L;
  const int myTiles = ownEnd > 0 ? (int)min((int64_t)nTiles, (ownEnd + BN - 1) / BN) : 0;
  // With kOverlap, tile t's S = Q K^T is issued before tile t-1's O += P V,
  // and the softmax of tile t runs while that product is in flight: the
  // tensor cores and the exp2 units work at the same time within a
  // warpgroup (the other warpgroups interleave on top).
  uint32_t p[BN / 16][4];
  // t: the key tile; n: its place among the tiles the block loads (the
  // ring's stage and phase).
  auto scores = [&](int n) {
    const int s = n % kStages;
    barrierWait(full(s), (n / kStages) & 1);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) // S = Q K^T
      mmaSS<BN, T>(acc,
                   descriptor(qAddr + (kk / 4) * QROWS * 128 + 64 * cg * 128 + (kk % 4) * 32, 16,
                              1024),
                   descriptor(kAddr + s * S::tile + (kk / 4) * BN * 128 + (kk % 4) * 32, 16,
                              1024),
                   kk > 0);
    mmaCommit();
  };
  auto values = [&](int n) { // O += P V
    const int s = n % kStages;
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
      mmaRS<D, T>(o, p[kk], descriptor(vAddr + s * S::tile + kk * 16 * 128, kVLbo, kVSbo), 1);
    mmaCommit();
  };
  // Masks, then exponentiates acc in place; returns the rows' rescales.
  auto softmax = [&](int t, float (&alpha)[2]) {
    const int64_t j0 = (int64_t)t * BN;
    // The mask's class of this warpgroup's rows (rows past Sq are never
    // stored, and the mask is not read there).
    int cls = kKeep;
    if constexpr (!Mask::kNone)
      if (r0 < Sq)
        cls = mask.tile(ownRows, b, j0, min(j0 + BN, L));
    const bool drop = cls == kDrop, mixed = cls == kMixed;
    if (drop || mixed || j0 + BN > L || (causal && j0 + BN - 1 > r0)) {
#pragma unroll
      for (int x = 0; x < BN / 2; ++x) {
        const int64_t j = j0 + 8 * (x / 4) + 2 * (lane % 4) + (x & 1),
                      i = rowA + ((x & 2) ? 8 : 0);
        if (drop || j >= L || (causal && j > i))
          acc[x] = kNegInf;
        else if (!Mask::kNone && mixed && i < Sq) // the term in units of acc
          acc[x] = fmaf(mask(b, h, i, j), invScale, acc[x]);
        // Four terms at a time: hoisting all 64 of a mask's loads spills.
        if (!Mask::kNone && x % 4 == 3)
          asm volatile("" ::: "memory");
      }
    }
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      float mx = kNegInf;
#pragma unroll
      for (int jb = 0; jb < BN / 8; ++jb)
        mx = fmaxf(mx, fmaxf(acc[4 * jb + 2 * rr], acc[4 * jb + 2 * rr + 1]));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float mNew = fmaxf(m[rr], mx * scaleLog2);
      const float base = mNew == kNegInf ? 0.f : mNew;
      alpha[rr] = exp2Approx(m[rr] - base);
      m[rr] = mNew;
      float sum = 0.f;
#pragma unroll
      for (int jb = 0; jb < BN / 8; ++jb)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float &x = acc[4 * jb + 2 * rr + e];
          x = exp2Approx(fmaf(x, scaleLog2, -base));
          sum += x;
        }
      l[rr] = l[rr] * alpha[rr] + sum;
    }
  };
  auto rescaleAndPack = [&](const float (&alpha)[2]) {
#pragma unroll
    for (int jb = 0; jb < D / 8; ++jb)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        o[4 * jb + e] *= alpha[e / 2];
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk)
#pragma unroll
      for (int g = 0; g < 4; ++g) // g: (row a | b) x (k low | high)
        p[kk][g] = pack<T>(acc[8 * kk + 2 * g], acc[8 * kk + 2 * g + 1]);
  };
  auto release = [&](int n) {
    __syncwarp();
    if (lane == 0)
      barrierArrive(empty(n % kStages));
  };
  // The next tile at or after t the block loads (the same walk as the
  // producer's; blockDrops is uniform over the block).
  auto nextTile = [&](int t) {
    if constexpr (!Mask::kNone)
      while (t < myTiles && blockDrops(t))
        ++t;
    return t;
  };
  int t = nextTile(0);
  if (t < myTiles && kOverlap<D>) {
    float alpha[2];
    mmaFence();
    scores(0);
    mmaWait<0>();
    pin(acc);
    softmax(t, alpha);
    rescaleAndPack(alpha);
    int n = 1;
    for (t = nextTile(t + 1); t < myTiles; t = nextTile(t + 1), ++n) {
      mmaFence();
      scores(n);
      values(n - 1);
      mmaWait<1>(); // S of this tile is in
      pin(acc);
      softmax(t, alpha);
      mmaWait<0>(); // P V of the previous tile is in: p and o are free
      pin(o);
      pinU(p);
      release(n - 1);
      rescaleAndPack(alpha);
    }
    mmaFence();
    values(n - 1);
    mmaWait<0>();
    pin(o);
    pinU(p);
    release(n - 1);
  } else {
    // Pingpong: warpgroup cg waits on barrier 3 + cg for its turn and hands
    // the turn over on the other's after issuing; warpgroup 0 starts. Both
    // take the same tiles (128 query rows and keys a block: the causal end
    // and the mask's skips are the block's), so the turns pair up; the last
    // hand-over of warpgroup 1 is left out, having no taker.
    constexpr bool pingpong = kPingpong<D, NC>;
    auto myTurn = [&] {
      if constexpr (pingpong)
        asm volatile("bar.sync %0, 256;\n" ::"r"(3 + cg) : "memory");
    };
    auto handOver = [&](bool last) {
      if constexpr (pingpong)
        if (!(last && cg == 1))
          asm volatile("bar.arrive %0, 256;\n" ::"r"(4 - cg) : "memory");
    };
    if (pingpong && cg == 1 && t < myTiles)
      asm volatile("bar.arrive 3, 256;\n" ::: "memory");
    for (int n = 0; t < myTiles; ++n) {
      const int next = nextTile(t + 1);
      float alpha[2];
      myTurn();
      mmaFence();
      scores(n);
      handOver(false);
      mmaWait<0>();
      pin(acc);
      softmax(t, alpha);
      rescaleAndPack(alpha);
      myTurn();
      mmaFence();
      values(n);
      handOver(next >= myTiles);
      mmaWait<0>();
      pin(o);
      pinU(p);
      release(n);
      t = next;
    }
  }
  // O / l, staged through this warpgroup's Q rows (no product reads them
  // any more) so that the stores are 16 bytes wide.
  float inv[2];
#pragma unroll
  for (int rr = 0; rr < 2; ++rr) {
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 1);
    l[rr] += __shfl_xor_sync(0xffffffffu, l[rr], 2);
    inv[rr] = l[rr] > 0.f ? 1.f / l[rr] : 0.f;
  }
  groupSync(1 + cg);
  unsigned char *stage = smem + S::q;
#pragma unroll
  for (int jb = 0; jb < D / 8; ++jb)
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int r = 64 * cg + 16 * warp + lane / 4 + 8 * rr;
      *reinterpret_cast<uint32_t *>(stage + swizzled(BM, r, jb) + (lane % 4) * 4) =
          pack<T>(o[4 * jb + 2 * rr] * inv[rr], o[4 * jb + 2 * rr + 1] * inv[rr]);
    }
  groupSync(1 + cg);
  T *oBase = out + b * os.batch + h * os.head;
  for (int e = tid; e < 64 * C; e += 128) {
    const int r = e / C, c = e % C;
    if (r0 + r < Sq)
      *reinterpret_cast<uint4 *>(oBase + (r0 + r) * os.seq + c * 8) =
          *reinterpret_cast<const uint4 *>(stage + swizzled(BM, 64 * cg + r, c));
  }
  if (lse && lane % 4 == 0) {
#pragma unroll
    for (int rr = 0; rr < 2; ++rr) {
      const int64_t i = rowA + 8 * rr;
      if (i < Sq)
        lse[(b * H + h) * Sq + i] =
            l[rr] > 0.f ? (m[rr] + __log2f(l[rr])) * 0.6931471805599453f : kNegInf;
    }
  }
}
} // namespace kiln_fa90
