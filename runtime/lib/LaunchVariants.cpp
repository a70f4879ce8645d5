//===- LaunchVariants.cpp - A generated kernel's launch shapes ------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A loop kernel's launch may carry other launch shapes (items per block,
// threads per block) the compiler knows compute the same
// (lib/ArtifactEmit/LaunchVariants.cpp). A runner resolves each at its
// sizes, runs the one the tuning database chose when its entry was measured
// on this very kernel image and list of shapes, and gives `kiln-run tune`
// the hooks to measure them (docs/tuning.md, "Launch variants").
//
//===----------------------------------------------------------------------===//

#include "ProgramRunner.h"

#include <algorithm>
#include <set>

using namespace kiln::runtime;
using namespace kiln::artifact;

void ProgramRunner::applyTunedLaunch(Launch &l, const ProgramOp &op, int64_t items,
                                     const SharedMemory &memory) {
  if (op.variants.empty())
    return;
  l.shapes.emplace_back(op.per, op.block);
  for (const ProgramOp::LaunchVariant &v : op.variants)
    l.shapes.emplace_back(v.per, v.block);
  for (const auto &[per, block] : l.shapes)
    l.grids.push_back(static_cast<unsigned>(
        std::min<int64_t>(std::max<int64_t>(1, (items + per - 1) / per), int64_t(1) << 30)));
  // The entry belongs to the kernel's image on this device (its content),
  // the name and the list of shapes measured; the shape to the sizes.
  std::string content = op.module;
  if (memory.moduleHashes)
    if (auto it = memory.moduleHashes->find(op.module); it != memory.moduleHashes->end())
      content = it->second;
  std::string signature = "launch " + content + " " + op.name;
  for (const auto &[per, block] : l.shapes)
    signature += " " + encodeLaunchShape(per, block);
  l.hash = hashSignature(signature);
  l.shape = "items=" + std::to_string(items) + ",shared=" + std::to_string(l.shared);
  for (size_t i = 0; i < op.symbols.size() && i < l.symbols.size(); ++i)
    l.shape += "," + op.symbols[i] + "=" + std::to_string(l.symbols[i]);
  l.label = "launch " + op.name + " (" + std::to_string(items) + " items)";
  const TuningEntry *entry =
      memory.tuning ? memory.tuning->find(*memory.tuningKey, "launch", l.hash, l.shape) : nullptr;
  std::string note;
  size_t choice = chooseLaunchShape(entry, l.shapes, note);
  if (entry && note.empty())
    ++tunedOps;
  else
    ++defaultOps;
  if (!note.empty() && tuningNote.empty())
    tuningNote = note;
  l.grid = l.grids[choice];
  l.block = static_cast<unsigned>(l.shapes[choice].second);
}

std::vector<StepExecutor::LaunchSite> ProgramRunner::getLaunchSites() const {
  std::vector<StepExecutor::LaunchSite> sites;
  for (size_t index : tunableLaunches) {
    const Launch &l = launchList[index];
    StepExecutor::LaunchSite site;
    site.action = l.action;
    site.hash = l.hash;
    site.shape = l.shape;
    site.label = l.label;
    site.shapes = l.shapes;
    std::set<CUdeviceptr> seen;
    for (int id : l.args)
      if (bytes[id] && seen.insert(pointers[id]).second)
        site.buffers.push_back({pointers[id], bytes[id], program.buffers[id].dtype});
    sites.push_back(std::move(site));
  }
  return sites;
}

Status ProgramRunner::enqueueLaunch(size_t site, size_t shape, CUstream stream) const {
  const Launch &l = launchList.at(tunableLaunches.at(site));
  return device->check(device->getDriver().cuLaunchKernel(
                           l.function, l.grids.at(shape), 1, 1,
                           static_cast<unsigned>(l.shapes.at(shape).second), 1, 1, l.shared,
                           stream, const_cast<void **>(l.params.data()), nullptr),
                       "cuLaunchKernel");
}
