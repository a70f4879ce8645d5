//===- GemmScreening.cpp - Which searched GEMM configurations tune measures ===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/GemmScreening.h"

#include "kiln/runtime/TuningDb.h"

#include <algorithm>
#include <map>

using namespace kiln::runtime;

namespace {
/// The runnable configurations, fastest first (equal times: lower index).
std::vector<size_t> byTime(const std::vector<double> &ms) {
  std::vector<size_t> order;
  for (size_t i = 0; i < ms.size(); ++i)
    if (ms[i] >= 0)
      order.push_back(i);
  std::sort(order.begin(), order.end(),
            [&](size_t p, size_t q) { return ms[p] < ms[q] || (ms[p] == ms[q] && p < q); });
  return order;
}
} // namespace

uint64_t kiln::runtime::screenGroup(const GemmConfig &config) {
  uint64_t scheme = config.splitK > 1 ? 1 + uint64_t(config.reduction) : 0;
  return uint64_t(uint32_t(config.algoId)) << 8 | scheme;
}

std::vector<size_t> kiln::runtime::screenAdmit(const std::vector<double> &ms,
                                               const std::vector<uint64_t> &groups,
                                               const ScreenPolicy &policy) {
  std::vector<size_t> order = byTime(ms);
  std::vector<size_t> admitted;
  if (order.size() <= policy.keep) {
    std::sort(order.begin(), order.end());
    return order;
  }
  // The fastest of each group first, so one dense cluster (split-K
  // variants of one tile) cannot crowd out a different algorithm whose
  // first samples were unlucky.
  std::vector<bool> taken(ms.size(), false);
  std::map<uint64_t, size_t> perGroup;
  double fastest = ms[order.front()];
  for (size_t i : order) {
    if (admitted.size() >= policy.keep / 2 || ms[i] > fastest * (1 + policy.groupBand))
      break;
    if (perGroup[groups[i]]++ < policy.perGroup) {
      admitted.push_back(i);
      taken[i] = true;
    }
  }
  // Then the fastest of the rest; those within the tie tolerance of the
  // cut's time are equal to it, and taken by index.
  std::vector<size_t> rest;
  for (size_t i : order)
    if (!taken[i])
      rest.push_back(i);
  size_t slots = policy.keep - admitted.size();
  if (rest.size() <= slots) {
    admitted.insert(admitted.end(), rest.begin(), rest.end());
  } else if (slots > 0) {
    double cut = ms[rest[slots - 1]];
    double tolerance = tieTolerance(cut);
    std::vector<size_t> atCut;
    for (size_t i : rest) {
      if (ms[i] < cut - tolerance)
        admitted.push_back(i);
      else if (ms[i] <= cut + tolerance)
        atCut.push_back(i);
    }
    std::sort(atCut.begin(), atCut.end());
    for (size_t i : atCut)
      if (admitted.size() < policy.keep)
        admitted.push_back(i);
  }
  std::sort(admitted.begin(), admitted.end());
  return admitted;
}

std::vector<size_t> kiln::runtime::screenRemeasure(const std::vector<double> &ms,
                                                   const std::vector<uint64_t> &groups,
                                                   const ScreenPolicy &policy) {
  std::vector<size_t> order = byTime(ms);
  if (order.size() <= policy.keep)
    return {};
  std::vector<size_t> again = screenAdmit(ms, groups, policy);
  double cut = 0;
  for (size_t i : again)
    cut = std::max(cut, ms[i]);
  double reach = cut + std::max(policy.rescreenBand * cut, tieTolerance(cut));
  std::vector<bool> taken(ms.size(), false);
  for (size_t i : again)
    taken[i] = true;
  for (size_t i : order)
    if (!taken[i] && ms[i] <= reach && again.size() < policy.maxRescreen)
      again.push_back(i);
  std::sort(again.begin(), again.end());
  return again;
}
