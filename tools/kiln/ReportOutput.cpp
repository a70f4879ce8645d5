//===- ReportOutput.cpp - kiln report as Markdown or JSON -----------------===//
//
// The Markdown table is for reading (docs/compatibility.md is one); the
// JSON holds every field with exact byte counts and full reasons, for
// scripts and tests. docs/compatibility.md describes both.
//
//===----------------------------------------------------------------------===//

#include "Report.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

using namespace llvm;

namespace kiln::driver {
namespace {

/// 104.6K, 1.24B: parameter counts as model cards write them.
std::string formatCount(int64_t n) {
  if (n < 1000)
    return std::to_string(n);
  const char *units[] = {"K", "M", "B", "T"};
  double value = static_cast<double>(n);
  unsigned unit = 0;
  value /= 1000;
  while (value >= 1000 && unit < 3) {
    value /= 1000;
    ++unit;
  }
  return formatv(value < 10    ? "{0:F2}{1}"
                 : value < 100 ? "{0:F1}{1}"
                               : "{0:F0}{1}",
                 value, units[unit])
      .str();
}

std::string formatSeconds(double seconds) {
  return seconds < 1 ? formatv("{0} ms", static_cast<int64_t>(seconds * 1000 + 0.5)).str()
                     : formatv("{0:F2} s", seconds).str();
}

std::string sizesText(const SymbolValues &sizes) {
  std::vector<std::string> pairs;
  for (const auto &entry : sizes)
    pairs.push_back(entry.getKey().str() + "=" + std::to_string(entry.getValue()));
  llvm::sort(pairs);
  return llvm::join(pairs, ", ");
}

/// A table cell: one line, no column separators, long reasons cut.
std::string cell(StringRef text) {
  std::string out;
  for (char c : text)
    out += c == '|'                 ? std::string("\\|")
           : c == '\n' || c == '\r' ? std::string(" ")
                                    : std::string(1, c);
  if (out.size() > 120) {
    size_t cut = 117;
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80)
      --cut; // not inside a UTF-8 sequence
    out = out.substr(0, cut) + "...";
  }
  return out;
}

std::string architectureCell(const ModelArchitecture &a) {
  std::vector<std::string> parts;
  parts.push_back(std::to_string(a.layers) + (a.attention.empty() ? " linear layer" : " layer") +
                  (a.layers == 1 ? "" : "s"));
  if (a.hidden)
    parts.push_back("hidden " + std::to_string(a.hidden));
  if (!a.attention.empty()) {
    std::string heads = std::to_string(a.heads) + " heads";
    if (a.kvHeads != a.heads)
      heads += " / " + std::to_string(a.kvHeads) + " kv";
    parts.push_back(heads);
    parts.push_back("head dim " + std::to_string(a.headDim));
    if (!a.uniformAttention)
      parts.push_back("(first layer; layers differ)");
  }
  if (a.vocab)
    parts.push_back("vocab " + std::to_string(a.vocab));
  if (!a.norm.empty())
    parts.push_back(a.norm);
  if (!a.activation.empty())
    parts.push_back(a.activation);
  std::string family = a.family + (a.head.empty() ? "" : " " + a.head);
  return family + ": " + llvm::join(parts, ", ");
}

std::string breaksCell(const BreakReport &breaks) {
  if (breaks.breaks.empty())
    return "0";
  const GraphBreak &b = breaks.breaks.front();
  std::string first = "[" + b.code + "]" + (b.opType.empty() ? "" : " " + b.opType);
  if (!b.nodeName.empty())
    first += " (node '" + b.nodeName + "')";
  return std::to_string(breaks.breaks.size()) + ": " + first + ": " + b.reason;
}

std::string attentionCell(const AttentionPath &a) {
  if (!a.sites)
    return "none";
  std::string text = a.path + ", head dim " + std::to_string(a.headDim) + ", " + a.element;
  if (a.kernel.empty())
    return text + (a.raised == a.sites ? "" : ": S×S softmax and matmuls");
  text += a.kernel == "tiled" ? ": tiled kernels" : ": row kernel";
  if (a.cudnn)
    text += ", cuDNN";
  return text;
}

/// LoRA's "no linear layer's weight matches targets '<the whole regex>'"
/// fails every step of the row: the table says it once, in LoRA targets.
bool noLoraTargets(StringRef error) {
  return error.contains("no linear layer's weight matches targets");
}

std::string loraCell(const ReportRow &row) {
  if (row.loraError.empty())
    return std::to_string(row.loraTargets) + " (" + llvm::join(row.loraKinds, ", ") + "; " +
           formatCount(row.adapterParameters) + " params)";
  if (!noLoraTargets(row.loraError))
    return "error: " + row.loraError;
  StringRef error = row.loraError;
  size_t seen = error.find("(linear weights: ");
  return seen == StringRef::npos ? "0" : ("0 " + error.substr(seen)).str();
}

std::string errorCell(StringRef error) {
  return noLoraTargets(error) ? "no LoRA targets" : ("error: " + error).str();
}

std::string peakCell(const PlannedStep &step) {
  if (!step.error.empty())
    return errorCell(step.error);
  if (!step.stepPeakBytes)
    return "not lowered: " + step.stepError;
  return formatBytes(*step.stepPeakBytes);
}

std::string budgetCell(const BudgetSearch &search) {
  if (!search.error.empty())
    return errorCell(search.error);
  if (!search.bytes)
    return "-";
  return formatBytes(*search.bytes);
}

/// The two remat budgets of a setup (or their shared reason) in one cell.
std::string setupPeaks(const Setup &setup) {
  std::string none = peakCell(setup.none), automatic = peakCell(setup.automatic);
  if (none == automatic && !setup.none.stepPeakBytes)
    return none; // one reason for both
  return none + " / " + automatic;
}

const Setup *findSetup(const ReportRow &row, StringRef name) {
  for (const Setup &setup : row.setups)
    if (setup.name == name)
      return &setup;
  return nullptr;
}

json::Value optionalBytes(const std::optional<int64_t> &bytes) {
  return bytes ? json::Value(*bytes) : json::Value(nullptr);
}

/// Names and reasons come from the model: JSON strings must be UTF-8.
std::string utf8(const std::string &text) {
  return json::isUTF8(text) ? text : json::fixUTF8(text);
}

json::Value orNull(const std::string &text) {
  return text.empty() ? json::Value(nullptr) : json::Value(utf8(text));
}

json::Object stepJson(const PlannedStep &step) {
  if (!step.error.empty())
    return json::Object{{"error", utf8(step.error)}};
  return json::Object{{"error", nullptr},
                      {"planned_peak_bytes", optionalBytes(step.stepPeakBytes)},
                      {"arena_bytes", optionalBytes(step.stepArenaBytes)},
                      {"workspace_bytes", optionalBytes(step.stepWorkspaceBytes)},
                      {"step_program_error", orNull(step.stepError)},
                      {"graph_peak_bytes", step.graphPeakBytes},
                      {"persistent_bytes", step.persistentBytes},
                      {"activation_peak_bytes", step.activationPeakBytes}};
}

json::Object budgetJson(const BudgetSearch &search) {
  json::Object o{{"error", orNull(search.error)},
                 {"bytes", optionalBytes(search.bytes)},
                 {"gib", search.bytes ? json::Value(static_cast<double>(*search.bytes) /
                                                    (1024.0 * 1024 * 1024))
                                      : json::Value(nullptr)},
                 {"recomputed_ops", search.recomputedOps}};
  return o;
}

json::Value rowJson(const ReportRow &row) {
  if (!row.error.empty())
    return json::Object{{"model", utf8(row.model)}, {"error", utf8(row.error)}};
  const ModelArchitecture &a = row.arch;
  json::Object arch{{"family", a.family},     {"head", orNull(a.head)},
                    {"layers", a.layers},     {"hidden", a.hidden},
                    {"heads", a.heads},       {"kv_heads", a.kvHeads},
                    {"head_dim", a.headDim},  {"uniform_attention", a.uniformAttention},
                    {"vocab", a.vocab},       {"linear_layers", a.linearLayers},
                    {"norm", orNull(a.norm)}, {"activation", orNull(a.activation)}};
  json::Value first = nullptr;
  if (!row.breaks.breaks.empty()) {
    const GraphBreak &b = row.breaks.breaks.front();
    first = json::Object{{"code", b.code},
                         {"op_type", utf8(b.opType)},
                         {"node", utf8(b.nodeName)},
                         {"reason", utf8(b.reason)}};
  }
  json::Object breaks{{"count", static_cast<int64_t>(row.breaks.breaks.size())},
                      {"graphs", static_cast<int64_t>(row.breaks.opsPerGraph.size())},
                      {"first", std::move(first)}};
  const AttentionPath &at = row.attention;
  json::Array implementations;
  if (at.kernel == "tiled")
    implementations.push_back("tiled");
  if (at.kernel == "row")
    implementations.push_back("row");
  if (at.cudnn)
    implementations.push_back("cudnn");
  json::Object attention{{"sites", static_cast<int64_t>(at.sites)},
                         {"raised", static_cast<int64_t>(at.raised)},
                         {"path", orNull(at.path)},
                         {"head_dim", at.headDim},
                         {"element", orNull(at.element)},
                         {"kernel", orNull(at.kernel)},
                         {"cudnn", at.cudnn},
                         {"cudnn_reason", orNull(at.cudnnReason)},
                         {"implementations", std::move(implementations)}};
  json::Array modules;
  for (const std::string &kind : row.loraKinds)
    modules.push_back(utf8(kind));
  json::Object memory;
  for (const Setup &setup : row.setups)
    memory[setup.name] = json::Object{{"remat_none", stepJson(setup.none)},
                                      {"remat_auto", stepJson(setup.automatic)},
                                      {"min_budget", budgetJson(setup.budget)}};
  return json::Object{{"model", utf8(row.model)},
                      {"error", nullptr},
                      {"architecture", std::move(arch)},
                      {"parameters", a.parameters},
                      {"parameter_bytes", a.parameterBytes},
                      {"graph_breaks", std::move(breaks)},
                      {"fullgraph", row.breaks.breaks.empty()},
                      {"attention", std::move(attention)},
                      {"lora", json::Object{{"error", orNull(row.loraError)},
                                            {"targets", row.loraTargets},
                                            {"modules", std::move(modules)},
                                            {"adapter_parameters", row.adapterParameters}}},
                      {"nf4", json::Object{{"error", orNull(row.nf4Error)},
                                           {"weights", row.nf4Weights},
                                           {"parameters", row.nf4Parameters}}},
                      {"memory", std::move(memory)},
                      {"compile_seconds", row.compileSeconds},
                      {"report_seconds", row.reportSeconds}};
}

} // namespace

