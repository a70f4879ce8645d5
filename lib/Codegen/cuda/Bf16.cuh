#include <cuda_bf16.h>
__device__ __forceinline__ void kiln_atomic_add(__nv_bfloat16 *p, float v) { atomicAdd(p, __float2bfloat16(v)); }
// x rounded to bf16 and back (every bf16 intermediate, as PyTorch's
// op-by-op bf16 rounds it): one packed conversion of x with itself, the
// high half kept. The same bits as __bfloat162float(__float2bfloat16(x)),
// whose single F2F.BF16 issues on the slower conversion pipe
// (bench/bf16round: the SiLU gradient kernel 0.217 -> 0.206 ms on the H200).
__device__ __forceinline__ float kiln_round_bf16(float x) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  unsigned int r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %1;" : "=r"(r) : "f"(x));
  return __uint_as_float(r & 0xffff0000u);
#else
  return __bfloat162float(__float2bfloat16(x));
#endif
}
