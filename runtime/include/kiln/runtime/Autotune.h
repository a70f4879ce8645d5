//===- Autotune.h - Measure a step's candidates on this GPU -----*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// `kiln-run tune` (docs/tuning.md). For one shape of a loaded step:
//  - every distinct GEMM (by its cuBLASLt signature) is measured at the
//    moment the step reaches it, so its operands hold the step's real values:
//    cuBLASLt's top-K algorithms each compute the output once (compared with
//    the default's, the heuristic's first, by relative L2 error against the
//    numerics bound of the output dtype), then the eligible ones are timed
//    with CUDA events, round-robin, warm-up first, the median of N, with the
//    operands rotated over the GEMMs that share the signature;
//  - attention: the step with cuDNN's fused attention and with the generated
//    kernels, the loss at identical parameters compared, whole steps timed
//    alternately (graph replays);
//  - the winners (chooseWinner: a tie keeps the default) go into the
//    database, and the step with all of them is timed against the default
//    step in the same run.
// Parameters and optimizer state are put back after every measured step.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_AUTOTUNE_H
#define KILN_RUNTIME_AUTOTUNE_H

#include "kiln/runtime/StepExecutor.h"
#include "kiln/runtime/TuningDb.h"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

struct TuneOptions {
  int topK = 8;      ///< cuBLASLt candidates per GEMM
  /// Thin GEMMs (isThinGemm): configurations beyond the heuristic's list
  /// (split-K, other algorithm ids and tiles; GemmSearch.cpp) that join the
  /// candidates, the fastest of a screening; the total stays within
  /// kMaxTuningCandidates. 0: the heuristic's list only.
  int extra = 24;
  /// The most such configurations screened per GEMM.
  size_t screenLimit = 512;
  /// Tests only (KILN_TUNE_PICK_BEYOND_HEURISTIC=1): a thin GEMM chooses
  /// its fastest eligible configuration beyond the heuristic, whatever the
  /// margin, so that train's rebuilding of one is exercised.
  bool pickBeyondHeuristic = false;
  int warmup = 3;    ///< untimed runs of each candidate first
  int reps = 20;     ///< timed runs; the median counts
  int stepReps = 20; ///< timed whole steps per variant
  /// A close call (closeCallFinalists): rounds of `reps` interleaved runs
  /// of the finalists; the median of the rounds' medians decides.
  int closeRounds = 5;
  /// A GEMM sample runs back-to-back calls until it lasts about this long:
  /// one launch of a small GEMM (~7 us) is within event-timing jitter of
  /// its rivals, which flipped choices between two tune runs.
  double sampleMs = 0.2;
  int64_t step = 1; ///< the step number measured steps run as
  double lr = 0;
  bool tuneAttention = true; ///< false: --attention fixed it
  /// The generated kernels' launch variants (docs/tuning.md, "Launch
  /// variants"); false: --tune-launches off.
  bool tuneLaunches = true;
  /// After each op: ops done, ops in all, what was measured, seconds left
  /// (estimated from the time per op so far).
  std::function<void(size_t done, size_t total, const std::string &label, double etaSeconds)>
      progress;
};

/// One measured op of the final table.
struct TunedOp {
  std::string label;
  size_t calls = 0;      ///< ops of the step sharing it
  size_t candidates = 0; ///< measured, eligible or not
  size_t eligible = 0;   ///< within the numerics bound
  size_t remeasured = 0; ///< finalists of a close call measured again (0: none)
  size_t screened = 0;   ///< configurations beyond the heuristic screened (0: none)
  size_t rescreened = 0; ///< of those, measured again near the screening's cut
  size_t extra = 0;      ///< of those, candidates (after the heuristic's)
  bool beyondHeuristic = false; ///< the winner is one of those
  /// Launch variants not eligible: "per=2,block=256 (rel. error 3.1e-01)",
  /// "per=1,block=1024 (did not launch)".
  std::vector<std::string> rejected;
  double defaultMs = 0, tunedMs = 0;
  std::string choice; ///< "algo 3/8", "kernels", "default"
  double error = 0;   ///< the winner's relative error against the default
  bool changed = false;
};

struct TuneResult {
  std::string shape;
  std::vector<TunedOp> ops;
  double defaultStepMs = 0, tunedStepMs = 0; ///< medians, same run
  double stepLossError = 0;                  ///< tuned vs default loss, relative, same parameters
};

/// Measures the current shape of \p x (its inputs already set) and writes
/// the winners into \p db under \p x's tuning key; \p totalOps counts ops over
/// every shape of the run (progress), \p doneOps those before this shape.
Expected<TuneResult> tuneShape(StepExecutor &x, const Device &device, TuningDb &db,
                               const TuneOptions &options, size_t &doneOps, size_t totalOps);

/// The ops tuneShape measures for the current shape: distinct GEMM
/// signatures, distinct launches with variants (\p tuneLaunches) plus one
/// for attention, if any.
size_t countTuningOps(const StepExecutor &x, bool tuneAttention, bool tuneLaunches = true);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_AUTOTUNE_H
