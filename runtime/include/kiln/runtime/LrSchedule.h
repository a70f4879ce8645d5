//===- LrSchedule.h - Learning-rate schedules of kiln-run train -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The step's learning rate is an input, so the schedule lives here, GPU-free.
// The formulas are Hugging Face transformers' (docs/runtime.md, "Learning-rate
// schedules"): get_constant_schedule_with_warmup,
// get_linear_schedule_with_warmup, get_cosine_schedule_with_warmup and, with a
// minimum ratio, get_cosine_with_min_lr_schedule_with_warmup. Their LambdaLR
// has been stepped t - 1 times when optimizer step t (1-based) runs.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LRSCHEDULE_H
#define KILN_RUNTIME_LRSCHEDULE_H

#include <cstdint>
#include <optional>
#include <string>

namespace kiln::runtime {

struct LrSchedule {
  enum class Kind { Constant, Linear, Cosine };
  Kind kind = Kind::Constant;
  double peak = 0;     ///< --lr (or the artifact's)
  int64_t warmup = 0;  ///< --warmup: steps of linear warmup from 0
  int64_t total = 0;   ///< the run's last step (resumed runs included)
  double minRatio = 0; ///< --min-lr-ratio: the decay ends at peak * ratio

  /// transformers' multiplier after `s` scheduler steps (s = t - 1).
  double factor(int64_t s) const;
  /// The learning rate of optimizer step `t` (1-based): peak * factor(t - 1).
  double at(int64_t t) const { return peak * factor(t - 1); }
};

/// "constant", "linear", "cosine"; nullopt otherwise.
std::optional<LrSchedule::Kind> parseLrScheduleKind(const std::string &text);
const char *lrScheduleName(LrSchedule::Kind kind);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_LRSCHEDULE_H
