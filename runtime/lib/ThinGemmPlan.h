//===- ThinGemmPlan.h - Which GEMMs Kiln's thin-GEMM kernel runs -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Host side of kernels/ThinGemm.cuh, without CUDA: whether a GEMM's
// descriptor is one the kernel supports, which instantiation runs it, its
// grid and its split over K. Shared by the runtime (ProgramRunnerThinGemm.cpp)
// and the harness (bench/thingemm), and tested on the CPU (ThinGemmPlanTest).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_THINGEMMPLAN_H
#define KILN_RUNTIME_LIB_THINGEMMPLAN_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace kiln::runtime::thin {

/// A row-major GEMM C[M,N] = alpha op(A) op(B) + beta C as the step program
/// states it (ProgramOp), at the run's sizes.
struct Problem {
  int64_t m = 0, n = 0, k = 0, batch = 1;
  int64_t lda = 0, ldb = 0, ldc = 0; ///< row strides as stored
  bool transA = false, transB = false;
  bool bf16Operands = true, bf16Result = true;
  bool epilogue = false; ///< a bias or activation epilogue (not supported)
};

/// How the kernel runs a Problem.
struct Plan {
  std::string kernel;            ///< kiln_thin_gemm_<shape>_<layout>_bf16
  char shape = 'k';              ///< 'k', 'n' or 'm': the thin dimension
  int64_t tileM = 0, tileN = 0;  ///< the CTA's output tile
  unsigned gridX = 0, gridY = 0; ///< N / tileN, M / tileM
  unsigned splits = 1;           ///< over K (grid z)
  unsigned threads = 0;
  size_t sharedBytes = 0;        ///< dynamic shared memory
  size_t partialBytes = 0;       ///< fp32 partials in the GEMM workspace
  size_t counters = 0;           ///< tiles: one counter each (splits > 1)
};

/// The kernels' one argument as the host passes it (cuLaunchKernel): the
/// layout of kiln_thin::Params in kernels/ThinGemm.cuh, pointers as 64-bit
/// device addresses (the harness static_asserts the two agree).
struct LaunchArgs {
  uint64_t a = 0, b = 0, c = 0;
  uint64_t partials = 0; ///< splits * M * N floats (the GEMM workspace)
  uint64_t counters = 0; ///< one unsigned per tile, zero between launches
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  float alpha = 1, beta = 0;
  int32_t splits = 1;
};

/// The counters a runner keeps for the split launches (4 bytes each); a
/// plan needing more stays with cuBLASLt.
inline constexpr size_t kMaxCounters = 16384;

/// Slices of K per CTA at least this many (the ring's depth): a shorter
/// split spends its time filling the pipeline.
inline constexpr int64_t kMinSliceSteps = 4;
/// The K slice of the split shapes, and their tile along the wide dimension.
inline constexpr int64_t kSliceK = 64;
inline constexpr int64_t kWideTile = 64;

/// The plan for \p p on a device with \p sms SMs and \p workspaceBytes of
/// GEMM workspace, or an empty kernel name and \p why set.
Plan planThinGemm(const Problem &p, int sms, size_t workspaceBytes, std::string &why);

/// The split over K for a grid of \p tiles CTAs and \p slices slices of K:
/// doubled while the grid covers less than 7/8 of the SMs, each split keeps
/// kMinSliceSteps slices, and the partials fit \p maxSplitsByBytes. Few
/// splits: the tile's last CTA adds all S partial tiles alone.
unsigned chooseSplits(int64_t tiles, int64_t slices, int sms, int64_t maxSplitsByBytes);

} // namespace kiln::runtime::thin

#endif // KILN_RUNTIME_LIB_THINGEMMPLAN_H
