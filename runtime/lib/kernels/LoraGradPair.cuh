//===- LoraGradPair.cuh - An adapter's dT and dB from one read of dy -*- CUDA -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A LoRA adapter's backward has two thin GEMMs over the same output
// gradient Y = dy [T, N] (T tokens, N the layer's outputs, R the rank):
//
//   dT = a1 Y Bm + b1 dT      [T, R]   (Bm [N, R]: the adapter's B as stored)
//   dB = a2 Yᵀ t + b2 dB      [N, R]   (t [T, R]: the forward's x Aᵀ)
//
// cuBLASLt runs them as two memory-bound GEMMs, each reading all of Y (the
// 1b gate/up projections: 128 MB, twice). This kernel reads each Y tile
// once and feeds both products from shared memory (docs/design/
// lora-k-concat.md, "Beyond K-concatenation").
//
// Grid (N / CW, G): CTA (c, g) owns columns [c CW, (c + 1) CW) and a run of
// 64-row tiles. Per tile, dT's partial over the CTA's columns goes to a
// workspace (fp32 [N / CW][T][R]); dB's accumulates in registers over the
// run and goes out once (fp32 [G][N][R]). kiln_lora_grad_pair_finish sums
// the partials in index order and applies the alphas and betas, so the
// result does not depend on scheduling (no float atomics).
//
// Warps: dB, warp w the columns [w WC, (w + 1) WC) of the CTA's strip over
// the tile's 64 rows (Yᵀ through ldmatrix.trans); dT, warp w the rows
// 16 (w % 4) of the tile over half the strip's columns (w / 4), the two
// halves summed through shared memory.
//
// Layouts (LoraGradPairPlan.h checks them on the host): row-major, T a
// multiple of 64, N of CW, R of 16, row strides multiples of 8 elements,
// pointers 16-byte aligned.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_KERNELS_LORAGRADPAIR_CUH
#define KILN_RUNTIME_KERNELS_LORAGRADPAIR_CUH

#include "ThinGemm.cuh"

