//===- ArenaScratch.cpp - Scratch memory in the arena's free space --------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/ArenaScratch.h"

#include <algorithm>

using namespace kiln::artifact;

namespace {

/// Bytes [lo, hi) in use over ops [begin, end].
struct Extent {
  size_t begin, end, lo, hi;
};

size_t alignUp(size_t value, size_t alignment) {
  return alignment <= 1 ? value : (value + alignment - 1) / alignment * alignment;
}

} // namespace

std::vector<std::optional<size_t>>
kiln::artifact::placeScratch(const StepProgram &program, const ArenaPlan &arena, size_t arenaBytes,
                             const std::vector<ScratchRequest> &requests, size_t alignment) {
  LiveRanges live = program.liveRanges();
  std::vector<Extent> extents;
  for (size_t id = 0; id < arena.inArena.size(); ++id)
    if (arena.inArena[id] && live.allocAt[id] >= 0)
      extents.push_back({static_cast<size_t>(live.allocAt[id]), live.lastUse[id], arena.offsets[id],
                         arena.offsets[id] + std::max<size_t>(arena.bytes[id], 1)});
  arenaBytes = std::max(arenaBytes, arena.size);

  std::vector<std::optional<size_t>> placed;
  for (const ScratchRequest &request : requests) {
    // The byte ranges taken at some op of the request, lowest first.
    std::vector<std::pair<size_t, size_t>> taken;
    for (const Extent &e : extents)
      if (e.begin <= request.last && request.first <= e.end)
        taken.push_back({e.lo, e.hi});
    std::sort(taken.begin(), taken.end());
    std::optional<size_t> offset;
    size_t candidate = 0;
    for (const auto &[lo, hi] : taken) {
      if (candidate + request.bytes <= lo)
        break;
      candidate = std::max(candidate, alignUp(hi, alignment));
    }
    if (request.bytes > 0 && candidate + request.bytes <= arenaBytes)
      offset = candidate;
    if (offset)
      extents.push_back({request.first, request.last, *offset, *offset + request.bytes});
    placed.push_back(offset);
  }
  return placed;
}
