//===- CrossEntropyKernels.cuh - The fused LM head's row kernels -*- CUDA -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The kernels the runtime launches between the cuBLASLt GEMMs of the fused
// LM head and cross entropy (docs/artifact.md, "The fused LM head"), part of
// the support fatbin (SupportKernels.cu includes this file). Every scalar
// argument is an int64 (the launch ABI of generated kernels); the soft-cap
// travels as the bits of a double. `stats` is fp32 [rows + 1]: the loss of
// each row (0 for ignored ones), then the number of counted rows.
//
//===----------------------------------------------------------------------===//

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

#include <type_traits>

namespace {

constexpr int kHeadBlock = 1024;

__device__ int64_t headLabel(const void *labels, int64_t labels32, int64_t row) {
  return labels32 ? static_cast<const int32_t *>(labels)[row]
                  : static_cast<const int64_t *>(labels)[row];
}

/// A label that is not ignore_index and lies in [0, vocab) counts; others
/// (out of range ones included: a kernel cannot fail) are ignored.
__device__ bool headCounts(int64_t label, int64_t ignore, int64_t vocab) {
  return label != ignore && label >= 0 && label < vocab;
}

/// Block-wide reductions over kHeadBlock threads; every thread gets the result.
template <bool Max> __device__ float headReduce(float v, float *scratch) {
  for (int offset = 16; offset > 0; offset /= 2) {
    float o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = Max ? fmaxf(v, o) : v + o;
  }
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads(); // scratch may still be read by the previous reduction
  if (lane == 0)
    scratch[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / 32 ? scratch[lane] : (Max ? -INFINITY : 0.f);
  for (int offset = 16; offset > 0; offset /= 2) {
    float o = __shfl_xor_sync(0xffffffffu, v, offset);
    v = Max ? fmaxf(v, o) : v + o;
  }
  return v;
}

__device__ float headCap(float z, float cap) { return cap > 0 ? cap * tanhf(z / cap) : z; }

template <typename T> __device__ T headStore(float v);
template <> __device__ float headStore<float>(float v) { return v; }
template <> __device__ __nv_bfloat16 headStore<__nv_bfloat16>(float v) { return __float2bfloat16(v); }
template <> __device__ __half headStore<__half>(float v) { return __float2half(v); }

/// A 16-byte vector of logits: four fp32 or eight bf16, as floats.
template <typename L> struct HeadVector;
template <> struct HeadVector<float> {
  static constexpr int kLanes = 4;
  __device__ static void unpack(const uint4 &q, float *f) {
    f[0] = __uint_as_float(q.x), f[1] = __uint_as_float(q.y);
    f[2] = __uint_as_float(q.z), f[3] = __uint_as_float(q.w);
  }
};
template <> struct HeadVector<__nv_bfloat16> {
  static constexpr int kLanes = 8;
  __device__ static void unpack(const uint4 &q, float *f) {
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) { // bf16 is the top half of an fp32
      f[2 * i] = __uint_as_float(words[i] << 16);
      f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    }
  }
};

__device__ float headLoad(const float *z, int64_t v) { return z[v]; }
__device__ float headLoad(const __nv_bfloat16 *z, int64_t v) { return __bfloat162float(z[v]); }

/// One 16-byte vector of logits, capped, into a thread's running max \p m
/// and its sum \p s of exp(z - m), rescaled whenever m grows (online
/// softmax).
template <typename L>
__device__ __forceinline__ void headOnline(const uint4 &q, float cap, float &m, float &s) {
  constexpr int kLanes = HeadVector<L>::kLanes;
  float f[kLanes];
  HeadVector<L>::unpack(q, f);
  float mx = -INFINITY;
#pragma unroll
  for (int k = 0; k < kLanes; ++k) {
    f[k] = headCap(f[k], cap);
    mx = fmaxf(mx, f[k]);
  }
  if (mx > m) {
    s *= __expf(m - mx); // 0 while m is -inf (s is 0 then)
    m = mx;
  }
  float t = 0.f;
#pragma unroll
  for (int k = 0; k < kLanes; ++k)
    t += __expf(f[k] - m);
  s += t;
}

/// The row's log-sum-exp, one pass: each thread keeps a running max and a
/// sum rescaled whenever its max grows (online softmax), then the block
/// combines them. `Vector`: the row is 16-byte aligned (vocab a multiple of
/// the lanes, the chunk 16-byte aligned), read 16 bytes per access, four in
/// flight per thread. L: the chunk's logits type (fp32 or bf16); the
/// statistics are fp32 either way.
template <typename L, bool Vector>
__device__ float headLse(const L *z, int64_t vocab, float cap, float *scratch) {
  float m = -INFINITY, s = 0.f;
  if constexpr (Vector) {
    constexpr int kLanes = HeadVector<L>::kLanes;
    const uint4 *zv = reinterpret_cast<const uint4 *>(z);
    int64_t nv = vocab / kLanes;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x)
      headOnline<L>(zv[i], cap, m, s);
  } else {
    for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x) {
      float c = headCap(headLoad(z, v), cap);
      if (c > m) {
        s *= __expf(m - c);
        m = c;
      }
      s += __expf(c - m);
    }
  }
  float max = headReduce<true>(m, scratch);
  float sum = headReduce<false>(m == -INFINITY ? 0.f : s * __expf(m - max), scratch);
  return max + logf(sum);
}