namespace kiln_pair {

using kiln_thin::cpAsync16;
using kiln_thin::cpAsyncCommit;
using kiln_thin::cpAsyncWait;
using kiln_thin::ldmatrixX4;
using kiln_thin::mma16816;

/// The product kernel's one argument.
struct Params {
  const __nv_bfloat16 *y, *bm, *t;
  float *partT; ///< [N / CW][T][R]
  float *partB; ///< [groups][N][R]
  int64_t rows, cols, ldy, ldbm, ldt;
  int tilesPerGroup; ///< 64-row tiles per CTA (the last group may have fewer)
};

/// The finishing kernel's argument: dT = a1 sum partT + b1 dT over
/// `slicesT` slices, dB = a2 sum partB + b2 dB over `slicesB`.
struct FinishParams {
  const float *partT, *partB;
  __nv_bfloat16 *dT, *dB;
  int64_t rows, cols, rank, lddT, lddB;
  int slicesT, slicesB;
  float alpha1, beta1, alpha2, beta2;
};

constexpr int kThreads = 256;

/// R the rank, WC each warp's dB columns (the strip 8 WC), BM the tile's
/// rows, S the ring's stages. dT's warps: BM / 16 row blocks by
/// 8 / (BM / 16) parts of the strip's columns.
template <int R, int WC, int BM, int S> struct Layout {
  static constexpr int kStrip = 8 * WC;       // the CTA's columns
  static constexpr int kPitchY = kStrip + 8;  // padded rows: conflict-free ldmatrix
  static constexpr int kPitchR = R + 8;
  static constexpr int kStageY = BM * kPitchY;
  static constexpr int kStageT = BM * kPitchR;
  static constexpr int kStage = kStageY + kStageT;
  static constexpr int kBm = kStrip * kPitchR;
  static constexpr int kRowBlocks = BM / 16, kParts = 8 / kRowBlocks;
  static constexpr int kPartCols = kStrip / kParts;
  static constexpr int kRed = kRowBlocks * (kParts - 1) * 16 * R; // floats: parts 1.. of dT
  static constexpr int kSharedBytes = (S * kStage + kBm) * 2 + kRed * 4;
  static_assert(BM == 16 || BM == 32 || BM == 64, "tile rows 16, 32 or 64");
};

template <int Rows, int Width>
__device__ __forceinline__ void loadRows(__nv_bfloat16 *smem, int pitch, const __nv_bfloat16 *g,
                                         int64_t ld) {
  constexpr int kChunksPerRow = Width / 8, kChunks = Rows * kChunksPerRow;
#pragma unroll
  for (int i = 0; i < (kChunks + kThreads - 1) / kThreads; ++i) {
    int c = threadIdx.x + i * kThreads;
    if (kChunks % kThreads == 0 || c < kChunks) {
      int r = c / kChunksPerRow, w = (c % kChunksPerRow) * 8;
      cpAsync16(smem + r * pitch + w, g + r * ld + w);
    }
  }
}

template <int R, int WC, int BM, int S>
__device__ __forceinline__ void loraGradPair(const Params &p) {
  using L = Layout<R, WC, BM, S>;
  extern __shared__ __align__(16) unsigned char shared[];
  __nv_bfloat16 *stages = reinterpret_cast<__nv_bfloat16 *>(shared);
  __nv_bfloat16 *sBm = stages + S * L::kStage;
  float *red = reinterpret_cast<float *>(sBm + L::kBm);

  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * L::kStrip;
  const int64_t tiles = p.rows / BM;
  const int64_t tile0 = static_cast<int64_t>(blockIdx.y) * p.tilesPerGroup;
  const int count = static_cast<int>(min(static_cast<int64_t>(p.tilesPerGroup), tiles - tile0));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int j = lane / 8, r8 = lane % 8, g = lane / 4, t4 = lane % 4;

  auto loadStage = [&](int s, int64_t tile) {
    __nv_bfloat16 *sy = stages + s * L::kStage, *st = sy + L::kStageY;
    loadRows<BM, L::kStrip>(sy, L::kPitchY, p.y + tile * BM * p.ldy + col0, p.ldy);
    loadRows<BM, R>(st, L::kPitchR, p.t + tile * BM * p.ldt, p.ldt);
  };
  // Bm's rows for this strip, once, with the first tile; S - 1 tiles ahead.
  loadRows<L::kStrip, R>(sBm, L::kPitchR, p.bm + col0 * p.ldbm, p.ldbm);
#pragma unroll
  for (int s = 0; s < S - 1; ++s) {
    if (s < count)
      loadStage(s, tile0 + s);
    cpAsyncCommit();
  }

  constexpr int kFragsB = WC / 16; // dB: 16-column fragments per warp
  constexpr int kFragsN = R / 8;
  float accB[kFragsB][kFragsN][4];
#pragma unroll
  for (int a = 0; a < kFragsB; ++a)
#pragma unroll
    for (int b = 0; b < kFragsN; ++b)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        accB[a][b][e] = 0.f;

  const int rowBlock = (warp % L::kRowBlocks) * 16, part = warp / L::kRowBlocks;
  for (int i = 0; i < count; ++i) {
    cpAsyncWait<S - 2>();
    __syncthreads(); // tile i is in; every warp is done with tile i - 1's stage
    if (i + S - 1 < count)
      loadStage((i + S - 1) % S, tile0 + i + S - 1);
    cpAsyncCommit();
    const __nv_bfloat16 *sy = stages + (i % S) * L::kStage, *st = sy + L::kStageY;

    // dB += Yᵀ t over the tile's rows: A = Yᵀ (m: this warp's columns).
#pragma unroll
    for (int kk = 0; kk < BM; kk += 16) {
      uint32_t bt[kFragsN / 2][4];
#pragma unroll
      for (int fn = 0; fn < kFragsN / 2; ++fn)
        // (k, n), (k + 8, n), (k, n + 8), (k + 8, n + 8)
        ldmatrixX4<true>(bt[fn], st + (kk + r8 + (j % 2) * 8) * L::kPitchR + fn * 16 + (j / 2) * 8);
#pragma unroll
      for (int fm = 0; fm < kFragsB; ++fm) {
        uint32_t a[4];
        int m = warp * WC + fm * 16;
        // (m, k), (m + 8, k), (m, k + 8), (m + 8, k + 8) of Yᵀ
        ldmatrixX4<true>(a, sy + (kk + r8 + (j / 2) * 8) * L::kPitchY + m + (j % 2) * 8);
#pragma unroll
        for (int fn = 0; fn < kFragsN / 2; ++fn) {
          mma16816(accB[fm][2 * fn], a, bt[fn][0], bt[fn][1]);
          mma16816(accB[fm][2 * fn + 1], a, bt[fn][2], bt[fn][3]);
        }
      }
    }

    // dT's partial: rows rowBlock.. of the tile over this warp's part.
    float accT[kFragsN][4];
#pragma unroll
    for (int b = 0; b < kFragsN; ++b)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        accT[b][e] = 0.f;
#pragma unroll 4
    for (int kk = 0; kk < L::kPartCols; kk += 16) {
      int k = part * L::kPartCols + kk;
      uint32_t a[4];
      ldmatrixX4<false>(a, sy + (rowBlock + r8 + (j % 2) * 8) * L::kPitchY + k + (j / 2) * 8);
#pragma unroll
      for (int fn = 0; fn < kFragsN / 2; ++fn) {
        uint32_t b[4];
        ldmatrixX4<true>(b, sBm + (k + r8 + (j % 2) * 8) * L::kPitchR + fn * 16 + (j / 2) * 8);
        mma16816(accT[2 * fn], a, b[0], b[1]);
        mma16816(accT[2 * fn + 1], a, b[2], b[3]);
      }
    }
    // Parts 1.. through shared memory; part 0 adds them in order.
    float *blockRed = red + (warp % L::kRowBlocks) * (L::kParts - 1) * 16 * R;
    if (part > 0) {
      float *mine = blockRed + (part - 1) * 16 * R;
#pragma unroll
      for (int fn = 0; fn < kFragsN; ++fn) {
        int c = fn * 8 + 2 * t4;
        *reinterpret_cast<float2 *>(mine + g * R + c) = make_float2(accT[fn][0], accT[fn][1]);
        *reinterpret_cast<float2 *>(mine + (g + 8) * R + c) =
            make_float2(accT[fn][2], accT[fn][3]);
      }
    }
    __syncthreads();
    if (part == 0) {
#pragma unroll
      for (int q = 0; q < L::kParts - 1; ++q) {
        const float *other = blockRed + q * 16 * R;
#pragma unroll
        for (int fn = 0; fn < kFragsN; ++fn) {
          int c = fn * 8 + 2 * t4;
          float2 lo = *reinterpret_cast<const float2 *>(other + g * R + c);
          float2 hi = *reinterpret_cast<const float2 *>(other + (g + 8) * R + c);
          accT[fn][0] += lo.x, accT[fn][1] += lo.y, accT[fn][2] += hi.x, accT[fn][3] += hi.y;
        }
      }
      float *out =
          p.partT + (static_cast<int64_t>(blockIdx.x) * p.rows + (tile0 + i) * BM + rowBlock) * R;
#pragma unroll
      for (int fn = 0; fn < kFragsN; ++fn) {
        int c = fn * 8 + 2 * t4;
        __stcg(reinterpret_cast<float2 *>(out + g * R + c), make_float2(accT[fn][0], accT[fn][1]));
        __stcg(reinterpret_cast<float2 *>(out + (g + 8) * R + c),
               make_float2(accT[fn][2], accT[fn][3]));
      }
    }
  }
  cpAsyncWait<0>();

  // dB's partial of this run of tiles.
  float *outB = p.partB + (static_cast<int64_t>(blockIdx.y) * p.cols + col0 + warp * WC) * R;
#pragma unroll
  for (int fm = 0; fm < kFragsB; ++fm)
#pragma unroll
    for (int fn = 0; fn < kFragsN; ++fn) {
      int row = fm * 16 + g, c = fn * 8 + 2 * t4;
      __stcg(reinterpret_cast<float2 *>(outB + row * R + c),
             make_float2(accB[fm][fn][0], accB[fm][fn][1]));
      __stcg(reinterpret_cast<float2 *>(outB + (row + 8) * R + c),
             make_float2(accB[fm][fn][2], accB[fm][fn][3]));
    }
}

/// Four outputs per thread: the first rows * rank of dT, then dB's; the
/// slices added in index order. (Eight threads per four outputs meeting in a
/// fixed butterfly measured slower on the widest pairs: docs/benchmarks.md,
/// "Fourteenth session".)
__device__ __forceinline__ void loraGradPairFinish(const FinishParams &p) {
  const int64_t quadsT = p.rows * p.rank / 4, quadsB = p.cols * p.rank / 4;
  for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
       q < quadsT + quadsB; q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const bool isT = q < quadsT;
    const int64_t e = (isT ? q : q - quadsT) * 4, n = isT ? p.rows : p.cols;
    const float *part = isT ? p.partT : p.partB;
    const int slices = isT ? p.slicesT : p.slicesB;
    float4 s = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int i = 0; i < slices; ++i) {
      float4 v = __ldcg(reinterpret_cast<const float4 *>(part + i * n * p.rank + e));
      s.x += v.x, s.y += v.y, s.z += v.z, s.w += v.w;
    }
    const float alpha = isT ? p.alpha1 : p.alpha2, beta = isT ? p.beta1 : p.beta2;
    __nv_bfloat162 *out = reinterpret_cast<__nv_bfloat162 *>(
        (isT ? p.dT : p.dB) + (e / p.rank) * (isT ? p.lddT : p.lddB) + e % p.rank);
    float2 lo = make_float2(alpha * s.x, alpha * s.y), hi = make_float2(alpha * s.z, alpha * s.w);
    if (beta != 0.f) {
      float2 a = __bfloat1622float2(out[0]), b = __bfloat1622float2(out[1]);
      lo.x += beta * a.x, lo.y += beta * a.y, hi.x += beta * b.x, hi.y += beta * b.y;
    }
    out[0] = __floats2bfloat162_rn(lo.x, lo.y);
    out[1] = __floats2bfloat162_rn(hi.x, hi.y);
  }
}

} // namespace kiln_pair

