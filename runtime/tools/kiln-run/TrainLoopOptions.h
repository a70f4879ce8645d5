//===- TrainLoopOptions.h - kiln-run train's loop flags ---------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The flags of the training loop around the step (docs/runtime.md, "The
// training loop"): learning-rate schedule, run-time gradient accumulation,
// evaluation, periodic checkpoints and the metrics log. Parsing collects
// every problem, so train reports all of them in one message.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUN_TRAINLOOPOPTIONS_H
#define KILN_RUN_TRAINLOOPOPTIONS_H

#include "Commands.h"

#include "kiln/runtime/LrSchedule.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::run {

struct LoopOptions {
  /// Kind, warmup and min ratio; peak and total are set once the lr and the
  /// step count are known.
  runtime::LrSchedule schedule;
  int64_t gradAccum = 1;               ///< micro-batches per optimizer step
  std::optional<std::string> evalData; ///< --eval-data
  int64_t evalEvery = 0, evalBatches = 1;
  int64_t saveEvery = 0, keepLast = 0; ///< 0: off / keep every checkpoint
  std::optional<std::string> logFile;  ///< --log-file (JSON lines)
};

/// Parses the loop flags of \p args; each problem (a bad value, a flag that
/// needs another) is appended to \p problems.
LoopOptions parseLoopOptions(const Arguments &args, std::vector<std::string> &problems);

/// Parses a non-negative integer flag; false with a message otherwise.
bool parseCount(const std::string &flag, const std::string &text, int64_t minimum, int64_t &out,
                std::string &message);

/// "3 problems with the flags: A; B; C" (one problem: itself).
std::string joinProblems(const std::vector<std::string> &problems);

} // namespace kiln::run

#endif // KILN_RUN_TRAINLOOPOPTIONS_H
