//===- Report.h - The rows of kiln report -----------------------*- C++ -*-===//
//
// One row per model: what ReportCommand.cpp finds out, what ReportOutput.cpp
// prints as a Markdown table or JSON. A failed part carries its reason
// instead of numbers; a model that does not load is a row with `error`.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_REPORT_H
#define KILN_TOOLS_KILN_REPORT_H

#include "kiln/Analysis/GraphBreaks.h"
#include "kiln/Analysis/MemoryPlan.h"
#include "kiln/Analysis/ModelSummary.h"

#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace kiln::driver {

/// One compiled train step (LoRA or QLoRA at one remat budget).
struct PlannedStep {
  std::string error; // the pipeline's first error; the rest is then unset
  /// The graph-level plan (what kiln-remat budgets against).
  int64_t graphPeakBytes = 0, persistentBytes = 0, activationPeakBytes = 0;
  /// The kernel-level plan: what kiln-run allocates.
  std::optional<int64_t> stepPeakBytes, stepArenaBytes, stepWorkspaceBytes;
  std::string stepError;
};

/// The smallest --remat-budget kiln-remat meets (its budget=min).
struct BudgetSearch {
  std::string error;
  std::optional<int64_t> bytes; // the graph-level peak of that plan
  int64_t recomputedOps = 0;
};

/// LoRA or QLoRA: the step at --remat-budget none and auto, and the search.
struct Setup {
  std::string name; // "lora", "qlora"
  PlannedStep none, automatic;
  BudgetSearch budget;
};

struct AttentionPath {
  unsigned sites = 0, raised = 0;
  /// "causal", "masked (fixed)", "masked (input)", "unmasked", "not raised"
  /// or "mixed".
  std::string path;
  int64_t headDim = 0;
  std::string element; // in the compiled step ("bf16")
  /// The kernel codegen emits: "tiled" (tensor cores), "row" (one block per
  /// query row) or "" (not raised, no step).
  std::string kernel;
  bool cudnn = false;
  std::string cudnnReason; // why not, when not
};

struct ReportRow {
  std::string model;
  std::string error; // the model did not load: nothing else is set
  ModelArchitecture arch;
  BreakReport breaks;
  AttentionPath attention;
  std::string loraError;
  int64_t loraTargets = 0, adapterParameters = 0;
  std::vector<std::string> loraKinds; // q_proj, k_proj, ...
  std::string nf4Error;
  int64_t nf4Weights = 0, nf4Parameters = 0;
  std::vector<Setup> setups;
  double compileSeconds = 0, reportSeconds = 0;
};

/// What every row was computed with (printed above the table, and in JSON).
struct ReportSettings {
  SymbolValues sizes;
  std::string precision, optimizer, lora, quant;
  bool budgetSearch = true;
};

void printMarkdownReport(const ReportSettings &settings, const std::vector<ReportRow> &rows,
                         llvm::raw_ostream &os);
void printJsonReport(const ReportSettings &settings, const std::vector<ReportRow> &rows,
                     llvm::raw_ostream &os);

} // namespace kiln::driver

#endif // KILN_TOOLS_KILN_REPORT_H