/// kLanes gradient elements of type T as one store (16 or 8 bytes).
template <typename T, int kLanes> struct HeadPack {
  using Word = typename std::conditional<kLanes * sizeof(T) == 16, uint4, uint2>::type;
  __align__(16) T lane[kLanes];
};

/// One block per row of the chunk: logsumexp and the row's loss into
/// stats[first + row]; with a gradient, the row becomes
/// (softmax − onehot) · grad / counted (times 1 − tanh² under the cap), as T
/// over the row's own storage: an fp32 chunk (L = float) takes fp32
/// gradients element for element and 16-bit ones at the start of each row
/// (leading dimension 2·vocab); a bf16 chunk (L = bf16) takes bf16
/// gradients element for element. Ignored rows become zeros. The logits are
/// read twice (the log-sum-exp, the gradient) and the gradient written once.
template <typename L, typename T, bool Vector>
__device__ void headRows(L *chunk, const void *labels, const float *grad, float *stats,
                         int64_t first, int64_t vocab, int64_t rows, int64_t labels32,
                         int64_t ignore, int64_t capBits, int64_t gradient) {
  static_assert(sizeof(T) <= sizeof(L), "the gradient overwrites its logits");
  // A narrower T lands on bytes of earlier logits: readers first, tile by tile.
  constexpr bool kNarrower = sizeof(T) < sizeof(L);
  __shared__ float scratch[32];
  float cap = static_cast<float>(__longlong_as_double(capBits));
  int64_t row = blockIdx.x;
  L *z = chunk + row * vocab;
  T *out = reinterpret_cast<T *>(z);
  int64_t label = headLabel(labels, labels32, first + row);
  if (!headCounts(label, ignore, vocab)) {
    if (threadIdx.x == 0)
      stats[first + row] = 0.f;
    if (gradient)
      for (int64_t v = threadIdx.x; v < vocab; v += blockDim.x)
        out[v] = headStore<T>(0.f);
    return;
  }
  // z[label] is read before any thread overwrites it: the reductions in
  // headLse synchronize the block.
  float target = headCap(headLoad(z, label), cap);
  float lse = headLse<L, Vector>(z, vocab, cap, scratch);
  if (threadIdx.x == 0)
    stats[first + row] = lse - target;
  if (!gradient)
    return;
  float scale = grad[0] / stats[rows];
  auto dlogit = [&](float zv, int64_t v) {
    float c = headCap(zv, cap);
    float d = (__expf(c - lse) - (v == label ? 1.f : 0.f)) * scale;
    if (cap > 0) {
      float t = c / cap;
      d *= 1.f - t * t;
    }
    return d;
  };
  if constexpr (Vector) {
    // Tiles of kPer vectors per thread: every thread reads its part of the
    // tile before any thread writes it (a narrower element v lands on bytes
    // of logit v/2, inside this tile or an earlier one, never a later one);
    // same-size gradients overwrite only their own element.
    constexpr int kPer = 4, kLanes = HeadVector<L>::kLanes;
    using Pack = HeadPack<T, kLanes>;
    const uint4 *zv = reinterpret_cast<const uint4 *>(z);
    int64_t nv = vocab / kLanes;
    for (int64_t base = 0; base < nv; base += int64_t(blockDim.x) * kPer) {
      uint4 q[kPer];
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        int64_t i = base + int64_t(k) * blockDim.x + threadIdx.x;
        if (i < nv)
          q[k] = zv[i];
      }
      if (kNarrower)
        __syncthreads();
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        int64_t i = base + int64_t(k) * blockDim.x + threadIdx.x;
        if (i >= nv)
          continue;
        float f[kLanes];
        HeadVector<L>::unpack(q[k], f);
        Pack d;
#pragma unroll
        for (int j = 0; j < kLanes; ++j)
          d.lane[j] = headStore<T>(dlogit(f[j], kLanes * i + j));
        reinterpret_cast<typename Pack::Word *>(out)[i] =
            *reinterpret_cast<const typename Pack::Word *>(d.lane);
      }
    }
  } else {
    // A narrower element v lands on bytes of logit v/2: tile by tile, every
    // thread reads its logit before any thread writes the tile.
    for (int64_t base = 0; base < vocab; base += blockDim.x) {
      int64_t v = base + threadIdx.x;
      float d = 0.f;
      if (v < vocab)
        d = dlogit(headLoad(z, v), v);
      if (kNarrower)
        __syncthreads();
      if (v < vocab)
        out[v] = headStore<T>(d);
      if (kNarrower)
        __syncthreads();
    }
  }
}

} // namespace

