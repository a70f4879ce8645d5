//===- ArenaScratch.cpp - Scratch memory in the arena's free space --------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/ArenaScratch.h"

#include "kiln/artifact/DType.h"
#include "kiln/artifact/HopperAttention.h"
#include "kiln/artifact/MemoryPlanSection.h"

#include <algorithm>
#include <map>

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

Expected<AttentionScratchEstimate>
kiln::artifact::estimateAttentionScratch(const StepProgram &program, const ArenaPlan &arena,
                                         const SymbolBindings &sizes, size_t gemmWorkspaceBytes) {
  AttentionScratchEstimate estimate;
  // As kiln-run asks: every forward's statistics, then each workspace too
  // large for the GEMM workspace.
  std::vector<ScratchRequest> requests, workspaces;
  std::map<int, size_t> statsOf; // o -> its request
  auto dims = [&](int id) -> Expected<std::vector<int64_t>> {
    std::vector<int64_t> shape;
    for (const SizeExpr &d : program.buffers[id].shape) {
      Expected<int64_t> v = d.evaluate(sizes);
      if (!v)
        return v.takeError();
      shape.push_back(*v);
    }
    return shape;
  };
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const std::optional<AttentionRoles> &a = program.ops[i].attention;
    if (!a)
      continue;
    Expected<std::vector<int64_t>> q = dims(a->q), k = dims(a->k);
    if (!q)
      return q.takeError();
    if (!k)
      return k.takeError();
    if (q->size() != 4 || k->size() != 4)
      return Error{"attention operands are not rank 4"};
    *q = headMajorShape(*q, a->isSeqMajor(kSeqMajorQ));
    *k = headMajorShape(*k, a->isSeqMajor(kSeqMajorK));
    size_t b = (*q)[0], h = (*q)[1], s = (*q)[2], d = (*q)[3], hkv = (*k)[1], l = (*k)[2];
    ++estimate.calls;
    if (!a->backward) {
      statsOf[a->o] = requests.size();
      requests.push_back({i, i, b * h * s * 4});
      estimate.statistics += b * h * s * 4;
      continue;
    }
    if (auto forward = statsOf.find(a->o); forward != statsOf.end())
      requests[forward->second].last = i;
    size_t element = dtypeSize(program.buffers[a->q].dtype);
    size_t bytes = b * h * s * d * 4 + (h != hkv ? 2 * b * h * l * d * element : 0) + b * h * s * 4;
    estimate.workspace = std::max(estimate.workspace, bytes);
    if (bytes > gemmWorkspaceBytes)
      workspaces.push_back({i, i, bytes});
  }
  size_t statsCount = requests.size();
  requests.insert(requests.end(), workspaces.begin(), workspaces.end());
  std::vector<std::optional<size_t>> placed =
      placeScratch(program, arena, arena.size, requests, kArenaAlignment);
  size_t besideWorkspace = 0, placedWorkspace = 0;
  for (size_t r = 0; r < requests.size(); ++r) {
    bool isStats = r < statsCount;
    if (isStats)
      (placed[r] ? estimate.inPlan : estimate.beside) += requests[r].bytes;
    else if (placed[r])
      placedWorkspace = std::max(placedWorkspace, requests[r].bytes);
    else
      besideWorkspace = std::max(besideWorkspace, requests[r].bytes);
  }
  estimate.beside += besideWorkspace;
  estimate.inPlan +=
      workspaces.empty() ? std::min(estimate.workspace, gemmWorkspaceBytes) : placedWorkspace;
  return estimate;
}
