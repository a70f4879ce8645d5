//===- Nf4Gemm90Test.cpp - the wgmma NF4 GEMM through NVRTC for sm_90a ----===//
//
// runtime/lib/kernels/Nf4Gemm90.cuh (the fused NF4 GEMM for Hopper, checked
// and timed on the GPU machine by bench/nf4gemm/run.sh) compiles through
// NVRTC for sm_90a in all eight forms (forward and input gradient, fp32 and
// double-quantized absmax, activations by cp.async or TMA), as a runtime or
// the compiler would build it, and its shared-memory guard refuses a ring
// that no sm_90 block can hold.
//
//===----------------------------------------------------------------------===//

#include "kiln/Codegen/Nvrtc.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

using namespace kiln;
using namespace kiln::codegen;

namespace {

std::string header() {
  std::ifstream in(KILN_NF4_GEMM90_HEADER);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string instantiations() {
  std::string text;
  for (const char *forward : {"true", "false"})
    for (const char *doubleQuant : {"true", "false"})
      for (const char *tma : {"true", "false"})
        text += std::string("template __global__ void kiln_nf4_90::nf4Gemm90<") + forward + ", " +
                doubleQuant + ", " + tma +
                ">(const __nv_bfloat16 *, const uint8_t *, const float *, const uint8_t *, float, "
                "const __grid_constant__ kiln_nf4_90::Map8, __nv_bfloat16 *, int, int, int, float, "
                "float, const __grid_constant__ kiln_nf4_90::TensorMap);\n";
  return text;
}

TEST(Nf4Gemm90, CompilesForSm90aInEveryForm) {
  std::string text = header();
  ASSERT_NE(text.find("namespace kiln_nf4_90"), std::string::npos) << KILN_NF4_GEMM90_HEADER;
  NvrtcOptions options;
  llvm::Expected<std::string> cubin =
      compileKernel({"nf4gemm90", text + instantiations()}, "sm_90a", options);
  ASSERT_TRUE(static_cast<bool>(cubin)) << llvm::toString(cubin.takeError());
  EXPECT_FALSE(cubin->empty());
}

TEST(Nf4Gemm90, RefusesARingLargerThanABlocksSharedMemory) {
  // Six stages of 39 KiB: more than the 227 KiB an sm_90 block may have.
  NvrtcOptions options;
  llvm::Expected<std::string> cubin = compileKernel(
      {"nf4gemm90", "#define KILN_NF4_90_STAGES 6\n" + header() + instantiations()}, "sm_90a",
      options);
  ASSERT_FALSE(static_cast<bool>(cubin));
  EXPECT_NE(llvm::toString(cubin.takeError()).find("more shared memory than an sm_90 block gets"),
            std::string::npos);
}

} // namespace
