//===- ArenaScratch.h - Scratch memory in the arena's free space -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Memory the runtime needs beside the compiler's plan — cuDNN's attention
// workspace and the row statistics its forward hands to its backward —
// placed where no planned buffer is live at the same ops, so that it costs
// no device memory beyond the plan. The arena has such space: the plan's
// peak is reached at a few ops only, and below it the free bytes move.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_ARENASCRATCH_H
#define KILN_ARTIFACT_ARENASCRATCH_H

#include "kiln/artifact/StepProgram.h"

#include <optional>
#include <vector>

namespace kiln::artifact {

/// Bytes needed from op \p first through op \p last (program op indices).
struct ScratchRequest {
  size_t first = 0, last = 0, bytes = 0;
};

/// An arena offset for each request where its bytes are free of every
/// planned buffer of \p program (under \p arena) live at any of its ops, and
/// of the requests placed before it; std::nullopt where none is, within the
/// first \p arenaBytes (at least arena.size: a run's arena is its largest
/// shape's). Requests are placed in order, each at the lowest fitting
/// offset, aligned to \p alignment.
std::vector<std::optional<size_t>> placeScratch(const StepProgram &program, const ArenaPlan &arena,
                                                size_t arenaBytes,
                                                const std::vector<ScratchRequest> &requests,
                                                size_t alignment);

/// What cuDNN's fused attention would need beside the plan of \p program
/// at \p sizes (under \p arena), placed as kiln-run places it
/// (runtime/lib/AttentionScratch.cpp). The workspace is estimated as cuDNN
/// 9's frontend sizes its SDPA backward: the fp32 dQ accumulator, under GQA
/// full-head dK and dV, and the row sums; kiln-run uses the library's own
/// figure.
struct AttentionScratchEstimate {
  size_t calls = 0;      ///< attention launches (forward and backward)
  size_t statistics = 0; ///< bytes of row statistics, all forwards
  size_t workspace = 0;  ///< the largest call's workspace
  size_t inPlan = 0;     ///< bytes placed in the GEMM workspace or the arena
  size_t beside = 0;     ///< bytes kiln-run allocates beside the plan
};
Expected<AttentionScratchEstimate> estimateAttentionScratch(const StepProgram &program,
                                                            const ArenaPlan &arena,
                                                            const SymbolBindings &sizes,
                                                            size_t gemmWorkspaceBytes);

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_ARENASCRATCH_H
