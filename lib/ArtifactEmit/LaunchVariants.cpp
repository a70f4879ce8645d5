//===- LaunchVariants.cpp - Launch shapes offered to kiln-run tune --------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/ArtifactEmit/LaunchVariants.h"

using namespace kiln;

std::vector<LaunchVariant> kiln::rowLaunchVariants(const kernel::RowLayout &row,
                                                   int64_t itemsPerBlock, int64_t block) {
  // Only the shape the row template was generated for (lowering set it
  // from the same layout): another would mean code this does not know.
  int64_t rows = row.rowsPerBlock();
  if (itemsPerBlock != rows || block != 256)
    return {};
  std::vector<LaunchVariant> variants = {{2 * rows, 256}, {4 * rows, 256}, {8 * rows, 256}};
  // The scalar template: one block per row, the columns over blockDim.x.
  // 1024 threads too (its long rows, the vocabulary's, gain most): a
  // kernel whose registers do not allow them fails to launch, and tune
  // then drops that shape.
  if (row.width == 1)
    variants.insert(variants.begin(), {{1, 128}, {1, 512}, {1, 1024}});
  return variants;
}

std::vector<LaunchVariant> kiln::launchVariants(kernel::FusionKind kind, int64_t itemsPerBlock,
                                                int64_t block, const kernel::RowLayout &row) {
  if (kind == kernel::FusionKind::row)
    return rowLaunchVariants(row, itemsPerBlock, block);
  // Attention, scan, scatter and quantize kernels fix their blocks. Only
  // the grid-stride loops are free in both dimensions.
  if (kind != kernel::FusionKind::loop || itemsPerBlock != 256 || block != 256)
    return {};
  // Not 1024 threads: a kernel with more than 64 registers per thread
  // could not launch them (tune would skip it; no use offering it).
  return {{128, 128}, {512, 512}, {1024, 256}, {4096, 256}, {2048, 512}};
}

std::vector<LaunchVariant> kiln::launchVariants(kernel::KernelOp kernel, int64_t itemsPerBlock,
                                                int64_t block) {
  kernel::RowLayout row;
  if (kernel.getKind() == kernel::FusionKind::row)
    row = kernel::rowLayout(kernel.getBody().front());
  return launchVariants(kernel.getKind(), itemsPerBlock, block, row);
}
