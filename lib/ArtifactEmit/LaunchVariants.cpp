//===- LaunchVariants.cpp - Launch shapes offered to kiln-run tune --------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/ArtifactEmit/LaunchVariants.h"

using namespace kiln;

std::vector<LaunchVariant> kiln::launchVariants(kernel::FusionKind kind, int64_t itemsPerBlock,
                                                int64_t block) {
  // Row kernels place a warp or a block per row and bake rows per block and
  // chunks per thread into their code; attention, scan, scatter and
  // quantize kernels fix their blocks too. Only the grid-stride loops are
  // free in both dimensions.
  if (kind != kernel::FusionKind::loop || itemsPerBlock != 256 || block != 256)
    return {};
  // Not 1024 threads: a kernel with more than 64 registers per thread
  // could not launch them (tune would skip it; no use offering it).
  return {{128, 128}, {512, 512}, {1024, 256}, {4096, 256}, {2048, 512}};
}
