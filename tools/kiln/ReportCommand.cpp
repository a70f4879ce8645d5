//===- ReportCommand.cpp - kiln report ------------------------------------===//
//
// The compatibility table fine-tuners keep by hand, generated from the
// models: per model its architecture (read off the graph), graph breaks,
// how attention was raised and which implementations can serve it, LoRA
// targets and NF4 weights, the planned peak memory of LoRA and QLoRA steps
// at --remat-budget none and auto, the smallest budget kiln-remat meets
// and the compile time. Every number comes from the library kiln compile
// uses: the pipelines (lib/Pipelines), the graph-break analysis, the
// graph-level planner and the runtime's planner on the lowered step.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"
#include "Report.h"

#include "kiln/Analysis/GraphBreaks.h"
#include "kiln/Analysis/MemoryPlan.h"
#include "kiln/Analysis/ModelSummary.h"
#include "kiln/ArtifactEmit/Sections.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "kiln/Dialect/Kernel/OpClassification.h"
#include "kiln/Pipelines/Pipelines.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/SourceMgr.h"

#include <chrono>
#include <set>

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

enum class Format { Markdown, Json };

cl::list<std::string> models(cl::Positional, cl::desc("<model.onnx | IR.mlir>..."), cl::OneOrMore,
                             cl::sub(reportCommand()), cl::cat(category()));
cl::opt<int64_t> batch("batch", cl::desc("Value of the size symbol `batch` the plans use"),
                       cl::init(4), cl::sub(reportCommand()), cl::cat(category()));
cl::opt<int64_t> seq("seq", cl::desc("Value of the size symbol `seq` the plans use"),
                     cl::init(2048), cl::sub(reportCommand()), cl::cat(category()));
cl::opt<std::string>
    sizes("sizes", cl::desc("Values of other size symbols: n=8,ctx=512 (override --batch/--seq)"),
          cl::value_desc("symbol=N,..."), cl::sub(reportCommand()), cl::cat(category()));
cl::opt<std::string>
    loraSpec("lora",
             cl::desc("The LoRA (and QLoRA) adapters, as kiln compile --lora takes them; "
                      "targets= defaults to PEFT's usual projection names"),
             cl::value_desc("spec"), cl::init("r=16,alpha=32"), cl::sub(reportCommand()),
             cl::cat(category()));
cl::opt<std::string> loraSkip("lora-skip", cl::desc("Regex of weights that get no adapter"),
                              cl::value_desc("regex"), cl::sub(reportCommand()),
                              cl::cat(category()));
cl::opt<std::string> quant("quant",
                           cl::desc("QLoRA's storage of the frozen weights: nf4, or none "
                                    "(no QLoRA columns)"),
                           cl::value_desc("scheme"), cl::init("nf4"), cl::sub(reportCommand()),
                           cl::cat(category()));
cl::opt<std::string> precision("precision",
                               cl::desc("Compute precision of the planned steps (fp32 or "
                                        "bf16; attention kernels depend on it)"),
                               cl::init("bf16"), cl::sub(reportCommand()), cl::cat(category()));
cl::opt<std::string> optimizer("optimizer", cl::desc("Optimizer of the planned steps"),
                               cl::init("adamw"), cl::sub(reportCommand()), cl::cat(category()));
cl::opt<bool> budgetSearch("budget-search",
                           cl::desc("Find the smallest remat budget (kiln-remat's budget=min, the "
                                    "slowest column; =false leaves it out)"),
                           cl::init(true), cl::sub(reportCommand()), cl::cat(category()));
cl::opt<Format> format("format", cl::desc("Output format"),
                       cl::values(clEnumValN(Format::Markdown, "md", "a Markdown table"),
                                  clEnumValN(Format::Json, "json",
                                             "JSON: the settings and one object per row")),
                       cl::init(Format::Markdown), cl::sub(reportCommand()), cl::cat(category()));
