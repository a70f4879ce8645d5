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
// H, Hkv, Sq, L, the scale's float bits, causal (0/1). Row-major
// [B, H, Sq, D] and [B, Hkv, L, D] tensors, 16-byte aligned, or, for the
// tensors a kernel's layout names (kiln-attention-layout's seq_major
// operands), [B, Sq, H, D] and [B, L, Hkv, D]: one kernel per layout the
// step has, named by it (hopperAttentionLayoutSuffix).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_HOPPERATTENTION_H
#define KILN_ARTIFACT_HOPPERATTENTION_H

#include "kiln/artifact/DType.h"

#include <cstdint>
#include <string>

namespace kiln::artifact {

inline constexpr const char *kHopperAttentionModule = "kiln_fa90";

/// The tensors of an attention op stored [B, S, H, D] rather than
/// [B, H, S, D]: bits of a layout, as kiln_fa90::LayoutBit (the module's
/// source static_asserts the two agree) and the step program's `seq_major`
/// roles (docs/artifact.md).
enum AttentionLayoutBit : unsigned {
  kSeqMajorQ = 1,
  kSeqMajorK = 2,
  kSeqMajorV = 4,
  kSeqMajorO = 8,
  kSeqMajorDout = 16,
  kSeqMajorDq = 32,
  kSeqMajorDk = 64,
  kSeqMajorDv = 128,
};
/// The roles' names in bit order ("q", "k", "v", "o", "do", "dq", "dk", "dv").
inline const char *attentionRoleName(unsigned bitIndex) {
  static const char *const names[] = {"q", "k", "v", "o", "do", "dq", "dk", "dv"};
  return bitIndex < 8 ? names[bitIndex] : "";
}
/// The layout bits each kernel depends on: the forward reads q, k, v and
/// writes o; the backward's prepare reads o and dO; its main kernel reads
/// q, k, v, dO and writes dQ (its fp32 accumulator, in dQ's layout), dK,
/// dV; finish is elementwise (no bits).
inline constexpr unsigned kHopperForwardLayoutBits =
    kSeqMajorQ | kSeqMajorK | kSeqMajorV | kSeqMajorO;
inline constexpr unsigned kHopperPrepareLayoutBits = kSeqMajorO | kSeqMajorDout;
inline constexpr unsigned kHopperBackwardLayoutBits =
    kSeqMajorQ | kSeqMajorK | kSeqMajorV | kSeqMajorDout | kSeqMajorDq | kSeqMajorDk | kSeqMajorDv;
/// "" for dense tensors, else "_bshd" and the seq-major roles:
/// "_bshd_v_o" (layout kSeqMajorV | kSeqMajorO).
inline std::string hopperAttentionLayoutSuffix(unsigned layout) {
  if (!layout)
    return "";
  std::string suffix = "_bshd";
  for (unsigned bit = 0; bit < 8; ++bit)
    if (layout & (1u << bit))
      suffix += std::string("_") + attentionRoleName(bit);
  return suffix;
}

/// Whether the module has a forward for \p dtype at head dim \p headDim.
/// bf16 only: the template compiles for f16 too (FlashAttention90Test), but
/// its numerics are checked on the GPU for bf16 alone so far.
inline bool hopperAttentionFits(DType dtype, int64_t headDim) {
  return dtype == DType::BF16 && (headDim == 64 || headDim == 128);
}
/// "kiln_fa90_fwd_bf16_d64"; with seq-major tensors (\p layout, of which
/// the forward's bits count) "kiln_fa90_fwd_bf16_d64_bshd_v_o".
inline std::string hopperAttentionKernel(DType dtype, int64_t headDim, unsigned layout = 0) {
  return std::string("kiln_fa90_fwd_") + (dtype == DType::BF16 ? "bf16" : "f16") + "_d" +
         std::to_string(headDim) + hopperAttentionLayoutSuffix(layout & kHopperForwardLayoutBits);
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
/// multiple of 4. With seq-major tensors (\p layout) prepare and main are
/// named by the bits each reads ("kiln_fa90_bwd_prep_bf16_d64_bshd_o_do",
/// "kiln_fa90_bwd_bf16_d64_bshd_v_do_dv"); a seq-major prepare takes int64
/// H and Sq after rows. The fp32 dQ accumulator has dQ's layout.
inline std::string hopperAttentionBackwardKernel(DType dtype, int64_t headDim,
                                                 const char *part = "", unsigned layout = 0) {
  unsigned bits =
      std::string(part) == "prep_" ? kHopperPrepareLayoutBits : kHopperBackwardLayoutBits;
  return std::string("kiln_fa90_bwd_") + part + (dtype == DType::BF16 ? "bf16" : "f16") + "_d" +
         std::to_string(headDim) + hopperAttentionLayoutSuffix(layout & bits);
}
inline std::string hopperAttentionFinishKernel(DType dtype) {
  return std::string("kiln_fa90_bwd_finish_") + (dtype == DType::BF16 ? "bf16" : "f16");
}
/// A producer and two consumer warpgroups (64 keys each).
inline constexpr int kHopperAttentionBackwardThreads = 384;
/// Keys of one backward block, query rows of one of its steps.
inline constexpr int64_t kHopperAttentionBackwardKeys = 128, kHopperAttentionBackwardRows = 64;
/// kiln_fa90::bwd::Smem<D>::bytes: K and V (128 keys), two dS tiles
/// (64 x 64), double-buffered, two stages of Q, dO (64 rows), lse and D, a
/// dQ staging tile per consumer warp (8 x 16 rows x 72 floats: kDqWarp),
/// five mbarriers, 1024 bytes of alignment slack.
inline int hopperAttentionBackwardSharedBytes(int64_t headDim) {
  const int64_t kv = kHopperAttentionBackwardKeys * headDim * 2,
                rows = kHopperAttentionBackwardRows;
  return static_cast<int>(2 * kv + 4 * 64 * rows * 2 + 2 * (2 * rows * headDim * 2 + 2 * rows * 4) +
                          8 * 16 * 72 * 4 + 5 * 8 + 1024);
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
