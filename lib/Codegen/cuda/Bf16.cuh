#include <cuda_bf16.h>
__device__ __forceinline__ void kiln_atomic_add(__nv_bfloat16 *p, float v) { atomicAdd(p, __float2bfloat16(v)); }
