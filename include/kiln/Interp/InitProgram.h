//===- InitProgram.h - Run @kiln_init on the host ---------------*- C++ -*-===//
//
// The step reads parameters the checkpoint lacks (LoRA adapters, NF4 codes)
// from the init program's results. The interpreter runs that program once
// over the checkpoint and serves its results ahead of the checkpoint.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_INTERP_INITPROGRAM_H
#define KILN_INTERP_INITPROGRAM_H

#include "kiln/Interp/Interpreter.h"

#include <map>
#include <string>

namespace mlir {
class ModuleOp;
} // namespace mlir

namespace kiln {

/// Serves `tensors` by name, then whatever `base` has.
class OverlayWeightSource : public WeightSource {
public:
  explicit OverlayWeightSource(WeightSource &base) : base(base) {}
  absl::StatusOr<HostTensor> load(llvm::StringRef name) override;
  std::map<std::string, HostTensor, std::less<>> tensors;

private:
  WeightSource &base;
};

/// Runs the module's `@kiln_init` (if any) with `seed`, reading checkpoint
/// weights from `weights`, and adds its results to `weights.tensors`.
absl::Status runInitProgram(mlir::ModuleOp module, uint64_t seed, OverlayWeightSource &weights);

} // namespace kiln

#endif // KILN_INTERP_INITPROGRAM_H
