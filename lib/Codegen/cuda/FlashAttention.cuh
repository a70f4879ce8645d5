// Kiln's tiled tensor-core attention (lib/Codegen/cuda/FlashAttention.cuh).
//
// kiln.attention and kiln.attention_grad on bf16/f16 inputs with a head
// dimension of 16..128 (a multiple of 16) run as FlashAttention-style tiled
// kernels: a block of 4 warps owns 64 query rows of one (batch, head) and
// walks the keys 64 at a time; Q K^T, P V and the backward's five products
// are WMMA tensor-core products from shared memory, the softmax is online
// (running row max and sum), so no S x S tensor exists anywhere. P and dS
// are rounded once to bf16/f16 for their products, as FlashAttention does:
// the numerics policy of docs/codegen.md (relative L2 error within 1.5x of
// PyTorch's flash backend) holds, and the products cost one MMA each.
//
// The generated kernel passes q, k, v (and dout) with their Strides: the
// head dim contiguous, rows of a (batch, head) at a seq stride (D in dense
// [B, H, S, D], H D in kiln-attention-layout's [B, S, H, D]), loaded 16
// bytes at a time; the mask (possibly a
// fused producer) and the stores of the results as lambdas; and calls
// kiln_flash::forward / backward from this prelude. The backward is query-
// tile parallel: a first pass over the keys recomputes each row's max, sum
// and Delta = rowsum(P * dP) online (no forward output or statistics
// needed), the second makes P and dS, keeps dQ in registers and adds
// the tile's dK and dV partial products into fp32 accumulators atomically.
// Shared memory layouts are fixed by D (ForwardSmem, BackwardSmem below);
// kernel::flashAttentionSharedBytes() (OpClassification.cpp), which sizes
// the launch, is the same arithmetic, and every kernel static_asserts so.
#include <mma.h>
namespace kiln_flash {
using namespace nvcuda;
constexpr int BM = 64, BN = 64;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> Acc;
template <typename T, typename Layout>
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, Layout>;
template <typename T, typename Layout>
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, Layout>;

// Element strides of one tensor's [B, H, S, D] view (the head dim
// contiguous): dense [B, H, S, D] is {H S D, S D, D}, [B, S, H, D] (a
// seq_major operand) {S H D, D, H D}.
struct Strides {
  int64_t batch, head, seq;
};

// dK / dV partial sums: four fp32 atomics in one on sm_90.
__device__ __forceinline__ void atomicAdd4(float *p, float4 v) {
#if __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float4 *>(p), v);
#else
  atomicAdd(p, v.x);
  atomicAdd(p + 1, v.y);
  atomicAdd(p + 2, v.z);
  atomicAdd(p + 3, v.w);
#endif
}

// 64 rows of D elements (row 0 at src, the next `stride` elements on; rows
// past `rows` read as zero) into shared memory with row stride LD, 16 bytes
// per access.
template <typename T, int D, int LD>
__device__ __forceinline__ void loadTile(T *dst, const T *src, int64_t rows, int64_t stride) {
  constexpr int V = D / 8;
  for (int t = threadIdx.x; t < 64 * V; t += blockDim.x) {
    const int r = t / V, c = (t % V) * 8;
    uint4 x = make_uint4(0u, 0u, 0u, 0u);
    if (r < rows)
      x = *reinterpret_cast<const uint4 *>(src + (int64_t)r * stride + c);
    *reinterpret_cast<uint4 *>(dst + r * LD + c) = x;
  }
}

// C(16 x 16, fp32 at c, ldc) (+)= A(16 x K) B(K x 16), K = 16 * steps; A and
// B advance by aStep / bStep elements per 16 of K.
template <typename T, typename LA, typename LB>
__device__ __forceinline__ void product(float *c, int ldc, bool accumulate, const T *a, int lda,
                                        int aStep, const T *b, int ldb, int bStep, int steps) {
  Acc acc;
  if (accumulate)
    wmma::load_matrix_sync(acc, c, ldc, wmma::mem_row_major);
  else
    wmma::fill_fragment(acc, 0.f);
  for (int k = 0; k < steps; ++k) {
    FragA<T, LA> fa;
    FragB<T, LB> fb;
    wmma::load_matrix_sync(fa, a + k * aStep, lda);
    wmma::load_matrix_sync(fb, b + k * bStep, ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(c, acc, ldc, wmma::mem_row_major);
}

// Scores of one row: lane pair (2r, 2r+1) of a warp owns row r of the
// warp's 16, each 32 of the 64 columns. Returns the masked, scaled scores.
template <typename Mask>
__device__ __forceinline__ void rowScores(float (&s)[32], const float *S, int lds, int r, int c0,
                                          int64_t b, int64_t h, int64_t i, int64_t j0,
                                          int64_t Sq, int64_t L, float scale, bool causal,
                                          Mask &mask) {
#pragma unroll
  for (int c = 0; c < 32; ++c) {
    const int64_t j = j0 + c0 + c;
    float v = S[r * lds + c0 + c] * scale;
    if (j >= L || i >= Sq || (causal && j > i))
      v = -KILN_INF;
    else
      v += mask(b, h, i, j);
    s[c] = v;
  }
}

// A K or V tile (64 rows of D) travels global -> registers -> shared memory:
// the next tile's loads are issued before this tile's products, so their
// latency hides behind the tensor-core work. Blocks have 128 threads.
template <typename T, int D>
struct TilePrefetch {
  static constexpr int V = D / 8, PER = 64 * V / 128;
  uint4 regs[PER];
  __device__ __forceinline__ void load(const T *src, int64_t rows, int64_t stride) {
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      const int e = threadIdx.x + 128 * u, r = e / V, c = (e % V) * 8;
      regs[u] = r < rows ? *reinterpret_cast<const uint4 *>(src + (int64_t)r * stride + c)
                         : make_uint4(0u, 0u, 0u, 0u);
    }
  }
  template <int LD>
  __device__ __forceinline__ void store(T *dst) const {
#pragma unroll
    for (int u = 0; u < PER; ++u) {
      const int e = threadIdx.x + 128 * u, r = e / V, c = (e % V) * 8;
      *reinterpret_cast<uint4 *>(dst + r * LD + c) = regs[u];
    }
  }
};

// The dynamic shared memory of forward<T, D> and backward<T, D>: each
// tile's byte offset and the total a launch must provide. The generated
// kernel static_asserts `bytes` against the launch's size the compiler
// computed (kernel::flashAttentionSharedBytes), so the two cannot disagree.
template <typename T, int D> struct ForwardSmem {
  static constexpr int LD = D + 8, LDS = BN + 4, LDP = BN + 8;
  // O's staging (rescales, the final store) is a warp's own S rows when they
  // are wide enough (S is in registers by then), with S's row stride.
  static constexpr bool kShared = D + 4 <= LDS;
  static constexpr int LDO = kShared ? LDS : D + 4;
  static constexpr int q = 0, k = q + BM * LD * (int)sizeof(T), v = k + BN * LD * (int)sizeof(T),
                       s = v + BN * LD * (int)sizeof(T), p = s + BM * LDS * (int)sizeof(float),
                       end = p + BM * LDP * (int)sizeof(T),
                       o = kShared ? s : end,
                       bytes = kShared ? end : end + BM * LDO * (int)sizeof(float);
};
template <typename T, int D> struct BackwardSmem {
  static constexpr int LD = D + 8, LDS = BN + 4, LDP = BN + 8, LDO = D + 4;
  static constexpr int q = 0, dout = q + BM * LD * (int)sizeof(T),
                       k = dout + BM * LD * (int)sizeof(T), v = k + BN * LD * (int)sizeof(T),
                       s = v + BN * LD * (int)sizeof(T), dp = s + BM * LDS * (int)sizeof(float),
                       p = dp + BM * LDS * (int)sizeof(float), ds = p + BM * LDP * (int)sizeof(T),
                       stage = ds + BM * LDP * (int)sizeof(T),
                       bytes = stage + (BM / 16) * 256 * (int)sizeof(float);
  // dQ's final staging reuses S and dP.
  static_assert(BM * LDO <= 2 * BM * LDS, "dQ's staging must fit in S and dP");
};

// Row statistics are rescaled lazily: a row's reference max moves only when
// a score exceeds it by more than this (natural log units), so P = exp(s -
// m) stays below e^8 and the output accumulators (in registers) are
// rescaled through shared memory only then: a few times per row.
constexpr float kRescaleMargin = 8.f;

template <typename T, int D, typename Mask, typename StoreO>
__device__ void forward(const T *q, Strides qs, const T *k, Strides ks, const T *v, Strides vs,
                        int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t L, float scale,
                        bool causal, Mask mask, StoreO storeO, unsigned char *smem) {
  using Smem = ForwardSmem<T, D>;
  constexpr int LD = Smem::LD, LDS = Smem::LDS, LDP = Smem::LDP, LDO = Smem::LDO;
  T *Qs = reinterpret_cast<T *>(smem + Smem::q);
  T *Ks = reinterpret_cast<T *>(smem + Smem::k);
  T *Vs = reinterpret_cast<T *>(smem + Smem::v);
  float *Ss = reinterpret_cast<float *>(smem + Smem::s);
  T *Ps = reinterpret_cast<T *>(smem + Smem::p);
  float *Os = reinterpret_cast<float *>(smem + Smem::o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = warp * 16 + lane / 2, c0 = (lane % 2) * 32;
  float *myS = Ss + warp * 16 * LDS, *myO = Os + warp * 16 * LDO;
  T *myP = Ps + warp * 16 * LDP;
  const int64_t group = H / Hkv, qTiles = (Sq + BM - 1) / BM, tiles = B * H * qTiles;
  TilePrefetch<T, D> nextK, nextV;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t i0 = (tile % qTiles) * BM, h = (tile / qTiles) % H, b = tile / (qTiles * H);
    const int64_t hk = h / group, i = i0 + r;
    const T *kBase = k + b * ks.batch + hk * ks.head, *vBase = v + b * vs.batch + hk * vs.head;
    __syncthreads(); // the previous tile is done with shared memory
    loadTile<T, D, LD>(Qs, q + b * qs.batch + h * qs.head + i0 * qs.seq, Sq - i0, qs.seq);
    Acc o[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; ++n)
      wmma::fill_fragment(o[n], 0.f);
    float m = -KILN_INF, l = 0.f; // this lane's row (both lanes of a pair agree)
    bool empty = true;            // o holds nothing yet (warp-uniform)
    const int64_t jEnd = causal ? (L < i0 + BM ? L : i0 + BM) : L;
    nextK.load(kBase, L, ks.seq);
    nextV.load(vBase, L, vs.seq);
    for (int64_t j0 = 0; j0 < jEnd; j0 += BN) {
      __syncthreads();
      nextK.template store<LD>(Ks);
      nextV.template store<LD>(Vs);
      __syncthreads();
      if (j0 + BN < jEnd) {
        nextK.load(kBase + (j0 + BN) * ks.seq, L - j0 - BN, ks.seq);
        nextV.load(vBase + (j0 + BN) * vs.seq, L - j0 - BN, vs.seq);
      }
      for (int n = 0; n < BN / 16; ++n) // S = Q K^T
        product<T, wmma::row_major, wmma::col_major>(myS + n * 16, LDS, false,
                                                     Qs + warp * 16 * LD, LD, 16,
                                                     Ks + n * 16 * LD, LD, 16, D / 16);
      __syncwarp();
      float s[32];
      rowScores(s, Ss, LDS, r, c0, b, h, i, j0, Sq, L, scale, causal, mask);
      float mx = -KILN_INF;
#pragma unroll
      for (int c = 0; c < 32; ++c)
        mx = fmaxf(mx, s[c]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      if (__any_sync(0xffffffffu, mx > m + kRescaleMargin || (m == -KILN_INF && mx > m))) {
        const float mNew = fmaxf(m, mx);
        const float alpha = m == -KILN_INF ? 0.f : __expf(m - mNew);
        if (!empty) {
#pragma unroll
          for (int n = 0; n < D / 16; ++n)
            wmma::store_matrix_sync(myO + n * 16, o[n], LDO, wmma::mem_row_major);
          __syncwarp();
          for (int d = (lane % 2) * (D / 2); d < (lane % 2 + 1) * (D / 2); ++d)
            myO[(lane / 2) * LDO + d] *= alpha;
          __syncwarp();
#pragma unroll
          for (int n = 0; n < D / 16; ++n)
            wmma::load_matrix_sync(o[n], myO + n * 16, LDO, wmma::mem_row_major);
        }
        l *= alpha;
        m = mNew;
      }
      const float base = m == -KILN_INF ? 0.f : m;
      float sum = 0.f;
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const float p = __expf(s[c] - base);
        myP[(lane / 2) * LDP + c0 + c] = static_cast<T>(p);
        sum += p;
      }
      l += sum + __shfl_xor_sync(0xffffffffu, sum, 1);
      __syncwarp();
#pragma unroll
      for (int n = 0; n < D / 16; ++n) // O += P V
        for (int kk = 0; kk < BN / 16; ++kk) {
          FragA<T, wmma::row_major> fa;
          FragB<T, wmma::row_major> fb;
          wmma::load_matrix_sync(fa, myP + kk * 16, LDP);
          wmma::load_matrix_sync(fb, Vs + kk * 16 * LD + n * 16, LD);
          wmma::mma_sync(o[n], fa, fb, o[n]);
        }
      empty = false;
      __syncwarp();
    }
#pragma unroll
    for (int n = 0; n < D / 16; ++n)
      wmma::store_matrix_sync(myO + n * 16, o[n], LDO, wmma::mem_row_major);
    __syncwarp();
    const float inv = l > 0.f ? 1.f / l : 0.f;
    if (i < Sq)
      for (int d = (lane % 2) * (D / 2); d < (lane % 2 + 1) * (D / 2); ++d)
        storeO(b, h, i, d, myO[(lane / 2) * LDO + d] * inv);
  }
}

template <typename T, int D, typename Mask, typename StoreDQ, typename AddDK, typename AddDV>
__device__ void backward(const T *q, Strides qs, const T *k, Strides ks, const T *v, Strides vs,
                         const T *dout, Strides dos, int64_t B, int64_t H, int64_t Hkv,
                         int64_t Sq, int64_t L, float scale, bool causal, Mask mask,
                         StoreDQ storeDQ, AddDK addDK, AddDV addDV, bool wantDQ, bool wantDK,
                         bool wantDV, unsigned char *smem) {
  using Smem = BackwardSmem<T, D>;
  constexpr int LD = Smem::LD, LDS = Smem::LDS, LDP = Smem::LDP, LDO = Smem::LDO;
  T *Qs = reinterpret_cast<T *>(smem + Smem::q);
  T *dOs = reinterpret_cast<T *>(smem + Smem::dout);
  T *Ks = reinterpret_cast<T *>(smem + Smem::k);
  T *Vs = reinterpret_cast<T *>(smem + Smem::v);
  float *Ss = reinterpret_cast<float *>(smem + Smem::s);
  float *dPs = reinterpret_cast<float *>(smem + Smem::dp);
  T *Ps = reinterpret_cast<T *>(smem + Smem::p);
  T *dSs = reinterpret_cast<T *>(smem + Smem::ds);
  float *stage = reinterpret_cast<float *>(smem + Smem::stage); // 16 x 16 per warp
  float *dQs = Ss; // dQ's final staging: S and dP (contiguous) are free then
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r = warp * 16 + lane / 2, c0 = (lane % 2) * 32;
  float *myStage = stage + warp * 256;
  const int64_t group = H / Hkv, qTiles = (Sq + BM - 1) / BM, tiles = B * H * qTiles;
  TilePrefetch<T, D> nextK, nextV;
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t i0 = (tile % qTiles) * BM, h = (tile / qTiles) % H, b = tile / (qTiles * H);
    const int64_t hk = h / group, i = i0 + r;
    const T *kBase = k + b * ks.batch + hk * ks.head, *vBase = v + b * vs.batch + hk * vs.head;
    __syncthreads();
    loadTile<T, D, LD>(Qs, q + b * qs.batch + h * qs.head + i0 * qs.seq, Sq - i0, qs.seq);
    loadTile<T, D, LD>(dOs, dout + b * dos.batch + h * dos.head + i0 * dos.seq, Sq - i0,
                       dos.seq);
    const int64_t jEnd = causal ? (L < i0 + BM ? L : i0 + BM) : L;
    // Pass 1: each row's max, sum and sum of p * dP, online.
    float m = -KILN_INF, l = 0.f, pdp = 0.f;
    nextK.load(kBase, L, ks.seq);
    nextV.load(vBase, L, vs.seq);
    for (int64_t j0 = 0; j0 < jEnd; j0 += BN) {
      __syncthreads();
      nextK.template store<LD>(Ks);
      nextV.template store<LD>(Vs);
      __syncthreads();
      if (j0 + BN < jEnd) {
        nextK.load(kBase + (j0 + BN) * ks.seq, L - j0 - BN, ks.seq);
        nextV.load(vBase + (j0 + BN) * vs.seq, L - j0 - BN, vs.seq);
      }
      for (int n = 0; n < BN / 16; ++n) {
        product<T, wmma::row_major, wmma::col_major>(Ss + warp * 16 * LDS + n * 16, LDS, false,
                                                     Qs + warp * 16 * LD, LD, 16,
                                                     Ks + n * 16 * LD, LD, 16, D / 16);
        product<T, wmma::row_major, wmma::col_major>(dPs + warp * 16 * LDS + n * 16, LDS, false,
                                                     dOs + warp * 16 * LD, LD, 16,
                                                     Vs + n * 16 * LD, LD, 16, D / 16);
      }
      __syncwarp();
      float s[32];
      rowScores(s, Ss, LDS, r, c0, b, h, i, j0, Sq, L, scale, causal, mask);
      float mx = -KILN_INF;
#pragma unroll
      for (int c = 0; c < 32; ++c)
        mx = fmaxf(mx, s[c]);
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float mNew = fmaxf(m, mx), base = mNew == -KILN_INF ? 0.f : mNew;
      float sum = 0.f, dot = 0.f;
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const float p = __expf(s[c] - base);
        sum += p;
        dot += p * dPs[r * LDS + c0 + c];
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      dot += __shfl_xor_sync(0xffffffffu, dot, 1);
      const float alpha = __expf(m - base);
      l = l * alpha + sum;
      pdp = pdp * alpha + dot;
      m = mNew;
    }
    const float base = m == -KILN_INF ? 0.f : m, inv = l > 0.f ? 1.f / l : 0.f;
    const float delta = pdp * inv;
    // Pass 2: P, dS; dQ += dS K in registers, dK += dS^T Q and dV += P^T dO
    // atomically.
    Acc dq[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; ++n)
      wmma::fill_fragment(dq[n], 0.f);
    nextK.load(kBase, L, ks.seq);
    nextV.load(vBase, L, vs.seq);
    for (int64_t j0 = 0; j0 < jEnd; j0 += BN) {
      __syncthreads();
      nextK.template store<LD>(Ks);
      nextV.template store<LD>(Vs);
      __syncthreads();
      if (j0 + BN < jEnd) {
        nextK.load(kBase + (j0 + BN) * ks.seq, L - j0 - BN, ks.seq);
        nextV.load(vBase + (j0 + BN) * vs.seq, L - j0 - BN, vs.seq);
      }
      for (int n = 0; n < BN / 16; ++n) {
        product<T, wmma::row_major, wmma::col_major>(Ss + warp * 16 * LDS + n * 16, LDS, false,
                                                     Qs + warp * 16 * LD, LD, 16,
                                                     Ks + n * 16 * LD, LD, 16, D / 16);
        product<T, wmma::row_major, wmma::col_major>(dPs + warp * 16 * LDS + n * 16, LDS, false,
                                                     dOs + warp * 16 * LD, LD, 16,
                                                     Vs + n * 16 * LD, LD, 16, D / 16);
      }
      __syncwarp();
      float s[32];
      rowScores(s, Ss, LDS, r, c0, b, h, i, j0, Sq, L, scale, causal, mask);
#pragma unroll
      for (int c = 0; c < 32; ++c) {
        const float p = __expf(s[c] - base) * inv;
        const float ds = p * (dPs[r * LDS + c0 + c] - delta);
        Ps[r * LDP + c0 + c] = static_cast<T>(p);
        dSs[r * LDP + c0 + c] = static_cast<T>(ds);
      }
      __syncthreads(); // dK and dV contract over every row of the tile
      if (wantDQ) {
#pragma unroll
        for (int n = 0; n < D / 16; ++n) // dQ += dS K
          for (int kk = 0; kk < BN / 16; ++kk) {
            FragA<T, wmma::row_major> fa;
            FragB<T, wmma::row_major> fb;
            wmma::load_matrix_sync(fa, dSs + warp * 16 * LDP + kk * 16, LDP);
            wmma::load_matrix_sync(fb, Ks + kk * 16 * LD + n * 16, LD);
            wmma::mma_sync(dq[n], fa, fb, dq[n]);
          }
      }
      // Warp w owns keys 16w .. 16w + 15 of the tile.
      const int64_t jw = j0 + warp * 16;
      for (int n = 0; n < D / 16; ++n) {
        if (wantDK && jw < L) { // dK += dS^T Q
          product<T, wmma::col_major, wmma::row_major>(myStage, 16, false, dSs + warp * 16, LDP,
                                                       16 * LDP, Qs + n * 16, LD, 16 * LD,
                                                       BM / 16);
          __syncwarp();
          for (int t = lane * 4; t < 256; t += 128) {
            const int64_t j = jw + t / 16;
            if (j < L)
              addDK(b, hk, j, n * 16 + t % 16,
                    make_float4(myStage[t] * scale, myStage[t + 1] * scale,
                                myStage[t + 2] * scale, myStage[t + 3] * scale));
          }
          __syncwarp();
        }
        if (wantDV && jw < L) { // dV += P^T dO
          product<T, wmma::col_major, wmma::row_major>(myStage, 16, false, Ps + warp * 16, LDP,
                                                       16 * LDP, dOs + n * 16, LD, 16 * LD,
                                                       BM / 16);
          __syncwarp();
          for (int t = lane * 4; t < 256; t += 128) {
            const int64_t j = jw + t / 16;
            if (j < L)
              addDV(b, hk, j, n * 16 + t % 16,
                    make_float4(myStage[t], myStage[t + 1], myStage[t + 2], myStage[t + 3]));
          }
          __syncwarp();
        }
      }
    }
    if (wantDQ) {
      __syncthreads(); // every warp is done with S and dP
      float *myDQ = dQs + warp * 16 * LDO;
#pragma unroll
      for (int n = 0; n < D / 16; ++n)
        wmma::store_matrix_sync(myDQ + n * 16, dq[n], LDO, wmma::mem_row_major);
      __syncwarp();
      if (i < Sq)
        for (int d = (lane % 2) * (D / 2); d < (lane % 2 + 1) * (D / 2); ++d)
          storeDQ(b, h, i, d, myDQ[(lane / 2) * LDO + d] * scale);
    }
  }
}
} // namespace kiln_flash
