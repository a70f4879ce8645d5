//===- MemoryPlanSection.h - The runtime's names for memory_plan *- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The "memory_plan" section belongs to the artifact library
// (kiln/artifact/MemoryPlanSection.h); the runtime uses it by these names.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_MEMORYPLANSECTION_H
#define KILN_RUNTIME_MEMORYPLANSECTION_H

#include "kiln/artifact/MemoryPlanSection.h"
#include "kiln/runtime/StepProgram.h"

namespace kiln::runtime {
using artifact::ChainBuffer;
using artifact::checkArenaPlan;
using artifact::chooseArenaPlan;
using artifact::decodeMemoryPlan;
using artifact::encodeMemoryPlan;
using artifact::evaluateMemoryPlan;
using artifact::kArenaAlignment;
using artifact::kGemmWorkspaceBytes;
using artifact::kMaxArenaAlignment;
using artifact::persistentBytes;
using artifact::planStepMemory;
using artifact::StepMemoryPlan;
} // namespace kiln::runtime

#endif // KILN_RUNTIME_MEMORYPLANSECTION_H
