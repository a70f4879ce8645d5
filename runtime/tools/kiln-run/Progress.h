//===- Progress.h - kiln-run train's progress bar ---------------*- C++ -*-===//
//
// One line redrawn in place after every step — bar, step count, last loss,
// mean step time, estimated time left — on a terminal; the per-K-step log
// lines print above it, so a redirected log (what bench.py and the tests
// parse) stays free of it unless --progress on asks for it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUN_PROGRESS_H
#define KILN_RUN_PROGRESS_H

#include <cstdint>
#include <cstdio>

namespace kiln::run {

class ProgressBar {
public:
  /// Steps first+1 .. first+count; draws nothing when \p enabled is false.
  ProgressBar(int64_t first, int64_t count, bool enabled, std::FILE *out = stdout)
      : first(first), count(count), enabled(enabled && count > 0), out(out) {}
  /// After step \p step (absolute), which took \p ms and gave \p loss.
  void update(int64_t step, double loss, double ms);
  /// Clears the bar's line before a log line is printed.
  void clear();
  /// Ends the bar's line (the last state stays visible).
  void finish();

private:
  int64_t first, count;
  bool enabled;
  std::FILE *out;
  double totalMs = 0;
  bool drawn = false;
};

} // namespace kiln::run

#endif // KILN_RUN_PROGRESS_H
