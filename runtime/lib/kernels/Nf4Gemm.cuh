//===- Nf4Gemm.cuh - GEMM whose weight operand is NF4 codes + absmax ------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// C = alpha * A * op(W) + beta * C, A and C bf16 row-major, fp32 accumulation,
// W a frozen linear weight [out, in] stored as QLoRA's NF4 (kiln.nf4_quantize:
// the row-major [out, in] weight in blocks of 64, one fp32 absmax per block,
// two codes per byte, the even element in the high nibble). The codes are
// read by the GEMM itself and dequantized per tile into shared memory, with
// the arithmetic of kiln.nf4_dequantize (fp32 value * absmax, rounded to
// bf16), so the B operand is bit-identical to dequantize + GEMM and no bf16
// copy of the weight exists in memory.
//
//   kForward = true : C[M, N] = A[M, K] * W^T,  W [N, K]  (x * W^T, forward)
//   kForward = false: C[M, N] = A[M, K] * W,    W [K, N]  (dy * W, input gradient)
//
// mma.sync m16n8k16 (sm_80 and later, so it runs on the H200 too), 128x128
// or 256x128 tiles of C (Tiles below), 64-deep k tiles, 8 warps. A streams
// in by cp.async;
// the codes of the next k tile are loaded into registers while the tensor
// cores work on the current one and dequantized into the other shared
// buffer after it. Shared tiles are XOR-swizzled by 16-byte chunk so that
// ldmatrix reads 8 rows without bank conflicts. Needs M % 128 (or 256) == 0,
// N % 128 == 0, K % 64 == 0 (nf4GemmSupported); the caller falls back to
// dequantize + cuBLASLt otherwise.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_KERNELS_NF4GEMM_CUH
#define KILN_RUNTIME_KERNELS_NF4GEMM_CUH

#include <cuda_bf16.h>
#include <stdint.h>

