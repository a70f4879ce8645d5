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

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_ARENASCRATCH_H
