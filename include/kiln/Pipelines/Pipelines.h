//===- Pipelines.h - The pass pipelines of kiln import / compile -*- C++ -*-===//
//
// The passes `kiln import` and `kiln compile` run, in one place, built from
// one options struct: the import clean-up, the train-step pipeline (graph
// dialect: select-trainable ... guards) and the kernel pipeline (fusion,
// lowering to the step program, in-place updates, shared kernels). Registered for kiln-opt
// as --kiln-import-cleanup-pipeline, --kiln-train-step-pipeline and
// --kiln-kernel-pipeline, so kiln-opt reproduces what kiln compile runs.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_PIPELINES_PIPELINES_H
#define KILN_PIPELINES_PIPELINES_H

#include "kiln/Dialect/Graph/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <string>

namespace kiln {

/// Every choice kiln compile makes about the passes it runs. The spec
/// options (optimizer, lora) are the CLI's strings; verifyPipelineOptions
/// checks them.
struct PipelineOptions : mlir::PassPipelineOptions<PipelineOptions> {
  // Import clean-up.
  Option<bool> raiseComposites{*this, "raise-composites",
                               llvm::cl::desc("Rebuild RMSNorm, SiLU and attention from their "
                                              "decomposed spelling"),
                               llvm::cl::init(true)};

  // Train step.
  Option<std::string> until{*this, "until",
                            llvm::cl::desc("Where the train-step pipeline stops: forward (the "
                                           "graph with the trainable set marked), grads "
                                           "(loss and gradients) or step (the optimizer step)"),
                            llvm::cl::init("step")};
  Option<std::string> staticSymbols{*this, "static",
                                    llvm::cl::desc("Pin symbols to values: batch=4")};
  Option<std::string> train{*this, "train",
                            llvm::cl::desc("Parameters that train: all, none or a regex; empty: "
                                           "all, or only the adapters with lora")};
  Option<std::string> lora{*this, "lora",
                           llvm::cl::desc("LoRA adapters: r=16,alpha=32,dropout=0.05,"
                                          "targets=q_proj,v_proj (or targets_regex=REGEX, "
                                          "last); as kiln compile --lora")};
  Option<std::string> loraSkip{*this, "lora-skip",
                               llvm::cl::desc("Regex of weights that get no adapter")};
  Option<bool> loraKConcat{*this, "lora-k-concat",
                           llvm::cl::desc("With lora: each adapter's product summed with its "
                                          "frozen GEMM as one GEMM over concatenated K "
                                          "(kiln compile turns it on with --lora unless "
                                          "--quant; here it is asked for)")};
  Option<bool> loraGroupFrozen{*this, "lora-group-frozen",
                               llvm::cl::desc("With lora-k-concat: a sum's frozen products over "
                                              "the same rows (q/k/v's, gate/up's input "
                                              "gradients) join the same GEMM")};
  Option<std::string> loraGroupGrads{
      *this, "lora-group-grads",
      llvm::cl::desc("With lora-group-frozen: a group's dT and dB as one GEMM each over "
                     "[dq | dk | dv] (kiln-lora-group-grads): off, narrow (groups with a "
                     "piece at most 1024 wide) or all"),
      llvm::cl::init("off")};
  Option<std::string> precision{*this, "precision", llvm::cl::desc("fp32 or bf16"),
                                llvm::cl::init("fp32")};
  ListOption<std::string> fp32Ops{*this, "fp32-ops",
                                  llvm::cl::desc("With precision=bf16: ops kept in fp32")};
  Option<std::string> quant{*this, "quant", llvm::cl::desc("Frozen linear weights as: nf4")};
  Option<bool> doubleQuant{*this, "double-quant",
                           llvm::cl::desc("With quant=nf4: 8-bit absmax codes")};
  Option<std::string> quantSkip{*this, "quant-skip",
                                llvm::cl::desc("Regex of weights quant leaves alone")};
  Option<int64_t> gradAccum{*this, "grad-accum", llvm::cl::desc("Micro-batches per step"),
                            llvm::cl::init(1)};
  Option<bool> fuseLinearCe{*this, "fuse-linear-ce",
                            llvm::cl::desc("LM head matmul + cross entropy as one op chunked over "
                                           "tokens (kiln-fuse-linear-cross-entropy)"),
                            llvm::cl::init(true)};
  Option<bool> normGradFromOutput{
      *this, "norm-grad-from-output",
      llvm::cl::desc("RMSNorm gradients from the kept scaled output and a saved rstd, not the "
                     "norm's input (kiln-norm-grad-from-output)"),
      llvm::cl::init(true)};
  Option<int64_t> ceChunkTokens{*this, "ce-chunk-tokens",
                                llvm::cl::desc("Tokens per chunk of the fused LM head (0: the "
                                               "largest power of two up to 4096 whose chunk, "
                                               "bf16 or fp32 as kept, fits 256 MiB)"),
                                llvm::cl::init(0)};
  Option<bool> rowDotPrefetch{*this, "row-dot-prefetch",
                              llvm::cl::desc("kiln-row-dot: load each step's inputs during "
                                             "the step before"),
                              llvm::cl::init(false)};
  Option<bool> ceBf16Logits{*this, "ce-bf16-logits",
                            llvm::cl::desc("The fused LM head's logits chunk in bf16 where the "
                                           "head matmul yields bf16 (fp32 statistics)"),
                            llvm::cl::init(true)};
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("adamw[:lr=,weight_decay=,betas=B1/B2,eps=] or "
                                               "sgd[:lr=,momentum=,dampening=,nesterov=0|1,"
                                               "weight_decay=]"),
                                llvm::cl::init("adamw")};
  Option<double> clipGradNorm{*this, "clip-grad-norm",
                              llvm::cl::desc("Global gradient L2 norm limit (0: off)"),
                              llvm::cl::init(0.0)};
  Option<double> dataParallel{*this, "data-parallel",
                              llvm::cl::desc("Average gradients and the loss over data-parallel "
                                             "ranks in gradient buckets of at most this many MiB "
                                             "(0: off; kiln compile --data-parallel: 25)"),
                              llvm::cl::init(0.0)};
  Option<bool> loopPrograms{*this, "loop-programs",
                            llvm::cl::desc("Also build the run-time loop's programs: "
                                           "@main__accum, @main__apply and @main__eval "
                                           "(kiln-loop-programs), and the gradient norm as a "
                                           "result of the step and of apply")};
  Option<std::string> attentionLayout{
      *this, "attention-layout",
      llvm::cl::desc("Layout attention reads and writes: bhsd ([B, H, S, D], with the "
                     "transposes) or bshd (kiln-attention-layout folds them into the op; "
                     "default)"),
      llvm::cl::init("bshd")};
  Option<std::string> rematBudget{*this, "remat-budget",
                                  llvm::cl::desc("kiln-remat's budget: none, pointwise, "
                                                 "auto, min or GiB (kiln compile: pointwise)"),
                                  llvm::cl::init("none")};
  Option<std::string> rematSymbols{*this, "remat-symbols",
                                   llvm::cl::desc("Symbol values kiln-remat plans at: batch=4")};
  Option<std::string> dynamic{*this, "dynamic",
                              llvm::cl::desc("Symbol ranges recorded as guards: "
                                             "batch=1..64,seq=16..8192:8")};
  Option<std::string> buckets{*this, "buckets",
                              llvm::cl::desc("Shape buckets, ';' between symbols: "
                                             "seq=512,1024;batch=8")};

