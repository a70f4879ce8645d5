//===- ThinGemm.cuh - Bandwidth-bound GEMMs with one thin dimension -*- CUDA -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Row-major C[M,N] = alpha * op(A) op(B) + beta * C, bf16 operands, fp32
// accumulation, bf16 or fp32 C, where one of M, N, K is 16..64: the LoRA
// GEMMs (docs/design/lora-k-concat.md). At these intensities the work is
// moving bytes, so the kernel is built for streaming: 16-byte cp.async
// loads into a multi-stage shared-memory ring, ldmatrix (.trans for the
// transposed layouts) into mma.sync m16n8k16, a CTA tile whose thin side is
// the whole thin dimension, and a split over K where the output has too few
// tiles to keep every SM streaming.
//
// The split is deterministic: each CTA of a tile writes its fp32 partial to
// a workspace, the last to arrive (an integer counter per tile, reset by
// that CTA) adds the partials in split order 0..S-1 and applies alpha and
// beta. No float atomics, so the result does not depend on arrival order.
//
// The epilogue stages the fp32 tile in shared memory and writes C in
// 16-byte vectors (reading C first where beta != 0).
//
// Layouts (ThinGemmPlan.h checks them on the host): A is [M,K] (TA = false)
// or [K,M] (TA = true) at row stride lda; B is [K,N] (TB = false) or [N,K]
// (TB = true) at ldb; C is [M,N] at ldc. M, N multiples of the tile, K of
// the split times BK, strides multiples of 8 elements, pointers 16-byte
// aligned.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_KERNELS_THINGEMM_CUH
#define KILN_RUNTIME_KERNELS_THINGEMM_CUH

#include <cuda_bf16.h>
#include <stdint.h>

namespace kiln_thin {

/// The kernel's one argument (passed by value through cuLaunchKernel).
struct Params {
  const __nv_bfloat16 *a, *b;
  void *c;
  float *partials;     ///< splits * M * N floats (splits > 1)
  unsigned *counters;  ///< one per output tile, zero between launches
  int64_t m, n, k, lda, ldb, ldc;
  float alpha, beta;
  int splits;
};

__device__ __forceinline__ uint32_t smemAddress(const void *p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cpAsync16(void *smem, const void *global) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(smemAddress(smem)),
               "l"(global));
}
__device__ __forceinline__ void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n"); }
template <int N> __device__ __forceinline__ void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

template <bool Trans> __device__ __forceinline__ void ldmatrixX4(uint32_t (&r)[4], const void *p) {
  if (Trans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smemAddress(p)));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smemAddress(p)));
}

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
               "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/// A row-major tile of R rows by W contiguous elements in shared memory,
/// rows padded by 8 elements: ldmatrix's eight 16-byte row reads then fall
/// in distinct bank groups.
template <int R, int W> struct Tile {
  static constexpr int kPitch = W + 8;
  static constexpr int kElements = R * kPitch;
};

/// The CTA's tile: BM x BN outputs, K in steps of BK through a ring of
/// Stages buffers, WarpsM x WarpsN warps each holding (BM/WarpsM) x
/// (BN/WarpsN) accumulators.
template <int BM, int BN, int BK, int WarpsM, int WarpsN, int Stages, bool TA, bool TB>
struct Config {
  static constexpr int kThreads = 32 * WarpsM * WarpsN;
  static constexpr int kWarpM = BM / WarpsM, kWarpN = BN / WarpsN;
  static constexpr int kFragsM = kWarpM / 16, kFragsN = kWarpN / 8;
  static_assert(kWarpM % 16 == 0 && kWarpN % 16 == 0, "warp tile: multiples of 16");
  static_assert(BK % 16 == 0, "BK: a multiple of 16");
  // Stored as the operands are: A [BM][BK] or [BK][BM], B [BK][BN] or [BN][BK].
  using TileA = Tile<TA ? BK : BM, TA ? BM : BK>;
  using TileB = Tile<TB ? BN : BK, TB ? BK : BN>;
  static constexpr int kStageElements = TileA::kElements + TileB::kElements;
  static constexpr int kPipelineBytes = Stages * kStageElements * 2;
  static constexpr int kStagePitch = BN + 4; // fp32 staging of the output tile
  static constexpr int kStagingBytes = BM * kStagePitch * 4;
  static constexpr int kSharedBytes =
      kPipelineBytes > kStagingBytes ? kPipelineBytes : kStagingBytes;
};

