//===- TrainCommand.cpp - kiln-run train ------------------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Parses every flag of the training command and validates everything a run
// needs before touching the GPU: the artifact, the weights against its
// parameter layout, a resumed checkpoint, the token data, the sizes against
// the guards and, where a driver exists, the device against the kernel
// images and cuBLASLt. Then it runs the step program (StepExecutor): the
// init program once, then N steps, logging and saving a checkpoint.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"
#include "DataParallel.h"
#include "Profile.h"
#include "Progress.h"

#include "kiln/runtime/Checkpoint.h"
#include "kiln/runtime/CublasLt.h"
#include "kiln/runtime/CudaDriver.h"
#include "kiln/runtime/Device.h"
#include "kiln/runtime/StepExecutor.h"
#include "kiln/runtime/StepArtifact.h"
#include "kiln/runtime/Nccl.h"
#include "kiln/runtime/Rendezvous.h"
#include "kiln/runtime/TokenData.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <set>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

using namespace kiln::run;
using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {
constexpr const char *kTrainUsage =
    "USAGE: kiln-run train STEP.kiln --data TOKENS.bin --steps N --batch B "
    "--seq S [options]\n"
    "\n"
    "  --weights FILE          safetensors weights (repeat for shards)\n"
    "  --init random:SEED      random parameters instead of --weights\n"
    "  --data FILE             raw little-endian token ids\n"
    "  --token-dtype T         uint16 (default) or uint32\n"
    "  --steps N               optimizer steps to run (0: load, run the init "
    "program,\n"
    "                          save with --save/--save-adapters; no step)\n"
    "  --batch B, --seq S      sequences per step and tokens per sequence;\n"
    "                          comma lists (e.g. --seq 512,1024,2048) give\n"
    "                          several shapes, used in turn: step t runs\n"
    "                          shape (t-1) mod N (a list of 1 repeats)\n"
    "  --seed S                seed of the data order, of the init program\n"
    "                          (LoRA's A matrices) and of dropout (default 0);\n"
    "                          --init random:SEED seeds the random parameters\n"
    "  --lr LR                 learning rate (default: the artifact's)\n"
    "  --log-every K           print loss, step ms, tokens/s, peak memory "
    "every K "
    "steps (default 10)\n"
    "  --save FILE             write params + optimizer state + step "
    "(safetensors)\n"
    "  --resume FILE           continue from a --save checkpoint\n"
    "  --save-adapters DIR     write LoRA weights as a PEFT adapter directory\n"
    "  --device N              CUDA device ordinal (default 0)\n"
    "  --input NAME=FILE       a data input's raw elements, the same every "
    "step\n"
    "  --progress on|off|auto  a progress bar redrawn after every step (auto: when\n"
    "                          stdout is a terminal)\n"
    "  --graphs on|off         capture the step as a CUDA Graph (default on)\n"
    "  --graph-cache N         executable graphs kept per program (default 8);\n"
    "                          further shapes patch the least recently used\n"
    "  --attention auto|kernels|cudnn\n"
    "                          who runs attention: cuDNN's fused attention where\n"
    "                          libcudnn.so.9 loads (KILN_CUDNN_LIBRARY names it)\n"
    "                          and takes the shape, else the generated kernels\n"
    "                          (auto, default); only the kernels; cuDNN or fail\n"
    "  --profile FILE          time every op of the last step (no graph): "
    "all ops to FILE\n"
    "                          (TSV), the costliest kernels to stdout\n"
    "  --gpus N                data-parallel training on GPUs 0..N-1 of this host (an\n"
    "                          artifact from kiln compile --data-parallel): one\n"
    "                          process per GPU, each --batch rows of the step's\n"
    "                          N*batch (its own shard of the data order), gradients\n"
    "                          and the logged loss averaged by NCCL (libnccl.so.2;\n"
    "                          KILN_NCCL_LIBRARY names it); rank 0 logs and saves.\n"
    "                          Under torchrun-style RANK/WORLD_SIZE/LOCAL_RANK leave\n"
    "                          it out: each process is one rank on GPU LOCAL_RANK\n"
    "  --rendezvous DIR        an empty directory every rank sees, where they meet\n"
    "                          (default with --gpus: a fresh temporary one; under\n"
    "                          RANK/WORLD_SIZE: $KILN_RENDEZVOUS)\n";

} // namespace

const std::vector<std::string> kiln::run::kTrainFlags = {
    "weights", "init", "data", "token-dtype", "steps", "batch", "seq",
    "seed", "lr", "log-every", "save", "resume", "save-adapters", "device",
    "input", "graphs", "graph-cache", "profile", "progress", "attention", "gpus",
    "rendezvous"};

