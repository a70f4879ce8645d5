//===- MemoryPlanSection.h - The "memory_plan" section ----------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The arena plan of a step program in symbolic form (docs/artifact.md,
// "The memory plan"). The compiler plans the lowered step with the same
// StepProgram::planArena the runtime uses and records, per arena buffer, its
// byte size as an expression and the buffer it was placed directly above (its
// base). The offsets are then a chain,
//
//   offset(X) = 0                                        (no base)
//   offset(X) = offset(base) + align_up(max(size(base), 1))
//
// which evaluates at any symbol values. At values other than the planned
// ones two buffers live at the same time may overlap, so the runtime checks
// the evaluated plan against the program's liveness and re-plans if it must.
// Plain C++17, shared by the compiler and the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_MEMORYPLANSECTION_H
#define KILN_ARTIFACT_MEMORYPLANSECTION_H

#include "kiln/artifact/StepProgram.h"

#include <string>
#include <string_view>
#include <vector>

namespace kiln::artifact {

/// Alignment of every arena buffer (the executor's and the compiler's plan).
inline constexpr size_t kArenaAlignment = 256;
/// The largest 'alignment' a memory_plan section may ask for.
inline constexpr int64_t kMaxArenaAlignment = int64_t{1} << 20;
/// The cuBLASLt workspace the executor allocates next to the arena.
inline constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;

/// One arena buffer of the chain.
struct ChainBuffer {
  int buffer = -1; ///< The step program's buffer id (an alloc).
  SizeExpr size;   ///< Its bytes.
  int base = -1;   ///< The buffer it sits on, or -1 (offset 0).
};

/// The decoded "memory_plan" section.
struct StepMemoryPlan {
  size_t alignment = kArenaAlignment;
  SymbolBindings plannedAt;   ///< The values it was planned at.
  size_t arenaBytes = 0;      ///< At plannedAt.
  size_t persistentBytes = 0; ///< Arguments, weights, constants.
  size_t workspaceBytes = kGemmWorkspaceBytes;
  std::vector<ChainBuffer> buffers; ///< In placement order: bases first.
  /// The most aligned arena bytes live at one op: what any placement needs
  /// (planStepMemory only; not in the section).
  size_t livePeakBytes = 0;
  /// cuDNN attention's statistics and workspace as kiln-run would place
  /// them (estimateAttentionScratch; planStepMemory only, not in the section).
  size_t attentionCalls = 0, attentionInPlanBytes = 0, attentionBesideBytes = 0;
};

/// Bytes outside the arena at \p sizes: every argument, each named weight
/// once and every constant.
Expected<size_t> persistentBytes(const StepProgram &program, const SymbolBindings &sizes);

/// Plans \p program at \p sizes (planArena) and records the chain.
Expected<StepMemoryPlan> planStepMemory(const StepProgram &program, const SymbolBindings &sizes);

/// The section's JSON.
std::string encodeMemoryPlan(const StepMemoryPlan &plan);

/// Decodes the section; an error is one line naming \p origin and the
/// field ("section 'memory_plan': buffers entry 3: ...").
Expected<StepMemoryPlan> decodeMemoryPlan(std::string_view json, const std::string &origin);

/// The offsets of \p plan's chain at \p sizes, with \p program's byte
/// sizes. Fails when the plan does not cover exactly the program's allocs.
Expected<ArenaPlan> evaluateMemoryPlan(const StepMemoryPlan &plan, const StepProgram &program,
                                       const SymbolBindings &sizes);

/// Checks that no two arena buffers of \p program live at the same op share
/// a byte under \p arena and that the arena holds them all; the error names
/// the first such pair.
Status checkArenaPlan(const StepProgram &program, const ArenaPlan &arena);

/// The arena the executor allocates: \p plan evaluated at \p sizes when it
/// passes checkArenaPlan, else planArena at \p sizes, with \p note saying
/// why (one line; empty when the plan was used or there is none).
Expected<ArenaPlan> chooseArenaPlan(const StepProgram &program, const StepMemoryPlan *plan,
                                    const SymbolBindings &sizes, std::string &note);

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_MEMORYPLANSECTION_H
