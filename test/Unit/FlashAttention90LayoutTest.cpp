//===- FlashAttention90LayoutTest.cpp - kiln_fa90's seq-major variants ----===//
//
// kiln-attention-layout's [B, S, H, D] operands in Kiln's sm_90a attention
// (FlashAttention90.cuh, FlashAttention90Backward.cuh): every kernel the
// artifact may carry compiles through NVRTC for sm_90a with a compile-time
// Layout, in the layout of the bench's steps (v and o seq-major; v, dO, dV
// in the backward) and with every tensor seq-major (each tensor's strides
// come from its own bit, so the dense test and this one between them take
// every path), under the names the runtime looks them up by
// (kiln/artifact/HopperAttention.h), whose layout bits are kiln_fa90's.
//
//===----------------------------------------------------------------------===//

#include "kiln/Codegen/Cuda.h"
#include "kiln/Codegen/Nvrtc.h"
#include "kiln/artifact/HopperAttention.h"

#include <gtest/gtest.h>

using namespace kiln;
using namespace kiln::codegen;
using artifact::DType;

namespace {

constexpr unsigned kAll = 255;
// The bench's steps: v and the output (forward), v, o, dO and dV (backward).
std::string prepare(int d, unsigned layout);

constexpr unsigned kBench =
    artifact::kSeqMajorV | artifact::kSeqMajorO | artifact::kSeqMajorDout | artifact::kSeqMajorDv;

std::string forward(DType dtype, int d, unsigned layout) {
  std::string t = dtype == DType::BF16 ? "__nv_bfloat16" : "__half", D = std::to_string(d);
  unsigned bits = layout & artifact::kHopperForwardLayoutBits;
  return "extern \"C\" __global__ void __launch_bounds__(" +
         std::to_string(artifact::hopperAttentionThreads(d)) + ", 1) " +
         artifact::hopperAttentionKernel(dtype, d, layout) + "(const " + t + " *q, const " + t +
         " *k, const " + t + " *v, " + t +
         " *o, float *lse, int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t L) {\n"
         "  extern __shared__ __align__(1024) unsigned char smem[];\n"
         "  kiln_fa90::forward<" +
         t + ", " + D +
         ">(q, k, v, o, lse, B, H, Hkv, Sq, L, 0.125f, true, smem, kiln_fa90::NoMask(), "
         "kiln_fa90::Layout<" +
         std::to_string(bits) + ">());\n}\n";
}

/// The main kernel and, with \p withPrepare, the prepare kernel.
std::string backward(int d, unsigned layout, bool withPrepare) {
  std::string T = "__nv_bfloat16", D = std::to_string(d);
  unsigned main = layout & artifact::kHopperBackwardLayoutBits;
  return "extern \"C\" __global__ void __launch_bounds__(384, 1) " +
         artifact::hopperAttentionBackwardKernel(DType::BF16, d, "", layout) + "(const " + T +
         " *q, const " + T + " *k, const " + T + " *v, const " + T +
         " *dO, const float *lse, const float *dd, float *acc, " + T + " *dK, " + T +
         " *dV, int64_t B, int64_t H, int64_t Hkv, int64_t Sq, int64_t L) {\n"
         "  extern __shared__ __align__(1024) unsigned char smem[];\n"
         "  kiln_fa90::bwd::backward<" +
         T + ", " + D +
         ">(q, k, v, dO, lse, dd, acc, dK, dV, B, H, Hkv, Sq, L, 0.125f, true, smem, "
         "kiln_fa90::NoMask(), kiln_fa90::Layout<" +
         std::to_string(main) + ">());\n}\n" + (withPrepare ? prepare(d, layout) : "");
}

std::string prepare(int d, unsigned layout) {
  std::string T = "__nv_bfloat16", D = std::to_string(d);
  unsigned prep = layout & artifact::kHopperPrepareLayoutBits;
  return "extern \"C\" __global__ void " +
         artifact::hopperAttentionBackwardKernel(DType::BF16, d, "prep_", layout) + "(const " + T +
         " *o, const " + T +
         " *dO, float *dd, float *acc, int64_t rows, int64_t H, int64_t Sq) {\n"
         "  kiln_fa90::bwd::prepare<" +
         T + ", " + D + ">(o, dO, dd, acc, rows, H, Sq, kiln_fa90::Layout<" + std::to_string(prep) +
         ">());\n}\n";
}

TEST(FlashAttention90Layout, NamesSayWhichTensorsAreSeqMajor) {
  EXPECT_EQ(artifact::hopperAttentionKernel(DType::BF16, 64, 0), "kiln_fa90_fwd_bf16_d64");
  EXPECT_EQ(artifact::hopperAttentionKernel(DType::BF16, 64, kBench),
            "kiln_fa90_fwd_bf16_d64_bshd_v_o");
  EXPECT_EQ(artifact::hopperAttentionBackwardKernel(DType::BF16, 64, "", kBench),
            "kiln_fa90_bwd_bf16_d64_bshd_v_do_dv");
  EXPECT_EQ(artifact::hopperAttentionBackwardKernel(DType::BF16, 128, "prep_", kBench),
            "kiln_fa90_bwd_prep_bf16_d128_bshd_o_do");
  // A layout whose bits the kernel ignores names the dense kernel.
  EXPECT_EQ(artifact::hopperAttentionBackwardKernel(DType::BF16, 64, "prep_", artifact::kSeqMajorV),
            "kiln_fa90_bwd_prep_bf16_d64");
  EXPECT_EQ(artifact::hopperAttentionKernel(DType::BF16, 64, kAll),
            "kiln_fa90_fwd_bf16_d64_bshd_q_k_v_o");
}

TEST(FlashAttention90Layout, EveryStridedVariantCompilesForSm90a) {
  std::string text = std::string(flashAttention90Prelude()) + flashAttention90BackwardPrelude();
  text += "static_assert(kiln_fa90::kSeqQ == " + std::to_string(artifact::kSeqMajorQ) +
          " && kiln_fa90::kSeqK == " + std::to_string(artifact::kSeqMajorK) +
          " && kiln_fa90::kSeqV == " + std::to_string(artifact::kSeqMajorV) +
          " && kiln_fa90::kSeqO == " + std::to_string(artifact::kSeqMajorO) +
          " && kiln_fa90::kSeqDout == " + std::to_string(artifact::kSeqMajorDout) +
          " && kiln_fa90::kSeqDq == " + std::to_string(artifact::kSeqMajorDq) +
          " && kiln_fa90::kSeqDk == " + std::to_string(artifact::kSeqMajorDk) +
          " && kiln_fa90::kSeqDv == " + std::to_string(artifact::kSeqMajorDv) +
          ", \"layout bits\");\n";
  for (int d : {64, 128})
    for (unsigned layout : {kBench, kAll}) {
      text += forward(DType::BF16, d, layout);
      text += backward(d, layout, layout == kBench); // the same o, dO bits in both
    }
  text += forward(DType::F16, 64, kAll);
  // The prepare kernel with only dO seq-major (rows in o's dense order).
  text += "extern \"C\" __global__ void prep_dout(const __nv_bfloat16 *o, const __nv_bfloat16 "
          "*dO, float *dd, float *acc, int64_t rows, int64_t H, int64_t Sq) {\n"
          "  kiln_fa90::bwd::prepare<__nv_bfloat16, 64>(o, dO, dd, acc, rows, H, Sq, "
          "kiln_fa90::Layout<kiln_fa90::kSeqDout>());\n}\n";
  NvrtcOptions options;
  llvm::Expected<std::string> cubin = compileKernel({"fa90layout", text}, "sm_90a", options);
  ASSERT_TRUE(static_cast<bool>(cubin)) << llvm::toString(cubin.takeError());
  EXPECT_FALSE(cubin->empty());
}

} // namespace
