//===- MemoryPlanSection.cpp - Plan the lowered step as the runtime will --===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The runtime allocates one arena from its own plan of the step program it
// runs (runtime/lib/artifact). Planning the lowered step here with that same
// code on that same encoding gives the estimate the runtime will allocate,
// and the memory_plan section (docs/artifact.md) it can use as is.
//
//===----------------------------------------------------------------------===//

#include "kiln/ArtifactEmit/Sections.h"

#include "kiln/Dialect/Kernel/KernelDialect.h"

using namespace mlir;

FailureOr<kiln::artifact::StepMemoryPlan>
kiln::planLoweredStep(func::FuncOp func, const artifact::SymbolBindings &values) {
  // Which NVRTC module holds a kernel does not matter to the plan.
  llvm::StringMap<std::string> modules;
  if (auto module = func->getParentOfType<ModuleOp>())
    for (auto kernel : module.getOps<kernel::KernelOp>())
      modules[kernel.getSymName()] = "plan";
  FailureOr<std::string> json = emitStepProgramSection(func, modules);
  if (failed(json))
    return failure();
  artifact::Expected<artifact::StepProgram> program =
      artifact::StepProgram::decode(*json, "step program");
  if (!program)
    return func.emitError(program.getError()), failure();
  artifact::Expected<artifact::StepMemoryPlan> plan = artifact::planStepMemory(*program, values);
  if (!plan)
    return func.emitError("memory plan of the step program: ") << plan.getError(), failure();
  return std::move(*plan);
}