namespace {
/// Parses a non-negative integer flag; false with a message otherwise.
bool parseCount(const std::string &flag, const std::string &text,
                int64_t minimum, int64_t &out, std::string &message) {
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end || errno == ERANGE || value < minimum) {
    message = "--" + flag + " needs an integer >= " + std::to_string(minimum) +
              ", got '" + text + "'";
    return false;
  }
  out = value;
  return true;
}

/// Parses --batch/--seq: comma lists of positive integers, zipped (a list
/// of one repeats) into the run's shapes.
bool parseShapes(const std::string &batchText, const std::string &seqText,
                 std::vector<SymbolBindings> &shapes, std::string &message) {
  auto parseList = [&](const std::string &flag, const std::string &text,
                       std::vector<int64_t> &out) {
    size_t start = 0;
    while (true) {
      size_t comma = text.find(',', start);
      int64_t value;
      if (!parseCount(flag, text.substr(start, comma - start), 1, value, message)) {
        message = "--" + flag + " needs positive integers (comma-separated), got '" + text + "'";
        return false;
      }
      out.push_back(value);
      if (comma == std::string::npos)
        return true;
      start = comma + 1;
    }
  };
  std::vector<int64_t> batches, seqs;
  if (!parseList("batch", batchText, batches) || !parseList("seq", seqText, seqs))
    return false;
  size_t n = std::max(batches.size(), seqs.size());
  if ((batches.size() != 1 && batches.size() != n) || (seqs.size() != 1 && seqs.size() != n)) {
    message = "--batch and --seq lists differ in length (" + std::to_string(batches.size()) +
              " and " + std::to_string(seqs.size()) + "); give one value or the same count";
    return false;
  }
  for (size_t i = 0; i < n; ++i)
    shapes.push_back({{"batch", batches[batches.size() == 1 ? 0 : i]},
                      {"seq", seqs[seqs.size() == 1 ? 0 : i]}});
  return true;
}

/// "batch=4,seq=512".
std::string formatShape(const SymbolBindings &sizes) {
  std::string text;
  for (const auto &[symbol, value] : sizes)
    text += (text.empty() ? "" : ",") + symbol + "=" + std::to_string(value);
  return text;
}

