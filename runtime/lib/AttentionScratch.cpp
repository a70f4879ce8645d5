//===- AttentionScratch.cpp - cuDNN attention's memory, inside the plan ---===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// cuDNN's fused attention needs memory the compiler's plan does not hold:
// each forward's row statistics (fp32 [batch, heads, seq]) until its
// backward, and a workspace per call (the backward's fp32 dQ accumulator,
// full-head dK/dV under GQA, the row sums: 129 MiB on the bench's 1b
// shape). Allocated beside the arena they were 1.5% over the plan; placed in
// the GEMM workspace (which no other op uses while attention runs) or in the
// arena bytes no planned buffer holds at those ops, they cost nothing.
//
//===----------------------------------------------------------------------===//

#include "ProgramRunner.h"

#include <algorithm>

using namespace kiln::runtime;

Status
ProgramRunner::placeAttentionScratch(const std::vector<artifact::ScratchRequest> &stats,
                                     const std::vector<std::pair<size_t, size_t>> &workspaceNeeds,
                                     const ArenaPlan &plan, const SharedMemory &memory,
                                     std::vector<CUdeviceptr> &statsPointer,
                                     std::map<size_t, CUdeviceptr> &workspaceOf) {
  // Statistics first: they live longest. Then each workspace too large for
  // the GEMM workspace, at its one op.
  std::vector<artifact::ScratchRequest> requests = stats;
  std::vector<size_t> workspaceRequest(workspaceNeeds.size(), SIZE_MAX);
  for (size_t w = 0; w < workspaceNeeds.size(); ++w) {
    auto [op, bytes] = workspaceNeeds[w];
    if (bytes <= kWorkspaceBytes) {
      workspaceOf[op] = workspace;
      scratchInPlan = std::max(scratchInPlan, bytes);
      continue;
    }
    workspaceRequest[w] = requests.size();
    requests.push_back({op, op, bytes});
  }
  size_t arenaBytes = memory.arena ? memory.arenaBytes : arenaSize;
  std::vector<std::optional<size_t>> placed =
      artifact::placeScratch(program, plan, arenaBytes, requests, kArenaAlignment);

  // What found no room: one buffer for the statistics, one workspace of the
  // largest need (the attention calls run one at a time).
  size_t statsOutside = 0, workspaceOutside = 0;
  for (size_t s = 0; s < stats.size(); ++s)
    if (!placed[s])
      statsOutside += (stats[s].bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
  for (size_t w = 0; w < workspaceNeeds.size(); ++w)
    if (workspaceRequest[w] != SIZE_MAX && !placed[workspaceRequest[w]])
      workspaceOutside = std::max(workspaceOutside, workspaceNeeds[w].second);
  CUdeviceptr statsBase = 0, workspaceBase = 0;
  if (statsOutside > 0) {
    Expected<DeviceBuffer> buffer = DeviceBuffer::allocate(*device, statsOutside);
    if (!buffer)
      return Error{"attention statistics: " + buffer.getError()};
    statsBase = buffer->get();
    owned.push_back(std::move(*buffer));
  }
  if (workspaceOutside > 0) {
    Expected<DeviceBuffer> buffer = DeviceBuffer::allocate(*device, workspaceOutside);
    if (!buffer)
      return Error{"cuDNN attention workspace: " + buffer.getError()};
    workspaceBase = buffer->get();
    owned.push_back(std::move(*buffer));
  }
  scratchOutside = statsOutside + workspaceOutside;

  statsPointer.assign(stats.size(), 0);
  size_t next = 0;
  for (size_t s = 0; s < stats.size(); ++s) {
    if (placed[s]) {
      statsPointer[s] = arena + *placed[s];
      scratchInPlan += stats[s].bytes;
    } else {
      statsPointer[s] = statsBase + next;
      next += (stats[s].bytes + kArenaAlignment - 1) / kArenaAlignment * kArenaAlignment;
    }
  }
  size_t largestPlaced = 0;
  for (size_t w = 0; w < workspaceNeeds.size(); ++w) {
    if (workspaceRequest[w] == SIZE_MAX)
      continue;
    const std::optional<size_t> &at = placed[workspaceRequest[w]];
    workspaceOf[workspaceNeeds[w].first] = at ? arena + *at : workspaceBase;
    if (at)
      largestPlaced = std::max(largestPlaced, workspaceNeeds[w].second);
  }
  scratchInPlan += largestPlaced;
  return Status::success();
}
