//===- ReportCommand.cpp - kiln-run report ----------------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The measured columns of `kiln report` (docs/compatibility.md): for each
// artifact, the planned peak at --batch/--seq (the bytes the executor
// allocates: persistent tensors, the arena of the artifact's memory plan, or
// of the plan made at load when it does not fit, and the cuBLASLt
// workspace) and, on a GPU, a few steps from random parameters and random
// tokens: the median step time, tokens/s and the measured peak (device
// memory free before loading minus free after each step, as `train` reports
// peak_mem). A row that fails says why; the others stand.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "kiln/artifact/FileIO.h"
#include "kiln/artifact/Json.h"
#include "kiln/runtime/CublasLt.h"
#include "kiln/runtime/CudaDriver.h"
#include "kiln/runtime/Device.h"
#include "kiln/runtime/MemoryPlanSection.h"
#include "kiln/runtime/StepArtifact.h"
#include "kiln/runtime/StepExecutor.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

using namespace kiln::run;
using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {
constexpr const char *kReportUsage =
    "USAGE: kiln-run report STEP.kiln... --batch B --seq S [options]\n"
    "\n"
    "Per artifact: the planned peak at B x S (persistent + arena + cuBLASLt\n"
    "workspace, what the executor allocates) and, on a GPU, the measured median\n"
    "step time, tokens/s and peak memory of a few steps from random parameters\n"
    "(--init random) on random tokens.\n"
    "\n"
    "  --batch B, --seq S      the sizes (one each)\n"
    "  --steps N               timed steps (default 10)\n"
    "  --warmup W              untimed steps first (default 3; the first\n"
    "                          captures the CUDA Graph)\n"
    "  --seed S                random parameters and tokens (default 0)\n"
    "  --format md|json        Markdown table (default) or JSON\n"
    "  --output FILE           write the report to FILE instead of stdout\n"
    "  --device N              CUDA device ordinal (default 0)\n"
    "  --attention auto|kernels|cudnn|sm90\n"
    "                          as for train\n"
    "  --plan-only             no device: the planned columns alone\n";

bool parseCount(const std::string &flag, const std::string &text, int64_t minimum, int64_t &out,
                std::string &message) {
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end || errno == ERANGE || value < minimum) {
    message =
        "--" + flag + " needs an integer >= " + std::to_string(minimum) + ", got '" + text + "'";
    return false;
  }
  out = value;
  return true;
}

std::string formatBytes(double bytes) {
  char text[32];
  if (bytes >= double(1 << 30))
    std::snprintf(text, sizeof(text), "%.2f GiB", bytes / double(1 << 30));
  else
    std::snprintf(text, sizeof(text), "%.1f MiB", bytes / double(1 << 20));
  return text;
}