void printMarkdownReport(const ReportSettings &settings, const std::vector<ReportRow> &rows,
                         raw_ostream &os) {
  bool qlora = settings.quant != "none";
  os << "Planned at " << sizesText(settings.sizes) << "; " << settings.precision << " compute, "
     << settings.optimizer << "; LoRA " << settings.lora;
  if (qlora)
    os << "; QLoRA: the same adapters on " << settings.quant << " base weights";
  os << ". Peaks: the step program's plan (what kiln-run allocates, cuBLASLt "
        "workspace included), --remat-budget none / auto. Smallest budget: the "
        "least --remat-budget kiln-remat meets (its graph-level plan, no "
        "workspace).\n\n";
  os << "| model | architecture | parameters | graph breaks | fullgraph | attention "
        "| LoRA targets | NF4 weights | LoRA peak";
  if (qlora)
    os << " | QLoRA peak";
  os << " | smallest budget (LoRA" << (qlora ? " / QLoRA)" : ")") << " | compile |\n";
  os << "|---|---|---|---|---|---|---|---|---|" << (qlora ? "---|" : "") << "---|---|\n";
  for (const ReportRow &row : rows) {
    os << "| " << cell(row.model) << " | ";
    if (!row.error.empty()) {
      os << "error: " << cell(row.error) << " |";
      for (int i = 0; i < (qlora ? 10 : 9); ++i)
        os << " - |";
      os << "\n";
      continue;
    }
    os << cell(architectureCell(row.arch)) << " | " << formatCount(row.arch.parameters) << " | "
       << cell(breaksCell(row.breaks)) << " | " << (row.breaks.breaks.empty() ? "yes" : "no")
       << " | " << cell(attentionCell(row.attention)) << " | ";
    os << cell(loraCell(row)) << " | ";
    if (!row.nf4Error.empty())
      os << "error: " << cell(row.nf4Error);
    else if (qlora)
      os << row.nf4Weights << " (" << formatCount(row.nf4Parameters) << " params)";
    else
      os << "-";
    std::vector<std::string> budgets;
    bool anyBudget = false;
    for (const char *name : {"lora", "qlora"}) {
      const Setup *setup = findSetup(row, name);
      if (!setup)
        continue;
      os << " | " << cell(setupPeaks(*setup));
      budgets.push_back(budgetCell(setup->budget));
      anyBudget |= setup->budget.bytes.has_value();
    }
    if (budgets.size() == 2 && budgets[0] == budgets[1] && !anyBudget)
      budgets.pop_back(); // one shared reason
    os << " | " << cell(llvm::join(budgets, " / ")) << " | " << formatSeconds(row.compileSeconds)
       << " |\n";
  }
}

void printJsonReport(const ReportSettings &settings, const std::vector<ReportRow> &rows,
                     raw_ostream &os) {
  json::Object sizes;
  for (const auto &entry : settings.sizes)
    sizes[entry.getKey()] = entry.getValue();
  json::Array out;
  for (const ReportRow &row : rows)
    out.push_back(rowJson(row));
  json::Object root{{"format", "kiln-report"},
                    {"version", 1},
                    {"settings", json::Object{{"sizes", std::move(sizes)},
                                              {"precision", settings.precision},
                                              {"optimizer", settings.optimizer},
                                              {"lora", settings.lora},
                                              {"quant", settings.quant},
                                              {"budget_search", settings.budgetSearch}}},
                    {"rows", std::move(out)}};
  os << formatv("{0:2}", json::Value(std::move(root))) << "\n";
}

} // namespace kiln::driver
