//===- CompileCommand.cpp - kiln compile ----------------------------------===//
//
// Imports (or parses) a model, turns the flags into the pipelines' options
// (lib/Pipelines), runs the train-step pipeline up to what --emit asks for,
// then the kernel pipeline, and emits.
//
//===----------------------------------------------------------------------===//

#include "CudaOutput.h"
#include "Driver.h"
#include "Progress.h"

#include "kiln/ArtifactEmit/Sections.h"
#include "kiln/Codegen/Nvrtc.h"
#include "kiln/Dialect/Kernel/Passes.h"
#include "kiln/Pipelines/Pipelines.h"
#include "kiln/artifact/FileIO.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

enum class Emit { ForwardMlir, GradsMlir, StepMlir, Artifact, FusedMlir, KernelMlir, Cuda };

cl::opt<std::string> model(cl::Positional, cl::desc("<model.onnx | IR.mlir>"), cl::Required,
                           cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> train("train",
                           cl::desc("Parameters that train: `all` (every float initializer of rank "
                                    ">= 1) or a regex searched in ONNX initializer names"),
                           cl::init("all"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<Emit> emit("emit", cl::desc("What to produce"),
                   cl::values(clEnumValN(Emit::ForwardMlir, "mlir",
                                         "the forward graph with the trainable set marked"),
                              clEnumValN(Emit::GradsMlir, "grads-mlir",
                                         "a function returning the loss and d loss / d p for "
                                         "every trainable parameter p"),
                              clEnumValN(Emit::StepMlir, "step-mlir",
                                         "train_step(inputs, params, optimizer state, lr, "
                                         "step) -> (loss, new params, new state)"),
                              clEnumValN(Emit::Artifact, "artifact",
                                         "the training step as a .kiln artifact (-o): meta, "
                                         "guards, parameters, kernel images (--arch), step "
                                         "and init programs"),
                              clEnumValN(Emit::FusedMlir, "fused-mlir",
                                         "the train step with its ops grouped into "
                                         "kiln_kernel.fusion regions"),
                              clEnumValN(Emit::KernelMlir, "kernel-mlir",
                                         "the step program: buffers, kernel launches and "
                                         "cuBLASLt GEMMs"),
                              clEnumValN(Emit::Cuda, "cuda",
                                         "-o DIR: one CUDA C++ source per kernel, NVRTC "
                                         "cubins (--arch) and PTX, step.mlir, manifest.json")),
                   cl::init(Emit::GradsMlir), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> optimizerSpec(
    "optimizer",
    cl::desc("The optimizer of the train step (--emit=step-mlir and what is built from "
             "it: kernel-mlir, cuda, artifact): adamw[:lr=,weight_decay=,betas=B1/B2,eps=] "
             "(PyTorch's defaults: lr=1e-3, weight_decay=0.01, betas=0.9/0.999, eps=1e-8) "
             "or sgd[:lr=,momentum=,dampening=,nesterov=0|1,weight_decay=] (lr=1e-3, "
             "the rest 0)"),
    cl::init("adamw"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string>
    precision("precision",
              cl::desc("fp32, or bf16: bf16 compute with fp32 master weights, fp32 "
                       "optimizer state and fp32 numerics-sensitive ops"),
              cl::init("fp32"), cl::sub(compileCommand()), cl::cat(category()));
cl::list<std::string> fp32Ops("fp32-ops",
                              cl::desc("With --precision=bf16: ops kept in fp32 (default softmax, "
                                       "log_softmax, layer_norm, rms_norm, cross_entropy)"),
                              cl::CommaSeparated, cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string>
    dynamicSymbols("dynamic",
                   cl::desc("Symbol ranges the step must serve: batch=1..64,seq=16..8192:8 "
                            "(MIN..MAX, optional :DIVISOR); recorded as run-time guards"),
                   cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> staticSymbols("static", cl::desc("Pin symbols to values: batch=4"),
                                   cl::sub(compileCommand()), cl::cat(category()));
cl::list<std::string>
    bucketSpecs("buckets",
                cl::desc("Also compile copies specialized for these values of a symbol: "
                         "seq=512,1024,2048 (repeat the flag for more symbols); other "
                         "values run the symbolic step"),
                cl::sub(compileCommand()), cl::cat(category()));
cl::opt<int64_t> gradAccum("grad-accum",
                           cl::desc("Micro-batches per step: gradients are averaged over this many "
                                    "sets of inputs (input_K.pb, micro-batch after micro-batch)"),
                           cl::init(1), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool>
    fuseLinearCe("fuse-linear-ce",
                 cl::desc("Compute the LM head matmul and the cross entropy as one op over "
                          "chunks of tokens: no [tokens x vocab] logits or gradient "
                          "(default true; =false keeps them)"),
                 cl::init(true), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> normGradFromOutput(
    "norm-grad-from-output",
    cl::desc("RMSNorm gradients from the normalized output the backward keeps anyway (divided "
             "by its frozen scale) and a saved rstd per row, so the norms' inputs are not "
             "kept (default true; frozen scales with a zero element are refused at load)"),
    cl::init(true), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<int64_t> ceChunkTokens(
    "ce-chunk-tokens",
    cl::desc("Tokens per chunk of the fused LM head and cross entropy (0: the "
             "largest power of two up to 4096 whose [chunk x vocab] logits, bf16 or fp32 as kept, fit 256 MiB)"),
    cl::init(0), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> ceBf16Logits(
    "ce-bf16-logits",
    cl::desc("With --precision=bf16: the fused LM head keeps its [chunk x vocab] logits in "
             "bf16, as the unfused bf16 graph does (fp32 accumulation and statistics; half "
             "the chunk's bytes, within PyTorch's own bf16 error: docs/benchmarks.md); fp32 steps "
             "keep fp32 logits (default true; =false: an fp32 chunk)"),
    cl::init(true), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<double> clipGradNorm("clip-grad-norm",
                             cl::desc("Scale gradients so their global L2 norm "
                                      "is at most this (0: off)"),
                             cl::init(0.0), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> dataParallel(
    "data-parallel",
    cl::desc("Data-parallel training (kiln-run train --gpus N): the gradients are "
             "averaged over the ranks (NCCL all-reduce) between backward and optimizer, "
             "in buckets of at most bucket-mb MiB (default 25) issued as the backward "
             "produces them; the logged loss is averaged too. --data-parallel or "
             "--data-parallel=bucket-mb=N"),
    cl::ValueOptional, cl::value_desc("bucket-mb=N"), cl::sub(compileCommand()),
    cl::cat(category()));

cl::opt<bool> loopPrograms("loop-programs",
                           cl::desc("Also compile the run-time loop's programs: accumulate a "
                                    "micro-batch's gradients, apply the optimizer to their "
                                    "token-weighted mean, and a forward-only eval (kiln-run train "
                                    "--grad-accum, --eval-data); the step and apply return the "
                                    "gradient norm"),
                           cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> output("o", cl::desc("Write the result here (default: stdout)"),
                            cl::value_desc("file"), cl::init("-"), cl::sub(compileCommand()),
                            cl::cat(category()));
cl::opt<bool> printIrAfterAll("print-ir-after-all",
                              cl::desc("Print the IR after every pass (stderr)"),
                              cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> fullgraph("fullgraph",
                        cl::desc("Fail (exit 4) listing every graph break "
                                 "instead of compiling around them"),
                        cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> explain("explain",
                      cl::desc("Print the graph-break report (as kiln explain) "
                               "and stop"),
                      cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string>
    loraSpec("lora",
             cl::desc("Add LoRA adapters: r=16,alpha=32,dropout=0.05,targets=q_proj,v_proj. "
                      "PEFT's names work too (lora_alpha, lora_dropout, target_modules). "
                      "Defaults: r=16, alpha=8 (PEFT's lora_alpha), dropout=0, targets the "
                      "attention and MLP projections of common models. targets lists module "
                      "names, each matching whole name components as PEFT's target_modules "
                      "(q_proj matches ...self_attn.q_proj.weight); targets_regex=REGEX or "
                      "targets=re:REGEX searches the weight names instead (last: the regex "
                      "runs to the end). Without --train only the adapters train"),
             cl::value_desc("spec"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> loraSkip("lora-skip", cl::desc("Regex of weights that get no adapter"),
                              cl::value_desc("regex"), cl::sub(compileCommand()),
                              cl::cat(category()));
cl::opt<bool> loraKConcat(
    "lora-k-concat",
    cl::desc("With --lora: add each adapter's product to its frozen GEMM as extra K "
             "columns, [x | t] [W ; s B^T] and [dy | dT] [W | A^T]^T, the frozen weight "
             "padded with the adapter's blocks (kiln-lora-k-concat; default: on with "
             "--lora unless --quant; =false: separate LoRA GEMMs)"),
    cl::init(true), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> loraGroupFrozen(
    "lora-group-frozen",
    cl::desc("With --lora-k-concat: a sum's frozen products over the same rows join the "
             "same GEMM too, [dq | dk | dv | dT] [Wq | Wk | Wv | A^T]^T for q/k/v's input "
             "gradient, the frozen weights side by side in one padded buffer "
             "(kiln-lora-k-concat group-frozen; default: on with --lora-k-concat; =false: "
             "one GEMM per frozen weight)"),
    cl::init(true), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> loraGroupGrads(
    "lora-group-grads",
    cl::desc("With --lora-group-frozen: a group's adapter gradients as one GEMM each, dT = "
             "[dq | dk | dv] [Bq ; Bk ; Bv] and dB = [dq | dk | dv]^T T, the pieces written in "
             "place in the input gradient's [dq | dk | dv | dT] (kiln-lora-group-grads): "
             "narrow (default: groups with a piece at most 1024 wide, GQA's q/k/v), all "
             "(gate/up too) or off"),
    cl::init("narrow"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> rowDot(
    "row-dot",
    cl::desc("Thin GEMMs of a vectorized loop kernel's rows (a LoRA adapter's dT = s dy B, "
             "n <= 64) computed in that kernel on tensor cores instead of reading its output "
             "again (kiln-row-dot; default: off, measured slower in the bench step)"),
    cl::init(false), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<int64_t> rowDotMinK(
    "row-dot-min-k",
    cl::desc("With --row-dot: only rows at least this many columns wide (the GEMM's k; "
             "default 256, every row the template takes)"),
    cl::init(256), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<int64_t> rowDotMaxInputs(
    "row-dot-max-inputs",
    cl::desc("With --row-dot: only kernels reading at most this many inputs of their rows' "
             "shape (the SiLU gradient reads 3: gate, up and the output's gradient; default 0: "
             "any)"),
    cl::init(0), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> rowDotPrefetch(
    "row-dot-prefetch",
    cl::desc("With --row-dot: each 256-column step of a row-dot kernel loads the next step's "
             "inputs before its barrier and tensor-core products, so they are in flight "
             "meanwhile (default off: not measured yet)"),
    cl::init(false), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> attentionLayout(
    "attention-layout",
    cl::desc("Layout of attention's q/k/v, output and gradients: bshd (default; "
             "kiln-attention-layout: the op reads and writes the projections' "
             "[B, S, H, D] in place: generated kernels, kiln_fa90 and cuDNN alike; step "
             "program version 5) or bhsd ([B, H, S, D], transposes around it)"),
    cl::value_desc("bshd|bhsd"), cl::init("bshd"), cl::sub(compileCommand()),
    cl::cat(category()));
cl::opt<std::string>
    quant("quant",
          cl::desc("Store frozen linear weights quantized: nf4 (QLoRA's NormalFloat4, "
                   "blocks of 64 with fp32 absmax)"),
          cl::value_desc("scheme"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> doubleQuant("double-quant",
                          cl::desc("With --quant nf4: store the absmax values as 8-bit codes "
                                   "(QLoRA's double quantization, blocks of 256)"),
                          cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> quantSkip("quant-skip", cl::desc("Regex of weights --quant leaves alone"),
                               cl::value_desc("regex"), cl::sub(compileCommand()),
                               cl::cat(category()));
cl::opt<std::string>
    archList("arch",
             cl::desc("GPU archs the kernels are compiled for: the kernel images of "
                      "--emit=artifact, the cubins of --emit=cuda (sm_90,sm_80); PTX of the "
                      "oldest is kept for JIT on newer GPUs; `none` (--emit=cuda) writes "
                      "sources only"),
             cl::init("sm_90"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string>
    kernelCache("kernel-cache",
                cl::desc("NVRTC output cache directory (default $KILN_CACHE_DIR or "
                         "~/.cache/kiln; `none` disables it)"),
                cl::sub(compileCommand()), cl::cat(category()));
cl::list<std::string>
    dumpIrAfter("dump-ir-after",
                cl::desc("Print the IR after these passes (stderr): their arguments, e.g. "
                         "kiln-lora,kiln-fuse (a wrong name is an error listing them)"),
                cl::CommaSeparated, cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool>
    fusionReport("fusion-report",
                 cl::desc("Print kernels and GEMMs per step before and after fusion and the "
                          "bytes the kernels move (stdout), then stop"),
                 cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> reportSizes(
    "report-sizes",
    cl::desc("Symbol values to evaluate --fusion-report's byte counts at: batch=2,seq=16"),
    cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string>
    kernelCheck("kernel-check",
                cl::desc("With --emit=cuda: also write DIR/check/<kernel>/ with random inputs "
                         "and reference outputs at these symbol values (batch=2,seq=16) for "
                         "the runtime's kiln-kernel-check; reference=none writes the cases alone, "
                         "for harnesses that bring their own inputs (bench/attention.py)"),
                cl::sub(compileCommand()), cl::cat(category()));
cl::opt<uint64_t> kernelCheckSeed("kernel-check-seed",
                                  cl::desc("Seed of --kernel-check's inputs (default: fresh)"),
                                  cl::sub(compileCommand()), cl::cat(category()));
cl::opt<int>
    tuneTopK("tune-topk",
             cl::desc("The search space the artifact records for kiln-run tune: cuBLASLt's "
                      "best K algorithms per GEMM (1 to 64, default 8)"),
             cl::init(8), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> printTiming(
    "timing",
    cl::desc("Print the time of the import, every pass, CUDA C++ emission, NVRTC and the "
             "write (stderr)"),
    cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool>
    quiet("quiet",
          cl::desc("No progress lines (a line redrawn on a terminal; in a log, plain lines for "
                   "compiles that run NVRTC) and no final 'wrote FILE' line"),
          cl::sub(compileCommand()), cl::cat(category()));

/// The kernel cache directory --kernel-cache names.
std::string kernelCacheDir() {
  if (kernelCache.empty())
    return codegen::defaultKernelCacheDir();
  return kernelCache == "none" ? std::string() : std::string(kernelCache);
}

} // namespace

namespace {

/// The compile itself; its pass managers, and the timing scopes they nest
/// under, end before runCompile prints the report.
int compileModel(MLIRContext &context, TimingScope &timing) {
  std::string badPass;
  if (tuneTopK < 1 || tuneTopK > 64)
    return fail("--tune-topk must be from 1 to 64, got " + std::to_string(tuneTopK));
  if (failed(checkPassNames(std::vector<std::string>(dumpIrAfter.begin(), dumpIrAfter.end()),
                            "--dump-ir-after", badPass)))
    return fail(badPass);
  // The artifact replaces only a regular file (never a device, a FIFO, a
  // directory, /proc): refused now, not after compiling.
  if (emit == Emit::Artifact && !output.empty() && output != "-")
    if (artifact::Status status = artifact::checkReplaceableFile(output); !status)
      return fail(status.getError());
  bool runsNvrtc = (emit == Emit::Artifact || emit == Emit::Cuda) && archList != "none";
  CompileProgress progress(CompileProgress::choose(quiet, runsNvrtc));
  auto cudaOptions = [&](std::vector<std::string> archs) {
    CudaOutputOptions cuda;
    cuda.archs = std::move(archs);
    cuda.cacheDir = kernelCacheDir();
    cuda.verbose = printTiming;
    cuda.progress = &progress;
    cuda.timing = &timing;
    return cuda;
  };
  std::string weightsPath;
  OwningOpRef<ModuleOp> module;
  {
    TimingScope importTiming = timing.nest("import");
    progress.stage((StringRef(model).ends_with(".mlir") ? "parse " : "import ") + model);
    module = loadModule(context, model, {}, weightsPath);
  }
  if (!module)
    return 1;
  if (!findMain(*module))
    return fail(model + ": no function to compile");
  // A step program (kernel-level IR, e.g. a saved step.mlir) only needs
  // emitting.
  if (!module->getOps<kernel::KernelOp>().empty()) {
    if (emit != Emit::Cuda)
      return fail(model + " is a kernel-level step program: only --emit=cuda applies");
    if (output == "-")
      return fail("--emit=cuda needs -o DIR");
    std::vector<std::string> archs;
    if (archList != "none") {
      Expected<std::vector<std::string>> parsed = codegen::parseArchList(archList);
      if (!parsed)
        return fail(toString(parsed.takeError()));
      archs = *parsed;
    }
    CudaOutputOptions cuda = cudaOptions(archs);
    if (int rc = writeCuda(*module, output, cuda))
      return rc;
    if (!kernelCheck.empty())
      return writeKernelChecks(*module, output, kernelCheck,
                               kernelCheckSeed.getNumOccurrences()
                                   ? std::optional<uint64_t>(kernelCheckSeed)
                                   : std::nullopt);
    return 0;
  }
  if (fullgraph || explain) {
    FailureOr<BreakReport> report = analyzeModel(context, *module, train);
    if (failed(report))
      return 1;
    if (explain) {
      progress.clear();
      printBreakReport(model, *report, outs());
      return 0;
    }
    if (!report->breaks.empty()) {
      errs() << "kiln: error: --fullgraph: " << model << " has " << report->breaks.size()
             << " graph break" << (report->breaks.size() == 1 ? "" : "s") << "\n";
      printBreakReport(model, *report, errs());
      return kGraphBreakExit;
    }
  }

  TimingScope stepTiming = timing.nest("train-step pipeline");
  PassManager pm(&context);
  if (printIrAfterAll || !dumpIrAfter.empty()) {
    context.disableMultithreading();
    std::vector<std::string> only(dumpIrAfter.begin(), dumpIrAfter.end());
    pm.enableIRPrinting(
        /*shouldPrintBeforePass=*/[](Pass *, Operation *) { return false; },
        /*shouldPrintAfterPass=*/
        [only](Pass *pass, Operation *) {
          return only.empty() || llvm::is_contained(only, pass->getArgument().str());
        },
        /*printModuleScope=*/true, /*printAfterOnlyOnChange=*/false);
  }
  bool codegen = emit == Emit::FusedMlir || emit == Emit::KernelMlir || emit == Emit::Cuda ||
                 emit == Emit::Artifact || fusionReport;
  bool buildsStep = emit == Emit::StepMlir || codegen;
  if (emit == Emit::Cuda && output == "-")
    return fail("--emit=cuda needs -o DIR");
  std::vector<std::string> archs;
  if ((emit == Emit::Cuda || emit == Emit::Artifact) && archList != "none") {
    Expected<std::vector<std::string>> parsed = codegen::parseArchList(archList);
    if (!parsed)
      return fail(toString(parsed.takeError()));
    archs = *parsed;
  }
  StringMap<int64_t> sizes;
  if (!reportSizes.empty()) {
    SmallVector<StringRef> entries;
    StringRef(reportSizes).split(entries, ',', -1, false);
    for (StringRef entry : entries) {
      auto [name, value] = entry.split('=');
      int64_t v;
      if (value.trim().getAsInteger(10, v))
        return fail("--report-sizes entry '" + entry + "' needs NAME=INTEGER");
      sizes[name.trim()] = v;
    }
  }
  pm.enableTiming(stepTiming);
  pm.addInstrumentation(progress.instrumentation());
  bool trainStep = buildsStep || emit == Emit::Artifact;
  if (emit == Emit::Artifact && (output.empty() || output == "-"))
    return fail("--emit=artifact needs -o FILE.kiln");
  PipelineOptions options;
  options.until = trainStep ? "step" : emit == Emit::GradsMlir ? "grads" : "forward";
  options.staticSymbols = staticSymbols.getValue();
  if (train.getNumOccurrences() > 0)
    options.train = train.getValue();
  if (loraSpec.getNumOccurrences() && StringRef(loraSpec).trim().empty())
    return fail("--lora needs settings, e.g. --lora r=16,alpha=32,targets=q_proj,v_proj "
                "(without --lora every parameter trains)");
  options.lora = loraSpec.getValue();
  options.loraSkip = loraSkip.getValue();
  // On by default wherever there are adapters over plain frozen weights; asked
  // for without adapters, an error. NF4 weights keep separate LoRA GEMMs
  // unless asked: a padded weight would be a dequantized copy each step, and
  // the NF4 GEMM reads the codes themselves.
  if (loraKConcat.getNumOccurrences() && loraKConcat.getValue() && loraSpec.empty())
    return fail("--lora-k-concat needs --lora");
  options.loraKConcat = loraKConcat.getNumOccurrences()
                            ? loraKConcat.getValue()
                            : !loraSpec.empty() && quant.empty();
  if (loraGroupFrozen.getNumOccurrences() && loraGroupFrozen && !options.loraKConcat)
    return fail("--lora-group-frozen needs --lora-k-concat (and --lora, without --quant)");
  options.loraGroupFrozen = options.loraKConcat && loraGroupFrozen.getValue();
  if (loraGroupGrads.getNumOccurrences() && loraGroupGrads != "off" && !options.loraGroupFrozen)
    return fail("--lora-group-grads needs --lora-group-frozen");
  options.loraGroupGrads = options.loraGroupFrozen ? loraGroupGrads.getValue() : "off";
  options.rowDot = rowDot.getValue();
  options.rowDotMinK = rowDotMinK.getValue();
  options.rowDotMaxInputs = rowDotMaxInputs.getValue();
  options.rowDotPrefetch = rowDotPrefetch.getValue();
  options.attentionLayout = attentionLayout.getValue();
  options.precision = precision.getValue();
  options.fp32Ops = std::vector<std::string>(fp32Ops.begin(), fp32Ops.end());
  options.quant = quant.getValue();
  options.doubleQuant = doubleQuant.getValue();
  options.quantSkip = quantSkip.getValue();
  options.gradAccum = gradAccum.getValue();
  options.fuseLinearCe = fuseLinearCe.getValue();
  options.normGradFromOutput = normGradFromOutput.getValue();
  options.ceChunkTokens = ceChunkTokens.getValue();
  options.ceBf16Logits = ceBf16Logits.getValue();
  options.optimizer = optimizerSpec.getValue();
  options.clipGradNorm = clipGradNorm.getValue();
  if (dataParallel.getNumOccurrences()) {
    StringRef spec = StringRef(dataParallel).trim();
    double mb = 25;
    if (!spec.empty() && (!spec.consume_front("bucket-mb=") || spec.getAsDouble(mb) || !(mb > 0) ||
                          !std::isfinite(mb)))
      return fail("--data-parallel takes bucket-mb=N (a positive number of MiB), got '" +
                  dataParallel + "'");
    if (!trainStep && emit != Emit::GradsMlir)
      return fail("--data-parallel needs a backward pass (--emit=grads-mlir, step-mlir or later)");
    options.dataParallel = mb;
  }
  options.loopPrograms = loopPrograms.getValue();
  options.dynamic = dynamicSymbols.getValue();
  options.buckets = llvm::join(bucketSpecs, ";");
  options.fuseOnly = emit == Emit::FusedMlir;
  options.rematBudget = rematBudget().str();
  // The default (pointwise) applies where there is a backward pass; only an
  // explicit budget on a forward-only compile is an error.
  if (!rematBudgetGiven() && options.until == "forward")
    options.rematBudget = "none";
  std::string invalid;
  if (failed(verifyPipelineOptions(options, invalid)))
    return fail(invalid);
  if (failed(setRematSymbols(options, dynamicSymbols)))
    return 1;
  // Pass errors are located diagnostics: kiln's handler (Diagnostics.h)
  // prints each as one line.
  buildTrainStepPipeline(pm, options);
  progress.stage("train step");
  if (failed(pm.run(*module)))
    return 1;
  stepTiming.stop();
  if (memoryReportRequested()) {
    TimingScope reportTiming = timing.nest("memory report");
    progress.stage("memory report");
    progress.clear(); // the report prints to stdout
    if (int rc = reportMemory(*module, dynamicSymbols, trainStep))
      return rc;
    if (output == "-")
      return 0; // The report is the output; -o writes the IR too.
  }
  std::vector<std::pair<std::string, std::string>> artifactSections;
  if (emit == Emit::Artifact) {
    TimingScope sectionsTiming = timing.nest("artifact sections");
    // The search space kiln-run tune measures (meta "tuning"), never a choice.
    Builder b(&context);
    (*module)->setAttr(
        "kiln.tuning",
        b.getDictionaryAttr({b.getNamedAttr("gemm_topk", b.getI64IntegerAttr(tuneTopK))}));
    // From the graph-level step: lowering replaces parameters by buffers.
    FailureOr<std::vector<std::pair<std::string, std::string>>> sections =
        stepArtifactSections(*module, model, archs);
    if (failed(sections))
      return 1;
    artifactSections = std::move(*sections);
    if (int rc = addInlineValues(artifactSections, model))
      return rc;
  }
  // The values the artifact's memory_plan is made at, read off the
  // graph-level step (its guards and buckets).
  std::optional<SymbolValues> planValues;
  if (emit == Emit::Artifact)
    planValues = memoryPlanValues(findMain(*module), dynamicSymbols);
  if (codegen) {
    // Fusion and lowering run after the step is final (guards, buckets).
    std::vector<StepCounts> before;
    for (func::FuncOp func : module->getOps<func::FuncOp>())
      before.push_back(countUnfused(func));
    TimingScope kernelTiming = timing.nest("kernel pipeline");
    PassManager lower(&context);
    if (printIrAfterAll || !dumpIrAfter.empty())
      lower.enableIRPrinting([](Pass *, Operation *) { return false; },
                             [&](Pass *pass, Operation *) {
                               return printIrAfterAll ||
                                      llvm::is_contained(dumpIrAfter, pass->getArgument().str());
                             },
                             true, false);
    lower.enableTiming(kernelTiming);
    lower.addInstrumentation(progress.instrumentation());
    buildKernelPipeline(lower, options);
    progress.stage("kernel pipeline");
    if (failed(lower.run(*module)))
      return 1;
    kernelTiming.stop();
    if (fusionReport) {
      progress.clear();
      unsigned i = 0;
      for (func::FuncOp func : module->getOps<func::FuncOp>())
        printFusionReport(func.getName(), before[i++], countLowered(func), sizes, outs());
      return 0;
    }
    if (emit == Emit::Artifact) {
      // Without values for every symbol the runtime plans at load time.
      if (planValues) {
        TimingScope planTiming = timing.nest("memory plan");
        progress.stage("memory plan");
        FailureOr<artifact::StepMemoryPlan> plan =
            planLoweredStep(findMain(*module), toBindings(*planValues));
        if (failed(plan))
          return 1;
        artifactSections.push_back({"memory_plan", artifact::encodeMemoryPlan(*plan)});
      }
      return writeArtifact(*module, std::move(artifactSections), output, cudaOptions(archs));
    }
    if (emit == Emit::Cuda) {
      if (int rc = writeCuda(*module, output, cudaOptions(archs)))
        return rc;
      if (!kernelCheck.empty())
        return writeKernelChecks(*module, output, kernelCheck,
                                 kernelCheckSeed.getNumOccurrences()
                                     ? std::optional<uint64_t>(kernelCheckSeed)
                                     : std::nullopt);
      return 0;
    }
  }
  progress.clear();
  std::unique_ptr<ToolOutputFile> file = openOutput(output);
  if (!file)
    return 1;
  module->print(file->os());
  return closeOutput(*file, output);
}

} // namespace

int runCompile(MLIRContext &context) {
  // The timing manager outlives every pass manager and scope that reports
  // to it, also when a pass fails (MLIR's own, owned by the pass manager,
  // is destroyed before the failed pass's timer: a crash).
  DefaultTimingManager timingManager;
  timingManager.setEnabled(printTiming);
  int rc;
  {
    TimingScope root = timingManager.getRootScope();
    rc = compileModel(context, root);
  }
  if (printTiming) {
    timingManager.print();
    timingManager.setEnabled(false); // printed once, not again on destruction
  }
  return rc;
}

} // namespace kiln::driver
