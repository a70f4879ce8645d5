//===- AutotuneNf4.h - tune's measurement of the fused NF4 GEMM -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Internal to the runtime library: Autotune.cpp calls tuneNf4 when the step
// reaches the first GEMM of an NF4 signature (kiln/runtime/Nf4Gemm.h).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_AUTOTUNENF4_H
#define KILN_RUNTIME_LIB_AUTOTUNENF4_H

#include "kiln/runtime/Autotune.h"

namespace kiln::runtime {

/// Measures NF4 site \p sites[members.front()] (its dequantize launch has
/// run, its activations hold the step's values): dequantize + cuBLASLt
/// (the default) and the fused kernel compute C once each from the same C,
/// the fused one must be within the bf16 bound of the default; then both
/// run round-robin (warm-up, `reps` samples of back-to-back calls of about
/// `sampleMs`), chooseWinner decides. C is put back afterwards.
Expected<TuningEntry> tuneNf4(StepExecutor &x, const Device &device,
                              const std::vector<StepExecutor::Nf4Site> &sites,
                              const std::vector<size_t> &members, const TuneOptions &options,
                              TunedOp &row);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_LIB_AUTOTUNENF4_H
