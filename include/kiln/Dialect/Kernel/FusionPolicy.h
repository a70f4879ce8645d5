//===- FusionPolicy.h - Fusion decisions beyond op classes ------*- C++ -*-===//
//
// What kiln-fuse and kiln-lower-to-step decide together beyond the op
// classes (OpClassification.h): which reductions and bias adds become part
// of a GEMM.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KERNEL_FUSIONPOLICY_H
#define KILN_DIALECT_KERNEL_FUSIONPOLICY_H

#include "kiln/Dialect/Kernel/OpClassification.h"

#include <optional>

namespace kiln::kernel {

/// A `reduce_sum` over the batch dims of a weight-gradient
/// `matmul {transpose_a}` ([B..., S, K]^T x [B..., S, N]): one GEMM with
/// k = B*S computes both, so the sum is part of the GEMM. Returns the
/// matmul, or null.
mlir::Operation *gemmOfBatchSum(mlir::Operation *reduceSum);

/// cuBLASLt's bias epilogues: `matmul` whose only use adds a rank-1 bias of
/// the output width, optionally followed (as the add's only use) by relu or
/// tanh-GELU — cuBLASLt's GELU is the tanh form. Only for GEMMs without a
/// batch (2-D operands or a shared right operand folded into m).
struct GemmEpilogue {
  mlir::Operation *matmul = nullptr;
  mlir::Value bias;
  mlir::Operation *last = nullptr; // the add or the activation
  Epilogue kind = Epilogue::none;
};
/// The epilogue chain `op` (a matmul, its bias add or the activation)
/// belongs to, if any.
std::optional<GemmEpilogue> gemmEpilogueOf(mlir::Operation *op);

/// The value of a scalar float constant (one element; through a cast, as
/// the cast rounds it), if `v` is one.
std::optional<double> scalarFactor(mlir::Value v);

/// `mul(v, s)` with a scalar constant s whose every use is a matmul
/// operand: the GEMMs take s as alpha and read v.
bool isFoldedScale(mlir::Operation *op);
/// (v, s) of such a folded scale, if `op` is one.
std::optional<std::pair<mlir::Value, double>> foldedScaleOf(mlir::Operation *op);

/// `add(into, [mul(] matmul [, s)])` of one type, the matmul (and the
/// scale) used only there and `into` used only there, produced by a kernel,
/// a GEMM or another such sum (not a parameter, constant or view): one GEMM
/// with alpha = s and beta = 1 writing into `into`'s buffer.
///
/// When both terms are products, the one with the smaller static k writes C
/// and the other accumulates: a GEMM with a small k (a LoRA up projection,
/// k = r) costs the traffic of C, which beta = 1 doubles, while a large-k
/// GEMM reads C in its epilogue behind its math. `into` may then be a
/// scaled product `mul(matmul, s)` itself (`intoScale`): its GEMM writes C
/// with alpha = `intoAlpha`.
struct GemmAccumulate {
  mlir::Operation *add = nullptr;
  mlir::Operation *matmul = nullptr;
  mlir::Operation *scale = nullptr; // the mul, or null
  mlir::Value into;
  double alpha = 1;
  mlir::Operation *intoScale = nullptr; // mul(into's matmul, s), or null
  double intoAlpha = 1;
};
/// The accumulation `op` (the add, the matmul, the scale or the into scale)
/// belongs to.
std::optional<GemmAccumulate> gemmAccumulateOf(mlir::Operation *op);

/// The scaled product that `mm` computes as the C of an accumulation
/// (GemmAccumulate::intoScale), if any: its GEMM has alpha = that scale.
std::optional<GemmAccumulate> gemmAccumulateIntoOf(mlir::Operation *mm);

/// A kernel without inputs (a scalar constant's cast) read only as scales
/// that GEMMs take as alpha: kiln-lower-to-step launches nothing for it.
bool onlyFeedsAlpha(mlir::Operation *fusion);

} // namespace kiln::kernel

#endif // KILN_DIALECT_KERNEL_FUSIONPOLICY_H