/// stats[rows] = the number of counted labels (one block).
extern "C" __global__ void kiln_head_count(const void *labels, float *stats, int64_t rows,
                                           int64_t vocab, int64_t labels32, int64_t ignore) {
  __shared__ float scratch[32];
  float count = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    count += headCounts(headLabel(labels, labels32, r), ignore, vocab) ? 1.f : 0.f;
  count = headReduce<false>(count, scratch);
  if (threadIdx.x == 0)
    stats[rows] = count;
}

#define KILN_HEAD_ROWS(name, L, T)                                                                \
  extern "C" __global__ void name(L *chunk, const void *labels, const float *grad, float *stats, \
                                  int64_t first, int64_t vocab, int64_t rows, int64_t labels32,  \
                                  int64_t ignore, int64_t capBits, int64_t gradient) {           \
    if (vocab % HeadVector<L>::kLanes == 0 && reinterpret_cast<uintptr_t>(chunk) % 16 == 0)     \
      headRows<L, T, true>(chunk, labels, grad, stats, first, vocab, rows, labels32, ignore,     \
                           capBits, gradient);                                                   \
    else                                                                                         \
      headRows<L, T, false>(chunk, labels, grad, stats, first, vocab, rows, labels32, ignore,    \
                            capBits, gradient);                                                  \
  }
// fp32 chunks: fp32, bf16 or f16 gradients; a bf16 chunk (bf16 logits): bf16.
KILN_HEAD_ROWS(kiln_head_rows_f32, float, float)
KILN_HEAD_ROWS(kiln_head_rows_bf16, float, __nv_bfloat16)
KILN_HEAD_ROWS(kiln_head_rows_f16, float, __half)
KILN_HEAD_ROWS(kiln_head_rows_bf16_logits, __nv_bfloat16, __nv_bfloat16)
#undef KILN_HEAD_ROWS

/// loss = sum of the row losses / counted rows, in a fixed order (one
/// block): the same loss every run. 0 counted rows give NaN, as in PyTorch.
extern "C" __global__ void kiln_head_loss(const float *stats, float *loss, int64_t rows) {
  __shared__ float scratch[32];
  float sum = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x)
    sum += stats[r];
  sum = headReduce<false>(sum, scratch);
  if (threadIdx.x == 0)
    loss[0] = sum / stats[rows];
}

/// The 16-bit weight gradient from its fp32 accumulator.
extern "C" __global__ void kiln_head_narrow_bf16(const float *in, __nv_bfloat16 *out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16(in[i]);
}
extern "C" __global__ void kiln_head_narrow_f16(const float *in, __half *out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2half(in[i]);
}
