//===- Progress.cpp - kiln-run train's progress bar -----------------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "Progress.h"

#include <string>

using namespace kiln::run;

void ProgressBar::update(int64_t step, double loss, double ms) {
  if (!enabled)
    return;
  totalMs += ms;
  int64_t done = step - first;
  constexpr int kWidth = 30;
  int filled = static_cast<int>(kWidth * done / count);
  std::string bar(static_cast<size_t>(filled), '#');
  bar.append(static_cast<size_t>(kWidth - filled), '.');
  double mean = totalMs / static_cast<double>(done);
  double left = mean * static_cast<double>(count - done) / 1000.0;
  std::fprintf(out, "\r[%s] %lld/%lld  loss %.4f  %.1f ms/step  ETA %.0fs\033[K", bar.c_str(),
               static_cast<long long>(done), static_cast<long long>(count), loss, mean, left);
  std::fflush(out);
  drawn = true;
}

void ProgressBar::clear() {
  if (drawn)
    std::fprintf(out, "\r\033[K");
  drawn = false;
}

void ProgressBar::finish() {
  if (drawn)
    std::fprintf(out, "\n");
  drawn = false;
}
