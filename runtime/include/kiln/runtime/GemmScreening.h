//===- GemmScreening.h - Which searched GEMM configurations tune measures -===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A thin GEMM's search (GemmSearch.cpp) finds a hundred or more
// configurations; tune screens them all briefly and admits the fastest few
// as candidates (docs/tuning.md, "Candidates beyond the heuristic"). Two
// tune runs must admit the same ones: the times near the cut are dense
// (split-K variants of a few tiles, within a few % of each other), so the
// cut keeps the best of each configuration group first, measures what lies
// near the cut again with more samples, and orders times within the tie
// tolerance of the cut by index (the configurations' order), not by noise.
// Pure functions of the measured times: CPU-tested (TuningDbTest).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_GEMMSCREENING_H
#define KILN_RUNTIME_GEMMSCREENING_H

#include "kiln/runtime/GemmConfig.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kiln::runtime {

/// Samples (after one warm-up) of every configuration in the first pass,
/// and of those measured again near the cut; the median counts. A median of
/// 5 ignores two disturbed samples; of 2 (the mean) it moved by half of one.
constexpr int kScreenSamples = 5;
constexpr int kRescreenSamples = 11;

struct ScreenPolicy {
  size_t keep = 24; ///< configurations admitted at most
  /// Admitted first: up to this many of each group (screenGroup), the
  /// fastest, when within groupBand of the fastest overall; at most half
  /// of `keep` go this way.
  size_t perGroup = 2;
  double groupBand = 0.25;
  /// Measured again: what the cut admits, and every configuration within
  /// this fraction of the cut's time (at least the tie tolerance), at most
  /// maxRescreen in all (the fastest).
  double rescreenBand = 0.25;
  size_t maxRescreen = 72;
};

/// The group a configuration's time is ranked in for the per-group
/// admissions: its algorithm id and its split-K scheme (none, or the
/// reduction scheme of its splits).
uint64_t screenGroup(const GemmConfig &config);

/// The configurations admitted, in ascending index order, from their
/// medians \p ms (negative: not runnable) and groups \p groups (as many).
/// Indices are the configurations' order (GemmConfig::operator<): times
/// within tieTolerance of the cut's are taken by index, so noise below the
/// tolerance cannot change what is admitted.
std::vector<size_t> screenAdmit(const std::vector<double> &ms, const std::vector<uint64_t> &groups,
                                const ScreenPolicy &policy);

/// The configurations to measure again before screenAdmit decides, in
/// ascending index order: those screenAdmit would admit from the first
/// pass \p ms and those within rescreenBand of the cut. Empty when nothing
/// is cut (every runnable configuration is admitted).
std::vector<size_t> screenRemeasure(const std::vector<double> &ms,
                                    const std::vector<uint64_t> &groups,
                                    const ScreenPolicy &policy);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_GEMMSCREENING_H
