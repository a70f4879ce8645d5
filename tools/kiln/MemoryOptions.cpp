//===- MemoryOptions.cpp - kiln compile --memory-report / --remat-budget --===//
//
// The memory flags of `kiln compile`: the rematerialization budget and the
// symbol values kiln-remat plans at (pipeline options), which symbol values
// size the plan, and the report (its kernel-level part is StepMemory.cpp).
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "kiln/Analysis/CostModel.h"
#include "kiln/Analysis/MemoryPlan.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Pipelines/Pipelines.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

#include <limits>
#include <map>

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

cl::opt<std::string>
    memoryReport("memory-report",
                 cl::desc("Print the planned peak memory (parameters, optimizer state, "
                          "activations, workspace) and the largest tensors live at the "
                          "peak, at these symbol values (`--memory-report=` for static "
                          "models); the IR is then written only with -o"),
                 cl::value_desc("symbol=value,..."), cl::sub(compileCommand()),
                 cl::cat(category()));
cl::opt<std::string>
    memoryPlanFile("memory-plan",
                   cl::desc("Write the memory plan (buffers, symbolic sizes and offsets, "
                            "live intervals) as JSON to this file"),
                   cl::value_desc("file"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string>
    rematBudgetFlag("remat-budget",
                    cl::desc("Recompute activations in the backward pass (kiln-remat): none, "
                             "pointwise (keep the fewest bytes recomputing only pointwise, cast "
                             "and shape ops), auto (also norms, and matmul/attention while the "
                             "estimated step time grows by at most 8.5%), min (the smallest "
                             "planned peak it can reach) or a planned-peak limit in GiB; "
                             "default pointwise"),
                    cl::value_desc("none|pointwise|auto|min|GiB"), cl::init("pointwise"),
                    cl::sub(compileCommand()), cl::cat(category()));

/// `batch=4,seq=2048`, or `batch=1..64,seq=16..8192:8` read as the maxima.
FailureOr<SymbolValues> parseValues(StringRef spec, StringRef flag) {
  SymbolValues values;
  SmallVector<StringRef> pairs;
  spec.split(pairs, ',', -1, /*KeepEmpty=*/false);
  for (StringRef pair : pairs) {
    auto [name, text] = pair.trim().split('=');
    StringRef value = text.split(':').first;
    if (value.contains(".."))
      value = value.split("..").second;
    int64_t number;
    if (name.empty() || value.trim().getAsInteger(10, number) || number < 1) {
      fail("--" + flag + ": '" + pair + "' is not symbol=N");
      return failure();
    }
    values[name.trim()] = number;
  }
  return values;
}

/// The report's values first, then the maxima of --dynamic ranges.
FailureOr<SymbolValues> symbolValues(StringRef dynamicSpec) {
  FailureOr<SymbolValues> values = parseValues(memoryReport, "memory-report");
  FailureOr<SymbolValues> ranges = parseValues(dynamicSpec, "dynamic");
  if (failed(values) || failed(ranges))
    return failure();
  for (const auto &entry : *ranges)
    values->try_emplace(entry.getKey(), entry.getValue());
  return values;
}

std::string joinValues(const SymbolValues &values) {
  std::vector<std::string> pairs;
  for (const auto &entry : values)
    pairs.push_back(entry.getKey().str() + "=" + std::to_string(entry.getValue()));
  std::sort(pairs.begin(), pairs.end());
  return llvm::join(pairs, ",");
}

std::string formatFlops(int64_t flops) {
  const char *units[] = {"", "K", "M", "G", "T", "P"};
  double value = static_cast<double>(flops);
  unsigned unit = 0;
  while (value >= 1000 && unit < 5) {
    value /= 1000;
    ++unit;
  }
  return llvm::formatv("{0:F2} {1}FLOP", value, units[unit]).str();
}

/// What kiln-remat recorded, and which ops it cloned.
void printRematSummary(func::FuncOp func, const SymbolValues &values, raw_ostream &os) {
  auto remat = func->getAttrOfType<DictionaryAttr>("kiln.remat");
  if (!remat)
    return;
  auto number = [&](StringRef key) {
    auto attr = remat.getAs<IntegerAttr>(key);
    return attr ? attr.getInt() : 0;
  };
  std::map<std::string, unsigned> byOp;
  int64_t stepFlops = 0;
  func.walk([&](Operation *op) {
    stepFlops += estimateFlops(op, values);
    if (op->hasAttr("kiln.recomputed"))
      ++byOp[op->getName().getStringRef().str()];
  });
  std::vector<std::string> kinds;
  for (auto &[name, count] : byOp)
    kinds.push_back(std::to_string(count) + " " + name);
  int64_t extra = number("extra_flops");
  os << "rematerialization (--remat-budget=" << remat.getAs<StringAttr>("budget").getValue()
     << ")\n";
  os << "  kept for backward       " << number("saved") << " tensors, "
     << formatBytes(number("saved_bytes")) << " (without remat: " << number("saved_before")
     << " tensors, " << formatBytes(number("saved_bytes_before")) << ")\n";
  os << "  recomputed              " << number("recomputed") << " ops";
  if (!kinds.empty())
    os << ": " << llvm::join(kinds, ", ");
  os << "\n";
  os << "  extra FLOPs             " << formatFlops(extra);
  if (stepFlops > extra && extra > 0)
    os << llvm::formatv(" (+{0:F1}% of the step)",
                        100.0 * extra / static_cast<double>(stepFlops - extra));
  os << "\n";
  int64_t stepBefore = number("step_us_before"), step = number("step_us");
  if (stepBefore > 0)
    os << llvm::formatv("  estimated step time     {0:F1} ms -> {1:F1} ms ({2}{3:F1}%, "
                        "roofline estimate)\n",
                        stepBefore / 1000.0, step / 1000.0, step >= stepBefore ? "+" : "",
                        100.0 * (step - stepBefore) / static_cast<double>(stepBefore));
  os << "  planned peak            " << formatBytes(number("peak_bytes_before")) << " -> "
     << formatBytes(number("peak_bytes")) << "\n";
}

/// Each shape bucket is planned at its own values (the others from the
/// report): the same symbolic sizes, evaluated per bucket.
void printBucketPeaks(func::FuncOp main, const SymbolValues &values, raw_ostream &os) {
  auto buckets = main->getAttrOfType<ArrayAttr>("kiln.buckets");
  if (!buckets)
    return;
  os << "buckets (planned at their values)\n";
  for (auto ref : buckets.getAsRange<FlatSymbolRefAttr>()) {
    auto bucket = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(main, ref);
    if (!bucket)
      continue;
    MemoryPlan plan = planMemory(bucket, values);
    os << "  @" << llvm::left_justify(bucket.getSymName(), 22) << " ";
    if (!plan.unboundSymbols.empty()) {
      os << "needs a value for " << llvm::join(plan.unboundSymbols, ", ") << "\n";
      continue;
    }
    os << "planned peak " << formatBytes(plan.peakBytes()) << ", activation peak "
       << formatBytes(plan.activationPeakBytes) << "\n";
  }
}

} // namespace

StringRef rematBudget() { return rematBudgetFlag; }
bool rematBudgetGiven() { return rematBudgetFlag.getNumOccurrences() > 0; }

LogicalResult setRematSymbols(PipelineOptions &options, StringRef dynamicSpec) {
  if (options.rematBudget == "none")
    return success();
  FailureOr<SymbolValues> values = symbolValues(dynamicSpec);
  if (failed(values))
    return failure();
  options.rematSymbols = joinValues(*values);
  return success();
}

bool memoryReportRequested() {
  return memoryReport.getNumOccurrences() > 0 || !memoryPlanFile.empty();
}

int reportMemory(ModuleOp module, StringRef dynamicSpec, bool stepProgram) {
  func::FuncOp func = findMain(module);
  FailureOr<SymbolValues> values = symbolValues(dynamicSpec);
  if (failed(values))
    return 1;
  MemoryPlan plan = planMemory(func, *values);
  if (!plan.unboundSymbols.empty())
    return fail("--memory-report needs a value for " + llvm::join(plan.unboundSymbols, ", ") +
                " (e.g. --memory-report " + plan.unboundSymbols.front() + "=1024)");
  // The kernel-level plan: what the runtime allocates for this step.
  std::optional<artifact::StepMemoryPlan> step;
  StepPeak stepPeak;
  std::string stepError;
  if (stepProgram)
    if (FailureOr<artifact::StepMemoryPlan> lowered =
            planStepProgram(module, *values, stepError, &stepPeak);
        succeeded(lowered))
      step = std::move(*lowered);
  if (memoryReport.getNumOccurrences() > 0) {
    printMemoryReport(plan, outs());
    printRematSummary(func, *values, outs());
    printBucketPeaks(func, *values, outs());
    if (step)
      printStepPlan(*step, outs(), &stepPeak);
    else if (stepProgram)
      outs() << "step program (after fusion): not planned: " << stepError << "\n";
  }
  if (!memoryPlanFile.empty()) {
    std::unique_ptr<ToolOutputFile> file = openOutput(memoryPlanFile);
    if (!file)
      return 1;
    json::Value root = memoryPlanToJSON(plan);
    // The kernel-level plan, as the artifact's memory_plan section holds it.
    if (step) {
      Expected<json::Value> section = json::parse(artifact::encodeMemoryPlan(*step));
      if (section)
        root.getAsObject()->try_emplace("step_program", std::move(*section));
      else
        consumeError(section.takeError());
    }
    file->os() << llvm::formatv("{0:2}", root) << "\n";
    if (int rc = closeOutput(*file, memoryPlanFile))
      return rc;
  }
  return 0;
}

std::optional<SymbolValues> memoryPlanValues(func::FuncOp main, StringRef dynamicSpec) {
  FailureOr<SymbolValues> parsed = symbolValues(dynamicSpec);
  if (failed(parsed))
    return std::nullopt;
  SymbolValues values = std::move(*parsed);
  // Range guards a user asked for (the int32 indexing bound is no size).
  if (auto guards = main->getAttrOfType<ArrayAttr>("kiln.guards"))
    for (auto guard : guards.getAsRange<DictionaryAttr>()) {
      auto kind = guard.getAs<StringAttr>("kind");
      auto expr = guard.getAs<SymExprAttr>("expr");
      auto max = guard.getAs<IntegerAttr>("max");
      if (!kind || kind.getValue() != "range" || !expr || !max ||
          max.getInt() >= std::numeric_limits<int32_t>::max())
        continue;
      SmallVector<StringRef> names = dimSymbols(expr);
      if (names.size() == 1 && expr == SymExprAttr::getSymbol(main.getContext(), names[0]))
        values.try_emplace(names[0], max.getInt());
    }
  // Then the largest shape bucket of each symbol.
  SymbolValues bucketMax;
  if (auto buckets = main->getAttrOfType<ArrayAttr>("kiln.buckets"))
    for (auto ref : buckets.getAsRange<FlatSymbolRefAttr>())
      if (auto bucket = SymbolTable::lookupNearestSymbolFrom<func::FuncOp>(main, ref))
        if (auto at = bucket->getAttrOfType<DictionaryAttr>("kiln.bucket"))
          for (NamedAttribute entry : at)
            if (auto value = llvm::dyn_cast<IntegerAttr>(entry.getValue()))
              bucketMax[entry.getName()] =
                  std::max(bucketMax.lookup(entry.getName()), value.getInt());
  for (const auto &entry : bucketMax)
    values.try_emplace(entry.getKey(), entry.getValue());
  // Every size symbol of the step needs one.
  bool bound = true;
  auto visit = [&](Type type) {
    if (auto tensor = llvm::dyn_cast<RankedTensorType>(type))
      for (Dim d : getDims(tensor))
        for (StringRef symbol : dimSymbols(d))
          bound &= values.count(symbol) > 0;
  };
  for (Type type : main.getArgumentTypes())
    visit(type);
  main.walk([&](Operation *op) {
    for (Type type : op->getResultTypes())
      visit(type);
  });
  if (!bound)
    return std::nullopt;
  return values;
}

} // namespace kiln::driver