cl::opt<std::string> output("o", cl::desc("Write the report here (default: stdout)"),
                            cl::value_desc("file"), cl::init("-"), cl::sub(reportCommand()),
                            cl::cat(category()));

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// Collects the first error diagnostic (the row's reason) instead of
/// printing it.
struct FirstError {
  std::string message;
  ScopedDiagnosticHandler handler;
  /// `located`: the message starts with the diagnostic's location.
  explicit FirstError(MLIRContext *context, bool located = false)
      : handler(context, [this, located](Diagnostic &diag) {
          if (!message.empty() || diag.getSeverity() != DiagnosticSeverity::Error)
            return success();
          raw_string_ostream os(message);
          if (located && !isa<UnknownLoc>(diag.getLocation())) {
            diag.getLocation().print(os);
            os << ": ";
          }
          os << diag.str();
          return success();
        }) {}
};

/// Like loadModule, but a failure is the row's reason, not a printed error.
OwningOpRef<ModuleOp> load(MLIRContext &context, const std::string &path, std::string &error) {
  if (sys::fs::is_directory(path)) {
    error = path + ": is a directory, not a model file";
    return nullptr;
  }
  if (StringRef(path).ends_with(".mlir")) {
    FirstError first(&context, /*located=*/true); // loc("path":line:col)
    SourceMgr sourceMgr;
    OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(path, sourceMgr, &context);
    if (!module)
      error = first.message.empty() ? path + ": cannot be read" : first.message;
    return module;
  }
  ImportOptions options;
  options.raiseComposites = raiseComposites;
  absl::StatusOr<ImportResult> result = importOnnxFile(&context, path, options);
  if (!result.ok()) {
    error = std::string(result.status().message());
    return nullptr;
  }
  return std::move(result->module);
}

/// The pipeline options of one planned step, as kiln compile would set them.
void setStepOptions(PipelineOptions &options, StringRef until, bool withLora, bool nf4,
                    StringRef remat, const SymbolValues &values) {
  options.until = until.str();
  options.precision = precision.getValue();
  options.optimizer = optimizer.getValue();
  if (withLora) {
    options.lora = loraSpec.getValue();
    options.loraSkip = loraSkip.getValue();
  } else if (nf4) {
    options.train = "none"; // what QLoRA freezes: every base weight
  }                         // else a full fine-tune: everything trains
  if (nf4)
    options.quant = quant.getValue();
  // kiln compile's default: LoRA products as extra K columns of plain
  // frozen weights (not of NF4 ones).
  options.loraKConcat = withLora && !nf4;
  options.loraGroupFrozen = options.loraKConcat;
  options.loraGroupGrads = options.loraGroupFrozen ? "narrow" : "off";
  options.rematBudget = remat.str();
  if (remat != "none") {
    std::vector<std::string> pairs;
    for (const auto &entry : values)
      pairs.push_back(entry.getKey().str() + "=" + std::to_string(entry.getValue()));
    llvm::sort(pairs);
    options.rematSymbols = llvm::join(pairs, ",");
  }
}

/// A clone of `module` through the train-step pipeline (setStepOptions'
/// choices); null with `error`.
OwningOpRef<ModuleOp> runTrainStep(ModuleOp module, StringRef until, bool withLora, bool nf4,
                                   StringRef remat, const SymbolValues &values,
                                   std::string &error) {
  PipelineOptions options;
  setStepOptions(options, until, withLora, nf4, remat, values);
  if (failed(verifyPipelineOptions(options, error)))
    return nullptr;
  OwningOpRef<ModuleOp> step = module.clone();
  FirstError first(module.getContext());
  PassManager pm(module.getContext());
  buildTrainStepPipeline(pm, options);
  if (failed(pm.run(*step))) {
    error = first.message.empty() ? "the train-step pipeline failed" : first.message;
    return nullptr;
  }
  return step;
}

