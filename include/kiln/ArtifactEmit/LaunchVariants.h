//===- LaunchVariants.h - Launch shapes offered to kiln-run tune -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The compiler cannot time a kernel, but it knows which launch shapes give
// the same result: a loop kernel walks its items in a grid-stride loop over
// blockDim and gridDim (lib/Codegen/LoopKernel.cpp), so any block size and
// any number of items per block compute the same elements the same way.
// Those kernels' launches carry a few such shapes in the artifact
// ("variants", docs/artifact.md) as the search space `kiln-run tune`
// measures on the GPU (docs/tuning.md, "Launch variants"); the artifact
// stays portable, the default shape stays first.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACTEMIT_LAUNCHVARIANTS_H
#define KILN_ARTIFACTEMIT_LAUNCHVARIANTS_H

#include "kiln/Dialect/Kernel/KernelDialect.h"

#include <cstdint>
#include <vector>

namespace kiln {

struct LaunchVariant {
  int64_t itemsPerBlock = 256, block = 256;
};

/// The launch shapes besides (\p itemsPerBlock, \p block) that a kernel of
/// \p kind offers tune: for loop kernels at the loop default (256 items on
/// 256 threads) smaller and larger blocks, and blocks of 256 or 512 threads
/// that take 4 to 16 items each (fewer blocks, each thread looping); none
/// for the other kinds, whose code fixes rows per block or threads per row.
std::vector<LaunchVariant> launchVariants(kernel::FusionKind kind, int64_t itemsPerBlock,
                                          int64_t block);

} // namespace kiln

#endif // KILN_ARTIFACTEMIT_LAUNCHVARIANTS_H
