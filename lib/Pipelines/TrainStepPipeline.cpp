//===- TrainStepPipeline.cpp - Import clean-up and the graph-level step ---===//
//
// The order matters: LoRA before precision (adapters stay fp32), NF4 after
// (it stores the frozen weights precision left), CSE before kiln-remat (CSE
// would merge the recomputed clones back), the guards last (they record the
// final step's assumptions), buckets after them (each copy keeps them).
//
//===----------------------------------------------------------------------===//

#include "kiln/Pipelines/Pipelines.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/ErrorHandling.h"

using namespace mlir;

namespace kiln {

void buildImportCleanupPipeline(OpPassManager &pm, const PipelineOptions &options) {
  // Drops what import-time folding left dead (constants only shapes used).
  pm.addPass(createCanonicalizerPass());
  if (options.raiseComposites) {
    pm.addNestedPass<func::FuncOp>(createRaiseCompositesPass());
    pm.addPass(createCanonicalizerPass());
  }
  pm.addPass(createCSEPass());
}

void buildTrainStepPipeline(OpPassManager &pm, const PipelineOptions &options) {
  std::string error;
  FailureOr<TrainStepPassOptions> optimizer = failure();
  if (options.until == "step")
    optimizer = parseOptimizerSpec(options.optimizer, options.clipGradNorm, error);
  FailureOr<LoraPassOptions> lora = failure();
  if (!options.lora.empty())
    lora = parseLoraSpec(options.lora, options.loraSkip, error);
  if (!error.empty()) // A caller that skipped verifyPipelineOptions.
    llvm::report_fatal_error(llvm::Twine("kiln-train-step-pipeline: ") + error);

  if (!options.staticSymbols.empty()) {
    SpecializeSymbolsPassOptions specialize;
    specialize.values = options.staticSymbols;
    pm.addPass(createSpecializeSymbolsPass(specialize));
  }
  SelectTrainablePassOptions trainable;
  // PEFT's default: with adapters and no explicit choice, only they train.
  trainable.train = !options.train.empty() ? std::string(options.train)
                    : succeeded(lora)      ? "none"
                                           : "all";
  pm.addNestedPass<func::FuncOp>(createSelectTrainablePass(trainable));
  if (succeeded(lora))
    pm.addPass(createLoraPass(*lora));
  if (options.precision != "fp32") {
    PrecisionPassOptions precision;
    precision.compute = options.precision;
    precision.fp32Ops = options.fp32Ops; // the pass copies the list
    pm.addNestedPass<func::FuncOp>(createPrecisionPass(precision));
  }
  if (!options.quant.empty()) {
    QuantizeNf4PassOptions nf4;
    nf4.skip = options.quantSkip;
    nf4.doubleQuant = options.doubleQuant;
    pm.addPass(createQuantizeNf4Pass(nf4));
  }
  // Before autodiff, so that the backward of the shared down projection is
  // one GEMM per group too.
  if (succeeded(lora))
    pm.addNestedPass<func::FuncOp>(createLoraConcatPass());
  bool backward = options.until != "forward";
  if (backward && options.fuseLinearCe) {
    FuseLinearCrossEntropyPassOptions fused;
    fused.chunkTokens = options.ceChunkTokens;
    fused.bf16Logits = options.ceBf16Logits;
    pm.addNestedPass<func::FuncOp>(createFuseLinearCrossEntropyPass(fused));
  }
  if (backward) {
    pm.addNestedPass<func::FuncOp>(createAutodiffPass());
    GradAccumPassOptions accumulate;
    accumulate.microBatches = options.gradAccum;
    pm.addNestedPass<func::FuncOp>(createGradAccumPass(accumulate));
    // Between backward and optimizer: clipping and the update see the mean.
    if (options.dataParallel > 0) {
      DataParallelPassOptions dataParallel;
      dataParallel.bucketMb = options.dataParallel;
      pm.addNestedPass<func::FuncOp>(createDataParallelPass(dataParallel));
    }
  }
  if (options.loopPrograms && succeeded(optimizer)) {
    pm.addPass(createLoopProgramsPass());
    optimizer->gradNorm = true;
  }
  if (succeeded(optimizer))
    pm.addNestedPass<func::FuncOp>(createTrainStepPass(*optimizer));
  if (backward) {
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
    // On the whole step: the input gradients are sums only after autodiff.
    if (options.loraKConcat && succeeded(lora)) {
      LoraKConcatPassOptions kconcat;
      kconcat.groupFrozen = options.loraGroupFrozen;
      pm.addNestedPass<func::FuncOp>(createLoraKConcatPass(kconcat));
      if (options.loraGroupGrads != "off") {
        LoraGroupGradsPassOptions grads;
        grads.allGroups = options.loraGroupGrads == "all";
        pm.addNestedPass<func::FuncOp>(createLoraGroupGradsPass(grads));
      }
    }
    // After CSE, which would merge the clones back.
    if (!options.quant.empty())
      pm.addNestedPass<func::FuncOp>(createRecomputeDequantizedPass());
    // Before remat, which then no longer keeps the norms' inputs for them.
    if (options.normGradFromOutput)
      pm.addNestedPass<func::FuncOp>(createNormGradFromOutputPass());
  }
  if (options.rematBudget != "none") {
    RematerializePassOptions remat;
    remat.budget = options.rematBudget;
    remat.symbols = options.rematSymbols;
    pm.addNestedPass<func::FuncOp>(createRematerializePass(remat));
  }
  // After remat: its clones of an attention fold their transposes too.
  if (options.attentionLayout == "bshd")
    pm.addNestedPass<func::FuncOp>(createAttentionLayoutPass());
  // Every later stage sizes things from the dims: none may be unknown.
  pm.addNestedPass<func::FuncOp>(createVerifyShapesPass());
  ShapeGuardsPassOptions guards;
  guards.dynamic = options.dynamic;
  pm.addNestedPass<func::FuncOp>(createShapeGuardsPass(guards));
  if (!options.buckets.empty()) {
    ShapeBucketsPassOptions buckets;
    buckets.buckets = options.buckets;
    pm.addPass(createShapeBucketsPass(buckets));
  }
}

} // namespace kiln