/// The training loop on the GPU (docs/runtime.md, train).
int executeSteps(const StepArtifact &artifact, const Device &gpu,
                 const CublasLt &lt, const std::vector<std::string> &weightPaths,
                 const Arguments &args, const std::vector<SymbolBindings> &shapes,
                 int64_t startStep, int64_t steps, int64_t logEvery,
                 uint64_t seed, const TokenFile *tokens,
                 std::optional<uint64_t> randomInitSeed, RankSession *rank) {
  int world = rank ? rank->getRank().world : 1;
  bool leader = !rank || rank->isLeader();
  std::vector<SafetensorsFile> weights;
  if (!randomInitSeed)
    for (const std::string &path : weightPaths) {
      Expected<SafetensorsFile> opened = SafetensorsFile::open(path);
      if (!opened)
        return error(kExitBadInput, opened.getError());
      weights.push_back(std::move(*opened));
    }
  StepExecutor::Options options;
  options.shapes = shapes;
  options.seed = seed;
  options.randomInitSeed = randomInitSeed;
  options.communicator = rank ? rank->getCommunicator() : nullptr;
  if (std::optional<std::string> graphs = args.get("graphs")) {
    if (*graphs != "on" && *graphs != "off")
      return error(kExitUsage, "--graphs must be on or off, got '" + *graphs + "'");
    options.useGraphs = *graphs == "on";
  }
  if (std::optional<std::string> text = args.get("graph-cache")) // checked by runTrain
    options.graphsPerProgram = static_cast<size_t>(std::strtoll(text->c_str(), nullptr, 10));
  if (std::optional<std::string> mode = args.get("attention")) // checked by runTrain
    options.attention = *mode == "kernels" ? StepExecutor::Options::Attention::Kernels
                        : *mode == "cudnn" ? StepExecutor::Options::Attention::Cudnn
                                           : StepExecutor::Options::Attention::Auto;
  // Measured peak: device memory free before the step is loaded minus
  // free after each step (arena, weights, workspace, graphs, and what
  // cuBLASLt and the driver allocate on the way).
  Expected<std::pair<size_t, size_t>> before = gpu.getMemoryInfo();
  if (!before)
    return error(kExitNoDevice, before.getError());
  Expected<std::unique_ptr<StepExecutor>> made =
      StepExecutor::create(artifact, gpu, lt, weights.empty() ? nullptr : &weights, options);
  if (!made)
    return error(kExitBadInput, made.getError());
  StepExecutor &x = **made;
  if (std::optional<std::string> resume = args.get("resume")) {
    Expected<SafetensorsFile> ckpt = SafetensorsFile::open(*resume);
    if (!ckpt)
      return error(kExitBadInput, ckpt.getError());
    if (Status s = x.loadCheckpoint(*ckpt); !s)
      return error(kExitBadInput, s.getError());
  }
  std::printf("step program: %zu launches, %zu GEMMs; device memory: %zu bytes "
              "persistent + %zu bytes arena and GEMM workspace (%s)\n",
              x.getLaunchCount(), x.getGemmCount(), x.getPersistentBytes(),
              x.getArenaBytes(),
              x.usesArtifactPlan() ? "the artifact's memory plan" : "planned at load");
  if (std::string attention = x.getAttentionSummary(); !attention.empty())
    std::printf("%s\n", attention.c_str());
  if (shapes.size() > 1) {
    // The arena is sized for the largest shape; each runs its program.
    std::printf("shapes:");
    for (const SymbolBindings &sizes : shapes) {
      if (Status s = x.selectShape(sizes); !s)
        return error(kExitBadInput, s.getError());
      std::printf(" %s (%s)", formatShape(sizes).c_str(), x.getProgramName().c_str());
    }
    std::printf("\n");
    if (Status s = x.selectShape(shapes.front()); !s)
      return error(kExitBadInput, s.getError());
  }
  double lr = 0;
  if (std::optional<std::string> text = args.get("lr"))
    lr = std::strtod(text->c_str(), nullptr);
  else if (x.getDefaultLr())
    lr = *x.getDefaultLr();
  else
    return error(kExitUsage, "the step has no compiled learning rate; pass --lr");

  // Fixed inputs (--input NAME=FILE: raw elements of the input's dtype)
  // replace the token windows for the inputs they name.
  std::set<std::string> fixed;
  for (const std::string &spec : args.getAll("input")) {
    size_t eq = spec.find('=');
    if (eq == std::string::npos)
      return error(kExitUsage, "--input needs NAME=FILE, got '" + spec + "'");
    std::string name = spec.substr(0, eq), path = spec.substr(eq + 1);
    Expected<std::pair<DType, int64_t>> input = x.getInputSpec(name);
    if (!input)
      return error(kExitUsage, "--input " + name + ": " + input.getError());
    Expected<MappedFile> file = MappedFile::open(path);
    if (!file)
      return error(kExitBadInput, file.getError());
    size_t want = static_cast<size_t>(input->second) * dtypeSize(input->first);
    if (file->size() != want)
      return error(kExitBadInput,
                   path + ": " + std::to_string(file->size()) + " bytes; input '" +
                       name + "' needs " + std::to_string(input->second) + " " +
                       dtypeName(input->first) + " elements (" +
                       std::to_string(want) + " bytes)");
    if (Status s = x.setInput(name, file->data(), input->first,
                              static_cast<size_t>(input->second));
        !s)
      return error(kExitBadInput, s.getError());
    fixed.insert(name);
  }

  std::vector<uint32_t> windows, row;
  std::vector<ActionTime> profile;
  double peak = 0;
  std::string progressMode = args.get("progress").value_or("auto");
  ProgressBar progress(startStep, steps,
                       progressMode == "on" || (progressMode == "auto" && ::isatty(STDOUT_FILENO)));
  for (int64_t t = startStep + 1; t <= startStep + steps; ++t) {
    // Step t's shape depends on t alone, so a resumed run continues the
    // schedule.
    const SymbolBindings &sizes = shapes[static_cast<size_t>(t - 1) % shapes.size()];
    int64_t batch = sizes.at("batch"), seq = sizes.at("seq");
    if (shapes.size() > 1)
      if (Status s = x.selectShape(sizes); !s)
        return error(kExitBadInput, "step " + std::to_string(t) + ": " + s.getError());
    auto begin = std::chrono::steady_clock::now();
    bool sampled = false;
    for (const std::string &name : x.getDataInputs()) {
      if (fixed.count(name))
        continue;
      if (!tokens)
        return error(kExitUsage, "input '" + name + "' needs --data or --input");
      if (!sampled) {
        // Rank r reads rows r*batch .. (r+1)*batch-1 of the step's order:
        // together the ranks read what one process with world*batch would.
        uint64_t firstRow = rank ? static_cast<uint64_t>(rank->getRank().rank * batch) : 0;
        if (Status s = tokens->sampleBatch(seed, static_cast<uint64_t>(t - 1),
                                           batch, seq, windows, 0, firstRow);
            !s)
          return error(kExitBadInput, s.getError());
        sampled = true;
      }
      // Labels are the windows shifted by one token; the rest read the
      // window's first seq tokens.
      bool labels = name == "labels" || name == "targets" || name == "target";
      row.clear();
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t i = 0; i < seq; ++i)
          row.push_back(windows[b * (seq + 1) + i + (labels ? 1 : 0)]);
      if (Status s = x.setInput(name, row.data(), DType::U32, row.size()); !s)
        return error(kExitBadInput, s.getError());
    }
    std::optional<std::string> profilePath = args.get("profile");
    Expected<double> loss = profilePath && leader && t == startStep + steps
                                ? x.runProfiledStep(t, lr, profile)
                                : x.runStep(t, lr);
    if (!loss)
      return error(kExitNoDevice, "step " + std::to_string(t) + ": " + loss.getError());
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - begin)
                    .count();
    if (Expected<std::pair<size_t, size_t>> now = gpu.getMemoryInfo(); now)
      peak = std::max(peak, static_cast<double>(before->first) -
                                static_cast<double>(now->first));
    if (!std::isfinite(*loss))
      return error(kExitBadInput, "step " + std::to_string(t) + ": the loss is " +
                                      std::to_string(*loss));
    if ((t - startStep) % logEvery == 0 || t == startStep + steps || t == startStep + 1) {
      progress.clear();
      std::printf("step %lld loss %.7f step_ms %.3f tokens/s %.0f peak_mem %.0f%s\n",
                  static_cast<long long>(t), *loss, ms,
                  static_cast<double>(batch * seq * world) / (ms / 1000.0), peak,
                  shapes.size() > 1 ? (" shape " + formatShape(sizes)).c_str() : "");
    }
    progress.update(t, *loss, ms);
    std::fflush(stdout);
  }
  progress.finish();
  if (x.getGraphCaptures())
    std::printf("cuda graphs: %zu captured, %zu instantiated, %zu patched for a new shape%s\n",
                x.getGraphCaptures(), x.getGraphInstantiations(), x.getGraphUpdates(),
                x.getGraphRefusal().empty()
                    ? ""
                    : (" (the driver refused a patch: " + x.getGraphRefusal() + ")").c_str());
  if (rank)
    std::printf("peak_mem per GPU: %s\n", rank->peakMemorySummary(peak).c_str());
  // Rank 0 alone writes files: every rank holds the same parameters.
  if (!leader)
    return 0;
  if (std::optional<std::string> path = args.get("profile"); path && steps > 0)
    if (Status s = writeProfile(*path, profile); !s)
      return error(kExitBadInput, s.getError());
  if (steps == 0)
    std::printf("0 steps: parameters loaded and initialized, nothing trained\n");

  if (std::optional<std::string> path = args.get("save")) {
    std::vector<std::pair<std::string, NamedTensor *>> params, state;
    if (Status s = x.readTrainable(params, state); !s)
      return error(kExitNoDevice, s.getError());
    std::vector<std::string> hostBytes;
    hostBytes.reserve(params.size() + state.size());
    std::vector<TensorData> p, st;
    for (auto *list : {&params, &state})
      for (auto &[name, tensor] : *list) {
        Expected<std::string> bytes = x.download(*tensor);
        if (!bytes)
          return error(kExitNoDevice, bytes.getError());
        hostBytes.push_back(std::move(*bytes));
        (list == &params ? p : st)
            .push_back({name, tensor->dtype, tensor->shape, hostBytes.back().data()});
      }
    if (Status s = writeCheckpoint(*path, startStep + steps, p, st); !s)
      return error(kExitBadInput, s.getError());
    std::printf("saved %s: step %lld\n", path->c_str(),
                static_cast<long long>(startStep + steps));
  }
  if (std::optional<std::string> dir = args.get("save-adapters")) {
    // PEFT's layout: the trained lora_A/lora_B weights and the settings the
    // compiler recorded (meta "lora").
    // Checked by runTrain before any device work.
    const Json *lora = artifact.getMeta().get("lora");
    LoraConfig config;
    config.rank = lora->get("r")->getInteger();
    config.alpha = lora->get("alpha")->getNumber();
    std::vector<std::pair<std::string, NamedTensor *>> params, state;
    if (Status s = x.readTrainable(params, state); !s)
      return error(kExitNoDevice, s.getError());
    std::vector<std::string> hostBytes;
    hostBytes.reserve(params.size());
    std::vector<TensorData> adapters;
    std::set<std::string> modules;
    for (auto &[name, tensor] : params) {
      size_t at = name.rfind(".lora_");
      if (at == std::string::npos)
        continue;
      Expected<std::string> bytes = x.download(*tensor);
      if (!bytes)
        return error(kExitNoDevice, bytes.getError());
      hostBytes.push_back(std::move(*bytes));
      adapters.push_back({name, tensor->dtype, tensor->shape, hostBytes.back().data()});
      std::string module = name.substr(0, at);
      modules.insert(module.substr(module.rfind('.') + 1)); // q_proj, ...
    }
    config.targetModules.assign(modules.begin(), modules.end());
    if (Status s = writePeftAdapters(*dir, adapters, config); !s)
      return error(kExitBadInput, s.getError());
    std::printf("saved %zu adapter tensors (PEFT) to %s\n", adapters.size(), dir->c_str());
  }
  return 0;
}
} // namespace

