//===- KernelPipeline.cpp - The step program and the registrations --------===//
//
// Fusion and lowering run after the graph-level step is final (guards,
// buckets): every function of the module, the init program and the shape
// buckets included, becomes a step program.
//
//===----------------------------------------------------------------------===//

#include "kiln/Pipelines/Pipelines.h"

#include "kiln/Dialect/Kernel/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

namespace kiln {

void buildKernelPipeline(OpPassManager &pm, const PipelineOptions &options) {
  pm.addNestedPass<func::FuncOp>(kernel::createFusePass());
  if (options.fuseOnly)
    return;
  pm.addPass(kernel::createLowerToStepPass());
  pm.addNestedPass<func::FuncOp>(kernel::createUpdateInPlacePass());
  if (options.rowDot)
    pm.addPass(kernel::createRowDotPass(
        {options.rowDotMinK, options.rowDotMaxInputs, options.rowDotPrefetch}));
  pm.addPass(kernel::createDedupeKernelsPass());
}

void registerPipelines() {
  PassPipelineRegistration<PipelineOptions>(
      "kiln-import-cleanup-pipeline",
      "What kiln import runs on the graph it built: canonicalize, "
      "raise-composites, cse",
      buildImportCleanupPipeline);
  PassPipelineRegistration<PipelineOptions>(
      "kiln-train-step-pipeline",
      "kiln compile's graph-level pipeline (--emit=step-mlir; until=grads, "
      "until=forward for the earlier --emit values): trainable set, LoRA, "
      "precision, NF4, autodiff, optimizer step, remat, shape guards",
      buildTrainStepPipeline);
  PassPipelineRegistration<PipelineOptions>(
      "kiln-kernel-pipeline",
      "kiln compile's kernel-level pipeline (--emit=kernel-mlir; fuse-only "
      "for --emit=fused-mlir): kiln-fuse, kiln-lower-to-step, "
      "kiln-update-in-place, kiln-dedupe-kernels",
      buildKernelPipeline);
}

} // namespace kiln
