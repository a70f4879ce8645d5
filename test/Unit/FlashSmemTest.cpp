//===- FlashSmemTest.cpp - The launch's shared memory vs kiln_flash ------===//
//
// kernel::flashAttentionSharedBytes sizes a tiled attention launch; the
// kiln_flash templates (lib/Codegen/cuda/FlashAttention.cuh) lay their
// tiles out in that memory. NVRTC checks the two against each other for
// every head dim the tiled kernels take, and refuses a size that differs.
//
//===----------------------------------------------------------------------===//

#include "kiln/Codegen/Cuda.h"
#include "kiln/Codegen/Nvrtc.h"
#include "kiln/Dialect/Kernel/OpClassification.h"

#include <gtest/gtest.h>

using namespace kiln;
using namespace kiln::codegen;

namespace {

/// The prelude and a kernel asserting, per head dim 16..128 and element
/// type, that kiln_flash's layout takes the compiler's size (+ \p skew).
std::string layoutChecks(int64_t skew) {
  std::string body;
  for (const char *element : {"__nv_bfloat16", "__half"})
    for (int64_t d = 16; d <= 128; d += 16)
      for (bool backward : {false, true})
        body += std::string("static_assert(kiln_flash::") + (backward ? "Backward" : "Forward") +
                "Smem<" + element + ", " + std::to_string(d) + ">::bytes == " +
                std::to_string(kernel::flashAttentionSharedBytes(d, backward) + skew) +
                ", \"kiln_flash layout\");\n";
  return cudaPrelude(/*bf16=*/true, /*f16=*/true, /*dynamicMap8=*/false, /*flashAttention=*/true) +
         body + "extern \"C\" __global__ void layout() {}\n";
}

TEST(FlashSmem, CompilerSizeIsTheTemplateLayout) {
  NvrtcOptions options;
  llvm::Expected<std::string> cubin = compileKernel({"layout", layoutChecks(0)}, "sm_80", options);
  ASSERT_TRUE(static_cast<bool>(cubin)) << llvm::toString(cubin.takeError());
}

TEST(FlashSmem, NvrtcRefusesAnotherSize) {
  NvrtcOptions options;
  llvm::Expected<std::string> cubin = compileKernel({"layout", layoutChecks(16)}, "sm_80", options);
  ASSERT_FALSE(static_cast<bool>(cubin));
  std::string message = llvm::toString(cubin.takeError());
  EXPECT_NE(message.find("kiln_flash layout"), std::string::npos) << message;
}

} // namespace