/// Plans a compiled step at both levels; `lowered` (optional) receives the
/// step program for the attention launches.
void planStep(ModuleOp step, const SymbolValues &values, PlannedStep &planned,
              OwningOpRef<ModuleOp> *lowered = nullptr) {
  func::FuncOp main = findMain(step);
  MemoryPlan plan = planMemory(main, values);
  planned.graphPeakBytes = plan.peakBytes();
  planned.persistentBytes = plan.persistentBytes;
  planned.activationPeakBytes = plan.activationPeakBytes;
  OwningOpRef<ModuleOp> program = lowerStepProgram(step, planned.stepError);
  if (!program)
    return;
  FirstError first(step.getContext());
  FailureOr<artifact::StepMemoryPlan> kernelPlan =
      planLoweredStep(program->lookupSymbol<func::FuncOp>("main"), toBindings(values));
  if (failed(kernelPlan)) {
    planned.stepError = first.message;
    return;
  }
  planned.stepArenaBytes = kernelPlan->arenaBytes;
  planned.stepWorkspaceBytes = kernelPlan->workspaceBytes;
  planned.stepPeakBytes =
      kernelPlan->persistentBytes + kernelPlan->arenaBytes + kernelPlan->workspaceBytes;
  if (lowered)
    *lowered = std::move(program);
}

/// The smallest --remat-budget=GiB kiln-remat meets: its `min` budget runs
/// the scan a GiB budget runs and applies the plan with the smallest peak;
/// a budget is met exactly when one plan of that scan fits, so that peak is
/// the answer (docs/memory.md, "Budgets").
BudgetSearch searchBudget(ModuleOp module, bool nf4, const SymbolValues &values) {
  BudgetSearch search;
  OwningOpRef<ModuleOp> step = runTrainStep(module, "step", true, nf4, "min", values, search.error);
  if (!step)
    return search;
  auto remat = findMain(*step)->getAttrOfType<DictionaryAttr>("kiln.remat");
  auto peak = remat ? remat.getAs<IntegerAttr>("peak_bytes") : nullptr;
  auto recomputed = remat ? remat.getAs<IntegerAttr>("recomputed") : nullptr;
  if (!peak || !recomputed) {
    search.error = "kiln-remat recorded no plan";
    return search;
  }
  search.bytes = peak.getInt();
  search.recomputedOps = recomputed.getInt();
  return search;
}

std::string elementName(Type type) {
  std::string text;
  raw_string_ostream os(text);
  type.print(os);
  return text;
}

/// How the compiled step's attention runs: the kernel codegen emits
/// (isFlashAttention decides, as codegen does) and whether cuDNN may take
/// it: the lowered step marks the launches it may take (unmasked tiled
/// attention, their roles recorded), and the runtime adds its own rule
/// (head dim a multiple of 8 up to 256, query heads a multiple of kv heads;
/// docs/runtime.md, "Attention implementations").
AttentionPath attentionOf(func::FuncOp step, ModuleOp lowered) {
  AttentionPath path;
  std::vector<AttentionSite> sites = findAttention(step);
  path.sites = sites.size();
  if (sites.empty())
    return path;
  std::set<std::string> kinds;
  bool allFlash = true;
  for (const AttentionSite &site : sites) {
    path.raised += site.raised;
    std::string mask = attentionMaskName(site.mask).str();
    std::string kind =
        !site.raised ? "not raised" + (site.mask == AttentionMask::None ? std::string()
                                                                        : " (mask: " + mask + ")")
        : site.mask == AttentionMask::None
            ? (site.causal ? "causal" : "unmasked")
            : (site.causal ? "causal + mask (" : "masked (") + mask + ")";
    kinds.insert(kind);
    allFlash &= site.raised && kernel::isFlashAttention(site.op);
  }
  path.path = kinds.size() == 1 ? *kinds.begin() : "mixed";
  const AttentionSite &first = sites.front();
  path.headDim = first.headDim;
  path.element = elementName(first.element);
  if (path.raised != path.sites) {
    path.cudnnReason = "attention not raised (softmax of q kT)";
    return path;
  }
  path.kernel = allFlash ? "tiled" : "row";
  unsigned offered = 0;
  if (lowered)
    lowered.walk([&](kernel::LaunchOp launch) {
      if (std::optional<DictionaryAttr> roles = launch.getAttention())
        if (auto direction = roles->getAs<StringAttr>("direction");
            direction && direction.getValue() == "forward" && !roles->get("masked"))
          ++offered; // a masked one is kiln_fa90's alone
    });
  bool runtimeRule = llvm::all_of(sites, [](const AttentionSite &s) {
    return s.headDim > 0 && s.headDim % 8 == 0 && s.headDim <= 256 && s.kvHeads > 0 &&
           s.heads % s.kvHeads == 0;
  });
  if (!lowered)
    path.cudnnReason = "no step program";
  else if (!allFlash)
    path.cudnnReason = "not bf16/f16 with head dim a multiple of 16 up to 128";
  else if (offered < sites.size())
    path.cudnnReason = "masked";
  else if (!runtimeRule)
    path.cudnnReason = "head dim or heads outside cuDNN's rule";
  path.cudnn = path.cudnnReason.empty();
  return path;
}

