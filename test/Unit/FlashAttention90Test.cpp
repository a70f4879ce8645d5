//===- FlashAttention90Test.cpp - kiln_fa90 through NVRTC for sm_90a ------===//
//
// Kiln's sm_90a attention forward (lib/Codegen/cuda/FlashAttention90.cuh)
// compiles through NVRTC for sm_90a in every element type and head dim the
// artifact may carry, and its shared-memory layout and consumer count are
// the launch geometry the runtime uses (kiln/artifact/HopperAttention.h);
// NVRTC refuses a size that differs.
//
//===----------------------------------------------------------------------===//

#include "kiln/Codegen/Cuda.h"
#include "kiln/Codegen/Nvrtc.h"
#include "kiln/artifact/HopperAttention.h"

#include <gtest/gtest.h>

using namespace kiln;
using namespace kiln::codegen;

namespace {

/// The prelude, the geometry asserts (sizes + \p skew) and, with
/// \p kernels, one forward kernel per element type and head dim.
std::string source(int skew, bool kernels) {
  std::string text = flashAttention90Prelude();
  for (int d : {64, 128}) {
    std::string D = std::to_string(d);
    text += "static_assert(kiln_fa90::defaultConsumers<" + D +
            ">() == " + std::to_string(artifact::hopperAttentionConsumers(d)) +
            " && kiln_fa90::threads<" + std::to_string(artifact::hopperAttentionConsumers(d)) +
            ">() == " + std::to_string(artifact::hopperAttentionThreads(d)) +
            " && kiln_fa90::Smem<" + D +
            ">::bytes == " + std::to_string(artifact::hopperAttentionSharedBytes(d) + skew) +
            ", \"kiln_fa90 geometry\");\n";
    if (!kernels)
      continue;
    for (const char *t : {"__nv_bfloat16", "__half"})
      text += std::string("extern \"C\" __global__ void __launch_bounds__(") +
              std::to_string(artifact::hopperAttentionThreads(d)) + ", 1) fwd_" +
              (t[2] == 'n' ? "bf16" : "f16") + "_" + D + "(const " + t + " *q, const " + t +
              " *k, const " + t + " *v, " + t +
              " *o, float *lse, int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t L) {\n"
              "  extern __shared__ __align__(1024) unsigned char smem[];\n"
              "  kiln_fa90::forward<" +
              t + ", " + D + ">(q, k, v, o, lse, B, H, Hkv, Sq, L, 0.125f, true, smem);\n}\n";
  }
  return text + "extern \"C\" __global__ void layout() {}\n";
}

TEST(FlashAttention90, CompilesForSm90aWithTheRuntimesGeometry) {
  NvrtcOptions options;
  llvm::Expected<std::string> cubin = compileKernel({"fa90", source(0, true)}, "sm_90a", options);
  ASSERT_TRUE(static_cast<bool>(cubin)) << llvm::toString(cubin.takeError());
  EXPECT_FALSE(cubin->empty());
}

TEST(FlashAttention90, NvrtcRefusesAnotherSize) {
  NvrtcOptions options;
  llvm::Expected<std::string> cubin = compileKernel({"fa90", source(16, false)}, "sm_90a", options);
  ASSERT_FALSE(static_cast<bool>(cubin));
  std::string message = llvm::toString(cubin.takeError());
  EXPECT_NE(message.find("kiln_fa90 geometry"), std::string::npos) << message;
}

} // namespace
