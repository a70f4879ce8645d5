//===- Profile.cpp - kiln-run train --profile -----------------------------===//

#include "Profile.h"

#include "kiln/artifact/FileIO.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

using namespace kiln::runtime;

namespace {
const char *category(const std::string &label) {
  if (label.rfind("gemm ", 0) == 0)
    return "cuBLASLt GEMMs";
  if (label == "memset" || label == "memcpy" || label == "result copies")
    return "memory ops";
  return "generated kernels";
}
} // namespace

Status kiln::run::writeProfile(const std::string &path, const std::vector<ActionTime> &times,
                               unsigned top) {
  std::ostringstream out;
  out << "op\tlabel\tms\n";
  for (size_t i = 0; i < times.size(); ++i)
    out << i << '\t' << times[i].label << '\t' << times[i].ms << '\n';
  // Like checkpoints: replaced atomically, and only a regular file.
  std::string text = out.str();
  if (Status status = kiln::artifact::writeFileAtomically(
          path, [&](kiln::artifact::FileWriter &writer) { return writer.write(text); });
      !status)
    return status;

  double total = 0;
  std::map<std::string, double> byCategory;
  std::map<std::string, std::pair<double, unsigned>> byLabel;
  for (const ActionTime &t : times) {
    total += t.ms;
    byCategory[category(t.label)] += t.ms;
    auto &entry = byLabel[t.label];
    entry.first += t.ms;
    ++entry.second;
  }
  std::printf("profile (last step, no graph): %zu ops, %.3f ms of device time -> %s\n",
              times.size(), total, path.c_str());
  for (const auto &[name, ms] : byCategory)
    std::printf("  %-20s %10.3f ms %5.1f%%\n", name.c_str(), ms,
                total > 0 ? 100 * ms / total : 0.0);
  std::vector<std::pair<std::string, std::pair<double, unsigned>>> sorted(byLabel.begin(),
                                                                          byLabel.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const auto &a, const auto &b) { return a.second.first > b.second.first; });
  std::printf("  costliest ops (total ms, count, share):\n");
  for (size_t i = 0; i < sorted.size() && i < top; ++i)
    std::printf("  %10.3f ms %5u %5.1f%%  %s\n", sorted[i].second.first, sorted[i].second.second,
                total > 0 ? 100 * sorted[i].second.first / total : 0.0, sorted[i].first.c_str());
  return Status::success();
}