/// Copies a tile of R x W elements at (row0, col0) of a row-major matrix
/// with row stride ld into shared memory, 16 bytes per cp.async.
template <int R, int W, int Threads>
__device__ __forceinline__ void loadTile(__nv_bfloat16 *smem, const __nv_bfloat16 *g, int64_t ld,
                                         int64_t row0, int64_t col0) {
  constexpr int kChunksPerRow = W / 8, kChunks = R * kChunksPerRow;
  static_assert(W % 8 == 0, "tile width: whole 16-byte chunks");
#pragma unroll
  for (int i = 0; i < (kChunks + Threads - 1) / Threads; ++i) {
    int c = threadIdx.x + i * Threads;
    if (kChunks % Threads == 0 || c < kChunks) {
      int r = c / kChunksPerRow, w = (c % kChunksPerRow) * 8;
      cpAsync16(smem + r * Tile<R, W>::kPitch + w, g + (row0 + r) * ld + col0 + w);
    }
  }
}

template <typename Cfg, int BM, int BN, int BK, bool TA, bool TB>
__device__ __forceinline__ void loadStage(__nv_bfloat16 *stage, const Params &p, int64_t m0,
                                          int64_t n0, int64_t k0) {
  __nv_bfloat16 *sa = stage, *sb = stage + Cfg::TileA::kElements;
  if (TA)
    loadTile<BK, BM, Cfg::kThreads>(sa, p.a, p.lda, k0, m0);
  else
    loadTile<BM, BK, Cfg::kThreads>(sa, p.a, p.lda, m0, k0);
  if (TB)
    loadTile<BN, BK, Cfg::kThreads>(sb, p.b, p.ldb, n0, k0);
  else
    loadTile<BK, BN, Cfg::kThreads>(sb, p.b, p.ldb, k0, n0);
}

/// One BK slice of the warp's products from a stage in shared memory.
template <typename Cfg, int BM, int BN, int BK, bool TA, bool TB>
__device__ __forceinline__ void computeStage(const __nv_bfloat16 *stage, int warpM0, int warpN0,
                                             float (&acc)[Cfg::kFragsM][Cfg::kFragsN][4]) {
  const __nv_bfloat16 *sa = stage, *sb = stage + Cfg::TileA::kElements;
  constexpr int pa = Cfg::TileA::kPitch, pb = Cfg::TileB::kPitch;
  int lane = threadIdx.x % 32, j = lane / 8, r = lane % 8;
#pragma unroll
  for (int kk = 0; kk < BK; kk += 16) {
    uint32_t af[Cfg::kFragsM][4];
#pragma unroll
    for (int fm = 0; fm < Cfg::kFragsM; ++fm) {
      int m = warpM0 + fm * 16;
      // Matrices 0..3: (m, k), (m + 8, k), (m, k + 8), (m + 8, k + 8).
      if (TA)
        ldmatrixX4<true>(af[fm], sa + (kk + r + (j / 2) * 8) * pa + m + (j % 2) * 8);
      else
        ldmatrixX4<false>(af[fm], sa + (m + r + (j % 2) * 8) * pa + kk + (j / 2) * 8);
    }
#pragma unroll
    for (int fn = 0; fn < Cfg::kFragsN; fn += 2) {
      int n = warpN0 + fn * 8;
      // Matrices 0..3: (k, n), (k + 8, n), (k, n + 8), (k + 8, n + 8).
      uint32_t bf[4];
      if (TB)
        ldmatrixX4<false>(bf, sb + (n + r + (j / 2) * 8) * pb + kk + (j % 2) * 8);
      else
        ldmatrixX4<true>(bf, sb + (kk + r + (j % 2) * 8) * pb + n + (j / 2) * 8);
#pragma unroll
      for (int fm = 0; fm < Cfg::kFragsM; ++fm) {
        mma16816(acc[fm][fn], af[fm], bf[0], bf[1]);
        mma16816(acc[fm][fn + 1], af[fm], bf[2], bf[3]);
      }
    }
  }
}

