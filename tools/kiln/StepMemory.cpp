//===- StepMemory.cpp - The kernel-level memory plan of kiln compile ------===//
//
// What the runtime will allocate: the train step after the kernel pipeline
// (kiln-fuse, kiln-lower-to-step, kiln-update-in-place), planned by the runtime's own planner
// (kiln::planLoweredStep). --memory-report prints it under the graph-level
// plan, whose fused-away intermediates it no longer counts.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "kiln/Analysis/MemoryPlan.h"
#include "kiln/ArtifactEmit/Sections.h"
#include "kiln/Pipelines/Pipelines.h"
#include "mlir/IR/Diagnostics.h"
#include "llvm/Support/FormatVariadic.h"

using namespace llvm;
using namespace mlir;

namespace kiln::driver {

artifact::SymbolBindings toBindings(const SymbolValues &values) {
  artifact::SymbolBindings bindings;
  for (const auto &entry : values)
    bindings[entry.getKey().str()] = entry.getValue();
  return bindings;
}

OwningOpRef<ModuleOp> lowerStepProgram(ModuleOp module, std::string &error) {
  // On a clone: the command goes on with (or writes) the graph-level step.
  OwningOpRef<ModuleOp> lowered = module.clone();
  ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &diag) {
    if (error.empty() && diag.getSeverity() == DiagnosticSeverity::Error)
      error = diag.str();
    return success();
  });
  PassManager pm(module.getContext());
  buildKernelPipeline(pm, PipelineOptions());
  if (failed(pm.run(*lowered)))
    return nullptr;
  if (!lowered->lookupSymbol<func::FuncOp>("main")) {
    error = "no @main step function";
    return nullptr;
  }
  return lowered;
}

FailureOr<artifact::StepMemoryPlan> planStepProgram(ModuleOp module, const SymbolValues &values,
                                                    std::string &error, StepPeak *peak) {
  OwningOpRef<ModuleOp> lowered = lowerStepProgram(module, error);
  if (!lowered)
    return failure();
  ScopedDiagnosticHandler handler(module.getContext(), [&](Diagnostic &diag) {
    if (error.empty() && diag.getSeverity() == DiagnosticSeverity::Error)
      error = diag.str();
    return success();
  });
  auto main = lowered->lookupSymbol<func::FuncOp>("main");
  if (peak) {
    FailureOr<StepPeak> described = describeLoweredStepPeak(main, toBindings(values), 10);
    if (failed(described))
      return failure();
    *peak = std::move(*described);
  }
  return planLoweredStep(main, toBindings(values));
}

void printStepPlan(const artifact::StepMemoryPlan &plan, raw_ostream &os, const StepPeak *at) {
  int64_t persistent = plan.persistentBytes, arena = plan.arenaBytes,
          workspace = plan.workspaceBytes, peak = persistent + arena + workspace;
  os << "step program (after fusion): persistent " << formatBytes(persistent) << ", arena "
     << formatBytes(arena) << ", workspace " << formatBytes(workspace) << ", planned peak "
     << formatBytes(peak) << "\n";
  os << formatv("  {0} + {1} + {2} = {3} bytes: what kiln-run allocates at these values\n",
                persistent, arena, workspace, peak);
  os << "  arena buffers " << plan.buffers.size() << ", most live at one op "
     << formatBytes(plan.livePeakBytes) << "\n";
  if (plan.attentionCalls)
    os << formatv("  cuDNN attention ({0} calls, where it runs): statistics and workspace {1} "
                  "in the plan's free space, {2} bytes beside it: planned peak {3} bytes\n",
                  plan.attentionCalls, formatBytes(plan.attentionInPlanBytes),
                  plan.attentionBesideBytes, peak + plan.attentionBesideBytes);
  if (!at)
    return;
  os << formatv("  largest buffers live at op {0} ({1}):\n", at->op, at->opName);
  for (const StepPeak::Buffer &b : at->largest)
    os << formatv("    {0,10}  {1}  {2}, last used at op {3}\n",
                  formatBytes(static_cast<int64_t>(b.bytes)), b.type, b.writer, b.lastUse);
}

} // namespace kiln::driver
