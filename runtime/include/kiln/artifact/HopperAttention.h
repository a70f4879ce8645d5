//===- HopperAttention.h - Kiln's sm_90a attention kernels ------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The artifact's kernels/kiln_fa90 module (lib/Codegen/cuda/
// FlashAttention90.cuh, compiled by NVRTC for sm_90a when --arch names
// sm_90): one forward kernel per element type and head dim. The compiler
// writes the module and static_asserts these numbers into its source; the
// runtime launches the kernels with them in place of a tiled attention
// forward launch (docs/codegen.md, "Attention on Hopper").
//
// Kernel parameters: q, k, v, o, lse (fp32 [B, H, Sq] or 0), then int64 B,
// H, Hkv, Sq, L, the scale's float bits, causal (0/1). Dense row-major
// [B, H, Sq, D] and [B, Hkv, L, D] tensors, 16-byte aligned.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_HOPPERATTENTION_H
#define KILN_ARTIFACT_HOPPERATTENTION_H

#include "kiln/artifact/DType.h"

#include <cstdint>
#include <string>

namespace kiln::artifact {

inline constexpr const char *kHopperAttentionModule = "kiln_fa90";

/// Whether the module has a forward for \p dtype at head dim \p headDim.
/// bf16 only: the template compiles for f16 too (FlashAttention90Test), but
/// its numerics are checked on the GPU for bf16 alone so far.
inline bool hopperAttentionFits(DType dtype, int64_t headDim) {
  return dtype == DType::BF16 && (headDim == 64 || headDim == 128);
}
/// "kiln_fa90_fwd_bf16_d64".
inline std::string hopperAttentionKernel(DType dtype, int64_t headDim) {
  return std::string("kiln_fa90_fwd_") + (dtype == DType::BF16 ? "bf16" : "f16") + "_d" +
         std::to_string(headDim);
}
/// Consumer warpgroups of a block (kiln_fa90::defaultConsumers): each owns
/// 64 query rows; one producer warpgroup more.
inline int hopperAttentionConsumers(int64_t headDim) { return headDim == 64 ? 3 : 2; }
inline int hopperAttentionThreads(int64_t headDim) {
  return 128 * (hopperAttentionConsumers(headDim) + 1);
}
inline int64_t hopperAttentionRows(int64_t headDim) {
  return 64 * hopperAttentionConsumers(headDim);
}
/// kiln_fa90::Smem<D>::bytes: Q, three stages of K and V tiles of 128
/// keys, six mbarriers, 1024 bytes of alignment slack.
inline int hopperAttentionSharedBytes(int64_t headDim) {
  const int64_t tile = 128 * headDim * 2;
  return static_cast<int>(hopperAttentionRows(headDim) * headDim * 2 + 3 * 2 * tile + 6 * 8 + 1024);
}
/// One block per 64 NC query rows of every (batch, head).
inline int64_t hopperAttentionBlocks(int64_t batch, int64_t heads, int64_t seq, int64_t headDim) {
  const int64_t rows = hopperAttentionRows(headDim);
  return (seq + rows - 1) / rows * batch * heads;
}

/// The backward (lib/Codegen/cuda/FlashAttention90Backward.cuh), three
/// launches per attention backward: "kiln_fa90_bwd_prep_bf16_d64" (D =
/// rowsum(dO * O), the fp32 dQ accumulator zeroed; parameters o, dO, D,
/// dQacc, int64 rows = B H Sq), "kiln_fa90_bwd_bf16_d64" (q, k, v, dO, lse,
/// D, dQacc, dK, dV, then int64 B, H, Hkv, Sq, L, the scale's float bits,
/// causal) and "kiln_fa90_bwd_finish_bf16" (dQacc, dQ, the scale's float
/// bits, int64 n = B H Sq D). lse is the forward's row log-sum-exp; Sq a
/// multiple of 4.
inline std::string hopperAttentionBackwardKernel(DType dtype, int64_t headDim,
                                                 const char *part = "") {
  return std::string("kiln_fa90_bwd_") + part + (dtype == DType::BF16 ? "bf16" : "f16") +
         "_d" + std::to_string(headDim);
}
inline std::string hopperAttentionFinishKernel(DType dtype) {
  return std::string("kiln_fa90_bwd_finish_") + (dtype == DType::BF16 ? "bf16" : "f16");
}
/// A producer and two consumer warpgroups (64 keys each).
inline constexpr int kHopperAttentionBackwardThreads = 384;
/// Keys of one backward block, query rows of one of its steps.
inline constexpr int64_t kHopperAttentionBackwardKeys = 128, kHopperAttentionBackwardRows = 64;
/// kiln_fa90::bwd::Smem<D>::bytes: K and V (128 keys), two dS tiles
/// (64 x 64), double-buffered, two stages of Q, dO (64 rows), lse and D, five mbarriers,
/// 1024 bytes of alignment slack.
inline int hopperAttentionBackwardSharedBytes(int64_t headDim) {
  const int64_t kv = kHopperAttentionBackwardKeys * headDim * 2,
                rows = kHopperAttentionBackwardRows;
  return static_cast<int>(2 * kv + 4 * 64 * rows * 2 + 2 * (2 * rows * headDim * 2 + 2 * rows * 4) +
                          5 * 8 + 1024);
}
/// One block per 128 keys of every (batch, kv head).
inline int64_t hopperAttentionBackwardBlocks(int64_t batch, int64_t kvHeads, int64_t kvSeq) {
  return (kvSeq + kHopperAttentionBackwardKeys - 1) / kHopperAttentionBackwardKeys * batch *
         kvHeads;
}
/// Whether the backward takes the shape (beyond hopperAttentionFits).
inline bool hopperAttentionBackwardFits(int64_t seq) { return seq % 4 == 0; }

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_HOPPERATTENTION_H