/// Adapter and NF4 counts: the forward pipeline with only LoRA, and with
/// only NF4 on frozen weights (QLoRA's base), on clones.
void countAdapters(ModuleOp module, const SymbolValues &values, ReportRow &row) {
  OwningOpRef<ModuleOp> lora =
      runTrainStep(module, "forward", true, false, "none", values, row.loraError);
  if (lora)
    findMain(*lora).walk([&](ParameterOp param) {
      StringRef name = param.getName();
      if (name.ends_with(".lora_A.weight")) {
        ++row.loraTargets;
        // The module's own name (q_proj), in order of first appearance.
        StringRef module = name.drop_back(StringRef(".lora_A.weight").size());
        std::string kind =
            module.rsplit('.').second.empty() ? module.str() : module.rsplit('.').second.str();
        if (!llvm::is_contained(row.loraKinds, kind))
          row.loraKinds.push_back(kind);
      }
      if (name.ends_with(".lora_A.weight") || name.ends_with(".lora_B.weight"))
        row.adapterParameters += param.getType().getNumElements();
    });
  if (quant == "none")
    return;
  OwningOpRef<ModuleOp> nf4 =
      runTrainStep(module, "forward", false, true, "none", values, row.nf4Error);
  if (nf4)
    findMain(*nf4).walk([&](Nf4DequantizeOp dequantize) {
      ++row.nf4Weights;
      row.nf4Parameters += dequantize.getType().getNumElements();
    });
}

/// Size symbols of `main`'s arguments that `values` lacks.
std::vector<std::string> unboundSymbols(func::FuncOp main, const SymbolValues &values) {
  std::vector<std::string> missing;
  for (Type type : main.getArgumentTypes())
    if (auto tensor = dyn_cast<RankedTensorType>(type))
      for (Dim d : getDims(tensor))
        for (StringRef symbol : dimSymbols(d))
          if (!values.count(symbol) && !llvm::is_contained(missing, symbol.str()))
            missing.push_back(symbol.str());
  return missing;
}

