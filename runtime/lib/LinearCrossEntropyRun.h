//===- LinearCrossEntropyRun.h - The fused LM head, chunk by chunk -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Expands a step program's linear_cross_entropy op at the run's sizes into
// the launches and cuBLASLt GEMMs the executor records (docs/artifact.md,
// "The fused LM head"): a count of the labels, per chunk of tokens the
// logits GEMM, the row kernel and the gradient GEMMs, then the loss and the
// narrowing of an fp32 weight-gradient accumulator. The chunk count follows
// the run's token count, so one CUDA Graph per shape holds every chunk.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_LINEARCROSSENTROPYRUN_H
#define KILN_RUNTIME_LIB_LINEARCROSSENTROPYRUN_H

#include "kiln/runtime/CublasLt.h"
#include "kiln/runtime/Device.h"
#include "kiln/runtime/StepProgram.h"

#include <string>
#include <vector>

namespace kiln::runtime {

/// The support fatbin's head kernels (kernels/CrossEntropyKernels.cuh).
struct HeadKernels {
  CUfunction count = nullptr, loss = nullptr;
  CUfunction rows[3] = {};   ///< fp32 chunk: F32, BF16, F16 gradients
  CUfunction rowsBf16Logits = nullptr; ///< bf16 chunk, bf16 gradients
  CUfunction narrow[2] = {}; ///< BF16, F16
};
Expected<HeadKernels> loadHeadKernels(const KernelModule &support);

/// Row-major C = op(A) · op(B) (+ beta · C) with explicit leading dimensions.
struct HeadGemm {
  CUdeviceptr a = 0, b = 0, c = 0;
  artifact::DType ab = artifact::DType::F32, ct = artifact::DType::F32;
  int64_t m = 0, n = 0, k = 0, lda = 0, ldb = 0, ldc = 0;
  bool transA = false, transB = false;
  float beta = 0;
  std::string label;
};

/// A launch: pointers, then int64 arguments.
struct HeadLaunch {
  std::string name;
  CUfunction function = nullptr;
  unsigned grid = 1, block = 1;
  std::vector<CUdeviceptr> pointers;
  std::vector<int64_t> ints;
};

struct HeadStep {
  bool isGemm = false;
  HeadGemm gemm;
  HeadLaunch launch;
};

/// The steps of \p head at the evaluated \p shapes, its buffers at
/// \p pointers; an error names what does not fit (hidden [N, H] against
/// weight, labels, chunk and stats).
Expected<std::vector<HeadStep>>
expandLinearCrossEntropy(const StepProgram &program, const LinearCrossEntropy &head,
                         const std::vector<std::vector<int64_t>> &shapes,
                         const std::vector<CUdeviceptr> &pointers, const HeadKernels &kernels);

/// The cuBLASLt descriptor, layouts and algorithm of one head GEMM.
struct HeadGemmHandles {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first = nullptr, second = nullptr, result = nullptr;
  cublasLtMatmulAlgo_t algo{};
};
Expected<HeadGemmHandles> createHeadGemm(const CublasLt &lt, cublasLtHandle_t handle,
                                         const HeadGemm &gemm, uint64_t workspaceBytes);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_LIB_LINEARCROSSENTROPYRUN_H