namespace kiln_nf4 {

constexpr int kTileN = 128, kTileK = 64, kThreads = 256;
constexpr int kTileBytesB = kTileN * kTileK * 2; // B per stage: 16 KiB

// kWarpsM = 2: 128x128 tiles of C, 8 warps of 64x32, two blocks per SM.
// kWarpsM = 4: 256x128 tiles, 8 warps of 64x64 (half the dequantization
// and fewer shared-memory reads per MMA), one block per SM.
template <int kWarpsM> struct Tiles {
  static constexpr int kTileM = 64 * kWarpsM;
  static constexpr int kWarpsN = 8 / kWarpsM;
  static constexpr int kWarpN = kTileN / kWarpsN; // 32 or 64 columns per warp
  static constexpr int kFragsN = kWarpN / 8;
  static constexpr int kTileBytesA = kTileM * kTileK * 2;
  static constexpr int kSharedBytes = 2 * kTileBytesA + 2 * kTileBytesB;
  static constexpr int kBlocksPerSm = kWarpsM == 2 ? 2 : 1;
};

// The 16 NF4 values (QLoRA, appendix E), as include/kiln/Support/NF4.h.
__device__ __constant__ float kNf4Values[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};

template <int kWarpsM = 2> inline bool nf4GemmSupported(long long m, long long n, long long k) {
  return m > 0 && n > 0 && k > 0 && m % Tiles<kWarpsM>::kTileM == 0 && n % kTileN == 0 &&
         k % kTileK == 0;
}

__device__ __forceinline__ uint32_t sharedAddress(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void copyAsync16(uint32_t dst, const void *src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ void ldmatrix4(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix4Trans(uint32_t addr, uint32_t (&r)[4]) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void mma16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Byte offset of 16-byte chunk `chunk` of row `row` in a swizzled tile whose
// rows are `rowBytes` long.
__device__ __forceinline__ uint32_t swizzled(int row, int chunk, int rowBytes) {
  return row * rowBytes + ((chunk ^ (row & 7)) << 4);
}

// Eight codes (one 32-bit word, four bytes, high nibble first) times their
// absmax, rounded to bf16, as four bf16 pairs.
__device__ __forceinline__ uint4 dequantize8(uint32_t word, float absmax, const float *lut) {
  uint32_t out[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    uint32_t byte = (word >> (8 * b)) & 0xffu;
    __nv_bfloat162 pair = __floats2bfloat162_rn(lut[byte >> 4] * absmax, lut[byte & 15u] * absmax);
    out[b] = *reinterpret_cast<uint32_t *>(&pair);
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

template <bool kForward, int kWarpsM = 2>
__global__ void __launch_bounds__(kThreads, Tiles<kWarpsM>::kBlocksPerSm)
    nf4Gemm(const __nv_bfloat16 *__restrict__ a, const uint8_t *__restrict__ codes,
            const float *__restrict__ absmax, __nv_bfloat16 *c, int m, int n, int k, float alpha,
            float beta) {
  extern __shared__ __align__(128) unsigned char shared[];
  __shared__ float lut[16];
  using T = Tiles<kWarpsM>;
  constexpr int kTileBytesA = T::kTileBytesA, kFragsN = T::kFragsN;
  unsigned char *sharedA = shared;                   // [2][tile m][64 k]
  unsigned char *sharedB = shared + 2 * kTileBytesA; // [2][128 n][64 k] or [2][64 k][128 n]

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warpM = warp / T::kWarpsN, warpN = warp % T::kWarpsN;
  const int m0 = blockIdx.y * T::kTileM, n0 = blockIdx.x * kTileN;
  const int tiles = k / kTileK;
  if (tid < 16)
    lut[tid] = kNf4Values[tid];

  // A: 8 chunks of 16 bytes per row, 4 or 8 per thread.
  auto loadA = [&](int stage, int tile) {
#pragma unroll
    for (int i = 0; i < T::kTileM * 8 / kThreads; ++i) {
      int q = tid + i * kThreads, row = q >> 3, chunk = q & 7;
      const __nv_bfloat16 *src = a + (size_t)(m0 + row) * k + tile * kTileK + chunk * 8;
      copyAsync16(sharedAddress(sharedA + stage * kTileBytesA + swizzled(row, chunk, 128)), src);
    }
    asm volatile("cp.async.commit_group;\n" ::);
  };
  // The codes of one k tile: 32 consecutive elements of one weight row (16
  // bytes) and their absmax per thread.
  //   forward:  tile [128 n][64 k], thread -> row n = tid / 2, k half tid % 2
  //   gradient: tile [64 k][128 n], thread -> row k = tid / 4, n quarter tid % 4
  auto loadCodes = [&](int tile, uint4 &word, float &scale) {
    size_t element;
    if (kForward)
      element = (size_t)(n0 + (tid >> 1)) * k + tile * kTileK + (tid & 1) * 32;
    else
      element = (size_t)(tile * kTileK + (tid >> 2)) * n + n0 + (tid & 3) * 32;
    word = __ldg(reinterpret_cast<const uint4 *>(codes + element / 2));
    scale = __ldg(absmax + element / 64);
  };
  auto storeB = [&](int stage, const uint4 &word, float scale) {
    unsigned char *tile = sharedB + stage * kTileBytesB;
    const uint32_t words[4] = {word.x, word.y, word.z, word.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint32_t offset = kForward ? swizzled(tid >> 1, (tid & 1) * 4 + i, 128)
                                 : swizzled(tid >> 2, (tid & 3) * 4 + i, 256);
      *reinterpret_cast<uint4 *>(tile + offset) = dequantize8(words[i], scale, lut);
    }
  };

  float acc[4][kFragsN][4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[i][j][e] = 0.f;

  uint4 word;
  float scale;
  loadA(0, 0);
  loadCodes(0, word, scale);
  __syncthreads(); // the lookup table
  storeB(0, word, scale);

  for (int tile = 0; tile < tiles; ++tile) {
    const int cur = tile & 1;
    const bool more = tile + 1 < tiles;
    if (more) {
      loadA(cur ^ 1, tile + 1);
      loadCodes(tile + 1, word, scale);
      asm volatile("cp.async.wait_group 1;\n" ::);
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::);
    }
    __syncthreads();
    const uint32_t baseA = sharedAddress(sharedA + cur * kTileBytesA);
    const uint32_t baseB = sharedAddress(sharedB + cur * kTileBytesB);
#pragma unroll
    for (int kk = 0; kk < kTileK / 16; ++kk) {
      uint32_t fb[kFragsN][2];
#pragma unroll
      for (int j = 0; j < kFragsN / 2; ++j) {
        uint32_t r[4];
        if (kForward) {
          // [n][k]: matrices (n 0-7, k 0-7), (n 0-7, k 8-15), (n 8-15, ...).
          int row = warpN * T::kWarpN + j * 16 + ((lane >> 4) << 3) + (lane & 7);
          int chunk = kk * 2 + ((lane >> 3) & 1);
          ldmatrix4(baseB + swizzled(row, chunk, 128), r);
        } else {
          // [k][n], transposed on load: (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), ...
          int row = kk * 16 + (((lane >> 3) & 1) << 3) + (lane & 7);
          int chunk = (warpN * T::kWarpN + j * 16 + ((lane >> 4) << 3)) >> 3;
          ldmatrix4Trans(baseB + swizzled(row, chunk, 256), r);
        }
        fb[2 * j][0] = r[0];
        fb[2 * j][1] = r[1];
        fb[2 * j + 1][0] = r[2];
        fb[2 * j + 1][1] = r[3];
      }
      // One A fragment at a time: 4 registers instead of 16 (no spills).
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        uint32_t fa[4];
        int row = warpM * 64 + i * 16 + (lane & 15);
        int chunk = kk * 2 + (lane >> 4);
        ldmatrix4(baseA + swizzled(row, chunk, 128), fa);
#pragma unroll
        for (int j = 0; j < kFragsN; ++j)
          mma16816(acc[i][j], fa, fb[j][0], fb[j][1]);
      }
    }
    if (more)
      storeB(cur ^ 1, word, scale);
    __syncthreads();
  }

  // Fragment (i, j): rows g and g + 8, columns 2t and 2t + 1.
  const int g = lane >> 2, t = lane & 3;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < kFragsN; ++j)
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        int row = m0 + warpM * 64 + i * 16 + g + half * 8;
        int col = n0 + warpN * T::kWarpN + j * 8 + 2 * t;
        __nv_bfloat162 *out = reinterpret_cast<__nv_bfloat162 *>(c + (size_t)row * n + col);
        float x = alpha * acc[i][j][2 * half], y = alpha * acc[i][j][2 * half + 1];
        if (beta != 0.f) {
          float2 old = __bfloat1622float2(*out);
          x += beta * old.x;
          y += beta * old.y;
        }
        *out = __floats2bfloat162_rn(x, y);
      }
}

} // namespace kiln_nf4

#endif // KILN_RUNTIME_KERNELS_NF4GEMM_CUH
