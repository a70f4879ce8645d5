//===- TuneCommand.cpp - kiln-run tune --------------------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Measures the step's candidates on this GPU (kiln/runtime/Autotune.h) at
// each --batch/--seq shape and writes the winners to the tuning database
// (docs/tuning.md), atomically. Every flag, the database path and the
// artifact are checked before the device is touched.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "kiln/artifact/FileIO.h"
#include "kiln/artifact/Json.h"
#include "kiln/runtime/Autotune.h"
#include "kiln/runtime/CublasLt.h"
#include "kiln/runtime/CudaDriver.h"
#include "kiln/runtime/Device.h"
#include "kiln/runtime/StepArtifact.h"
#include "kiln/runtime/StepExecutor.h"
#include "kiln/runtime/TokenData.h"
#include "kiln/runtime/TuningDb.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sys/stat.h>
#include <unistd.h>

using namespace kiln::run;
using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {
constexpr const char *kTuneUsage =
    "USAGE: kiln-run tune STEP.kiln --batch B --seq S[,S2...] [options]\n"
    "\n"
    "Measures the step's candidates on this GPU (cuBLASLt's top-K algorithms\n"
    "per GEMM, cuDNN or the generated kernels for attention, on sm_90 Kiln's\n"
    "fused NF4 GEMM or dequantize + cuBLASLt per NF4 GEMM), checks each\n"
    "against the default's output, and writes the winners to the tuning\n"
    "database that 'kiln-run train' reads (docs/tuning.md).\n"
    "\n"
    "  --db FILE               the database (default $XDG_CACHE_HOME/kiln/tuning.db,\n"
    "                          else ~/.cache/kiln/tuning.db); entries of other\n"
    "                          machines and ops in it are kept\n"
    "  --tune-topk K           cuBLASLt candidates per GEMM (default: the artifact's\n"
    "                          meta \"tuning\", from kiln compile --tune-topk; else 8)\n"
    "  --tune-extra N          thin GEMMs (m, n or k <= 64, or k >= 4 max(m, n)):\n"
    "                          the N fastest of a screening of configurations\n"
    "                          beyond the heuristic's (split-K, other algorithm\n"
    "                          ids and tiles) join the candidates (default 24,\n"
    "                          0: none)\n"
    "  --tune-launches on|off  the generated kernels' launch variants the artifact\n"
    "                          offers (loop kernels: block size, items per block;\n"
    "                          row kernels: rows per block, threads per row of\n"
    "                          the scalar template; default on)\n"
    "  --reps N                timed runs per candidate, the median counts (default 20)\n"
    "  --warmup N              untimed runs per candidate first (default 3)\n"
    "  --batch B, --seq S      the shapes to tune (comma lists, as for train)\n"
    "  --weights FILE          safetensors weights (repeat for shards)\n"
    "  --init random:SEED      random parameters instead of --weights\n"
    "  --data FILE             token ids for the measured steps (default: random\n"
    "                          ids below the vocabulary size, from --seed)\n"
    "  --token-dtype T         uint16 (default) or uint32\n"
    "  --input NAME=FILE       a data input's raw elements (one shape only)\n"
    "  --seed S                data, init program and dropout seed (default 0)\n"
    "  --lr LR                 learning rate (default: the artifact's)\n"
    "  --device N              CUDA device ordinal (default 0)\n"
    "  --attention auto|kernels|cudnn\n"
    "                          auto (default) measures cuDNN against the kernels;\n"
    "                          kernels or cudnn fixes it and tunes only the GEMMs\n"
    "  --progress on|off|auto  redraw one progress line (auto: stderr is a terminal)\n";

/// Feeds the step's data inputs one batch of windows (labels shifted by
/// one), except those --input fixes (\p fixed: name -> file).
Status feedInputs(StepExecutor &x, const SymbolBindings &sizes, const TokenFile *tokens,
                  uint64_t seed, int64_t vocab, const std::map<std::string, std::string> &fixed) {
  for (const auto &[name, path] : fixed) {
    Expected<std::pair<DType, int64_t>> input = x.getInputSpec(name);
    if (!input)
      return Error{"--input " + name + ": " + input.getError()};
    Expected<MappedFile> file = MappedFile::open(path);
    if (!file)
      return file.takeError();
    size_t want = static_cast<size_t>(input->second) * dtypeSize(input->first);
    if (file->size() != want)
      return Error{path + ": " + std::to_string(file->size()) + " bytes; input '" + name +
                   "' needs " + std::to_string(input->second) + " " + dtypeName(input->first) +
                   " elements (" + std::to_string(want) + " bytes)"};
    if (Status s = x.setInput(name, file->data(), input->first, static_cast<size_t>(input->second));
        !s)
      return s;
  }
  bool needed = false;
  for (const std::string &name : x.getDataInputs())
    needed |= !fixed.count(name);
  if (!needed)
    return Status::success();
  if (!tokens && vocab <= 0)
    return Error{"the artifact records no vocabulary size for random token ids; pass --data"};
  int64_t batch = sizes.at("batch"), seq = sizes.at("seq");
  std::vector<uint32_t> windows;
  if (tokens) {
    if (Status s = tokens->sampleBatch(seed, 0, batch, seq, windows); !s)
      return s;
  } else {
    // splitmix64 from the seed: random ids, reproducible.
    uint64_t state = seed ^ 0x7475756e65ull;
    windows.resize(static_cast<size_t>(batch * (seq + 1)));
    for (uint32_t &id : windows) {
      uint64_t z = (state += 0x9E3779B97F4A7C15ull);
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      id = static_cast<uint32_t>((z ^ (z >> 31)) % static_cast<uint64_t>(vocab));
    }
  }
  std::vector<uint32_t> row;
  for (const std::string &name : x.getDataInputs()) {
    if (fixed.count(name))
      continue;
    bool labels = name == "labels" || name == "targets" || name == "target";
    row.clear();
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < seq; ++i)
        row.push_back(windows[b * (seq + 1) + i + (labels ? 1 : 0)]);
    if (Status s = x.setInput(name, row.data(), DType::U32, row.size()); !s)
      return s;
  }
  return Status::success();
}

