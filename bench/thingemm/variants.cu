// The harness's other tilings (Variants.h), bf16 out, as a fatbin of their
// own: nvcc -fatbin -gencode arch=compute_90,code=sm_90 -I runtime/lib/kernels
//   -o variants.fatbin bench/thingemm/variants.cu
#include "ThinGemm.cuh"
#include "Variants.h"

#define THIN_VARIANT_KERNEL(name, shape, thin, TA, TB, BM, BN, BK, WM, WN, ST)                     \
  extern "C" __global__ void __launch_bounds__(32 * WM * WN)                                      \
      kiln_thin_variant_##name(kiln_thin::Params p) {                                            \
    kiln_thin::thinGemm<BM, BN, BK, WM, WN, ST, TA, TB, __nv_bfloat16>(p);                        \
  }
THIN_GEMM_VARIANTS(THIN_VARIANT_KERNEL)

#define THIN_WIDE_VARIANT_KERNEL(name, thin, TB, BM, BN, WM, WN, MINB)                             \
  extern "C" __global__ void __launch_bounds__(32 * WM * WN, MINB)                                \
      kiln_thin_variant_##name(kiln_thin::Params p) {                                            \
    kiln_thin::thinGemmWide<BM, BN, thin, WM, WN, false, TB, __nv_bfloat16>(p);                   \
  }
THIN_GEMM_WIDE_VARIANTS(THIN_WIDE_VARIANT_KERNEL)