/// Control characters of a reason or path as \xHH: a table cell stays one
/// line (and '|' cannot open a new cell).
std::string cell(const std::string &text) {
  std::string out;
  for (unsigned char c : text) {
    if (c < 0x20 || c == 0x7f) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "\\x%02x", c);
      out += hex;
    } else if (c == '|') {
      out += "\\|";
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

struct Planned {
  std::string error;
  size_t persistent = 0, arena = 0, workspace = kGemmWorkspaceBytes;
  std::string source; ///< "the artifact's memory plan" or "planned at load"
  size_t total() const { return persistent + arena + workspace; }
};

struct Measured {
  std::string error;
  double medianMs = 0, tokensPerSecond = 0, peakBytes = 0;
  double firstLoss = 0, lastLoss = 0;
  int64_t steps = 0;
};

struct Row {
  std::string artifact;
  std::string error; ///< The artifact did not open (then nothing else).
  std::string program;
  Planned planned;
  Measured measured;
};

/// Uniform token ids (splitmix64), the same for a seed on any machine.
uint64_t splitmix(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

Planned plan(const StepArtifact &step, const SymbolBindings &sizes, std::string &programName) {
  Planned p;
  const BucketSpec *bucket = step.selectBucket(sizes);
  programName = bucket ? bucket->section : "step";
  const StepProgram *program = step.getProgram(programName);
  if (!program) {
    p.error = "no step program (compile with kiln compile --emit=artifact)";
    return p;
  }
  Expected<size_t> persistent = persistentBytes(*program, sizes);
  if (!persistent) {
    p.error = persistent.getError();
    return p;
  }
  const std::optional<StepMemoryPlan> &memoryPlan = step.getMemoryPlan();
  std::string note;
  Expected<ArenaPlan> arena = chooseArenaPlan(
      *program, programName == "step" && memoryPlan ? &*memoryPlan : nullptr, sizes, note);
  if (!arena) {
    p.error = arena.getError();
    return p;
  }
  p.persistent = *persistent;
  p.arena = arena->size;
  p.source = programName == "step" && memoryPlan && note.empty() ? "the artifact's memory plan"
                                                                 : "planned at load";
  return p;
}

Measured measure(const StepArtifact &step, const SymbolBindings &sizes, const Device &gpu,
                 const CublasLt &lt, int64_t warmup, int64_t steps, uint64_t seed,
                 StepExecutor::Options::Attention attention) {
  Measured m;
  Expected<std::pair<size_t, size_t>> before = gpu.getMemoryInfo();
  if (!before) {
    m.error = before.getError();
    return m;
  }
  StepExecutor::Options options;
  options.shapes = {sizes};
  options.seed = seed;
  options.randomInitSeed = seed;
  options.attention = attention;
  Expected<std::unique_ptr<StepExecutor>> made =
      StepExecutor::create(step, gpu, lt, nullptr, options);
  if (!made) {
    m.error = made.getError();
    return m;
  }
  StepExecutor &x = **made;
  double lr = x.getDefaultLr().value_or(1e-4);
  int64_t batch = sizes.at("batch"), seq = sizes.at("seq");
  uint64_t vocab = static_cast<uint64_t>(std::max<int64_t>(step.getVocabSize().value_or(2), 1));
  uint64_t state = seed ^ 0x6b696c6e2d72756eull; // "kiln-run"
  std::vector<uint32_t> windows, row;
  std::vector<double> times;
  double peak = 0;
  for (int64_t t = 1; t <= warmup + steps; ++t) {
    windows.resize(static_cast<size_t>(batch * (seq + 1)));
    for (uint32_t &id : windows)
      id = static_cast<uint32_t>(splitmix(state) % vocab);
    auto begin = std::chrono::steady_clock::now();
    for (const std::string &name : x.getDataInputs()) {
      Expected<std::pair<DType, int64_t>> spec = x.getInputSpec(name);
      if (!spec) {
        m.error = spec.getError();
        return m;
      }
      bool labels = name == "labels" || name == "targets" || name == "target";
      bool mask = name.find("mask") != std::string::npos; // padding masks: keep all
      row.clear();
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < seq; ++i)
          row.push_back(mask ? 1u : windows[b * (seq + 1) + i + (labels ? 1 : 0)]);
      if (static_cast<int64_t>(row.size()) != spec->second) {
        m.error = "input '" + name + "' holds " + std::to_string(spec->second) +
                  " elements, not batch x seq (kiln-run report feeds token inputs only)";
        return m;
      }
      if (Status s = x.setInput(name, row.data(), DType::U32, row.size()); !s) {
        m.error = s.getError();
        return m;
      }
    }
    Expected<double> loss = x.runStep(t, lr);
    if (!loss) {
      m.error = "step " + std::to_string(t) + ": " + loss.getError();
      return m;
    }
    if (!std::isfinite(*loss)) { // JSON has no inf/nan; the row says so instead
      m.error = "step " + std::to_string(t) + ": the loss is " + std::to_string(*loss);
      return m;
    }
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    if (Expected<std::pair<size_t, size_t>> now = gpu.getMemoryInfo(); now)
      peak = std::max(peak, static_cast<double>(before->first) - static_cast<double>(now->first));
    if (t == 1)
      m.firstLoss = *loss;
    m.lastLoss = *loss;
    if (t > warmup)
      times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  size_t n = times.size();
  m.medianMs = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
  m.tokensPerSecond = static_cast<double>(batch * seq) / (m.medianMs / 1000.0);
  m.peakBytes = peak;
  m.steps = steps;
  return m;
}

Json orNull(bool present, Json value) { return present ? std::move(value) : Json(); }

std::string renderJson(const std::vector<Row> &rows, const SymbolBindings &sizes, int64_t steps,
                       int64_t warmup, uint64_t seed, const std::string &device) {
  Json settings = Json::object();
  settings.set("batch", Json::integer(sizes.at("batch")));
  settings.set("seq", Json::integer(sizes.at("seq")));
  settings.set("steps", Json::integer(steps));
  settings.set("warmup", Json::integer(warmup));
  settings.set("seed", Json::integer(static_cast<int64_t>(seed)));
  settings.set("device", orNull(!device.empty(), Json::string(device)));
  Json list = Json::array();
  for (const Row &r : rows) {
    Json row = Json::object();
    row.set("artifact", Json::string(r.artifact));
    row.set("error", orNull(!r.error.empty(), Json::string(r.error)));
    if (r.error.empty()) {
      row.set("program", Json::string(r.program));
      const Planned &p = r.planned;
      bool ok = p.error.empty();
      Json planned = Json::object();
      planned.set("error", orNull(!ok, Json::string(p.error)));
      planned.set("peak_bytes", orNull(ok, Json::integer(static_cast<int64_t>(p.total()))));
      planned.set("persistent_bytes",
                  orNull(ok, Json::integer(static_cast<int64_t>(p.persistent))));
      planned.set("arena_bytes", orNull(ok, Json::integer(static_cast<int64_t>(p.arena))));
      planned.set("workspace_bytes", orNull(ok, Json::integer(static_cast<int64_t>(p.workspace))));
      planned.set("source", orNull(ok, Json::string(p.source)));
      row.set("planned", std::move(planned));
      const Measured &m = r.measured;
      bool ran = m.error.empty();
      Json measured = Json::object();
      measured.set("error", orNull(!ran, Json::string(m.error)));
      measured.set("steps", orNull(ran, Json::integer(m.steps)));
      measured.set("step_ms_median", orNull(ran, Json::number(m.medianMs)));
      measured.set("tokens_per_second", orNull(ran, Json::number(m.tokensPerSecond)));
      measured.set("peak_bytes", orNull(ran, Json::integer(static_cast<int64_t>(m.peakBytes))));
      measured.set("peak_vs_planned", orNull(ran && ok && p.total(),
                                             Json::number(m.peakBytes / double(p.total()) - 1)));
      measured.set("loss_first", orNull(ran, Json::number(m.firstLoss)));
      measured.set("loss_last", orNull(ran, Json::number(m.lastLoss)));
      row.set("measured", std::move(measured));
    }
    list.push(std::move(row));
  }
  Json doc = Json::object();
  doc.set("format", Json::string("kiln-run-report"));
  doc.set("version", Json::integer(1));
  doc.set("settings", std::move(settings));
  doc.set("rows", std::move(list));
  return doc.print(true) + "\n";
}

std::string renderMarkdown(const std::vector<Row> &rows, const SymbolBindings &sizes, int64_t steps,
                           int64_t warmup, const std::string &device) {
  char head[512];
  std::snprintf(head, sizeof(head),
                "Measured at batch=%lld, seq=%lld on %s: median of %lld steps after %lld "
                "warm-up, random parameters and tokens. Planned peak: persistent + arena + "
                "cuBLASLt workspace, what kiln-run allocates.\n\n",
                static_cast<long long>(sizes.at("batch")), static_cast<long long>(sizes.at("seq")),
                device.empty() ? "no device (planned columns only)" : device.c_str(),
                static_cast<long long>(steps), static_cast<long long>(warmup));
  std::string out = head;
  out += "| artifact | planned peak | measured peak | measured vs planned | step ms | tokens/s "
         "| loss (first, last) |\n|---|---|---|---|---|---|---|\n";
  for (const Row &r : rows) {
    out += "| " + cell(r.artifact) + " | ";
    if (!r.error.empty()) {
      out += "error: " + cell(r.error) + " | | | | | |\n";
      continue;
    }
    const Planned &p = r.planned;
    out += p.error.empty()
               ? formatBytes(double(p.total())) + " (" + formatBytes(double(p.persistent)) +
                     " persistent + " + formatBytes(double(p.arena)) + " arena + " +
                     formatBytes(double(p.workspace)) + " workspace; " + p.source + ")"
               : "not planned: " + cell(p.error);
    const Measured &m = r.measured;
    if (!m.error.empty()) {
      out += " | not measured: " + cell(m.error) + " | | | | |\n";
      continue;
    }
    char text[256];
    std::string ratio = "-";
    if (p.error.empty() && p.total()) {
      std::snprintf(text, sizeof(text), "%+.1f%%", 100 * (m.peakBytes / double(p.total()) - 1));
      ratio = text;
    }
    std::snprintf(text, sizeof(text), " | %s | %s | %.2f | %.0f | %.4f, %.4f |\n",
                  formatBytes(m.peakBytes).c_str(), ratio.c_str(), m.medianMs, m.tokensPerSecond,
                  m.firstLoss, m.lastLoss);
    out += text;
  }
  return out;
}
} // namespace

const std::vector<std::string> kiln::run::kReportFlags = {
    "batch",  "seq",    "steps",  "warmup",    "seed",
    "format", "output", "device", "attention", "plan-only"};

int kiln::run::runReport(int argc, char **argv) {
  if (argc == 1 && (!std::strcmp(argv[0], "-h") || !std::strcmp(argv[0], "--help"))) {
    std::fputs(kReportUsage, stdout);
    return 0;
  }
  // --plan-only takes no value: give it one for the parser.
  std::vector<std::string> words(argv, argv + argc);
  bool planOnly = false;
  words.erase(std::remove_if(words.begin(), words.end(),
                             [&](const std::string &w) {
                               bool is = w == "--plan-only";
                               planOnly |= is;
                               return is;
                             }),
              words.end());
  std::vector<char *> rest;
  for (std::string &w : words)
    rest.push_back(w.data());
  std::string message;
  std::optional<Arguments> args =
      Arguments::parse(static_cast<int>(rest.size()), rest.data(), kReportFlags, message);
  if (!args)
    return error(kExitUsage, message + " (see 'kiln-run report --help')");
  if (args->positional.empty())
    return error(kExitUsage, "'report' takes one or more artifact files (see 'kiln-run report "
                             "--help')");
  for (const char *required : {"batch", "seq"})
    if (!args->get(required))
      return error(kExitUsage,
                   std::string("missing --") + required + " (see 'kiln-run report --help')");
  int64_t batch, seq, steps = 10, warmup = 3, seed = 0, device = 0;
  if (!parseCount("batch", *args->get("batch"), 1, batch, message) ||
      !parseCount("seq", *args->get("seq"), 1, seq, message) ||
      (args->get("steps") && !parseCount("steps", *args->get("steps"), 1, steps, message)) ||
      (args->get("warmup") && !parseCount("warmup", *args->get("warmup"), 0, warmup, message)) ||
      (args->get("seed") && !parseCount("seed", *args->get("seed"), 0, seed, message)) ||
      (args->get("device") && !parseCount("device", *args->get("device"), 0, device, message)))
    return error(kExitUsage, message);
  std::string format = args->get("format").value_or("md");
  if (format != "md" && format != "json")
    return error(kExitUsage, "--format must be md or json, got '" + format + "'");
  StepExecutor::Options::Attention attention = StepExecutor::Options::Attention::Auto;
  if (std::optional<std::string> mode = args->get("attention")) {
    if (*mode != "auto" && *mode != "kernels" && *mode != "cudnn" && *mode != "sm90")
      return error(kExitUsage,
                   "--attention must be auto, kernels, cudnn or sm90, got '" + *mode + "'");
    attention = *mode == "kernels" ? StepExecutor::Options::Attention::Kernels
                : *mode == "cudnn" ? StepExecutor::Options::Attention::Cudnn
                : *mode == "sm90"  ? StepExecutor::Options::Attention::Sm90
                                   : StepExecutor::Options::Attention::Auto;
  }
  std::optional<std::string> output = args->get("output");
  if (output)
    if (Status s = checkReplaceableFile(*output); !s)
      return error(kExitUsage, "--output " + s.getError());
  SymbolBindings sizes = {{"batch", batch}, {"seq", seq}};

  // The device, once for every row; without one the measured columns say why.
  std::string deviceName, noDevice = "--plan-only";
  std::optional<CudaDriver> driver;
  std::optional<Device> gpu;
  std::optional<CublasLt> lt;
  if (!planOnly) {
    Expected<CudaDriver> loaded = CudaDriver::load();
    if (!loaded) {
      noDevice = loaded.getError();
    } else {
      driver.emplace(std::move(*loaded));
      Expected<Device> opened = Device::open(*driver, static_cast<int>(device));
      Expected<CublasLt> library = CublasLt::load();
      if (!opened)
        noDevice = "--device " + std::to_string(device) + ": " + opened.getError();
      else if (!library)
        noDevice = library.getError();
      else {
        gpu.emplace(std::move(*opened));
        lt.emplace(std::move(*library));
        deviceName = formatDevice(gpu->getInfo());
      }
    }
  }

  std::vector<Row> rows;
  for (const std::string &path : args->positional) {
    Row row;
    row.artifact = path;
    Expected<StepArtifact> step = StepArtifact::open(path);
    if (!step) {
      row.error = step.getError();
      rows.push_back(std::move(row));
      continue;
    }
    std::string unbound;
    for (const std::string &symbol : step->getSymbols())
      if (!sizes.count(symbol))
        unbound = "the step has size symbol '" + symbol + "'; kiln-run binds only batch and seq";
    if (!unbound.empty()) {
      row.planned.error = row.measured.error = unbound;
    } else if (Status guards = checkGuards(step->getGuards(), sizes); !guards) {
      row.planned.error = row.measured.error = "--batch/--seq: " + guards.getError();
    } else {
      row.planned = plan(*step, sizes, row.program);
      if (!row.planned.error.empty())
        row.measured.error = row.planned.error;
      else if (!gpu)
        row.measured.error = noDevice;
      else
        row.measured =
            measure(*step, sizes, *gpu, *lt, warmup, steps, static_cast<uint64_t>(seed), attention);
    }
    rows.push_back(std::move(row));
  }
  std::string text = format == "json" ? renderJson(rows, sizes, steps, warmup,
                                                   static_cast<uint64_t>(seed), deviceName)
                                      : renderMarkdown(rows, sizes, steps, warmup, deviceName);
  if (!output) {
    std::fputs(text.c_str(), stdout);
    return 0;
  }
  if (Status s = writeFileAtomically(
          *output, [&](FileWriter &writer) { return writer.write(text.data(), text.size()); });
      !s)
    return error(kExitBadInput, s.getError());
  return 0;
}