std::string formatMs(double ms) {
  char text[32];
  std::snprintf(text, sizeof text, ms < 1 ? "%.4f" : "%.3f", ms);
  return text;
}
} // namespace

const std::vector<std::string> kiln::run::kTuneFlags = {
    "db",        "tune-topk", "tune-extra", "tune-launches", "reps",   "warmup",
    "batch",     "seq",       "weights",    "init",          "data",   "token-dtype",
    "seed",      "lr",        "device",     "input",         "attention", "progress"};

int kiln::run::runTune(int argc, char **argv) {
  if (isHelp(argc, argv)) {
    std::fputs(kTuneUsage, stdout);
    return 0;
  }
  std::string message;
  std::optional<Arguments> args = Arguments::parse(argc, argv, kTuneFlags, message);
  if (!args)
    return error(kExitUsage, message + " (see 'kiln-run tune --help')");
  if (args->positional.size() != 1)
    return error(kExitUsage, "'tune' takes one artifact file (see 'kiln-run tune --help')");
  const std::string &artifactPath = args->positional[0];
  for (const char *required : {"batch", "seq"})
    if (!args->get(required))
      return error(kExitUsage,
                   std::string("missing --") + required + " (see 'kiln-run tune --help')");
  int64_t topK = 8, extra = 24, reps = 20, warmup = 3, seed = 0, device = 0;
  if ((args->get("tune-topk") &&
       !parseCount("tune-topk", *args->get("tune-topk"), 1, topK, message)) ||
      (args->get("tune-extra") &&
       !parseCount("tune-extra", *args->get("tune-extra"), 0, extra, message)) ||
      (args->get("reps") && !parseCount("reps", *args->get("reps"), 1, reps, message)) ||
      (args->get("warmup") && !parseCount("warmup", *args->get("warmup"), 0, warmup, message)) ||
      (args->get("seed") && !parseCount("seed", *args->get("seed"), 0, seed, message)) ||
      (args->get("device") && !parseCount("device", *args->get("device"), 0, device, message)))
    return error(kExitUsage, message);
  if (topK > kMaxTuningCandidates)
    return error(kExitUsage,
                 "--tune-topk needs an integer from 1 to 64, got " + std::to_string(topK));
  if (extra >= kMaxTuningCandidates)
    return error(kExitUsage,
                 "--tune-extra needs an integer from 0 to 63, got " + std::to_string(extra));
  std::vector<SymbolBindings> shapes;
  if (!parseShapes(*args->get("batch"), *args->get("seq"), shapes, message))
    return error(kExitUsage, message);
  if (std::optional<std::string> mode = args->get("attention");
      mode && *mode != "auto" && *mode != "kernels" && *mode != "cudnn")
    return error(kExitUsage, "--attention must be auto, kernels or cudnn, got '" + *mode + "'");
  if (std::optional<std::string> mode = args->get("tune-launches");
      mode && *mode != "on" && *mode != "off")
    return error(kExitUsage, "--tune-launches must be on or off, got '" + *mode + "'");
  if (std::optional<std::string> mode = args->get("progress");
      mode && *mode != "on" && *mode != "off" && *mode != "auto")
    return error(kExitUsage, "--progress must be on, off or auto, got '" + *mode + "'");
  double lrFlag = 0;
  if (std::optional<std::string> lr = args->get("lr")) {
    char *end = nullptr;
    lrFlag = std::strtod(lr->c_str(), &end);
    if (lr->empty() || *end || !(lrFlag > 0))
      return error(kExitUsage, "--lr needs a positive number, got '" + *lr + "'");
  }
  std::optional<TokenDType> tokenDType = TokenDType::U16;
  if (std::optional<std::string> text = args->get("token-dtype"))
    if (!(tokenDType = parseTokenDType(*text)))
      return error(kExitUsage, "--token-dtype must be uint16 or uint32, got '" + *text + "'");
  const std::vector<std::string> &weightFiles = args->getAll("weights");
  std::optional<uint64_t> randomInitSeed;
  if (std::optional<std::string> init = args->get("init")) {
    int64_t initSeed;
    if (init->compare(0, 7, "random:") != 0 ||
        !parseCount("init", init->substr(7), 0, initSeed, message))
      return error(kExitUsage, "--init must be random:SEED, got '" + *init + "'");
    if (!weightFiles.empty())
      return error(kExitUsage, "--init and --weights exclude each other");
    randomInitSeed = static_cast<uint64_t>(initSeed);
  } else if (weightFiles.empty()) {
    return error(kExitUsage, "no weights: pass --weights FILE or --init random:SEED");
  }

  // The database: replaceable, and if present, ours to replace.
  std::string dbPath = args->get("db").value_or(defaultTuningDbPath());
  if (dbPath.empty())
    return error(kExitUsage, "no --db and neither XDG_CACHE_HOME nor HOME is set");
  TuningDb db;
  {
    struct stat info;
    if (::stat(dbPath.c_str(), &info) == 0 || ::lstat(dbPath.c_str(), &info) == 0) {
      if (Status s = checkReplaceableFile(dbPath); !s)
        return error(kExitUsage, "--db " + s.getError());
      Expected<MappedFile> file = MappedFile::open(dbPath);
      if (!file)
        return error(kExitBadInput, file.getError());
      std::optional<int> version = TuningDb::headerVersion(file->view());
      if (version && *version != kTuningDbVersion)
        return error(kExitBadInput, dbPath + ": a tuning database of format version " +
                                        std::to_string(*version) + " (this kiln-run writes " +
                                        std::to_string(kTuningDbVersion) +
                                        "); not replaced: pass another --db");
      Expected<TuningDb> loaded = TuningDb::parse(file->view(), dbPath);
      if (loaded)
        db = std::move(*loaded);
      else
        std::fprintf(stderr, "kiln-run: note: %s; ignored, it will be replaced\n",
                     loaded.getError().c_str());
    } else if (std::string dir = parentDirectory(dbPath);
               ::access(dir.c_str(), F_OK) == 0 && ::access(dir.c_str(), W_OK) != 0) {
      return error(kExitUsage, "--db " + dbPath + ": cannot write there (directory '" + dir +
                                   "' is read-only)");
    }
  }

  // The artifact, the sizes against its guards, the weights and the data.
  Expected<StepArtifact> step = StepArtifact::open(artifactPath);
  if (!step)
    return error(kExitBadInput, step.getError());
  for (const std::string &symbol : step->getSymbols())
    if (!shapes.front().count(symbol))
      return error(kExitBadInput, artifactPath + ": the step has size symbol '" + symbol +
                                      "'; kiln-run binds only batch and seq");
  // The search space the compiler recorded (kiln compile --tune-topk);
  // --tune-topk here overrides it.
  if (const Json *tuning = step->getMeta().get("tuning")) {
    const Json *recorded = tuning->get("gemm_topk");
    if (!tuning->isObject() || !recorded || !recorded->isInteger() || recorded->getInteger() < 1 ||
        recorded->getInteger() > kMaxTuningCandidates)
      return error(kExitBadInput, artifactPath +
                                      ": meta \"tuning\" needs \"gemm_topk\", an "
                                      "integer from 1 to " +
                                      std::to_string(kMaxTuningCandidates));
    if (!args->get("tune-topk"))
      topK = recorded->getInteger();
  }
  for (const SymbolBindings &sizes : shapes)
    if (Status status = checkGuards(step->getGuards(), sizes); !status)
      return error(kExitGuard,
                   "--batch/--seq" +
                       (shapes.size() > 1 ? " (" + formatShape(sizes) + ")" : std::string()) +
                       ": " + status.getError());
  if (!step->hasStepProgram())
    return error(kExitNotBuilt, artifactPath + ": the artifact has no step program "
                                               "(recompile with kiln compile --emit=artifact)");
  std::vector<SafetensorsFile> shards;
  for (const std::string &path : weightFiles) {
    Expected<SafetensorsFile> weights = SafetensorsFile::open(path);
    if (!weights)
      return error(kExitBadInput, weights.getError());
    shards.push_back(std::move(*weights));
  }
  if (!shards.empty())
    if (Status status = step->checkWeights(shards); !status)
      return error(kExitBadInput, status.getError());
  int64_t vocab = step->getVocabSize().value_or(0);
  std::optional<TokenFile> tokens;
  if (std::optional<std::string> data = args->get("data")) {
    Expected<TokenFile> opened = TokenFile::open(*data, *tokenDType);
    if (!opened)
      return error(kExitBadInput, opened.getError());
    tokens.emplace(std::move(*opened));
    std::vector<uint32_t> windows;
    for (const SymbolBindings &sizes : shapes)
      if (Status s = tokens->sampleBatch(static_cast<uint64_t>(seed), 0, sizes.at("batch"),
                                         sizes.at("seq"), windows, static_cast<uint32_t>(vocab));
          !s)
        return error(kExitBadInput, s.getError());
  }
  std::map<std::string, std::string> fixed;
  for (const std::string &spec : args->getAll("input")) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos)
      return error(kExitUsage, "--input needs NAME=FILE, got '" + spec + "'");
    fixed[spec.substr(0, eq)] = spec.substr(eq + 1);
  }
  if (!fixed.empty() && shapes.size() > 1)
    return error(kExitUsage, "--input feeds one shape; give one --batch and --seq with it");

  // The device.
  Expected<CudaDriver> driver = CudaDriver::load();
  if (!driver)
    return error(kExitNoDevice, driver.getError() + "; nothing was tuned");
  Expected<Device> gpu = Device::open(*driver, static_cast<int>(device));
  if (!gpu)
    return error(kExitNoDevice, "--device " + std::to_string(device) + ": " + gpu.getError());
  Expected<CublasLt> lt = CublasLt::load();
  if (!lt)
    return error(kExitNoDevice, lt.getError());
  StepExecutor::Options options;
  options.shapes = shapes;
  options.seed = static_cast<uint64_t>(seed);
  options.randomInitSeed = randomInitSeed;
  if (std::optional<std::string> mode = args->get("attention"))
    options.attention = *mode == "kernels" ? StepExecutor::Options::Attention::Kernels
                        : *mode == "cudnn" ? StepExecutor::Options::Attention::Cudnn
                                           : StepExecutor::Options::Attention::Auto;
  Expected<std::unique_ptr<StepExecutor>> made =
      StepExecutor::create(*step, *gpu, *lt, shards.empty() ? nullptr : &shards, options);
  if (!made)
    return error(kExitBadInput, made.getError());
  StepExecutor &x = **made;
  double lr = lrFlag > 0 ? lrFlag : x.getDefaultLr().value_or(0);
  if (!(lr > 0))
    return error(kExitUsage, "the step has no compiled learning rate; pass --lr");
  std::printf("tune %s on %s\n", artifactPath.c_str(), x.getTuningKey().describe().c_str());

  std::string progressMode = args->get("progress").value_or("auto");
  bool redraw = progressMode == "on" || (progressMode == "auto" && ::isatty(STDERR_FILENO));
  TuneOptions tune;
  tune.topK = static_cast<int>(topK);
  tune.extra = static_cast<int>(extra);
  tune.tuneLaunches = args->get("tune-launches").value_or("on") == "on";
  if (const char *pick = std::getenv("KILN_TUNE_PICK_BEYOND_HEURISTIC"))
    tune.pickBeyondHeuristic = std::string(pick) == "1";
  tune.reps = static_cast<int>(reps);
  tune.stepReps = static_cast<int>(reps);
  tune.warmup = static_cast<int>(warmup);
  tune.lr = lr;
  // --attention kernels|cudnn fixes attention: only the GEMMs are tuned.
  tune.tuneAttention = options.attention == StepExecutor::Options::Attention::Auto;
  tune.progress = [&](size_t done, size_t all, const std::string &label, double eta) {
    if (progressMode == "off")
      return;
    std::fprintf(stderr, "%stune: %zu/%zu ops  %.0fs left  %s%s", redraw ? "\r\033[K" : "", done,
                 all, std::ceil(eta), label.c_str(), redraw ? "" : "\n");
    std::fflush(stderr);
  };
  size_t total = 0;
  for (const SymbolBindings &sizes : shapes) {
    if (Status s = x.selectShape(sizes); !s)
      return error(kExitBadInput, s.getError());
    total += countTuningOps(x, tune.tuneAttention, tune.tuneLaunches);
  }
  auto begin = std::chrono::steady_clock::now();
  size_t done = 0;
  std::vector<TuneResult> results;
  for (const SymbolBindings &sizes : shapes) {
    if (Status s = x.selectShape(sizes); !s)
      return error(kExitBadInput, s.getError());
    if (Status s = feedInputs(x, sizes, tokens ? &*tokens : nullptr, static_cast<uint64_t>(seed),
                              vocab, fixed);
        !s)
      return error(kExitBadInput, s.getError());
    Expected<TuneResult> result = tuneShape(x, *gpu, db, tune, done, total);
    if (!result)
      return error(kExitNoDevice, formatShape(sizes) + ": " + result.getError());
    result->shape = formatShape(sizes);
    results.push_back(std::move(*result));
  }
  if (redraw && progressMode != "off")
    std::fprintf(stderr, "\r\033[K");
  if (Status s = db.write(dbPath); !s)
    return error(kExitBadInput, s.getError());

  // The report: the ops whose choice changed, then each shape's whole step.
  size_t changed = 0;
  for (const TuneResult &r : results)
    for (const TunedOp &op : r.ops)
      changed += op.changed;
  std::printf("%-44s %5s %11s %11s %-22s %s\n", "op (choice changed)", "calls", "default ms",
              "tuned ms", "choice", "rel. error");
  for (const TuneResult &r : results)
    for (const TunedOp &op : r.ops)
      if (op.changed) {
        char error[32];
        std::snprintf(error, sizeof error, "%.1e", op.error);
        std::printf("%-44s %5zu %11s %11s %-22s %s\n", op.label.c_str(), op.calls,
                    formatMs(op.defaultMs).c_str(), formatMs(op.tunedMs).c_str(), op.choice.c_str(),
                    error);
      }
  if (!changed)
    std::printf("(none: every default held or won within the %.0f%% noise margin)\n",
                kTieMargin * 100);
  // The NF4 GEMMs, whatever won: the fused kernel against dequantize +
  // cuBLASLt per signature (AutotuneNf4.cpp).
  for (const TuneResult &r : results)
    for (const TunedOp &op : r.ops)
      if (op.label.rfind("nf4 ", 0) == 0)
        std::printf("%s: %zu calls, dequant+cublaslt %s ms, %s\n", op.label.c_str(), op.calls,
                    formatMs(op.defaultMs).c_str(), op.choice.c_str());
  size_t close = 0;
  for (const TuneResult &r : results)
    for (const TunedOp &op : r.ops)
      close += op.remeasured > 0;
  if (close)
    std::printf("close calls: %zu ops measured again (finalists interleaved, the median of %d "
                "rounds' medians)\n",
                close, tune.closeRounds);
  size_t thin = 0, screened = 0, rescreened = 0, extraWon = 0;
  for (const TuneResult &r : results)
    for (const TunedOp &op : r.ops) {
      thin += op.screened > 0;
      screened += op.screened;
      rescreened += op.rescreened;
      extraWon += op.beyondHeuristic;
    }
  if (thin)
    std::printf("beyond the heuristic: %zu thin GEMMs screened %zu configurations (%zu measured "
                "again near the cut); %zu chose one of them\n",
                thin, screened, rescreened, extraWon);
  // Launch variants: a shape that computed other values (or did not
  // launch) is not eligible; the count shows the compiler's claim held.
  size_t launchOps = 0, launchShapes = 0, eligibleShapes = 0;
  for (const TuneResult &r : results)
    for (const TunedOp &op : r.ops)
      if (op.label.rfind("launch ", 0) == 0 && op.eligible > 0) { // measured
        ++launchOps;
        launchShapes += op.candidates;
        eligibleShapes += op.eligible;
      }
  if (launchOps)
    std::printf("launch variants: %zu launches, %zu of %zu shapes eligible (the others did not "
                "launch or computed other values)\n",
                launchOps, eligibleShapes, launchShapes);
  for (const TuneResult &r : results)
    for (const TunedOp &op : r.ops)
      if (!op.rejected.empty()) {
        std::string list;
        for (const std::string &shape : op.rejected)
          list += (list.empty() ? "" : ", ") + shape;
        std::printf("  %s: not eligible: %s\n", op.label.c_str(), list.c_str());
      }
  for (const TuneResult &r : results) {
    size_t ops = r.ops.size();
    std::printf("step %s: default %s ms, tuned %s ms (%+.1f%%), loss rel. difference %.1e; "
                "%zu ops measured\n",
                r.shape.c_str(), formatMs(r.defaultStepMs).c_str(), formatMs(r.tunedStepMs).c_str(),
                r.defaultStepMs > 0 ? (r.tunedStepMs / r.defaultStepMs - 1) * 100 : 0.0,
                r.stepLossError, ops);
  }
  for (const TuneResult &r : results)
    if (!(r.stepLossError <= numericsBound(DType::BF16)))
      std::fprintf(stderr,
                   "kiln-run: note: %s: the tuned step's loss differs from the default's by "
                   "%.1e, over the bf16 bound %.0e (each op passed its own check)\n",
                   r.shape.c_str(), r.stepLossError, numericsBound(DType::BF16));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
  std::printf("tune: %zu of %zu ops changed in %.1f s; wrote %s\n", changed, total, seconds,
              dbPath.c_str());
  return 0;
}
