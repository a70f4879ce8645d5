// Other tilings of kernels/ThinGemm.cuh's template for the harness to time
// beside the planned one (bench/thingemm/variants.cu instantiates them as
// kiln_thin_variant_<name>; thin_gemm_check.cu reads the table): which tile
// suits each kind of thin GEMM is measured, not guessed.
//   X(name, shape, thin, TA, TB, BM, BN, BK, WarpsM, WarpsN, Stages)
#define THIN_GEMM_VARIANTS(X)                                                                      \
  X(k32nt_128x64, 'k', 32, false, true, 128, 64, 32, 4, 2, 2)                                      \
  X(k32nt_64x128, 'k', 32, false, true, 64, 128, 32, 2, 4, 2)                                      \
  X(k32nt_64x64, 'k', 32, false, true, 64, 64, 32, 2, 2, 2)                                        \
  X(k16nn_128x64, 'k', 16, false, false, 128, 64, 16, 4, 2, 2)                                     \
  X(k16nn_64x64, 'k', 16, false, false, 64, 64, 16, 2, 2, 2)                                       \
  X(k48nt_128x64, 'k', 48, false, true, 128, 64, 48, 4, 2, 2)                                      \
  X(k48nt_64x64, 'k', 48, false, true, 64, 64, 48, 2, 2, 2)                                        \
  X(k48nn_128x64, 'k', 48, false, false, 128, 64, 48, 4, 2, 2)                                     \
  X(n48nt_128, 'n', 48, false, true, 128, 48, 64, 4, 1, 4)                                         \
  X(n48nt_32, 'n', 48, false, true, 32, 48, 64, 2, 1, 4)                                           \
  X(n48nt_64s3, 'n', 48, false, true, 64, 48, 64, 4, 1, 3)                                         \
  X(n16nt_128, 'n', 16, false, true, 128, 16, 64, 4, 1, 4)                                         \
  X(n16nt_32, 'n', 16, false, true, 32, 16, 64, 2, 1, 4)                                           \
  X(n32nn_128, 'n', 32, false, false, 128, 32, 64, 4, 1, 4)                                        \
  X(n32nn_32, 'n', 32, false, false, 32, 32, 64, 2, 1, 4)                                          \
  X(n48tn_128, 'n', 48, true, false, 128, 48, 64, 4, 1, 4)                                         \
  X(n48tn_32, 'n', 48, true, false, 32, 48, 64, 2, 1, 4)                                           \
  X(m48tn_128, 'm', 48, true, false, 48, 128, 64, 1, 4, 4)                                         \
  X(m48tn_32, 'm', 48, true, false, 48, 32, 64, 1, 2, 4)                                           \
  X(m16tn_128, 'm', 16, true, false, 16, 128, 64, 1, 4, 4)                                         \
  X(m16tn_32, 'm', 16, true, false, 16, 32, 64, 1, 2, 4)

// thinGemmWide (a CTA keeps its A tile and streams several B tiles), small
// K only; the harness gives each CTA the tiles that make about two CTAs
// per SM. X(name, thin, TB, BM, BN, WarpsM, WarpsN, MinBlocks): MinBlocks
// per SM in __launch_bounds__ (2 spills the 128 x 128 tiles: 1 there).
#define THIN_GEMM_WIDE_VARIANTS(X)                                                                 \
  X(wide_k32nt_128x128, 32, true, 128, 128, 4, 2, 1)                                                  \
  X(wide_k32nt_128x64, 32, true, 128, 64, 4, 2, 2)                                                    \
  X(wide_k16nn_128x128, 16, false, 128, 128, 4, 2, 1)                                                 \
  X(wide_k16nn_128x64, 16, false, 128, 64, 4, 2, 2)                                                   \
  X(wide_k16nt_128x128, 16, true, 128, 128, 4, 2, 1)                                                  \
  X(wide_k48nt_128x128, 48, true, 128, 128, 4, 2, 1)                                                  \
  X(wide_k48nn_128x128, 48, false, 128, 128, 4, 2, 1)                                                 \
  X(wide_k32nn_128x128, 32, false, 128, 128, 4, 2, 1)
