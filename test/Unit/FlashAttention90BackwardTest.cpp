//===- FlashAttention90BackwardTest.cpp - kiln_fa90::bwd through NVRTC ----===//
//
// Kiln's sm_90a attention backward (lib/Codegen/cuda/
// FlashAttention90Backward.cuh) compiles through NVRTC for sm_90a after the
// forward's prelude, in every element type and head dim the artifact may
// carry, with the shared-memory size and block shape the runtime launches
// it with (kiln/artifact/HopperAttention.h); NVRTC refuses another size.
//
//===----------------------------------------------------------------------===//

#include "kiln/Codegen/Cuda.h"
#include "kiln/Codegen/Nvrtc.h"
#include "kiln/artifact/HopperAttention.h"

#include <gtest/gtest.h>

using namespace kiln;
using namespace kiln::codegen;

namespace {

std::string source(int skew, bool kernels) {
  std::string text = std::string(flashAttention90Prelude()) + flashAttention90BackwardPrelude();
  text += "static_assert(kiln_fa90::bwd::kThreads == " +
          std::to_string(artifact::kHopperAttentionBackwardThreads) +
          " && kiln_fa90::bwd::BN == " + std::to_string(artifact::kHopperAttentionBackwardKeys) +
          " && kiln_fa90::bwd::BM == " + std::to_string(artifact::kHopperAttentionBackwardRows) +
          ", \"kiln_fa90 backward geometry\");\n";
  for (int d : {64, 128}) {
    std::string D = std::to_string(d);
    text += "static_assert(kiln_fa90::bwd::Smem<" + D + ">::bytes == " +
            std::to_string(artifact::hopperAttentionBackwardSharedBytes(d) + skew) +
            ", \"kiln_fa90 backward geometry\");\n";
    if (!kernels)
      continue;
    for (const char *t : {"__nv_bfloat16", "__half"}) {
      std::string T = t, name = std::string(t[2] == 'n' ? "bf16" : "f16") + "_" + D;
      text += "extern \"C\" __global__ void __launch_bounds__(384, 1) bwd_" + name + "(const " +
              T + " *q, const " + T + " *k, const " + T + " *v, const " + T +
              " *dO, const float *lse, const float *dd, float *acc, " + T + " *dK, " + T +
              " *dV, int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t L) {\n"
              "  extern __shared__ __align__(1024) unsigned char smem[];\n"
              "  kiln_fa90::bwd::backward<" +
              T + ", " + D + ">(q, k, v, dO, lse, dd, acc, dK, dV, B, H, Hkv, Sq, L, 0.125f, true, smem);\n}\n" +
              "extern \"C\" __global__ void prep_" + name + "(const " + T + " *o, const " + T +
              " *dO, float *dd, float *acc, int64_t rows) {\n  kiln_fa90::bwd::prepare<" + T +
              ", " + D + ">(o, dO, dd, acc, rows);\n}\n";
    }
  }
  return text + "extern \"C\" __global__ void finish(const float *a, __nv_bfloat16 *dq, int64_t n) {\n"
                "  kiln_fa90::bwd::finish<__nv_bfloat16>(a, dq, 0.125f, n);\n}\n";
}

TEST(FlashAttention90Backward, CompilesForSm90aWithTheRuntimesGeometry) {
  NvrtcOptions options;
  llvm::Expected<std::string> cubin = compileKernel({"fa90bwd", source(0, true)}, "sm_90a", options);
  ASSERT_TRUE(static_cast<bool>(cubin)) << llvm::toString(cubin.takeError());
  EXPECT_FALSE(cubin->empty());
}

/// Forward and backward kernels with each mask form of FlashAttention90.cuh:
/// the generated kernel's (a lambda over a keep tensor, through
/// elementMask), packed documents and key padding.
std::string maskedSource() {
  std::string text = std::string(flashAttention90Prelude()) + flashAttention90BackwardPrelude();
  const char *params = "(const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v, "
                       "__nv_bfloat16 *o, const __nv_bfloat16 *dO, float *lse, const float *dd, "
                       "float *acc, __nv_bfloat16 *dK, __nv_bfloat16 *dV, const unsigned char *keep, "
                       "const int *doc, int64_t B, int64_t H, int64_t Hkv, int64_t S) {\n"
                       "  extern __shared__ __align__(1024) unsigned char smem[];\n";
  const std::pair<const char *, const char *> forms[] = {
      {"elem", "kiln_fa90::elementMask([&](int64_t b, int64_t h, int64_t i, int64_t j) -> float {\n"
               "    return keep[(b * S + i) * S + j] ? 0.f : -__int_as_float(0x7f800000); })"},
      {"doc", "kiln_fa90::DocumentMask{doc, S}"},
      {"pad", "kiln_fa90::KeyPaddingMask{keep, S}"}};
  for (int d : {64, 128})
    for (auto [form, mask] : forms) {
      if (d == 128 && std::string(form) == "pad")
        continue; // the same code as elem's, at the other head dim
      std::string D = std::to_string(d), name = std::string(form) + "_" + D;
      text += "extern \"C\" __global__ void __launch_bounds__(" +
              std::to_string(artifact::hopperAttentionThreads(d)) + ", 1) fwd_" + name + params +
              "  auto mask = " + mask + ";\n  kiln_fa90::forward<__nv_bfloat16, " + D +
              ", kiln_fa90::defaultConsumers<" + D +
              ">()>(q, k, v, o, lse, B, H, Hkv, S, S, 0.125f, true, smem, mask);\n}\n";
      text += "extern \"C\" __global__ void __launch_bounds__(384, 1) bwd_" + name + params +
              "  auto mask = " + mask + ";\n  kiln_fa90::bwd::backward<__nv_bfloat16, " + D +
              ">(q, k, v, dO, lse, dd, acc, dK, dV, B, H, Hkv, S, S, 0.125f, true, smem, mask);\n}\n";
    }
  return text;
}

TEST(FlashAttention90Backward, CompilesTheMaskedFormsForSm90a) {
  NvrtcOptions options;
  llvm::Expected<std::string> cubin = compileKernel({"fa90mask", maskedSource()}, "sm_90a", options);
  ASSERT_TRUE(static_cast<bool>(cubin)) << llvm::toString(cubin.takeError());
  EXPECT_FALSE(cubin->empty());
}

/// The -D switch sets bench/fa90/variants.sh builds (FlashAttention90*.cuh:
/// the forward's overlap at head dim 128, the backward's dQ split, merged
/// waits, pipelining, ring depth, and dQ by float2 or 16-byte atomics, warp
/// staging or bulk reductions) still compile through NVRTC, whichever
/// of them the headers' defaults pick: bf16, both head dims, unmasked (the
/// test above compiles the mask forms with the defaults).
TEST(FlashAttention90Backward, CompilesEverySwitchSetForSm90a) {
  const char *sets[] = {
      "#define KILN_FA90_OVERLAP128 1\n",
      "#define KILN_FA90_BWD_SPLIT 1\n",
      "#define KILN_FA90_BWD_SPLIT 1\n#define KILN_FA90_BWD_MERGE 1\n",
      "#define KILN_FA90_BWD_SPLIT 1\n#define KILN_FA90_BWD_PIPE 1\n#define KILN_FA90_BWD_STAGES 3\n"
      "#define KILN_FA90_BWD_DQWARP 0\n",
      "#define KILN_FA90_BWD_SPLIT 1\n#define KILN_FA90_BWD_PIPE 1\n",
      "#define KILN_FA90_BWD_DQWARP 0\n#define KILN_FA90_BWD_SPLIT 0\n#define KILN_FA90_BWD_BULKDQ 1\n",
      "#define KILN_FA90_BWD_DQWARP 0\n#define KILN_FA90_BWD_SPLIT 1\n#define KILN_FA90_BWD_BULKDQ 1\n",
      "#define KILN_FA90_BWD_DQWARP 0\n#define KILN_FA90_BWD_SPLIT 0\n#define KILN_FA90_BWD_DQV4 1\n",
      "#define KILN_FA90_BWD_DQWARP 0\n#define KILN_FA90_BWD_SPLIT 0\n",
      "#define KILN_FA90_BWD_SPLIT 0\n",
      ("#define KILN_FA90_BWD_SPLIT 1\n#define KILN_FA90_BWD_DQWARP 1\n#define KILN_FA90_BWD_MERGE 0\n"
       "#define KILN_FA90_BWD_PIPE 0\n#define KILN_FA90_OVERLAP128 0\n#define KILN_FA90_BWD_STAGES 2\n")};
  for (const char *defines : sets) {
    std::string text = std::string(defines) + flashAttention90Prelude() +
                       flashAttention90BackwardPrelude();
    for (int d : {64, 128}) {
      std::string D = std::to_string(d);
      {
        const char *mask = "kiln_fa90::NoMask()";
        std::string name = D;
        std::string params =
            "(const __nv_bfloat16 *q, const __nv_bfloat16 *k, const __nv_bfloat16 *v, "
            "__nv_bfloat16 *o, const __nv_bfloat16 *dO, float *lse, const float *dd, float *acc, "
            "__nv_bfloat16 *dK, __nv_bfloat16 *dV, const unsigned char *keep, int64_t B, "
            "int64_t H, int64_t Hkv, int64_t S) {\n"
            "  extern __shared__ __align__(1024) unsigned char smem[];\n  auto mask = " +
            std::string(mask) + ";\n";
        text += "extern \"C\" __global__ void __launch_bounds__(" +
                std::to_string(artifact::hopperAttentionThreads(d)) + ", 1) fwd_" + name + params +
                "  kiln_fa90::forward<__nv_bfloat16, " + D + ", kiln_fa90::defaultConsumers<" + D +
                ">()>(q, k, v, o, lse, B, H, Hkv, S, S, 0.125f, true, smem, mask);\n}\n";
        text += "extern \"C\" __global__ void __launch_bounds__(384, 1) bwd_" + name + params +
                "  kiln_fa90::bwd::backward<__nv_bfloat16, " + D +
                ">(q, k, v, dO, lse, dd, acc, dK, dV, B, H, Hkv, S, S, 0.125f, true, smem, mask);\n}\n";
      }
    }
    NvrtcOptions options;
    llvm::Expected<std::string> cubin = compileKernel({"fa90sw", text}, "sm_90a", options);
    ASSERT_TRUE(static_cast<bool>(cubin)) << defines << llvm::toString(cubin.takeError());
    EXPECT_FALSE(cubin->empty()) << defines;
  }
}

TEST(FlashAttention90Backward, NvrtcRefusesAnotherSize) {
  NvrtcOptions options;
  llvm::Expected<std::string> cubin =
      compileKernel({"fa90bwd", source(16, false)}, "sm_90a", options);
  ASSERT_FALSE(static_cast<bool>(cubin));
  std::string message = llvm::toString(cubin.takeError());
  EXPECT_NE(message.find("kiln_fa90 backward geometry"), std::string::npos) << message;
}

} // namespace
