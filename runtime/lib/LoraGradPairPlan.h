//===- LoraGradPairPlan.h - An adapter's dT and dB as one launch -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Host side of kernels/LoraGradPair.cuh, without CUDA: whether two adjacent
// GEMMs of a step are one adapter's dT = a1 Y Bm (+ dT) and dB = a2 Yᵀ t
// (+ dB) over the same Y, and the grid, strip and workspace of the launch
// that runs both. Shared by the runtime (ProgramRunnerLoraPair.cpp) and the
// harness (bench/gradpair), tested on the CPU (LoraGradPairPlanTest).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_LORAGRADPAIRPLAN_H
#define KILN_RUNTIME_LIB_LORAGRADPAIRPLAN_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::runtime::pair {

/// One GEMM as the step program states it (row-major C[M,N] = alpha op(A)
/// op(B) + beta C, row strides as stored), at the run's sizes.
struct Gemm {
  uint64_t a = 0, b = 0, c = 0; ///< device addresses
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t lda = 0, ldb = 0, ldc = 0;
  bool transA = false, transB = false;
  bool bf16 = true;      ///< bf16 operands and result
  bool epilogue = false; ///< a bias or activation epilogue
  float alpha = 1, beta = 0;
};

/// How the pair runs.
struct Plan {
  std::string kernel;      ///< kiln_lora_grad_pair_r<R>_w<WC>_m<BM>_s<S>
  int64_t rows = 0, cols = 0, rank = 0; ///< T, N, R
  int64_t strip = 0;       ///< columns per CTA (8 WC)
  unsigned gridX = 0, gridY = 0; ///< N / strip, groups of row tiles
  int tilesPerGroup = 0;
  int64_t tileRows = 0; ///< BM
  size_t sharedBytes = 0;
  size_t partialTBytes = 0, partialBBytes = 0; ///< fp32, in the GEMM workspace
  /// Which of the two GEMMs is dT (0 or 1); the other is dB.
  int dT = 0;
};

/// The kernels' arguments as the host passes them (cuLaunchKernel): the
/// layouts of kiln_pair::Params and FinishParams in kernels/LoraGradPair.cuh.
struct LaunchArgs {
  uint64_t y = 0, bm = 0, t = 0, partT = 0, partB = 0;
  int64_t rows = 0, cols = 0, ldy = 0, ldbm = 0, ldt = 0;
  int32_t tilesPerGroup = 0;
};
struct FinishArgs {
  uint64_t partT = 0, partB = 0, dT = 0, dB = 0;
  int64_t rows = 0, cols = 0, rank = 0, lddT = 0, lddB = 0;
  int32_t slicesT = 0, slicesB = 0;
  float alpha1 = 1, beta1 = 0, alpha2 = 1, beta2 = 0;
};

inline constexpr unsigned kThreads = 256;

/// The instantiation's tile rows and ring stages (kernels/LoraGradPair.cuh).
struct Shape {
  int64_t tileRows = 64;
  int64_t stages = 2;
  /// Ranks up to this take the 512-column strip (WC 64) where N allows.
  int64_t wideRank = 32;
};

/// The plan for GEMMs \p first and \p second (adjacent in the program, in
/// that order) on a device with \p sms SMs and \p workspaceBytes of GEMM
/// workspace, or an empty kernel name and \p why set.
Plan planLoraGradPair(const Gemm &first, const Gemm &second, int sms, size_t workspaceBytes,
                      std::string &why, Shape shape = {});

/// Both launches' arguments for \p plan over \p first and \p second, the
/// partials at \p workspace.
void fillLaunchArgs(const Plan &plan, const Gemm &first, const Gemm &second, uint64_t workspace,
                    LaunchArgs &args, FinishArgs &finish);

/// The finishing launch's grid (256 threads each).
unsigned finishBlocks(const Plan &plan, int sms);

} // namespace kiln::runtime::pair

#endif // KILN_RUNTIME_LIB_LORAGRADPAIRPLAN_H