// The instantiations the runtime loads by name (LoraGradPairPlan.h):
// kiln_lora_grad_pair_r<R>_w<WC>_m<BM>_s<S> and the finish.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define KILN_LORA_PAIR_BODY(R, WC, BM, S) kiln_pair::loraGradPair<R, WC, BM, S>(p);
#define KILN_LORA_FINISH_BODY kiln_pair::loraGradPairFinish(p);
#else
#define KILN_LORA_PAIR_BODY(R, WC, BM, S) __trap();
#define KILN_LORA_FINISH_BODY __trap();
#endif
#define KILN_LORA_PAIR(R, WC, BM, S)                                                               \
  extern "C" __global__ void __launch_bounds__(kiln_pair::kThreads)                               \
      kiln_lora_grad_pair_r##R##_w##WC##_m##BM##_s##S(kiln_pair::Params p) {                      \
    KILN_LORA_PAIR_BODY(R, WC, BM, S)                                                              \
  }
#define KILN_LORA_PAIR_SHAPES(BM, S)                                                               \
  KILN_LORA_PAIR(16, 64, BM, S)                                                                    \
  KILN_LORA_PAIR(32, 64, BM, S)                                                                    \
  KILN_LORA_PAIR(48, 64, BM, S)                                                                    \
  KILN_LORA_PAIR(16, 32, BM, S)                                                                    \
  KILN_LORA_PAIR(32, 32, BM, S)                                                                    \
  KILN_LORA_PAIR(48, 32, BM, S)                                                                    \
  KILN_LORA_PAIR(64, 32, BM, S)
#ifndef KILN_LORA_PAIR_NO_INSTANCES
KILN_LORA_PAIR_SHAPES(64, 2)
#endif
extern "C" __global__ void __launch_bounds__(256)
    kiln_lora_grad_pair_finish(kiln_pair::FinishParams p) {
  KILN_LORA_FINISH_BODY
}

#endif // KILN_RUNTIME_KERNELS_LORAGRADPAIR_CUH
