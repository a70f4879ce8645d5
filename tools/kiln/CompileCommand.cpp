//===- CompileCommand.cpp - kiln compile ----------------------------------===//
//
// Imports (or parses) a model, selects the trainable parameters and builds
// the training step up to what --emit asks for.
//
//===----------------------------------------------------------------------===//

#include "CudaOutput.h"
#include "Driver.h"

#include "kiln/ArtifactEmit/Sections.h"
#include "kiln/Codegen/Nvrtc.h"
#include "kiln/Dialect/Kernel/Passes.h"
#include "kiln/artifact/FileIO.h"

#include "kiln/Dialect/Graph/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

enum class Emit { ForwardMlir, GradsMlir, StepMlir, Artifact, FusedMlir, KernelMlir, Cuda };

cl::opt<std::string> model(cl::Positional, cl::desc("<model.onnx | IR.mlir>"),
                           cl::Required, cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> train(
    "train",
    cl::desc("Parameters that train: `all` (every float initializer of rank "
             ">= 1) or a regex searched in ONNX initializer names"),
    cl::init("all"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<Emit> emit(
    "emit", cl::desc("What to produce"),
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
    cl::desc("With --emit=step-mlir: adamw[:lr=,weight_decay=,betas=B1/B2,eps=] "
             "or sgd[:lr=,momentum=,dampening=,nesterov=0|1,weight_decay=]"),
    cl::init("adamw"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> precision(
    "precision",
    cl::desc("fp32, or bf16: bf16 compute with fp32 master weights, fp32 "
             "optimizer state and fp32 numerics-sensitive ops"),
    cl::init("fp32"), cl::sub(compileCommand()), cl::cat(category()));
cl::list<std::string> fp32Ops(
    "fp32-ops",
    cl::desc("With --precision=bf16: ops kept in fp32 (default softmax, "
             "log_softmax, layer_norm, rms_norm, cross_entropy)"),
    cl::CommaSeparated, cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> dynamicSymbols(
    "dynamic",
    cl::desc("Symbol ranges the step must serve: batch=1..64,seq=16..8192:8 "
             "(MIN..MAX, optional :DIVISOR); recorded as run-time guards"),
    cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> staticSymbols(
    "static", cl::desc("Pin symbols to values: batch=4"),
    cl::sub(compileCommand()), cl::cat(category()));
cl::list<std::string> bucketSpecs(
    "buckets",
    cl::desc("Also compile copies specialized for these values of a symbol: "
             "seq=512,1024,2048 (repeat the flag for more symbols); other "
             "values run the symbolic step"),
    cl::sub(compileCommand()), cl::cat(category()));
cl::opt<int64_t> gradAccum(
    "grad-accum",
    cl::desc("Micro-batches per step: gradients are averaged over this many "
             "sets of inputs (input_K.pb, micro-batch after micro-batch)"),
    cl::init(1), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<double> clipGradNorm("clip-grad-norm",
                             cl::desc("Scale gradients so their global L2 norm "
                                      "is at most this (0: off)"),
                             cl::init(0.0), cl::sub(compileCommand()),
                             cl::cat(category()));
cl::opt<std::string> output("o", cl::desc("Write the result here (default: stdout)"),
                            cl::value_desc("file"), cl::init("-"),
                            cl::sub(compileCommand()), cl::cat(category()));
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
cl::opt<std::string> loraSpec(
    "lora",
    cl::desc("Add LoRA adapters: r=16,alpha=32,dropout=0.05,targets=REGEX "
             "(targets last: the regex runs to the end). Without --train only "
             "the adapters train"),
    cl::value_desc("spec"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> loraSkip("lora-skip",
                              cl::desc("Regex of weights that get no adapter"),
                              cl::value_desc("regex"), cl::sub(compileCommand()),
                              cl::cat(category()));
cl::opt<std::string> quant(
    "quant",
    cl::desc("Store frozen linear weights quantized: nf4 (QLoRA's NormalFloat4, "
             "blocks of 64 with fp32 absmax)"),
    cl::value_desc("scheme"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> doubleQuant(
    "double-quant",
    cl::desc("With --quant nf4: store the absmax values as 8-bit codes "
             "(QLoRA's double quantization, blocks of 256)"),
    cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> quantSkip("quant-skip",
                               cl::desc("Regex of weights --quant leaves alone"),
                               cl::value_desc("regex"), cl::sub(compileCommand()),
                               cl::cat(category()));
cl::opt<std::string> archList(
    "arch",
    cl::desc("With --emit=cuda: GPU archs to compile cubins for (sm_90,sm_80); "
             "PTX of the oldest is kept for JIT elsewhere; `none` writes sources only"),
    cl::init("sm_90"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> kernelCache(
    "kernel-cache",
    cl::desc("NVRTC output cache directory (default $KILN_CACHE_DIR or "
             "~/.cache/kiln; `none` disables it)"),
    cl::sub(compileCommand()), cl::cat(category()));
cl::list<std::string> dumpIrAfter(
    "dump-ir-after",
    cl::desc("Print the IR after these passes (stderr), e.g. kiln-fuse"),
    cl::CommaSeparated, cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> fusionReport(
    "fusion-report",
    cl::desc("Print kernels and GEMMs per step before and after fusion and the "
             "bytes the kernels move (stdout), then stop"),
    cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> reportSizes(
    "report-sizes",
    cl::desc("Symbol values to evaluate --fusion-report's byte counts at: batch=2,seq=16"),
    cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> kernelCheck(
    "kernel-check",
    cl::desc("With --emit=cuda: also write DIR/check/<kernel>/ with random inputs "
             "and reference outputs at these symbol values (batch=2,seq=16) for "
             "the runtime's kiln-kernel-check"),
    cl::sub(compileCommand()), cl::cat(category()));
cl::opt<uint64_t> kernelCheckSeed(
    "kernel-check-seed", cl::desc("Seed of --kernel-check's inputs (default: fresh)"),
    cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> timing("timing", cl::desc("Print the time of every pass"),
                     cl::sub(compileCommand()), cl::cat(category()));

/// Parses `adamw:lr=1e-3,weight_decay=0.01,betas=0.9/0.999` into pass
/// options; PyTorch's defaults fill what is not given.
FailureOr<TrainStepPassOptions> parseOptimizer(StringRef spec) {
  TrainStepPassOptions options;
  auto [name, rest] = spec.split(':');
  options.optimizer = name.str();
  if (name == "sgd") {
    options.weightDecay = 0;
    options.lr = 1e-3;
  } else if (name != "adamw") {
    fail("unknown optimizer '" + name + "' (adamw or sgd)");
    return failure();
  }
  SmallVector<StringRef> settings;
  rest.split(settings, ',', -1, /*KeepEmpty=*/false);
  for (StringRef setting : settings) {
    std::pair<StringRef, StringRef> keyValue = setting.split('=');
    StringRef key = keyValue.first, value = keyValue.second;
    auto number = [&](double &out) {
      if (value.trim().getAsDouble(out)) {
        fail("optimizer setting '" + setting + "' needs a number");
        return false;
      }
      return true;
    };
    bool ok = true;
    if (key == "lr")
      ok = number(options.lr);
    else if (key == "weight_decay")
      ok = number(options.weightDecay);
    else if (key == "eps" && name == "adamw")
      ok = number(options.eps);
    else if (key == "betas" && name == "adamw") {
      auto [b1, b2] = value.split('/');
      ok = !b1.getAsDouble(options.beta1) && !b2.getAsDouble(options.beta2);
      if (!ok)
        fail("optimizer setting '" + setting + "' needs betas=B1/B2");
    } else if (key == "momentum" && name == "sgd")
      ok = number(options.momentum);
    else if (key == "dampening" && name == "sgd")
      ok = number(options.dampening);
    else if (key == "nesterov" && name == "sgd")
      options.nesterov = value == "1" || value == "true";
    else {
      fail("unknown " + name + " setting '" + key + "'");
      return failure();
    }
    if (!ok)
      return failure();
  }
  options.maxGradNorm = clipGradNorm;
  return options;
}

/// Parses `r=16,alpha=32,dropout=0.05,targets=REGEX` (PEFT's names; `rank`
/// is accepted for r). The regex may hold commas, so it runs to the end.
FailureOr<LoraPassOptions> parseLora(StringRef spec) {
  LoraPassOptions options;
  options.alpha = 32; // PEFT's LoraConfig default is alpha 8 with r 8;
  options.rank = 16;  // Kiln's default is the common r=16, alpha=32.
  options.skip = loraSkip;
  auto [settingsText, targets] = spec.split("targets=");
  if (spec.contains("targets="))
    options.targets = targets.str();
  SmallVector<StringRef> settings;
  settingsText.split(settings, ',', -1, /*KeepEmpty=*/false);
  for (StringRef setting : settings) {
    auto [key, value] = setting.split('=');
    double number;
    if (value.trim().getAsDouble(number))
      return fail("--lora setting '" + setting + "' needs a number"), failure();
    if (key == "r" || key == "rank") {
      if (number != static_cast<int64_t>(number))
        return fail("--lora r must be an integer"), failure();
      options.rank = static_cast<int64_t>(number);
    } else if (key == "alpha") {
      options.alpha = number;
    } else if (key == "dropout") {
      options.dropout = number;
    } else {
      return fail("unknown --lora setting '" + key +
                  "' (r, alpha, dropout, targets)"),
             failure();
    }
  }
  return options;
}

} // namespace

int runCompile(MLIRContext &context) {
  // The artifact replaces only a regular file (never a device, a FIFO, a
  // directory, /proc): refused now, not after compiling.
  if (emit == Emit::Artifact && !output.empty() && output != "-")
    if (runtime::Status status = artifact::checkReplaceableFile(output); !status)
      return fail(status.getError());
  std::string weightsPath;
  OwningOpRef<ModuleOp> module = loadModule(context, model, {}, weightsPath);
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
    CudaOutputOptions cuda;
    if (archList != "none") {
      Expected<std::vector<std::string>> parsed = codegen::parseArchList(archList);
      if (!parsed)
        return fail(toString(parsed.takeError()));
      cuda.archs = *parsed;
    }
    cuda.cacheDir = kernelCache.empty() ? codegen::defaultKernelCacheDir()
                    : kernelCache == "none" ? std::string()
                                            : std::string(kernelCache);
    cuda.verbose = timing;
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      std::string location;
      llvm::raw_string_ostream os(location);
      diag.getLocation().print(os);
      fail(os.str() + ": " + diag.str());
      return success();
    });
    return writeCuda(*module, output, cuda);
  }
  if (fullgraph || explain) {
    FailureOr<BreakReport> report = analyzeModel(context, *module, train);
    if (failed(report))
      return 1;
    if (explain) {
      printBreakReport(model, *report, outs());
      return 0;
    }
    if (!report->breaks.empty()) {
      errs() << "kiln: error: --fullgraph: " << model << " has "
             << report->breaks.size() << " graph break"
             << (report->breaks.size() == 1 ? "" : "s") << "\n";
      printBreakReport(model, *report, errs());
      return kGraphBreakExit;
    }
  }

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
  bool codegen = emit == Emit::FusedMlir || emit == Emit::KernelMlir ||
                 emit == Emit::Cuda || emit == Emit::Artifact || fusionReport;
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
  if (timing)
    pm.enableTiming();
  if (!staticSymbols.empty()) {
    SpecializeSymbolsPassOptions specialize;
    specialize.values = staticSymbols;
    pm.addPass(createSpecializeSymbolsPass(specialize));
  }
  SelectTrainablePassOptions trainOptions;
  trainOptions.train = train;
  // PEFT's default: with adapters and no explicit choice, only they train.
  if (!loraSpec.empty() && train.getNumOccurrences() == 0)
    trainOptions.train = "none";
  pm.addNestedPass<func::FuncOp>(createSelectTrainablePass(trainOptions));
  if (!loraSpec.empty()) {
    FailureOr<LoraPassOptions> lora = parseLora(loraSpec);
    if (failed(lora))
      return 1;
    pm.addPass(createLoraPass(*lora));
  }
  if (precision != "fp32") {
    PrecisionPassOptions precisionOptions;
    precisionOptions.compute = precision;
    precisionOptions.fp32Ops = fp32Ops;
    pm.addNestedPass<func::FuncOp>(createPrecisionPass(precisionOptions));
  }
  if (doubleQuant && quant.empty())
    return fail("--double-quant needs --quant nf4");
  if (!quant.empty()) {
    if (quant != "nf4")
      return fail("unknown --quant scheme '" + quant + "' (nf4)");
    QuantizeNf4PassOptions nf4;
    nf4.skip = quantSkip;
    nf4.doubleQuant = doubleQuant;
    pm.addPass(createQuantizeNf4Pass(nf4));
  }
  bool trainStep = buildsStep || emit == Emit::Artifact;
  if (emit == Emit::Artifact && (output.empty() || output == "-"))
    return fail("--emit=artifact needs -o FILE.kiln");
  if (emit == Emit::GradsMlir || trainStep) {
    pm.addNestedPass<func::FuncOp>(createAutodiffPass());
    GradAccumPassOptions accumulate;
    accumulate.microBatches = gradAccum;
    pm.addNestedPass<func::FuncOp>(createGradAccumPass(accumulate));
  }
  if (trainStep) {
    FailureOr<TrainStepPassOptions> optimizer = parseOptimizer(optimizerSpec);
    if (failed(optimizer))
      return 1;
    pm.addNestedPass<func::FuncOp>(createTrainStepPass(*optimizer));
  }
  if (emit != Emit::ForwardMlir) {
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
  }
  // After CSE, which would merge the recomputed clones back.
  if (failed(addRematPass(pm, emit != Emit::ForwardMlir, dynamicSymbols)))
    return 1;
  // Every later stage sizes things from the dims: none may be unknown.
  pm.addNestedPass<func::FuncOp>(createVerifyShapesPass());
  ShapeGuardsPassOptions guards;
  guards.dynamic = dynamicSymbols;
  pm.addNestedPass<func::FuncOp>(createShapeGuardsPass(guards));
  if (!bucketSpecs.empty()) {
    ShapeBucketsPassOptions buckets;
    buckets.buckets = llvm::join(bucketSpecs, ";");
    pm.addPass(createShapeBucketsPass(buckets));
  }
  // Pass errors are located diagnostics; print them as one line each.
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    std::string location;
    llvm::raw_string_ostream os(location);
    diag.getLocation().print(os);
    fail(os.str() + ": " + diag.str());
    return success();
  });
  if (failed(pm.run(*module)))
    return 1;
  if (memoryReportRequested()) {
    if (int rc = reportMemory(*module, dynamicSymbols, trainStep))
      return rc;
    if (output == "-")
      return 0; // The report is the output; -o writes the IR too.
  }
  std::vector<std::pair<std::string, std::string>> artifactSections;
  if (emit == Emit::Artifact) {
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
    PassManager lower(&context);
    if (printIrAfterAll || !dumpIrAfter.empty())
      lower.enableIRPrinting(
          [](Pass *, Operation *) { return false; },
          [&](Pass *pass, Operation *) {
            return printIrAfterAll ||
                   llvm::is_contained(dumpIrAfter, pass->getArgument().str());
          },
          true, false);
    if (timing)
      lower.enableTiming();
    lower.addNestedPass<func::FuncOp>(kernel::createFusePass());
    if (emit != Emit::FusedMlir) {
      lower.addPass(kernel::createLowerToStepPass());
      lower.addNestedPass<func::FuncOp>(kernel::createUpdateInPlacePass());
    }
    if (failed(lower.run(*module)))
      return 1;
    if (fusionReport) {
      unsigned i = 0;
      for (func::FuncOp func : module->getOps<func::FuncOp>())
        printFusionReport(func.getName(), before[i++], countLowered(func), sizes, outs());
      return 0;
    }
    if (emit == Emit::Artifact) {
      // Without values for every symbol the runtime plans at load time.
      if (planValues) {
        FailureOr<runtime::StepMemoryPlan> plan =
            planLoweredStep(findMain(*module), toBindings(*planValues));
        if (failed(plan))
          return 1;
        artifactSections.push_back({"memory_plan", runtime::encodeMemoryPlan(*plan)});
      }
      CudaOutputOptions cuda;
      cuda.archs = archs;
      cuda.cacheDir = kernelCache.empty() ? codegen::defaultKernelCacheDir()
                      : kernelCache == "none" ? std::string()
                                              : std::string(kernelCache);
      cuda.verbose = timing;
      return writeArtifact(*module, std::move(artifactSections), output, cuda);
    }
    if (emit == Emit::Cuda) {
      CudaOutputOptions cuda;
      cuda.archs = archs;
      cuda.cacheDir = kernelCache.empty() ? codegen::defaultKernelCacheDir()
                      : kernelCache == "none" ? std::string()
                                              : std::string(kernelCache);
      cuda.verbose = timing;
      if (int rc = writeCuda(*module, output, cuda))
        return rc;
      if (!kernelCheck.empty())
        return writeKernelChecks(*module, output, kernelCheck,
                                 kernelCheckSeed.getNumOccurrences()
                                     ? std::optional<uint64_t>(kernelCheckSeed)
                                     : std::nullopt);
      return 0;
    }
  }
  std::string error;
  std::unique_ptr<ToolOutputFile> file = openOutputFile(output, &error);
  if (!file)
    return fail(error);
  module->print(file->os());
  file->keep();
  return 0;
}

} // namespace kiln::driver
