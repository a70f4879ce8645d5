//===- PaddedWeights.h - Frozen weights with the adapter's blocks ---------===//
//
// K-concatenation's frozen weights (docs/design/lora-k-concat.md, piece 4):
// kiln-lower-to-step gives a frozen weight read by `[W ; s B^T]` and
// `[W | A^T]` one persistent buffer with room for both, and lowers each such
// concatenation to a kernel that writes only the adapter's block.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KERNEL_PADDEDWEIGHTS_H
#define KILN_DIALECT_KERNEL_PADDEDWEIGHTS_H

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Kernel/KernelDialect.h"

#include <optional>

namespace kiln::kernel {

/// A loop fusion yielding `concat(W, X)` along axis 0 or 1 of a static 2-D
/// float tensor, W a frozen `kiln.parameter` that the body reads only
/// there and X computed pointwise (nothing initializes it).
struct WeightConcat {
  FusionOp fusion;
  kiln::ParameterOp weight;
  kiln::ConcatOp concat;
  unsigned weightArg = 0; ///< W's block argument
  int64_t axis = 0;
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