/// Eight elements of C as loaded (16 bytes of bf16, 32 of fp32): kept raw
/// between the loads and the stores, half the registers of floats.
template <typename Out> struct Raw8 {
  uint4 v[sizeof(Out) / 2];
};
template <typename Out> __device__ __forceinline__ Raw8<Out> loadRaw8(const Out *p) {
  Raw8<Out> r;
#pragma unroll
  for (int i = 0; i < int(sizeof(Out) / 2); ++i)
    r.v[i] = reinterpret_cast<const uint4 *>(p)[i];
  return r;
}
__device__ __forceinline__ void unpack8(float (&f)[8], const Raw8<__nv_bfloat16> &r) {
  const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(r.v);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float2 x = __bfloat1622float2(h[i]);
    f[2 * i] = x.x;
    f[2 * i + 1] = x.y;
  }
}
__device__ __forceinline__ void unpack8(float (&f)[8], const Raw8<float> &r) {
  const float *x = reinterpret_cast<const float *>(r.v);
#pragma unroll
  for (int i = 0; i < 8; ++i)
    f[i] = x[i];
}
template <typename Out> __device__ __forceinline__ void storeOut8(Out *p, const float (&v)[8]);
template <> __device__ __forceinline__ void storeOut8(__nv_bfloat16 *p, const float (&v)[8]) {
  uint4 raw;
  __nv_bfloat162 *h = reinterpret_cast<__nv_bfloat162 *>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i)
    h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  *reinterpret_cast<uint4 *>(p) = raw;
}
template <> __device__ __forceinline__ void storeOut8(float *p, const float (&v)[8]) {
  reinterpret_cast<float4 *>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
  reinterpret_cast<float4 *>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
}

/// The whole kernel: grid (N / BN, M / BM, splits).
template <int BM, int BN, int BK, int WarpsM, int WarpsN, int Stages, bool TA, bool TB,
          typename Out>