  // Kernel pipeline.
  Option<bool> rowDot{*this, "row-dot",
                      llvm::cl::desc("kiln-row-dot: thin GEMMs of a loop kernel's rows "
                                     "computed in that kernel"),
                      llvm::cl::init(false)};
  Option<int64_t> rowDotMinK{*this, "row-dot-min-k",
                             llvm::cl::desc("kiln-row-dot: only rows at least this wide"),
                             llvm::cl::init(256)};
  Option<int64_t> rowDotMaxInputs{
      *this, "row-dot-max-inputs",
      llvm::cl::desc("kiln-row-dot: only kernels reading at most this many full-width inputs "
                     "(0: any)"),
      llvm::cl::init(0)};
  Option<bool> fuseOnly{*this, "fuse-only",
                        llvm::cl::desc("Stop after kiln-fuse (kiln compile --emit=fused-mlir)")};

  /// Parses as PassOptions does, then verifies (verifyPipelineOptions):
  /// PassPipelineRegistration calls this on the concrete type, so kiln-opt
  /// rejects a bad optimizer or LoRA spec with its message.
  mlir::LogicalResult parseFromString(llvm::StringRef options,
                                      llvm::raw_ostream &errorStream = llvm::errs());
};

/// The pass options the CLI specs stand for; errors are one line naming the
/// bad setting.
mlir::FailureOr<TrainStepPassOptions> parseOptimizerSpec(llvm::StringRef spec, double clipGradNorm,
                                                         std::string &error);
mlir::FailureOr<LoraPassOptions> parseLoraSpec(llvm::StringRef spec, llvm::StringRef skip,
                                               std::string &error);

/// Checks what the passes do not check themselves: the specs, `until`, a
/// quantization scheme and remat without a backward pass. `error` receives
/// the first problem.
mlir::LogicalResult verifyPipelineOptions(const PipelineOptions &options, std::string &error);

/// canonicalize, raise-composites + canonicalize (optional), cse: what the
/// ONNX importer runs on what it built.
void buildImportCleanupPipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

/// specialize-symbols, select-trainable, lora, precision, quantize-nf4,
/// fuse-linear-cross-entropy, autodiff, grad-accum, data-parallel, loop-programs (optional),
/// train-step,
/// canonicalize + cse, remat,
/// verify-shapes, shape-guards, shape-buckets: the graph-level step, as far
/// as `until`. The options must verify.
void buildTrainStepPipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

/// kiln-fuse, kiln-lower-to-step, kiln-update-in-place,
/// kiln-dedupe-kernels: the step program the runtime interprets, one kernel
/// per distinct body (only the fusion with fuseOnly).
void buildKernelPipeline(mlir::OpPassManager &pm, const PipelineOptions &options);

/// Registers the three pipelines with MLIR's pass registry (kiln-opt).
void registerPipelines();

} // namespace kiln

#endif // KILN_PIPELINES_PIPELINES_H
