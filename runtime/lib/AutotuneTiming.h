//===- AutotuneTiming.h - How tune times candidates -------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Internal to the runtime library: the sampling every measured choice of
// `kiln-run tune` shares (Autotune.cpp's GEMMs and launches, AutotuneNf4.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_AUTOTUNETIMING_H
#define KILN_RUNTIME_LIB_AUTOTUNETIMING_H

#include "kiln/runtime/StepExecutor.h"

#include <functional>
#include <vector>

namespace kiln::runtime {

/// Median times per call of candidates \p timed, run round-robin: \p
/// warmup untimed rounds, then \p reps timed ones, each \p calls
/// back-to-back calls of \p enqueue(candidate) between two events, queued
/// behind \p x's stream hold (StreamHold.cpp) so that they run at the GPU's
/// pace.
Expected<std::vector<double>> timeRuns(StepExecutor &x, const Device &device,
                                       const std::vector<size_t> &timed, int warmup, int reps,
                                       int calls, const std::function<Status(size_t)> &enqueue);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_LIB_AUTOTUNETIMING_H