__device__ __forceinline__ void thinGemm(const Params &p) {
  using Cfg = Config<BM, BN, BK, WarpsM, WarpsN, Stages, TA, TB>;
  extern __shared__ __align__(16) unsigned char shared[];
  __nv_bfloat16 *ring = reinterpret_cast<__nv_bfloat16 *>(shared);
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * BN,
                m0 = static_cast<int64_t>(blockIdx.y) * BM;
  const int split = blockIdx.z;
  const int64_t kChunk = p.k / p.splits, kBegin = split * kChunk;
  const int steps = static_cast<int>(kChunk / BK);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warpM0 = (warp / WarpsN) * Cfg::kWarpM, warpN0 = (warp % WarpsN) * Cfg::kWarpN;

  float acc[Cfg::kFragsM][Cfg::kFragsN][4];
#pragma unroll
  for (int i = 0; i < Cfg::kFragsM; ++i)
#pragma unroll
    for (int j = 0; j < Cfg::kFragsN; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e)
        acc[i][j][e] = 0.f;

  // The ring: Stages - 1 slices in flight ahead of the one computed.
#pragma unroll
  for (int s = 0; s < Stages - 1; ++s) {
    if (s < steps)
      loadStage<Cfg, BM, BN, BK, TA, TB>(ring + s * Cfg::kStageElements, p, m0, n0,
                                         kBegin + s * BK);
    cpAsyncCommit();
  }
  for (int step = 0; step < steps; ++step) {
    cpAsyncWait<Stages - 2>();
    __syncthreads();
    int next = step + Stages - 1;
    if (next < steps)
      loadStage<Cfg, BM, BN, BK, TA, TB>(ring + (next % Stages) * Cfg::kStageElements, p, m0, n0,
                                         kBegin + next * BK);
    cpAsyncCommit();
    computeStage<Cfg, BM, BN, BK, TA, TB>(ring + (step % Stages) * Cfg::kStageElements, warpM0,
                                          warpN0, acc);
  }
  cpAsyncWait<0>();
  __syncthreads();

  // The accumulators into the fp32 staging tile (over the ring).
  float *staging = reinterpret_cast<float *>(shared);
  constexpr int sp = Cfg::kStagePitch;
  int g = lane / 4, t = lane % 4;
#pragma unroll
  for (int fm = 0; fm < Cfg::kFragsM; ++fm)
#pragma unroll
    for (int fn = 0; fn < Cfg::kFragsN; ++fn) {
      int row = warpM0 + fm * 16 + g, col = warpN0 + fn * 8 + 2 * t;
      *reinterpret_cast<float2 *>(staging + row * sp + col) =
          make_float2(acc[fm][fn][0], acc[fm][fn][1]);
      *reinterpret_cast<float2 *>(staging + (row + 8) * sp + col) =
          make_float2(acc[fm][fn][2], acc[fm][fn][3]);
    }
  __syncthreads();

  constexpr int kChunksPerRow = BN / 8, kChunks = BM * kChunksPerRow;
  constexpr int kPerThread = (kChunks + Cfg::kThreads - 1) / Cfg::kThreads;
  if (p.splits > 1) {
    // This split's partial, then the tile's last CTA sums all in order.
    float *mine = p.partials + split * p.m * p.n;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      int c = threadIdx.x + i * Cfg::kThreads;
      if (kChunks % Cfg::kThreads == 0 || c < kChunks) {
        int r = c / kChunksPerRow, w = (c % kChunksPerRow) * 8;
        float *dst = mine + (m0 + r) * p.n + n0 + w;
        const float *src = staging + r * sp + w;
        __stcg(reinterpret_cast<float4 *>(dst), *reinterpret_cast<const float4 *>(src));
        __stcg(reinterpret_cast<float4 *>(dst) + 1, *reinterpret_cast<const float4 *>(src + 4));
      }
    }
    __threadfence();
    __syncthreads();
    __shared__ unsigned arrived;
    unsigned *counter = p.counters + blockIdx.y * gridDim.x + blockIdx.x;
    if (threadIdx.x == 0)
      arrived = atomicAdd(counter, 1u);
    __syncthreads();
    if (arrived != static_cast<unsigned>(p.splits - 1))
      return;
    __threadfence();
    if (threadIdx.x == 0)
      *counter = 0; // ready for the next launch
  }

  // C = alpha * sum + beta * C, 8 elements per thread and chunk; every load
  // of C issued before the first store.
  Out *c = static_cast<Out *>(p.c);
  Raw8<Out> old[kPerThread];
  const bool accumulate = p.beta != 0.f;
  if (accumulate) {
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      int ch = threadIdx.x + i * Cfg::kThreads;
      if (kChunks % Cfg::kThreads == 0 || ch < kChunks) {
        int r = ch / kChunksPerRow, w = (ch % kChunksPerRow) * 8;
        old[i] = loadRaw8<Out>(c + (m0 + r) * p.ldc + n0 + w);
      }
    }
  }
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    int ch = threadIdx.x + i * Cfg::kThreads;
    if (kChunks % Cfg::kThreads == 0 || ch < kChunks) {
      int r = ch / kChunksPerRow, w = (ch % kChunksPerRow) * 8;
      float sum[8];
      if (p.splits > 1) {
#pragma unroll
        for (int e = 0; e < 8; ++e)
          sum[e] = 0.f;
        for (int s = 0; s < p.splits; ++s) {
          const float *src = p.partials + s * p.m * p.n + (m0 + r) * p.n + n0 + w;
          float4 x = __ldcg(reinterpret_cast<const float4 *>(src)),
                 y = __ldcg(reinterpret_cast<const float4 *>(src) + 1);
          sum[0] += x.x, sum[1] += x.y, sum[2] += x.z, sum[3] += x.w;
          sum[4] += y.x, sum[5] += y.y, sum[6] += y.z, sum[7] += y.w;
        }
      } else {
        float4 x = *reinterpret_cast<const float4 *>(staging + r * sp + w),
               y = *reinterpret_cast<const float4 *>(staging + r * sp + w + 4);
        sum[0] = x.x, sum[1] = x.y, sum[2] = x.z, sum[3] = x.w;
        sum[4] = y.x, sum[5] = y.y, sum[6] = y.z, sum[7] = y.w;
      }
      float v[8], prior[8];
      if (accumulate)
        unpack8(prior, old[i]);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        v[e] = accumulate ? p.alpha * sum[e] + p.beta * prior[e] : p.alpha * sum[e];
      storeOut8<Out>(c + (m0 + r) * p.ldc + n0 + w, v);
    }
  }
}

