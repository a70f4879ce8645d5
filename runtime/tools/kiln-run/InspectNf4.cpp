//===- InspectNf4.cpp - kiln-run inspect: the step's NF4 GEMMs ------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The NF4 weights the compiler marked for the fused NF4 GEMM (a dequantize
// launch's "nf4" roles), by GEMM signature at the memory plan's sizes, and
// whether Kiln's sm_90a kernel could run each instead of dequantize +
// cuBLASLt (kiln/runtime/Nf4Gemm.h). Which one runs is decided on the GPU
// (kiln-run train prints it; tune measures both).
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "kiln/runtime/Nf4Gemm.h"
#include "kiln/runtime/StepArtifact.h"
#include "kiln/runtime/StepProgram.h"

#include <algorithm>
#include <cstdio>
#include <map>

using namespace kiln::runtime;
using namespace kiln::artifact;

int kiln::run::printNf4Gemms(const StepArtifact &step, const char *path) {
  if (!step.hasStepProgram())
    return 0;
  Expected<StepProgram> program = StepProgram::decode(step.getContainer().contents("step"),
                                                      std::string(path) + ": section 'step'");
  if (!program)
    return error(kExitBadInput, program.getError());
  size_t launches = 0, exclusive = 0;
  for (const ProgramOp &op : program->ops)
    if (op.kind == ProgramOp::Kind::Launch && op.nf4) {
      ++launches;
      exclusive += op.nf4->exclusive;
    }
  if (!launches)
    return 0;
  SymbolBindings at;
  if (const std::optional<StepMemoryPlan> &plan = step.getMemoryPlan())
    at = plan->plannedAt;
  std::vector<Nf4GemmPair> pairs = pairNf4Gemms(*program, at);
  std::map<std::string, size_t> rows; // "label: fused-capable" -> count
  for (const Nf4GemmPair &pair : pairs)
    ++rows[at.empty() ? std::string("weights (sizes unknown: the artifact has no memory plan)")
                      : pair.label() + ": " +
                            (pair.unsupported.empty()
                                 ? std::string("the fused kernel can run it (sm_90)")
                                 : pair.unsupported)];
  std::string sizes;
  for (const auto &[symbol, value] : at)
    sizes += (sizes.empty() ? " at " : ", ") + symbol + "=" + std::to_string(value);
  std::printf("nf4 gemms (%zu weights of %zu dequantize launches, %zu exclusive%s):\n",
              pairs.size(), launches, exclusive, sizes.c_str());
  std::vector<std::pair<std::string, size_t>> sorted(rows.begin(), rows.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto &a, const auto &b) { return a.second > b.second; });
  for (const auto &[row, count] : sorted)
    std::printf("  %4zu  %s\n", count, row.c_str());
  return 0;
}