ReportRow reportModel(MLIRContext &context, const std::string &path, const SymbolValues &values) {
  Clock::time_point start = Clock::now();
  ReportRow row;
  row.model = path;
  OwningOpRef<ModuleOp> module = load(context, path, row.error);
  if (!module)
    return row;
  func::FuncOp main = findMain(*module);
  if (!main) {
    row.error = path + ": no function to report on";
    return row;
  }
  double importSeconds = secondsSince(start);
  row.arch = summarizeArchitecture(main);
  {
    OwningOpRef<ModuleOp> marked = module->clone();
    FirstError first(&context);
    PassManager pm(&context, ModuleOp::getOperationName());
    SelectTrainablePassOptions all;
    all.train = "all";
    pm.addNestedPass<func::FuncOp>(createSelectTrainablePass(all));
    if (succeeded(pm.run(*marked)))
      row.breaks = analyzeGraphBreaks(findMain(*marked));
  }
  countAdapters(*module, values, row);

  std::vector<std::string> missing = unboundSymbols(main, values);
  std::string unbound;
  if (!missing.empty())
    unbound =
        "needs a value for " + llvm::join(missing, ", ") + " (--sizes " + missing.front() + "=N)";
  for (bool nf4 : {false, true}) {
    if (nf4 && quant == "none")
      continue;
    Setup setup;
    setup.name = nf4 ? "qlora" : "lora";
    for (StringRef remat : {"none", "auto"}) {
      PlannedStep &planned = remat == "none" ? setup.none : setup.automatic;
      if (!unbound.empty()) {
        planned.error = unbound;
        continue;
      }
      Clock::time_point compileStart = Clock::now();
      OwningOpRef<ModuleOp> step =
          runTrainStep(*module, "step", true, nf4, remat, values, planned.error);
      if (!step)
        continue;
      // The row's compile time: import, the LoRA step, its lowering.
      bool timed = !nf4 && remat == "none";
      OwningOpRef<ModuleOp> lowered;
      planStep(*step, values, planned, timed ? &lowered : nullptr);
      if (timed) {
        row.compileSeconds = importSeconds + secondsSince(compileStart);
        row.attention = attentionOf(findMain(*step), lowered ? *lowered : ModuleOp());
      }
    }
    if (budgetSearch) {
      if (!unbound.empty())
        setup.budget.error = unbound;
      else
        setup.budget = searchBudget(*module, nf4, values);
    }
    row.setups.push_back(std::move(setup));
  }
  // Without a LoRA step (no targets), the attention of a full fine-tune
  // step; without any step, as imported.
  if (row.attention.sites == 0 && !row.arch.attention.empty()) {
    std::string error;
    OwningOpRef<ModuleOp> step = runTrainStep(*module, "step", false, false, "none", values, error);
    OwningOpRef<ModuleOp> lowered;
    if (step)
      lowered = lowerStepProgram(*step, error);
    row.attention = step ? attentionOf(findMain(*step), lowered ? *lowered : ModuleOp())
                         : attentionOf(main, ModuleOp());
  }
  row.reportSeconds = secondsSince(start);
  return row;
}

} // namespace

int runReport(MLIRContext &context) {
  ReportSettings settings;
  settings.sizes["batch"] = batch;
  settings.sizes["seq"] = seq;
  SmallVector<StringRef> pairs;
  StringRef(sizes).split(pairs, ',', -1, /*KeepEmpty=*/false);
  for (StringRef pair : pairs) {
    auto [name, text] = pair.trim().split('=');
    int64_t value;
    if (name.trim().empty() || text.trim().getAsInteger(10, value) || value < 1)
      return fail("--sizes: '" + pair + "' is not symbol=N with N >= 1");
    settings.sizes[name.trim()] = value;
  }
  if (batch < 1 || seq < 1)
    return fail("--batch and --seq must be at least 1");
  if (quant != "none" && quant != "nf4")
    return fail("unknown --quant scheme '" + quant + "' (nf4 or none)");
  settings.precision = precision;
  settings.optimizer = optimizer;
  settings.lora = loraSpec;
  settings.quant = quant;
  settings.budgetSearch = budgetSearch;
  // Settings errors are the user's, not a model's: checked once, up front.
  std::string invalid;
  PipelineOptions check;
  setStepOptions(check, "step", true, quant != "none", "none", settings.sizes);
  if (failed(verifyPipelineOptions(check, invalid)))
    return fail(invalid);
  if (precision != "fp32" && precision != "bf16")
    return fail("unknown --precision '" + precision + "' (fp32 or bf16)");

  std::vector<ReportRow> rows;
  for (const std::string &path : models)
    rows.push_back(reportModel(context, path, settings.sizes));
  std::unique_ptr<ToolOutputFile> file = openOutput(output);
  if (!file)
    return 1;
  if (format == Format::Json)
    printJsonReport(settings, rows, file->os());
  else
    printMarkdownReport(settings, rows, file->os());
  return closeOutput(*file, output);
}

} // namespace kiln::driver