/// The small-K kernel that keeps its A tile: a CTA owns rows m0..m0+BM and
/// (N / BN) / gridDim.x consecutive column tiles; B tiles stream through a
/// two-slot ring, the next one loading while this one's C is read and
/// written, so an SM's loads and stores overlap (the one-tile kernel above
/// loads, computes and stores in turn). K = BK, whole; grid (N / BN /
/// tiles, M / BM); no split.
template <int BM, int BN, int BK, int WarpsM, int WarpsN, bool TA, bool TB, typename Out>
__device__ __forceinline__ void thinGemmWide(const Params &p) {
  using Cfg = Config<BM, BN, BK, WarpsM, WarpsN, 2, TA, TB>;
  extern __shared__ __align__(16) unsigned char shared[];
  __nv_bfloat16 *sa = reinterpret_cast<__nv_bfloat16 *>(shared);
  __nv_bfloat16 *ring = sa + Cfg::TileA::kElements;
  float *staging = reinterpret_cast<float *>(ring + 2 * Cfg::TileB::kElements);
  constexpr int sp = Cfg::kStagePitch;
  const int tiles = static_cast<int>(p.n / BN) / gridDim.x;
  const int64_t m0 = static_cast<int64_t>(blockIdx.y) * BM,
                nFirst = static_cast<int64_t>(blockIdx.x) * tiles * BN;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int warpM0 = (warp / WarpsN) * Cfg::kWarpM, warpN0 = (warp % WarpsN) * Cfg::kWarpN;
  auto loadB = [&](int t) {
    __nv_bfloat16 *sb = ring + (t % 2) * Cfg::TileB::kElements;
    if (TB)
      loadTile<BN, BK, Cfg::kThreads>(sb, p.b, p.ldb, nFirst + t * BN, 0);
    else
      loadTile<BK, BN, Cfg::kThreads>(sb, p.b, p.ldb, 0, nFirst + t * BN);
  };
  // Group 0: A and B tile 0; group 1: B tile 1 (or nothing). One group per
  // tile after that, so wait_group 1 always means "this tile has landed".
  if (TA)
    loadTile<BK, BM, Cfg::kThreads>(sa, p.a, p.lda, 0, m0);
  else
    loadTile<BM, BK, Cfg::kThreads>(sa, p.a, p.lda, m0, 0);
  loadB(0);
  cpAsyncCommit();
  if (tiles > 1)
    loadB(1);
  cpAsyncCommit();

  constexpr int kChunksPerRow = BN / 8, kChunks = BM * kChunksPerRow;
  constexpr int kPerThread = (kChunks + Cfg::kThreads - 1) / Cfg::kThreads;
  const bool accumulate = p.beta != 0.f;
  Out *c = static_cast<Out *>(p.c);
  int g = lane / 4, t4 = lane % 4;
  for (int t = 0; t < tiles; ++t) {
    cpAsyncWait<1>();
    __syncthreads();
    float acc[Cfg::kFragsM][Cfg::kFragsN][4];
#pragma unroll
    for (int i = 0; i < Cfg::kFragsM; ++i)
#pragma unroll
      for (int j = 0; j < Cfg::kFragsN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          acc[i][j][e] = 0.f;
    // computeStage reads A then B from one stage: here A stays and B moves,
    // so the stage pointer is A's and B's offset from it is the slot's.
    {
      const __nv_bfloat16 *sb = ring + (t % 2) * Cfg::TileB::kElements;
      constexpr int pa = Cfg::TileA::kPitch, pb = Cfg::TileB::kPitch;
      int j = lane / 8, r = lane % 8;
#pragma unroll
      for (int kk = 0; kk < BK; kk += 16) {
        uint32_t af[Cfg::kFragsM][4];
#pragma unroll
        for (int fm = 0; fm < Cfg::kFragsM; ++fm) {
          int m = warpM0 + fm * 16;
          if (TA)
            ldmatrixX4<true>(af[fm], sa + (kk + r + (j / 2) * 8) * pa + m + (j % 2) * 8);
          else
            ldmatrixX4<false>(af[fm], sa + (m + r + (j % 2) * 8) * pa + kk + (j / 2) * 8);
        }
#pragma unroll
        for (int fn = 0; fn < Cfg::kFragsN; fn += 2) {
          int n = warpN0 + fn * 8;
          uint32_t bf[4];
          if (TB)
            ldmatrixX4<false>(bf, sb + (n + r + (j / 2) * 8) * pb + kk + (j % 2) * 8);
          else
            ldmatrixX4<true>(bf, sb + (kk + r + (j % 2) * 8) * pb + n + (j / 2) * 8);
#pragma unroll
          for (int fm = 0; fm < Cfg::kFragsM; ++fm) {
            mma16816(acc[fm][fn], af[fm], bf[0], bf[1]);
            mma16816(acc[fm][fn + 1], af[fm], bf[2], bf[3]);
          }
        }
      }
    }
    // Every warp is done with this B slot and with the last tile's staging.
    __syncthreads();
    if (t + 2 < tiles)
      loadB(t + 2);
    cpAsyncCommit();
    const int64_t n0 = nFirst + static_cast<int64_t>(t) * BN;
    // Issue this tile's C loads before the staging round trip.
    Raw8<Out> old[kPerThread];
    if (accumulate) {
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        int ch = threadIdx.x + i * Cfg::kThreads;
        if (kChunks % Cfg::kThreads == 0 || ch < kChunks) {
          int r = ch / kChunksPerRow, w = (ch % kChunksPerRow) * 8;
          old[i] = loadRaw8<Out>(c + (m0 + r) * p.ldc + n0 + w);
        }
      }
    }
#pragma unroll
    for (int fm = 0; fm < Cfg::kFragsM; ++fm)
#pragma unroll
      for (int fn = 0; fn < Cfg::kFragsN; ++fn) {
        int row = warpM0 + fm * 16 + g, col = warpN0 + fn * 8 + 2 * t4;
        *reinterpret_cast<float2 *>(staging + row * sp + col) =
            make_float2(acc[fm][fn][0], acc[fm][fn][1]);
        *reinterpret_cast<float2 *>(staging + (row + 8) * sp + col) =
            make_float2(acc[fm][fn][2], acc[fm][fn][3]);
      }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      int ch = threadIdx.x + i * Cfg::kThreads;
      if (kChunks % Cfg::kThreads == 0 || ch < kChunks) {
        int r = ch / kChunksPerRow, w = (ch % kChunksPerRow) * 8;
        float4 x = *reinterpret_cast<const float4 *>(staging + r * sp + w),
               y = *reinterpret_cast<const float4 *>(staging + r * sp + w + 4);
        float sum[8] = {x.x, x.y, x.z, x.w, y.x, y.y, y.z, y.w}, v[8], prior[8];
        if (accumulate)
          unpack8(prior, old[i]);
#pragma unroll
        for (int e = 0; e < 8; ++e)
          v[e] = accumulate ? p.alpha * sum[e] + p.beta * prior[e] : p.alpha * sum[e];
        storeOut8<Out>(c + (m0 + r) * p.ldc + n0 + w, v);
      }
    }
  }
  cpAsyncWait<0>();
}

