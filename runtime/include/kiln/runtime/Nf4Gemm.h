//===- Nf4Gemm.h - Fused NF4 GEMMs as candidates in the step ----*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A dequantize launch the compiler marked with its "nf4" roles
// (docs/artifact.md) writes a bf16 weight that GEMMs read. Where that GEMM
// is the weight's only reader and its shape suits Kiln's sm_90a NF4 GEMM
// (runtime/lib/kernels/Nf4Gemm90.cuh), the runtime may run that kernel on
// the codes instead of cuBLASLt on the dequantized weight, and skip the
// launch once none of its weights is needed in bf16 (docs/lora-qlora.md,
// "The fused NF4 GEMMs in the step"). The pairing is plain C++ (CPU-tested);
// which implementation runs is the tuning database's "nf4" entry, or the
// fixed rule: dequantize + cuBLASLt.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_NF4GEMM_H
#define KILN_RUNTIME_NF4GEMM_H

#include "kiln/artifact/StepProgram.h"
#include "kiln/runtime/Expected.h"

#include <string>
#include <vector>

namespace kiln::runtime {

/// The two implementations of an NF4 GEMM (the database's "impl").
inline constexpr const char *kNf4Default = "dequant+cublaslt";
inline constexpr const char *kNf4Fused = "nf4-fused";

/// The fused kernels' launch (kernels/Nf4GemmKernels.cu checks these): 384
/// threads, a grid of (n / 128, m / 256), this much dynamic shared memory.
inline constexpr unsigned kNf4GemmThreads = 384, kNf4GemmRows = 128, kNf4GemmTokens = 256;
inline constexpr unsigned kNf4GemmSharedBytes = 161920;

/// One marked NF4 weight and the GEMM reading it.
struct Nf4GemmPair {
  size_t launch = 0; ///< op index of the dequantize launch
  size_t weight = 0; ///< index into its nf4->weights
  size_t gemm = 0;   ///< op index of the reader (the first, when several)
  /// Forward: C[m, n] = alpha A[m, k] W^T + beta C (W [n, k]); else the
  /// input gradient: C = alpha A W + beta C (W [k, n]).
  bool forward = true;
  bool doubleQuant = false;
  int64_t m = 0, n = 0, k = 0;
  double alpha = 1, beta = 0;
  /// Empty: the fused kernel can run this GEMM; else why not ("the weight
  /// has 2 readers", "m=100 is not a multiple of 256").
  std::string unsupported;
  /// The tuning database's view: the problem's signature and "m=,n=,k=".
  std::string signature, shape;
  /// "nf4 8192x2048x2048 fwd dq" for tables and profiles.
  std::string label() const;
};

/// Every weight of every marked launch of \p program at \p sizes, with the
/// GEMM that reads it and whether the fused kernel can run it. A weight
/// whose GEMM is not of the kernel's form (A bf16 row-major and packed, W
/// as B, C bf16 packed, batch 1, no epilogue; blocks of 64, double
/// quantization in blocks of 256) or not of its tile sizes (m % 256, n %
/// 128, k % 64) is listed with the reason.
std::vector<Nf4GemmPair> pairNf4Gemms(const artifact::StepProgram &program,
                                      const artifact::SymbolBindings &sizes);

/// The dequantize launches that may be skipped when the GEMMs at
/// \p fusedGemms run fused: exclusive launches all of whose weights' readers
/// are among them.
std::vector<size_t> skippableNf4Launches(const artifact::StepProgram &program,
                                         const std::vector<size_t> &fusedGemms);

/// The KILN_NF4_GEMM test hook ("fused": every supported pair fused
/// whatever the database says; "dequant": none; unset or "": the database
/// or the fixed rule). Anything else is an error naming the value.
Expected<std::string> nf4GemmOverride();

} // namespace kiln::runtime

#endif // KILN_RUNTIME_NF4GEMM_H