int kiln::run::runTrain(int argc, char **argv) {
  if (argc == 1 &&
      (!std::strcmp(argv[0], "-h") || !std::strcmp(argv[0], "--help"))) {
    std::fputs(kTrainUsage, stdout);
    return 0;
  }
  std::string message;
  std::optional<Arguments> args = Arguments::parse(argc, argv, kTrainFlags, message);
  if (!args)
    return error(kExitUsage, message + " (see 'kiln-run train --help')");
  if (args->positional.size() != 1)
    return error(kExitUsage, "'train' takes one artifact file (see 'kiln-run "
                             "train --help')");
  const std::string &artifactPath = args->positional[0];

  // Flags first: a typo should not wait for a multi-GiB weights file.
  if (!args->get("data") && args->getAll("input").empty())
    return error(kExitUsage, "missing --data (see 'kiln-run train --help')");
  for (const char *required : {"steps", "batch", "seq"})
    if (!args->get(required))
      return error(kExitUsage, std::string("missing --") + required +
                                   " (see 'kiln-run train --help')");
  int64_t steps, seed = 0, logEvery = 10, device = 0, graphCache = 8;
  // --steps 0 loads everything and runs the init program, so --save and
  // --save-adapters write the initial parameters (bench/loss_curve.py gives
  // PyTorch Kiln's LoRA init this way).
  if (!parseCount("steps", *args->get("steps"), 0, steps, message) ||
      (args->get("seed") &&
       !parseCount("seed", *args->get("seed"), 0, seed, message)) ||
      (args->get("log-every") &&
       !parseCount("log-every", *args->get("log-every"), 1, logEvery,
                   message)) ||
      (args->get("device") &&
       !parseCount("device", *args->get("device"), 0, device, message)) ||
      (args->get("graph-cache") &&
       !parseCount("graph-cache", *args->get("graph-cache"), 1, graphCache, message)))
    return error(kExitUsage, message);
  std::vector<SymbolBindings> shapes;
  if (!parseShapes(*args->get("batch"), *args->get("seq"), shapes, message))
    return error(kExitUsage, message);
  if (shapes.size() > 1 && !args->getAll("input").empty())
    return error(kExitUsage, "--input feeds one shape; give one --batch and --seq with it");
  if (std::optional<std::string> mode = args->get("progress");
      mode && *mode != "on" && *mode != "off" && *mode != "auto")
    return error(kExitUsage, "--progress must be on, off or auto, got '" + *mode + "'");
  if (std::optional<std::string> mode = args->get("attention");
      mode && *mode != "auto" && *mode != "kernels" && *mode != "cudnn")
    return error(kExitUsage, "--attention must be auto, kernels or cudnn, got '" + *mode + "'");
  if (std::optional<std::string> lr = args->get("lr")) {
    char *end = nullptr;
    double value = std::strtod(lr->c_str(), &end);
    if (lr->empty() || *end || !(value > 0))
      return error(kExitUsage,
                   "--lr needs a positive number, got '" + *lr + "'");
  }
  // Output paths: their directory must exist and be writable now, not
  // after hours of training.
  for (const char *flag : {"save", "save-adapters", "profile"})
    if (std::optional<std::string> path = args->get(flag)) {
      // --save-adapters names a directory (PEFT's layout), created if needed.
      if (!std::strcmp(flag, "save-adapters"))
        while (path->size() > 1 && path->back() == '/')
          path->pop_back();
      size_t slash = path->rfind('/');
      std::string dir = slash == std::string::npos ? "."
                        : slash == 0               ? "/"
                                                   : path->substr(0, slash);
      if (path->empty() || path->back() == '/' ||
          ::access(dir.c_str(), W_OK) != 0)
        return error(kExitUsage, std::string("--") + flag + " " + *path +
                                     ": cannot write there (directory '" + dir +
                                     "' is missing or read-only)");
    }
  // ... and each replaces only a regular file: never a directory, a device,
  // a FIFO, or anything under /proc.
  if (std::optional<std::string> path = args->get("save"))
    if (Status s = checkReplaceableFile(*path); !s)
      return error(kExitUsage, "--save " + s.getError());
  if (std::optional<std::string> path = args->get("profile"))
    if (Status s = checkReplaceableFile(*path); !s)
      return error(kExitUsage, "--profile " + s.getError());
  if (std::optional<std::string> dir = args->get("save-adapters")) {
    while (dir->size() > 1 && dir->back() == '/')
      dir->pop_back();
    if (Status s = checkPeftAdapterDir(*dir); !s)
      return error(kExitUsage, "--save-adapters " + s.getError());
  }
  std::optional<TokenDType> tokenDType = TokenDType::U16;
  if (std::optional<std::string> text = args->get("token-dtype"))
    if (!(tokenDType = parseTokenDType(*text)))
      return error(kExitUsage, "--token-dtype must be uint16 or uint32, got '" +
                                   *text + "'");
  const std::vector<std::string> &weightFiles = args->getAll("weights");
  std::optional<std::string> init = args->get("init");
  std::optional<uint64_t> randomInitSeed;
  if (init) {
    int64_t initSeed;
    if (init->compare(0, 7, "random:") != 0 ||
        !parseCount("init", init->substr(7), 0, initSeed, message))
      return error(kExitUsage,
                   "--init must be random:SEED, got '" + *init + "'");
    if (!weightFiles.empty())
      return error(kExitUsage, "--init and --weights exclude each other");
    randomInitSeed = static_cast<uint64_t>(initSeed);
  } else if (weightFiles.empty()) {
    return error(kExitUsage, "no weights: pass --weights FILE or --init "
                             "random:SEED");
  }

  // Data parallelism: --gpus N launches the ranks (each runs this command
  // again, under RANK/WORLD_SIZE); under those variables this process is one.
  Expected<std::optional<RankInfo>> rankEnv =
      rankFromEnvironment([](const char *name) { return std::getenv(name); });
  if (!rankEnv)
    return error(kExitUsage, rankEnv.getError());
  std::string rendezvousDir = args->get("rendezvous").value_or("");
  if (std::optional<std::string> gpus = args->get("gpus")) {
    int64_t count;
    if (!parseCount("gpus", *gpus, 1, count, message))
      return error(kExitUsage, message);
    if (*rankEnv)
      return error(kExitUsage, "--gpus starts its own ranks; under RANK/WORLD_SIZE (torchrun) "
                               "leave it out: each process is one rank");
    if (args->get("device"))
      return error(kExitUsage, "--gpus N uses GPUs 0..N-1; leave out --device (or set "
                               "CUDA_VISIBLE_DEVICES)");
    if (count > 1024)
      return error(kExitUsage, "--gpus " + *gpus + ": more ranks than one host has GPUs");
    // The ranks get every flag but --gpus and --rendezvous (KILN_RENDEZVOUS).
    std::vector<std::string> rankArgs;
    for (int i = 0; i < argc; ++i) {
      std::string a = argv[i];
      bool takesValue = a == "--gpus" || a == "--rendezvous";
      if (takesValue) {
        ++i;
        continue;
      }
      if (a.rfind("--gpus=", 0) == 0 || a.rfind("--rendezvous=", 0) == 0)
        continue;
      rankArgs.push_back(a);
    }
    return launchRanks(static_cast<int>(count), "kiln-run", rankArgs, rendezvousDir);
  }
  std::unique_ptr<RankSession> rank;
  if (*rankEnv) {
    if (args->get("device"))
      return error(kExitUsage, "--device: under RANK/WORLD_SIZE each rank uses GPU LOCAL_RANK "
                               "(set CUDA_VISIBLE_DEVICES to choose them)");
    Expected<std::unique_ptr<RankSession>> started =
        RankSession::start(**rankEnv, rendezvousDir);
    if (!started)
      return error(kExitUsage, started.getError());
    rank = std::move(*started);
    device = (*rankEnv)->localRank;
  } else if (args->get("rendezvous")) {
    return error(kExitUsage, "--rendezvous needs --gpus N or RANK/WORLD_SIZE");
  }

  // The artifact, and the sizes against its guards.
  Expected<StepArtifact> step = StepArtifact::open(artifactPath);
  if (!step)
    return error(kExitBadInput, step.getError());
  if (rank) {
    const Json *dp = step->getMeta().get("data_parallel");
    if (!dp)
      return error(kExitUsage, artifactPath + " was compiled without --data-parallel: its "
                                              "gradients would not be averaged over the ranks "
                                              "(kiln compile --data-parallel)");
    // Every rank must run the same step on the same schedule, or the
    // all-reduces pair up wrongly or wait forever: compare before any GPU work.
    Expected<std::string> hash = fileContentHash(artifactPath);
    if (!hash)
      return error(kExitBadInput, hash.getError());
    std::map<std::string, std::string> settings;
    for (const char *flag : {"steps", "batch", "seq", "seed", "lr", "init", "resume",
                             "token-dtype", "graphs"})
      if (std::optional<std::string> value = args->get(flag))
        settings[std::string("--") + flag] = *value;
    settings["WORLD_SIZE"] = std::to_string(rank->getRank().world);
    if (Status s = rank->getRendezvous().checkRanks(artifactPath, *hash, settings); !s)
      return error(kExitBadInput, s.getError());
    std::printf("data parallel: %d rank%s, rendezvous %s, artifact %s\n", rank->getRank().world,
                rank->getRank().world == 1 ? "" : "s",
                rank->getRendezvous().getDirectory().c_str(), hash->c_str());
  }
  for (const std::string &symbol : step->getSymbols())
    if (!shapes.front().count(symbol))
      return error(kExitBadInput, artifactPath +
                                      ": the step has size symbol '" + symbol +
                                      "'; kiln-run binds only batch and seq");
  for (const SymbolBindings &sizes : shapes)
    if (Status status = checkGuards(step->getGuards(), sizes); !status)
      return error(kExitGuard, "--batch/--seq" +
                                   (shapes.size() > 1 ? " (" + formatShape(sizes) + ")" : std::string()) +
                                   ": " + status.getError());

  // --save-adapters writes PEFT's config from meta "lora": it must be there
  // now, not after training.
  if (args->get("save-adapters")) {
    const Json *lora = step->getMeta().get("lora");
    if (!lora)
      return error(kExitUsage, "--save-adapters: " + artifactPath +
                                   " has no LoRA adapters (compile with kiln compile --lora)");
    const Json *rank = lora->get("r");
    const Json *alpha = lora->get("alpha");
    if (!rank || !rank->isInteger() || rank->getInteger() < 1 || !alpha || !alpha->isNumber())
      return error(kExitBadInput, artifactPath +
                                      ": meta \"lora\" needs an integer \"r\" >= 1 and a "
                                      "number \"alpha\" (for --save-adapters)");
  }

  // Weights, then a resumed checkpoint.
  size_t trainable = 0;
  for (const ParamSpec &param : step->getParams())
    trainable += param.trainable;
  std::printf("artifact %s: %zu params (%zu trainable), %zu kernels, %zu "
              "guards\n",
              artifactPath.c_str(), step->getParams().size(), trainable,
              step->getKernels().size(), step->getGuards().size());
  // Several --weights are the shards of one checkpoint.
  std::vector<SafetensorsFile> shards;
  size_t tensors = 0;
  for (const std::string &path : weightFiles) {
    Expected<SafetensorsFile> weights = SafetensorsFile::open(path);
    if (!weights)
      return error(kExitBadInput, weights.getError());
    tensors += weights->getTensors().size();
    shards.push_back(std::move(*weights));
  }
  if (!shards.empty()) {
    if (Status status = step->checkWeights(shards); !status)
      return error(kExitBadInput, status.getError());
    std::printf("weights %s%s: %zu tensors, every frozen parameter matches\n",
                weightFiles.front().c_str(),
                shards.size() > 1 ? (" + " + std::to_string(shards.size() - 1) + " shards").c_str()
                                  : "",
                tensors);
  }
  int64_t startStep = 0;
  if (std::optional<std::string> resume = args->get("resume")) {
    Expected<SafetensorsFile> ckpt = SafetensorsFile::open(*resume);
    if (!ckpt)
      return error(kExitBadInput, ckpt.getError());
    Expected<int64_t> resumed = checkCheckpoint(*step, *ckpt);
    if (!resumed)
      return error(kExitBadInput, resumed.getError());
    startStep = *resumed;
    std::printf("resume %s: step %lld\n", resume->c_str(),
                static_cast<long long>(startStep));
  }

  // Data: the first step's windows, so a bad file fails now (--input alone
  // feeds fixed tensors instead).
  std::optional<TokenFile> tokens;
  if (args->get("data")) {
    Expected<TokenFile> opened = TokenFile::open(*args->get("data"), *tokenDType);
    if (!opened)
      return error(kExitBadInput, opened.getError());
    tokens.emplace(std::move(*opened));
    std::vector<uint32_t> windows;
    uint32_t vocab = static_cast<uint32_t>(step->getVocabSize().value_or(0));
    for (const SymbolBindings &sizes : shapes)
      if (Status status = tokens->sampleBatch(static_cast<uint64_t>(seed),
                                              static_cast<uint64_t>(startStep),
                                              sizes.at("batch"), sizes.at("seq"), windows, vocab,
                                              rank ? static_cast<uint64_t>(rank->getRank().rank *
                                                                           sizes.at("batch"))
                                                   : 0);
          !status)
        return error(kExitBadInput, status.getError());
    const SymbolBindings &first = shapes.front();
    std::printf("data %s: %llu tokens, %lld windows of %lld per step%s (seed "
                "%lld)\n",
                args->get("data")->c_str(),
                static_cast<unsigned long long>(tokens->getTokenCount()),
                static_cast<long long>(first.at("batch")),
                static_cast<long long>(first.at("seq") + 1),
                shapes.size() > 1 ? " at the first shape" : "",
                static_cast<long long>(seed));
  }

  // The device, where there is a driver: every kernel's image must load
  // (cubin, or PTX through the driver's JIT) and cuBLASLt must start on it.
  std::string deviceNote = "device checks skipped: no CUDA driver";
  Expected<CudaDriver> driver = CudaDriver::load();
  std::optional<Device> gpu;
  std::optional<CublasLt> lt;
  if (driver) {
    Expected<Device> opened = Device::open(*driver, static_cast<int>(device));
    if (!opened)
      return error(kExitNoDevice, "--device " + std::to_string(device) + ": " +
                                      opened.getError());
    gpu.emplace(std::move(*opened));
    if (rank) {
      if (Status s = rank->connect(*gpu); !s)
        return error(kExitNoDevice, s.getError());
      const Nccl &nccl = rank->getCommunicator()->getNccl();
      std::printf("nccl: %s (%s), rank %d of %d on device %lld, NCCL_NVLS_ENABLE=%s\n",
                  nccl.getVersionString().c_str(), nccl.getLibrary().c_str(),
                  rank->getRank().rank, rank->getRank().world, static_cast<long long>(device),
                  std::getenv("NCCL_NVLS_ENABLE") ? std::getenv("NCCL_NVLS_ENABLE") : "unset");
    }
    const DeviceInfo &info = gpu->getInfo();
    std::vector<KernelModule> modules;
    size_t jitted = 0;
    for (const auto &kernel : step->getKernels()) {
      Expected<KernelImageChoice> image =
          step->selectImage(kernel.first, info.computeCapabilityMajor,
                            info.computeCapabilityMinor);
      if (!image)
        return error(kExitNoDevice, image.getError());
      Expected<KernelModule> module = KernelModule::load(
          *gpu, step->getContainer().contents(image->section), image->needsJit,
          image->section);
      if (!module)
        return error(kExitNoDevice, artifactPath + ": " + module.getError());
      modules.push_back(std::move(*module));
      jitted += image->needsJit;
    }
    Expected<CublasLt> loaded = CublasLt::load();
    if (!loaded)
      return error(kExitNoDevice, loaded.getError());
    lt.emplace(std::move(*loaded));
    cublasLtHandle_t handle = nullptr;
    if (cublasStatus_t status = lt->cublasLtCreate(&handle);
        status != CUBLAS_STATUS_SUCCESS)
      return error(kExitNoDevice,
                   "cublasLtCreate failed: " + lt->describe(status));
    lt->cublasLtDestroy(handle);
    deviceNote = formatDevice(info) + ", " + std::to_string(modules.size()) +
                 " kernel image(s) loaded (" + std::to_string(jitted) +
                 " by PTX JIT), cuBLASLt " + lt->getVersionString() +
                 " started";
  }
  if (!step->hasStepProgram())
    return error(kExitNotBuilt,
                 "the artifact has no step program (artifact, " +
                     std::string(weightFiles.empty() ? "" : "weights, ") +
                     "data and guards are valid; " + deviceNote +
                     "); recompile with kiln compile --emit=artifact; nothing "
                     "was trained");
  if (!gpu) // The loader's message already says there is no driver.
    return error(kExitNoDevice, driver.getError() + "; nothing was trained");
  if (args->get("save-adapters") && !step->getMeta().get("lora"))
    return error(kExitUsage, "--save-adapters: " + artifactPath +
                                 " has no LoRA adapters (compile with kiln compile --lora)");
  std::printf("%s\n", deviceNote.c_str());
  return executeSteps(*step, *gpu, *lt, weightFiles,
                      *args, shapes, startStep, steps, logEvery,
                      static_cast<uint64_t>(seed), tokens ? &*tokens : nullptr,
                      randomInitSeed, rank.get());
}
