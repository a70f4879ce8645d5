//===- CheckpointRotation.h - --save-every and --keep-last ------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Periodic checkpoints sit beside --save FILE as FILE's stem plus
// "-step<N>" (ckpt.safetensors -> ckpt-step20.safetensors); after each one
// is written (atomically, by the checkpoint writer) the oldest beyond the
// last K are removed. Only regular files of exactly that name pattern are
// ever removed, so a resumed run also rotates the ones an earlier run left.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CHECKPOINTROTATION_H
#define KILN_RUNTIME_CHECKPOINTROTATION_H

#include "kiln/runtime/Expected.h"

#include <cstdint>
#include <string>
#include <vector>

namespace kiln::runtime {

/// "dir/ckpt.safetensors", 20 -> "dir/ckpt-step20.safetensors" (a name
/// without an extension gets the suffix at its end).
std::string periodicCheckpointPath(const std::string &savePath, int64_t step);

/// The periodic checkpoints of \p savePath present now, as (step, path),
/// oldest first.
Expected<std::vector<std::pair<int64_t, std::string>>>
listPeriodicCheckpoints(const std::string &savePath);

/// Removes all but the newest \p keep periodic checkpoints of \p savePath
/// (keep >= 1); \p removed receives their paths.
Status prunePeriodicCheckpoints(const std::string &savePath, int64_t keep,
                                std::vector<std::string> &removed);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CHECKPOINTROTATION_H
