//===- LrSchedule.cpp - Learning-rate schedules ---------------------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/LrSchedule.h"

#include <algorithm>
#include <cmath>

using namespace kiln::runtime;

double LrSchedule::factor(int64_t s) const {
  if (s < warmup)
    return static_cast<double>(s) / static_cast<double>(std::max<int64_t>(1, warmup));
  if (kind == Kind::Constant)
    return 1.0;
  double span = static_cast<double>(std::max<int64_t>(1, total - warmup));
  double decay;
  if (kind == Kind::Linear) {
    decay = std::max(0.0, static_cast<double>(total - s) / span);
  } else {
    double progress = static_cast<double>(s - warmup) / span;
    // num_cycles = 0.5: half a cosine from 1 down to 0.
    decay = std::max(0.0, 0.5 * (1.0 + std::cos(M_PI * 2.0 * 0.5 * progress)));
  }
  // get_cosine_with_min_lr_schedule_with_warmup's min_lr_rate (also
  // applied to linear here): the decay ends at minRatio instead of 0.
  return decay * (1.0 - minRatio) + minRatio;
}

std::optional<LrSchedule::Kind> kiln::runtime::parseLrScheduleKind(const std::string &text) {
  if (text == "constant")
    return LrSchedule::Kind::Constant;
  if (text == "linear")
    return LrSchedule::Kind::Linear;
  if (text == "cosine")
    return LrSchedule::Kind::Cosine;
  return std::nullopt;
}

const char *kiln::runtime::lrScheduleName(LrSchedule::Kind kind) {
  switch (kind) {
  case LrSchedule::Kind::Constant: return "constant";
  case LrSchedule::Kind::Linear: return "linear";
  case LrSchedule::Kind::Cosine: return "cosine";
  }
  return "constant";
}