/// Shared memory of thinGemmWide: A, two B slots, the fp32 staging tile.
template <int BM, int BN, int BK, int WarpsM, int WarpsN, bool TA, bool TB>
constexpr int wideSharedBytes() {
  using Cfg = Config<BM, BN, BK, WarpsM, WarpsN, 2, TA, TB>;
  return (Cfg::TileA::kElements + 2 * Cfg::TileB::kElements) * 2 + Cfg::kStagingBytes;
}

} // namespace kiln_thin

// The instantiations the runtime loads by name (ThinGemmPlan.h lists them):
// kiln_thin_gemm_<shape>_<layout>_<thin>_<out>.
//   k<T>: K = T (16..64), the CTA 128 x 128 over a big output, K whole.
//   n<T>: N = T, the CTA 64 rows x T, K in slices of 64, split over K.
//   m<T>: M = T, the CTA T x 64 columns, K in slices of 64, split over K.
// 64-wide tiles: with 128 (measured on the H200, 2026-12-01) the split
// shapes ran at half cuBLASLt's speed, we read it as the last CTA's serial
// sum of up to 32 partial tiles (docs/benchmarks.md, "Kiln's thin-GEMM
// kernels"); 64 gives twice the tiles, so fewer splits, each sum 1/4.
// layout: nn (A [M,K], B [K,N]), nt (B [N,K]), tn (A [K,M]).
// cp.async and bf16 mma.sync need sm_80; the PTX kept for older GPUs traps
// (ThinGemmPlan refuses them: the runtime checks the compute capability).
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define KILN_THIN_GEMM_BODY(BM, BN, BK, WM, WN, ST, TA, TB, OUT)                                   \
  kiln_thin::thinGemm<BM, BN, BK, WM, WN, ST, TA, TB, OUT>(p);
