//===- TrainMetrics.h - --log-file JSON lines and the loss curve -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// kiln-run train --log-file FILE appends one JSON object per step (and per
// evaluation) to FILE and, at the end, draws FILE's train and eval losses
// over steps as an SVG beside it (FILE with its extension replaced by
// ".svg"), with no library: GPU-free, so CI tests both.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TRAINMETRICS_H
#define KILN_RUNTIME_TRAINMETRICS_H

#include "kiln/runtime/Expected.h"

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

/// One line of the log: a train step (loss set) and/or an evaluation.
struct StepMetrics {
  int64_t step = 0;
  std::optional<double> loss, lr, gradNorm, tokensPerSecond, evalLoss;
  std::optional<int64_t> tokens; ///< counted (loss-carrying) tokens
};

/// `{"step": 3, "loss": 2.5, "lr": 0.001, "grad_norm": 1.2, ...}`: only
/// the fields that are set, numbers with 17 significant digits.
std::string formatMetricsLine(const StepMetrics &metrics);

/// Reads a --log-file: every line a JSON object with an integer "step";
/// a later line for the same step replaces the earlier's fields (a run
/// resumed from an earlier checkpoint rewrites its steps). Sorted by step.
Expected<std::vector<StepMetrics>> readMetricsLog(const std::string &path);

/// The SVG picture of \p metrics: train loss as a line, eval loss as a
/// line with dots, over steps, with axes, ticks and a legend.
std::string renderLossCurveSvg(const std::vector<StepMetrics> &metrics, const std::string &title);

/// "run/log.jsonl" -> "run/log.svg".
std::string lossCurvePath(const std::string &logPath);

/// Appends lines to a --log-file, flushed after each (a killed run keeps
/// every line it wrote).
class MetricsLog {
public:
  /// Opens \p path for appending (created when absent; only a regular file).
  static Expected<MetricsLog> open(const std::string &path);
  MetricsLog(MetricsLog &&other) noexcept;
  MetricsLog &operator=(MetricsLog &&) = delete;
  ~MetricsLog();
  Status append(const StepMetrics &metrics);
  const std::string &getPath() const { return path; }

private:
  MetricsLog(std::FILE *file, std::string path) : file(file), path(std::move(path)) {}
  std::FILE *file;
  std::string path;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TRAINMETRICS_H
