//===- LaunchVariants.h - Launch shapes offered to kiln-run tune -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The compiler cannot time a kernel, but it knows which launch shapes give
// the same result: a loop kernel walks its items in a grid-stride loop over
// blockDim and gridDim (lib/Codegen/LoopKernel.cpp), so any block size and
// any number of items per block compute the same elements the same way; a
// row kernel walks its rows in a grid-stride loop (lib/Codegen/
// RowKernel.cpp), so any number of rows per block computes the same rows,
// and the scalar row template also walks the columns over blockDim.
// Those kernels' launches carry a few such shapes in the artifact
// ("variants", docs/artifact.md) as the search space `kiln-run tune`
// measures on the GPU (docs/tuning.md, "Launch variants"); the artifact
// stays portable, the default shape stays first.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACTEMIT_LAUNCHVARIANTS_H
#define KILN_ARTIFACTEMIT_LAUNCHVARIANTS_H

#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "kiln/Dialect/Kernel/OpClassification.h"

#include <cstdint>
#include <vector>

namespace kiln {

struct LaunchVariant {
  int64_t itemsPerBlock = 256, block = 256;
};

/// The launch shapes besides (\p itemsPerBlock, \p block) that a kernel of
/// \p kind offers tune: for loop kernels at the loop default (256 items on
/// 256 threads) smaller and larger blocks, and blocks of 256 or 512 threads
/// that take 4 to 16 items each (fewer blocks, each thread looping); for
/// row kernels rowLaunchVariants (\p row: the kernel's rowLayout); none for
/// the other kinds, whose code fixes their blocks.
std::vector<LaunchVariant> launchVariants(kernel::FusionKind kind, int64_t itemsPerBlock,
                                          int64_t block, const kernel::RowLayout &row);
/// launchVariants of a kernel's launch, its kind and row layout read from
/// its body.
std::vector<LaunchVariant> launchVariants(kernel::KernelOp kernel, int64_t itemsPerBlock,
                                          int64_t block);

/// A row kernel's launch shapes besides its default (rowsPerBlock rows on
/// 256 threads): 2, 4 and 8 times the rows per block (fewer blocks, each
/// looping over rows; the weights a vectorized template loads once per
/// block serve more rows); and for the scalar template (width 1: its
/// columns walk blockDim, its reductions take any multiple of 32 threads up
/// to 1024) blocks of 128, 512 and 1024 threads on one row. The vectorized
/// templates bake threads per row (a warp, or the block's 256) and vector
/// width into their code: other values would be other compiled kernels,
/// not offered.
std::vector<LaunchVariant> rowLaunchVariants(const kernel::RowLayout &row, int64_t itemsPerBlock,
                                             int64_t block);

} // namespace kiln

#endif // KILN_ARTIFACTEMIT_LAUNCHVARIANTS_H
