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

// Row-dot kernels (kiln-row-dot): a 16-byte copy global -> shared that
// need not pass through registers, the transposing 8x8 matrix loads of
// the tensor cores' B fragments, and the bf16 m16n8k16 product with fp32
// accumulators. sm_75 (Kiln's oldest target: ldmatrix, no cp.async, no
// bf16 mma) copies through registers and computes the same fragment
// layouts with shuffles and fp32 FMAs, so every arch gets the same sums.
__device__ __forceinline__ void kiln_cp_async16(void *shared, const void *global) {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(
                   (unsigned)__cvta_generic_to_shared(shared)),
               "l"(global));
#else
  *reinterpret_cast<uint4 *>(shared) = *reinterpret_cast<const uint4 *>(global);
#endif
}
__device__ __forceinline__ void kiln_cp_async_wait_all() {
#if __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_all;\n" ::: "memory");
#endif
}
// Matrix j's row r is at lane 8j + r's address; lane (g, t) = (lane / 4,
// lane % 4) gets rows 2t and 2t + 1 of column g of each (.trans).
__device__ __forceinline__ void kiln_ldmatrix_x4_trans(unsigned r[4], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"((unsigned)__cvta_generic_to_shared(row)));
}
__device__ __forceinline__ void kiln_ldmatrix_x2_trans(unsigned r[2], const void *row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"((unsigned)__cvta_generic_to_shared(row)));
}
__device__ __forceinline__ float kiln_bf16_lo(unsigned x) { return __uint_as_float(x << 16); }
__device__ __forceinline__ float kiln_bf16_hi(unsigned x) { return __uint_as_float(x & 0xffff0000u); }
// d += a b: a the 16x16 row-major fragment, b0/b1 the 16x8 column-major one.
__device__ __forceinline__ void kiln_mma_bf16_16816(float d[4], const unsigned a[4], unsigned b0,
                                                    unsigned b1) {
#if __CUDA_ARCH__ >= 800
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
               "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  const int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  for (int k2 = 0; k2 < 8; ++k2) { // k = 2 k2, 2 k2 + 1
    const int from = k2 & 3;
    const unsigned r0 = __shfl_sync(0xffffffffu, k2 < 4 ? a[0] : a[2], g * 4 + from);
    const unsigned r1 = __shfl_sync(0xffffffffu, k2 < 4 ? a[1] : a[3], g * 4 + from);
    const unsigned c0 = __shfl_sync(0xffffffffu, k2 < 4 ? b0 : b1, (2 * t) * 4 + from);
    const unsigned c1 = __shfl_sync(0xffffffffu, k2 < 4 ? b0 : b1, (2 * t + 1) * 4 + from);
    d[0] += kiln_bf16_lo(r0) * kiln_bf16_lo(c0) + kiln_bf16_hi(r0) * kiln_bf16_hi(c0);
    d[1] += kiln_bf16_lo(r0) * kiln_bf16_lo(c1) + kiln_bf16_hi(r0) * kiln_bf16_hi(c1);
    d[2] += kiln_bf16_lo(r1) * kiln_bf16_lo(c0) + kiln_bf16_hi(r1) * kiln_bf16_hi(c0);
    d[3] += kiln_bf16_lo(r1) * kiln_bf16_lo(c1) + kiln_bf16_hi(r1) * kiln_bf16_hi(c1);
  }
#endif
}