#else
#define KILN_THIN_GEMM_BODY(BM, BN, BK, WM, WN, ST, TA, TB, OUT) __trap();
#endif
#define KILN_THIN_GEMM(name, BM, BN, BK, WM, WN, ST, TA, TB, OUT)                                  \
  extern "C" __global__ void __launch_bounds__(32 * WM * WN)                                      \
      kiln_thin_gemm_##name(kiln_thin::Params p) {                                               \
    KILN_THIN_GEMM_BODY(BM, BN, BK, WM, WN, ST, TA, TB, OUT)                                       \
  }

#define KILN_THIN_GEMM_LAYOUTS(shape, BM, BN, BK, WM, WN, ST, OUTNAME, OUT)                        \
  KILN_THIN_GEMM(shape##_nn_##OUTNAME, BM, BN, BK, WM, WN, ST, false, false, OUT)                 \
  KILN_THIN_GEMM(shape##_nt_##OUTNAME, BM, BN, BK, WM, WN, ST, false, true, OUT)                  \
  KILN_THIN_GEMM(shape##_tn_##OUTNAME, BM, BN, BK, WM, WN, ST, true, false, OUT)

#define KILN_THIN_GEMM_ALL(OUTNAME, OUT)                                                           \
  KILN_THIN_GEMM_LAYOUTS(k16, 128, 128, 16, 4, 2, 2, OUTNAME, OUT)                                 \
  KILN_THIN_GEMM_LAYOUTS(k32, 128, 128, 32, 4, 2, 2, OUTNAME, OUT)                                 \
  KILN_THIN_GEMM_LAYOUTS(k48, 128, 128, 48, 4, 2, 2, OUTNAME, OUT)                                 \
  KILN_THIN_GEMM_LAYOUTS(k64, 128, 128, 64, 4, 2, 2, OUTNAME, OUT)                                 \
  KILN_THIN_GEMM_LAYOUTS(n16, 64, 16, 64, 4, 1, 4, OUTNAME, OUT)                                  \
  KILN_THIN_GEMM_LAYOUTS(n32, 64, 32, 64, 4, 1, 4, OUTNAME, OUT)                                  \
  KILN_THIN_GEMM_LAYOUTS(n48, 64, 48, 64, 4, 1, 4, OUTNAME, OUT)                                  \
  KILN_THIN_GEMM_LAYOUTS(n64, 64, 64, 64, 4, 1, 4, OUTNAME, OUT)                                  \
  KILN_THIN_GEMM_LAYOUTS(m16, 16, 64, 64, 1, 4, 4, OUTNAME, OUT)                                  \
  KILN_THIN_GEMM_LAYOUTS(m32, 32, 64, 64, 1, 4, 4, OUTNAME, OUT)                                  \
  KILN_THIN_GEMM_LAYOUTS(m48, 48, 64, 64, 1, 4, 4, OUTNAME, OUT)                                  \
  KILN_THIN_GEMM_LAYOUTS(m64, 64, 64, 64, 1, 4, 4, OUTNAME, OUT)

#endif // KILN_RUNTIME_KERNELS_THINGEMM_CUH
