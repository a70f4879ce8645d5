//===- PaddedWeights.h - Frozen weights with the adapter's blocks ---------===//
//
// K-concatenation's frozen weights (docs/design/lora-k-concat.md, piece 4):
// kiln-lower-to-step gives a frozen weight read by `[W ; s B^T]` and
// `[W | A^T]` one persistent buffer with room for both, and lowers each such
// concatenation to a kernel that writes only the adapter's block. Frozen
// weights concatenated side by side (kiln-lora-k-concat's group-frozen:
// `[Wq | Wk | Wv | A^T]`) share one such buffer.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KERNEL_PADDEDWEIGHTS_H
#define KILN_DIALECT_KERNEL_PADDEDWEIGHTS_H

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Kernel/KernelDialect.h"

#include <optional>

namespace kiln::kernel {

/// A loop fusion yielding `concat(W..., X)` along axis 0 or 1 of a static
/// 2-D float tensor: one or more frozen `kiln.parameter`s W (the members,
/// side by side along the axis) that the body reads only there, and X
/// computed pointwise (nothing initializes it), last; or `concat(concat(W...),
/// X)`, the members side by side across the axis and X beside all of them.
struct WeightConcat {
  FusionOp fusion;
  kiln::ParameterOp weight; ///< the first member
  kiln::ConcatOp concat;
  unsigned weightArg = 0; ///< the first member's block argument
  int64_t axis = 0;
  llvm::SmallVector<kiln::ParameterOp, 1> members;
  llvm::SmallVector<unsigned, 1> memberArgs;
  /// Where the members stand side by side across `axis` (`[W_1 .. W_n ;
  /// X]`), their concatenation; the axis they stand along.
  kiln::ConcatOp inner;
  int64_t memberAxis = 0;
  /// X: the concat's last operand.
  mlir::Value adapter() const { return concat->getOperand(concat->getNumOperands() - 1); }
};

std::optional<WeightConcat> weightConcatOf(FusionOp fusion);

/// Appends the fusion's body less W to `body` (new arguments for its
/// inputs, appended to `inputs`: the fusion inputs they stand for) and
/// returns X's value there; yields nothing, so that several adapters'
/// blocks can share one kernel body.
mlir::Value appendAdapterBlock(WeightConcat concat, mlir::Block &body,
                               llvm::SmallVectorImpl<mlir::Value> &inputs);

} // namespace kiln::kernel

#endif
