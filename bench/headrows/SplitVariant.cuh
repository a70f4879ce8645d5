// A variant of kiln_head_rows_bf16_logits measured by head_rows_check.cu and
// not kept (slower: docs/benchmarks.md, "Fourteenth session"): each row
// split over a cluster of CTAs (sm_90, launched with a cluster dimension of
// 2 or 4) that keep their share of the row in shared memory from the
// log-sum-exp pass to the gradient pass, so the row crosses DRAM twice
// instead of three times; the CTAs combine their (max, sum) through
// distributed shared memory in rank order. Included after
// CrossEntropyKernels.cuh (its helpers).
#pragma once

#include <cooperative_groups.h>

extern "C" __global__ void __launch_bounds__(kHeadBlock)
    kiln_head_rows_split_bf16_logits(__nv_bfloat16 *chunk, const void *labels, const float *grad,
                                     float *stats, int64_t first, int64_t vocab, int64_t rows,
                                     int64_t labels32, int64_t ignore, int64_t capBits,
                                     int64_t gradient) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned parts = cluster.num_blocks(), rank = cluster.block_rank();
  extern __shared__ uint4 share[]; // this CTA's vectors of the row
  __shared__ float scratch[32];
  __shared__ float2 partial; // (max, sum of exp(z - max)) of the share
  constexpr int kLanes = 8;
  float cap = static_cast<float>(__longlong_as_double(capBits));
  const int64_t row = blockIdx.x / parts;
  __nv_bfloat16 *z = chunk + row * vocab;
  const int64_t nv = vocab / kLanes, per = (nv + parts - 1) / parts;
  const int64_t v0 = rank * per, v1 = v0 + per < nv ? v0 + per : nv;
  const int64_t label = headLabel(labels, labels32, first + row);
  const bool counts = headCounts(label, ignore, vocab);
  // The label's logit, read before any CTA of the cluster writes the row.
  const float target = counts ? headCap(headLoad(z, label), cap) : 0.f;
  const uint4 *zv = reinterpret_cast<const uint4 *>(z);
  float m = -INFINITY, s = 0.f;
#pragma unroll 4
  for (int64_t i = v0 + threadIdx.x; i < v1; i += blockDim.x) {
    uint4 q = zv[i];
    share[i - v0] = q;
    headOnline<__nv_bfloat16>(q, cap, m, s);
  }
  float max = headReduce<true>(m, scratch);
  float sum = headReduce<false>(m == -INFINITY ? 0.f : s * __expf(m - max), scratch);
  if (threadIdx.x == 0)
    partial = make_float2(max, sum);
  cluster.sync();
  float rowMax = -INFINITY;
  for (unsigned r = 0; r < parts; ++r)
    rowMax = fmaxf(rowMax, cluster.map_shared_rank(&partial, r)->x);
  float rowSum = 0.f;
  for (unsigned r = 0; r < parts; ++r) {
    float2 p = *cluster.map_shared_rank(&partial, r);
    rowSum += p.x == -INFINITY ? 0.f : p.y * __expf(p.x - rowMax);
  }
  const float lse = rowMax + logf(rowSum);
  cluster.sync(); // every CTA has read the others' partials before any leaves
  if (rank == 0 && threadIdx.x == 0)
    stats[first + row] = counts ? lse - target : 0.f;
  if (!gradient)
    return;
  uint4 *out = reinterpret_cast<uint4 *>(z);
  const float scale = counts ? grad[0] / stats[rows] : 0.f;
  for (int64_t i = v0 + threadIdx.x; i < v1; i += blockDim.x) {
    float f[kLanes];
    HeadVector<__nv_bfloat16>::unpack(share[i - v0], f);
    HeadPack<__nv_bfloat16, kLanes> d;
#pragma unroll
    for (int j = 0; j < kLanes; ++j) {
      float g = 0.f;
      if (counts) {
        float c = headCap(f[j], cap);
        g = (__expf(c - lse) - (kLanes * i + j == label ? 1.f : 0.f)) * scale;
        if (cap > 0) {
          float t = c / cap;
          g *= 1.f - t * t;
        }
      }
      d.lane[j] = headStore<__nv_bfloat16>(g);
    }
    out[i] = *reinterpret_cast<const uint4 *>(d.lane);
  }
}
