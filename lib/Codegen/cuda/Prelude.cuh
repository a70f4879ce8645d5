// Kiln's device helpers (lib/Codegen/cuda/Prelude.cuh), in every kernel source.
typedef long long int64_t;
#define KILN_INF __int_as_float(0x7f800000)

// a / b for a result rounded to bf16/f16 next: PTX's full-range division
// (at most 2 ulp of fp32, subnormals flushed) instead of IEEE's div.rn,
// whose slow path dominated the SiLU gradient kernel (docs/codegen.md,
// "Division in 16-bit kernels"). Never used for an fp32 or fp64 result.
__device__ __forceinline__ float kiln_div16(float a, float b) {
  float r;
  asm("div.full.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// Sum (or max) over the block; every thread gets the result. blockDim.x is a
// multiple of 32 and every thread of the block must call it.
__device__ __forceinline__ float kiln_block_reduce(float v, float *red, bool is_max) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  __syncthreads(); // red may still be read by the previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? red[lane] : (is_max ? -KILN_INF : 0.f);
    for (int o = 16; o > 0; o >>= 1) {
      float w = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, w) : v + w;
    }
    if (lane == 0) red[32] = v;
  }
  __syncthreads();
  return red[32];
}
// Sum (or max) over the warp; every lane gets the result (warp-per-row row
// kernels: no shared memory, no barrier).
__device__ __forceinline__ float kiln_warp_reduce(float v, bool is_max) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  return v;
}
__device__ __forceinline__ void kiln_atomic_add(float *p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void kiln_atomic_add(double *p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void kiln_atomic_add(int64_t *p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long *>(p), static_cast<unsigned long long>(v));
}
__device__ __forceinline__ void kiln_atomic_add(int *p, int v) { atomicAdd(p, v); }

// Philox4x32-10 (key = seed, counter = (index / 4, stream, 0)): word
// index % 4, top 24 bits scaled to [0, 1). Same draws as the interpreter.
__device__ __forceinline__ float kiln_philox_uniform(unsigned long long seed,
    unsigned long long stream, unsigned long long index) {
  const unsigned long long block = index / 4;
  unsigned int c0 = (unsigned int)block, c1 = (unsigned int)(block >> 32);
  unsigned int c2 = (unsigned int)stream, c3 = 0u;
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0, n1 = (unsigned int)p1;
    const unsigned int n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1, n3 = (unsigned int)p0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  const unsigned int word = index % 4 == 0 ? c0 : index % 4 == 1 ? c1 : index % 4 == 2 ? c2 : c3;
  return (float)(word >> 8) * (1.0f / 16777216.0f);
}

// QLoRA's NormalFloat4 code values.
__device__ const float kiln_nf4_values[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
// The nearest code (ties to the lower), midpoints in fp32 as on the host.
__device__ __forceinline__ unsigned int kiln_nf4_encode(float x) {
  unsigned int code = 0;
  for (unsigned int c = 1; c < 16; ++c)
    if (x > (kiln_nf4_values[c - 1] + kiln_nf4_values[c]) * 0.5f)
      code = c;
  return code;
}
