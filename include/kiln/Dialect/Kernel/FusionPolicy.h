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

} // namespace kiln::kernel

#endif // KILN_DIALECT_KERNEL_FUSIONPOLICY_H
