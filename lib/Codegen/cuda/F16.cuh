#include <cuda_fp16.h>
__device__ __forceinline__ void kiln_atomic_add(__half *p, float v) { atomicAdd(p, __float2half(v)); }
