//===- LaunchVariantsTest.cpp - The launch shapes offered to tune ---------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/ArtifactEmit/LaunchVariants.h"

#include <gtest/gtest.h>

using namespace kiln;
using kernel::FusionKind;
using kernel::RowLayout;

namespace {
std::vector<std::pair<int64_t, int64_t>> shapes(const std::vector<LaunchVariant> &variants) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (const LaunchVariant &v : variants)
    out.emplace_back(v.itemsPerBlock, v.block);
  return out;
}
using Shapes = std::vector<std::pair<int64_t, int64_t>>;

RowLayout vectorized(int64_t threadsPerRow) {
  RowLayout row;
  row.width = 8;
  row.cols = 2048;
  row.threadsPerRow = threadsPerRow;
  row.chunks = 1;
  return row;
}
} // namespace

TEST(LaunchVariants, ScalarRowsVaryRowsPerBlockAndThreads) {
  RowLayout scalar; // width 1: the columns walk blockDim.x
  EXPECT_EQ(shapes(rowLaunchVariants(scalar, 1, 256)),
            (Shapes{{1, 128}, {1, 512}, {1, 1024}, {2, 256}, {4, 256}, {8, 256}}));
}

TEST(LaunchVariants, VectorizedRowsKeepTheirThreads) {
  // A block per row: 256 threads baked in; a warp per row: 8 rows a block.
  EXPECT_EQ(shapes(rowLaunchVariants(vectorized(256), 1, 256)),
            (Shapes{{2, 256}, {4, 256}, {8, 256}}));
  EXPECT_EQ(shapes(rowLaunchVariants(vectorized(32), 8, 256)),
            (Shapes{{16, 256}, {32, 256}, {64, 256}}));
}

TEST(LaunchVariants, RowShapeOtherThanTheLayoutsHasNone) {
  // A launch whose shape is not the one its layout was generated for.
  EXPECT_TRUE(rowLaunchVariants(vectorized(32), 1, 256).empty());
  EXPECT_TRUE(rowLaunchVariants(vectorized(256), 1, 128).empty());
  EXPECT_TRUE(rowLaunchVariants(RowLayout(), 8, 256).empty());
}

TEST(LaunchVariants, ByKind) {
  EXPECT_EQ(launchVariants(FusionKind::loop, 256, 256, RowLayout()).size(), 5u);
  EXPECT_TRUE(launchVariants(FusionKind::loop, 1024, 256, RowLayout()).empty());
  EXPECT_EQ(shapes(launchVariants(FusionKind::row, 1, 256, vectorized(256))),
            (Shapes{{2, 256}, {4, 256}, {8, 256}}));
  for (FusionKind kind : {FusionKind::scan, FusionKind::scatter, FusionKind::quantize,
                          FusionKind::attention, FusionKind::attention_grad})
    EXPECT_TRUE(launchVariants(kind, 256, 256, RowLayout()).empty());
}
