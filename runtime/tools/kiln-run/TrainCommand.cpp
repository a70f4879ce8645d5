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
#include "TrainLoopOptions.h"

#include "kiln/runtime/BatchSource.h"
#include "kiln/runtime/Checkpoint.h"
#include "kiln/runtime/CheckpointRotation.h"
#include "kiln/runtime/CublasLt.h"
#include "kiln/runtime/CudaDriver.h"
#include "kiln/runtime/Device.h"
#include "kiln/runtime/DocumentData.h"
#include "kiln/runtime/Nccl.h"
#include "kiln/runtime/PeftAdapterInit.h"
#include "kiln/runtime/Rendezvous.h"
#include "kiln/runtime/StepArtifact.h"
#include "kiln/runtime/StepExecutor.h"
#include "kiln/runtime/TokenData.h"
#include "kiln/runtime/TrainMetrics.h"
#include "kiln/runtime/TuningDb.h"

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>
#include <tuple>
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
    "  --data FILE             a fine-tuning dataset (scripts/kiln_dataset.py;\n"
    "                          docs/data.md) or raw little-endian token ids\n"
    "  --token-dtype T         raw token ids: uint16 (default) or uint32\n"
    "  --batching pad|pack     a dataset's rows: a document each, padded to the\n"
    "                          smallest --seq bucket holding the micro-batch's\n"
    "                          longest (pad, default), or documents packed into\n"
    "                          rows of one --seq (pack: needs a position_ids input)\n"
    "  --labels shifted|unshifted\n"
    "                          a dataset's labels: the next tokens (default, as\n"
    "                          scripts/export_hf.py exports) or the inputs\n"
    "  --shuffle on|off        a dataset's documents in a seeded order per epoch\n"
    "                          (default on) or in file order\n"
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
    "  --lr LR                 learning rate (default: the artifact's): the peak\n"
    "                          of --lr-schedule\n"
    "  --lr-schedule constant|linear|cosine\n"
    "                          transformers' schedules with --warmup steps of\n"
    "                          linear warmup from 0 (default constant)\n"
    "  --warmup N              warmup steps (default 0)\n"
    "  --min-lr-ratio R        linear/cosine: decay to R * lr instead of 0\n"
    "  --grad-accum K          micro-batches of --batch per optimizer step, the\n"
    "                          loss and gradients their counted-token-weighted\n"
    "                          mean (needs kiln compile --loop-programs)\n"
    "  --eval-data FILE        held-out data (as --data) for the eval program\n"
    "  --eval-every N          evaluate every N steps (and after the last)\n"
    "  --eval-batches M        micro-batches per evaluation (default 1), the\n"
    "                          same ones each time\n"
    "  --log-file FILE         append one JSON line per step (step, loss, lr,\n"
    "                          grad_norm, tokens, tokens_per_s, eval_loss); at\n"
    "                          the end draw FILE's losses as FILE.svg beside it\n"
    "  --log-every K           print loss, step ms, tokens/s, peak memory "
    "every K "
    "steps (default 10)\n"
    "  --save FILE             write params + optimizer state + step "
    "(safetensors)\n"
    "  --save-every N          also save every N steps as FILE-step<N> (--save\n"
    "                          FILE names them)\n"
    "  --keep-last K           keep only the newest K of those\n"
    "  --resume FILE           continue from a --save checkpoint: step, lr\n"
    "                          schedule and data order\n"
    "  --adapters DIR          start the LoRA adapters from a PEFT adapter\n"
    "                          directory (e.g. PEFT's own init) instead of the\n"
    "                          init program's; optimizer state starts at zero\n"
    "  --save-adapters DIR     write LoRA weights as a PEFT adapter directory\n"
    "  --device N              CUDA device ordinal (default 0)\n"
    "  --input NAME=FILE       a data input's raw elements, the same every "
    "step\n"
    "  --progress on|off|auto  a progress bar redrawn after every step (auto: when\n"
    "                          stdout is a terminal)\n"
    "  --graphs on|off         capture the step as a CUDA Graph (default on)\n"
    "  --graph-cache N         executable graphs kept per program (default 8);\n"
    "                          further shapes patch the least recently used\n"
    "  --thin-gemm on|off      run the bf16 GEMMs with one of M, N, K 16..64 (the\n"
    "                          LoRA GEMMs) on Kiln's own kernels instead of\n"
    "                          cuBLASLt (default off: slower on the H200 for most)\n"
    "  --lora-grad-pairs on|off\n"
    "                          run each LoRA adapter's dT and dB GEMMs as one pass\n"
    "                          over the output gradient (default off: slower in\n"
    "                          the H200's 1b and small steps)\n"
    "  --attention auto|kernels|cudnn|sm90\n"
    "                          who runs attention: cuDNN's fused attention where\n"
    "                          libcudnn.so.9 loads (KILN_CUDNN_LIBRARY names it)\n"
    "                          and takes the shape, else Kiln's sm_90a attention\n"
    "                          (kernels/kiln_fa90: the forward, and the backward\n"
    "                          after it) on an H100/H200, else the generated\n"
    "                          kernels (auto, default); only the generated\n"
    "                          kernels; cuDNN or fail; Kiln's sm_90a attention\n"
    "                          where it fits and the generated kernels\n"
    "                          elsewhere (sm90; masked attention runs on it\n"
    "                          under auto too)\n"
    "  --tuning on|off         use the tuning database's choices where its key\n"
    "                          matches this machine (default: on when the database\n"
    "                          exists; written by 'kiln-run tune')\n"
    "  --db FILE               the tuning database (default\n"
    "                          $XDG_CACHE_HOME/kiln/tuning.db, else ~/.cache/kiln/tuning.db)\n"
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
    "                          it out: each process is one rank on GPU LOCAL_RANK.\n"
    "                          Raw token --data only; not with --grad-accum or\n"
    "                          --eval-data\n"
    "  --rendezvous DIR        an empty directory every rank sees, where they meet\n"
    "                          (default with --gpus: a fresh temporary one; under\n"
    "                          RANK/WORLD_SIZE: $KILN_RENDEZVOUS)\n";

} // namespace

const std::vector<std::string> kiln::run::kTrainFlags = {
    "weights",      "init",          "data",         "token-dtype", "steps",     "batch",
    "seq",          "seed",          "lr",           "log-every",   "save",      "resume",
    "adapters",     "save-adapters", "device",       "input",       "graphs",    "graph-cache",
    "profile",      "progress",      "attention",    "batching",    "labels",    "shuffle",
    "lr-schedule",  "warmup",        "min-lr-ratio", "grad-accum",  "eval-data", "eval-every",
    "eval-batches", "save-every",    "keep-last",    "log-file",    "tuning",    "db",
    "gpus",         "rendezvous",    "thin-gemm",    "lora-grad-pairs"};

/// Parses --batch/--seq: comma lists of positive integers, zipped (a list
/// of one repeats) into the run's shapes.
bool kiln::run::parseShapes(const std::string &batchText, const std::string &seqText,
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
    shapes.push_back(
        {{"batch", batches[batches.size() == 1 ? 0 : i]}, {"seq", seqs[seqs.size() == 1 ? 0 : i]}});
  return true;
}

/// "batch=4,seq=512".
std::string kiln::run::formatShape(const SymbolBindings &sizes) {
  std::string text;
  for (const auto &[symbol, value] : sizes)
    text += (text.empty() ? "" : ",") + symbol + "=" + std::to_string(value);
  return text;
}

namespace {
/// The training loop on the GPU (docs/runtime.md, train).
int executeSteps(const StepArtifact &artifact, const Device &gpu, const CublasLt &lt,
                 const std::vector<std::string> &weightPaths, const Arguments &args,
                 const std::vector<SymbolBindings> &shapes, int64_t startStep, int64_t steps,
                 int64_t logEvery, uint64_t seed, BatchSource *data,
                 std::optional<uint64_t> randomInitSeed, const LoopOptions &loop,
                 BatchSource *evalData, uint64_t startCursor, const PeftAdapterInit *adapters,
                 const TuningDb *tuning, const std::string &dbPath, RankSession *rank) {
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
  options.tuning = tuning;
  if (std::optional<std::string> graphs = args.get("graphs")) {
    if (*graphs != "on" && *graphs != "off")
      return error(kExitUsage, "--graphs must be on or off, got '" + *graphs + "'");
    options.useGraphs = *graphs == "on";
  }
  if (std::optional<std::string> text = args.get("graph-cache")) // checked by runTrain
    options.graphsPerProgram = static_cast<size_t>(std::strtoll(text->c_str(), nullptr, 10));
  options.thinGemm = args.get("thin-gemm").value_or("off") == "on"; // checked by runTrain
  options.loraGradPairs = args.get("lora-grad-pairs").value_or("off") == "on"; // checked too
  if (std::optional<std::string> mode = args.get("attention")) // checked by runTrain
    options.attention = *mode == "kernels" ? StepExecutor::Options::Attention::Kernels
                        : *mode == "cudnn" ? StepExecutor::Options::Attention::Cudnn
                        : *mode == "sm90"  ? StepExecutor::Options::Attention::Sm90
                                           : StepExecutor::Options::Attention::Auto;
  // Measured peak: device memory free before the step is loaded minus
  // free after each step (arena, weights, workspace, graphs, and what
  // cuBLASLt and the driver allocate on the way).
  gpu.traceMemory("before the step is loaded");
  Expected<std::pair<size_t, size_t>> before = gpu.getMemoryInfo();
  if (!before)
    return error(kExitNoDevice, before.getError());
  Expected<std::unique_ptr<StepExecutor>> made =
      StepExecutor::create(artifact, gpu, lt, weights.empty() ? nullptr : &weights, options);
  if (!made)
    return error(kExitBadInput, made.getError());
  StepExecutor &x = **made;
  if (adapters)
    if (Status s = uploadPeftAdapters(*adapters, x, gpu); !s)
      return error(kExitBadInput, s.getError());
  if (std::optional<std::string> resume = args.get("resume")) {
    Expected<SafetensorsFile> ckpt = SafetensorsFile::open(*resume);
    if (!ckpt)
      return error(kExitBadInput, ckpt.getError());
    if (Status s = x.loadCheckpoint(*ckpt); !s)
      return error(kExitBadInput, s.getError());
  }
  std::printf("step program: %zu launches, %zu GEMMs; device memory: %zu bytes "
              "persistent + %zu bytes arena and GEMM workspace (%s)\n",
              x.getLaunchCount(), x.getGemmCount(), x.getPersistentBytes(), x.getArenaBytes(),
              x.usesArtifactPlan() ? "the artifact's memory plan" : "planned at load");
  if (std::string attention = x.getAttentionSummary(); !attention.empty())
    std::printf("%s\n", attention.c_str());
  if (options.thinGemm)
    std::printf("thin GEMMs: %zu of %zu on Kiln's kernels (--thin-gemm on)\n",
                x.getThinGemmCount(), x.getGemmCount());
  if (size_t pairs = x.getLoraPairCount())
    std::printf("lora grad pairs: %zu (%zu of %zu GEMMs) in one pass over dy\n", pairs, 2 * pairs,
                x.getGemmCount());
  if (std::string nf4 = x.getNf4Summary(); !nf4.empty())
    std::printf("%s\n", nf4.c_str());
  if (tuning) {
    // Shapes beyond the first are counted once they are prepared.
    for (const SymbolBindings &sizes : shapes)
      if (Status s = x.selectShape(sizes); !s)
        return error(kExitBadInput, s.getError());
    if (Status s = x.selectShape(shapes.front()); !s)
      return error(kExitBadInput, s.getError());
    std::printf("%s\n", describeTuningUse(*tuning, dbPath, x.getTuningKey(), x.getTunedOpCount(),
                                          x.getDefaultOpCount(), x.getTuningNote())
                            .c_str());
  }
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
      return error(kExitBadInput, path + ": " + std::to_string(file->size()) + " bytes; input '" +
                                      name + "' needs " + std::to_string(input->second) + " " +
                                      dtypeName(input->first) + " elements (" +
                                      std::to_string(want) + " bytes)");
    if (Status s = x.setInput(name, file->data(), input->first, static_cast<size_t>(input->second));
        !s)
      return error(kExitBadInput, s.getError());
    fixed.insert(name);
  }

  MicroBatch batchData;
  std::vector<ActionTime> profile;
  double peak = 0;
  std::string progressMode = args.get("progress").value_or("auto");
  ProgressBar progress(startStep, steps,
                       progressMode == "on" || (progressMode == "auto" && ::isatty(STDOUT_FILENO)));
  // The data order continues where the checkpoint left it.
  if (data)
    if (Status s = data->seek(startCursor); !s)
      return error(kExitBadInput, s.getError());
  // The schedule spans the whole run, resumed parts included.
  LrSchedule schedule = loop.schedule;
  schedule.peak = lr;
  schedule.total = startStep + steps;
  bool accumulate = loop.gradAccum > 1;
  std::optional<MetricsLog> log;
  // Rank 0 alone writes files: every rank holds the same parameters and loss.
  if (loop.logFile && leader) {
    Expected<MetricsLog> opened = MetricsLog::open(*loop.logFile);
    if (!opened)
      return error(kExitBadInput, opened.getError());
    log.emplace(std::move(*opened));
  }
  std::optional<std::string> savePath = args.get("save");
  // Writes params, optimizer state, step and data cursor (atomically).
  auto saveCheckpoint = [&](const std::string &path, int64_t completed) -> int {
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
    LoopState position;
    if (data)
      position.dataCursor = data->getCursor();
    position.gradAccum = loop.gradAccum;
    if (Status s = writeCheckpoint(path, completed, p, st, nullptr, position); !s)
      return error(kExitBadInput, s.getError());
    std::printf("saved %s: step %lld\n", path.c_str(), static_cast<long long>(completed));
    return 0;
  };
  bool needsData = false;
  for (const std::string &name : x.getDataInputs())
    needsData |= !fixed.count(name);
  // Draws the next micro-batch of `source` (none: the fixed inputs at the
  // shape of `draw`) and uploads it; `sizes` gets its shape.
  auto feed = [&](BatchSource *source, uint64_t draw, const SymbolBindings *&sizes,
                  int64_t &counted) -> int {
    sizes = &shapes[draw % shapes.size()];
    counted = 0;
    if (needsData) {
      if (!source)
        return error(kExitUsage, "the step's data inputs need --data or --input");
      if (Status s = source->next(batchData); !s)
        return error(kExitBadInput, s.getError());
      sizes = &batchData.sizes;
      counted = batchData.countedTokens;
    }
    if (shapes.size() > 1)
      if (Status s = x.selectShape(*sizes); !s)
        return error(kExitBadInput, s.getError());
    for (const std::string &name : x.getDataInputs()) {
      if (fixed.count(name))
        continue;
      auto values = batchData.inputs.find(name);
      if (values == batchData.inputs.end())
        return error(kExitUsage, "input '" + name + "' is not made by the data (" +
                                     source->describe() + "); feed it with --input");
      if (Status s = x.setInput(name, values->second.data(), DType::I64, values->second.size()); !s)
        return error(kExitBadInput, s.getError());
    }
    return 0;
  };
  // The eval program over the same --eval-batches micro-batches each time:
  // their loss weighted by counted tokens.
  auto evaluate = [&](int64_t t, double &evalLoss) -> int {
    if (Status s = evalData->seek(0); !s)
      return error(kExitBadInput, "--eval-data: " + s.getError());
    double sum = 0, tokens = 0;
    for (int64_t b = 0; b < loop.evalBatches; ++b) {
      const SymbolBindings *sizes;
      int64_t counted;
      if (int rc = feed(evalData, static_cast<uint64_t>(b), sizes, counted))
        return rc;
      Expected<StepExecutor::ProgramOutputs> out = x.runEval();
      if (!out)
        return error(kExitNoDevice, "eval after step " + std::to_string(t) + ": " + out.getError());
      double n = out->tokens.value_or(1);
      if (n > 0)
        sum += out->loss * n, tokens += n;
    }
    evalLoss = tokens > 0 ? sum / tokens : std::nan("");
    progress.clear();
    std::printf("eval step %lld loss %.7f tokens %.0f\n", static_cast<long long>(t), evalLoss,
                tokens);
    return 0;
  };
  for (int64_t t = startStep + 1; t <= startStep + steps; ++t) {
    // Without a data source, micro-batch d's shape depends on d alone, so a
    // resumed run continues the schedule; a source picks the shape of each
    // micro-batch (its bucket) the same way from its cursor.
    double stepLr = schedule.at(t);
    auto begin = std::chrono::steady_clock::now();
    const SymbolBindings *sizes = nullptr;
    int64_t counted = 0, positions = 0;
    Expected<double> loss = 0.0;
    std::optional<double> gradNorm;
    if (!accumulate) {
      if (int rc = feed(data, static_cast<uint64_t>(t - 1), sizes, counted))
        return rc;
      positions = sizes->at("batch") * sizes->at("seq");
      std::optional<std::string> profilePath = args.get("profile");
      loss = profilePath && leader && t == startStep + steps ? x.runProfiledStep(t, stepLr, profile)
                                                             : x.runStep(t, stepLr);
      gradNorm = x.getLastGradNorm();
    } else {
      for (int64_t m = 0; m < loop.gradAccum; ++m) {
        uint64_t draw = static_cast<uint64_t>((t - 1) * loop.gradAccum + m);
        int64_t n;
        if (int rc = feed(data, draw, sizes, n))
          return rc;
        counted += n;
        positions += sizes->at("batch") * sizes->at("seq");
        Expected<StepExecutor::ProgramOutputs> micro =
            x.runAccumulate(static_cast<int64_t>(draw) + 1);
        if (!micro)
          return error(kExitNoDevice, "step " + std::to_string(t) + " micro-batch " +
                                          std::to_string(m) + ": " + micro.getError());
      }
      Expected<StepExecutor::ProgramOutputs> applied = x.runApply(t, stepLr);
      if (!applied)
        loss = Error{applied.getError()};
      else
        loss = applied->loss, gradNorm = applied->gradNorm;
    }
    if (!loss)
      return error(kExitNoDevice, "step " + std::to_string(t) + ": " + loss.getError());
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    if (Expected<std::pair<size_t, size_t>> now = gpu.getMemoryInfo(); now)
      peak = std::max(peak, static_cast<double>(before->first) - static_cast<double>(now->first));
    if (t <= startStep + 2)
      gpu.traceMemory("step " + std::to_string(t));
    if (!std::isfinite(*loss))
      return error(kExitBadInput,
                   "step " + std::to_string(t) + ": the loss is " + std::to_string(*loss));
    // Every rank's positions: the ranks run their shards at the same time.
    double tokensPerSecond = static_cast<double>(positions * world) / (ms / 1000.0);
    if ((t - startStep) % logEvery == 0 || t == startStep + steps || t == startStep + 1) {
      progress.clear();
      std::string extra;
      if (args.get("lr-schedule") || args.get("warmup"))
        extra += " lr " + std::to_string(stepLr);
      if (gradNorm)
        extra += " grad_norm " + std::to_string(*gradNorm);
      std::printf("step %lld loss %.7f step_ms %.3f tokens/s %.0f peak_mem %.0f%s%s\n",
                  static_cast<long long>(t), *loss, ms, tokensPerSecond, peak, extra.c_str(),
                  shapes.size() > 1 ? (" shape " + formatShape(*sizes)).c_str() : "");
    }
    progress.update(t, *loss, ms);
    StepMetrics metrics;
    metrics.step = t;
    metrics.loss = *loss;
    metrics.lr = stepLr;
    metrics.gradNorm = gradNorm;
    if (needsData)
      metrics.tokens = counted * world;
    metrics.tokensPerSecond = tokensPerSecond;
    if (evalData && (t % loop.evalEvery == 0 || t == startStep + steps)) {
      double evalLoss;
      if (int rc = evaluate(t, evalLoss))
        return rc;
      metrics.evalLoss = evalLoss;
    }
    if (log)
      if (Status s = log->append(metrics); !s)
        return error(kExitBadInput, s.getError());
    if (leader && loop.saveEvery && t % loop.saveEvery == 0 && t != startStep + steps) {
      if (int rc = saveCheckpoint(periodicCheckpointPath(*savePath, t), t))
        return rc;
      std::vector<std::string> removed;
      if (loop.keepLast)
        if (Status s = prunePeriodicCheckpoints(*savePath, loop.keepLast, removed); !s)
          return error(kExitBadInput, s.getError());
      for (const std::string &path : removed)
        std::printf("removed %s (--keep-last %lld)\n", path.c_str(),
                    static_cast<long long>(loop.keepLast));
    }
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
  if (!leader)
    return 0;
  if (std::optional<std::string> path = args.get("profile"); path && steps > 0)
    if (Status s = writeProfile(*path, profile); !s)
      return error(kExitBadInput, s.getError());
  if (steps == 0)
    std::printf("0 steps: parameters loaded and initialized, nothing trained\n");

  if (savePath)
    if (int rc = saveCheckpoint(*savePath, startStep + steps))
      return rc;
  if (log) {
    // The loss curve of the whole log (earlier runs of a resumed one too).
    Expected<std::vector<StepMetrics>> logged = readMetricsLog(log->getPath());
    if (!logged)
      return error(kExitBadInput, logged.getError());
    std::string svg = renderLossCurveSvg(*logged, "kiln-run train: " + log->getPath());
    std::string picture = lossCurvePath(log->getPath());
    if (Status s = writeFileAtomically(picture, [&](FileWriter &w) { return w.write(svg); }); !s)
      return error(kExitBadInput, s.getError());
    std::printf("wrote %s (%zu steps)\n", picture.c_str(), logged->size());
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
  if (argc == 1 && (!std::strcmp(argv[0], "-h") || !std::strcmp(argv[0], "--help"))) {
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

  // Flags first: a typo should not wait for a multi-GiB weights file. Every
  // problem is collected and reported together in one line.
  std::vector<std::string> problems;
  if (!args->get("data") && args->getAll("input").empty())
    problems.push_back("missing --data");
  for (const char *required : {"steps", "batch", "seq"})
    if (!args->get(required))
      problems.push_back(std::string("missing --") + required);
  int64_t steps = 0, seed = 0, logEvery = 10, device = 0, graphCache = 8;
  // --steps 0 loads everything and runs the init program, so --save and
  // --save-adapters write the initial parameters (bench/loss_curve.py gives
  // PyTorch Kiln's LoRA init this way).
  for (auto [flag, minimum, out] :
       {std::tuple<const char *, int64_t, int64_t *>{"steps", 0, &steps},
        {"seed", 0, &seed},
        {"log-every", 1, &logEvery},
        {"device", 0, &device},
        {"graph-cache", 1, &graphCache}})
    if (std::optional<std::string> text = args->get(flag))
      if (!parseCount(flag, *text, minimum, *out, message))
        problems.push_back(message);
  std::vector<SymbolBindings> shapes;
  if (args->get("batch") && args->get("seq")) {
    if (!parseShapes(*args->get("batch"), *args->get("seq"), shapes, message))
      problems.push_back(message);
    else if (shapes.size() > 1 && !args->getAll("input").empty())
      problems.push_back("--input feeds one shape; give one --batch and --seq with it");
  }
  if (std::optional<std::string> mode = args->get("progress");
      mode && *mode != "on" && *mode != "off" && *mode != "auto")
    problems.push_back("--progress must be on, off or auto, got '" + *mode + "'");
  if (std::optional<std::string> mode = args->get("attention");
      mode && *mode != "auto" && *mode != "kernels" && *mode != "cudnn" && *mode != "sm90")
    problems.push_back("--attention must be auto, kernels, cudnn or sm90, got '" + *mode + "'");
  if (std::optional<std::string> mode = args->get("graphs");
      mode && *mode != "on" && *mode != "off")
    problems.push_back("--graphs must be on or off, got '" + *mode + "'");
  if (std::optional<std::string> mode = args->get("thin-gemm");
      mode && *mode != "on" && *mode != "off")
    problems.push_back("--thin-gemm must be on or off, got '" + *mode + "'");
  if (std::optional<std::string> mode = args->get("lora-grad-pairs");
      mode && *mode != "on" && *mode != "off")
    problems.push_back("--lora-grad-pairs must be on or off, got '" + *mode + "'");
  // The tuning database: used when it exists (or --tuning on), never
  // trusted when damaged.
  std::optional<std::string> tuningMode = args->get("tuning");
  if (tuningMode && *tuningMode != "on" && *tuningMode != "off")
    problems.push_back("--tuning must be on or off, got '" + *tuningMode + "'");
  std::string dbPath = args->get("db").value_or(defaultTuningDbPath());
  std::optional<TuningDb> tuning;
  if (tuningMode.value_or("on") == "on" && !dbPath.empty()) {
    bool explicitly = tuningMode || args->get("db");
    if (::access(dbPath.c_str(), F_OK) == 0) {
      Expected<TuningDb> loaded = TuningDb::load(dbPath);
      if (loaded)
        tuning.emplace(std::move(*loaded));
      else
        std::fprintf(stderr, "kiln-run: note: tuning database %s; ignored, defaults used\n",
                     loaded.getError().c_str());
    } else if (explicitly) {
      std::fprintf(stderr,
                   "kiln-run: note: no tuning database at %s (write one with kiln-run "
                   "tune); defaults used\n",
                   dbPath.c_str());
    }
  }
  if (std::optional<std::string> lr = args->get("lr")) {
    char *end = nullptr;
    double value = std::strtod(lr->c_str(), &end);
    if (lr->empty() || *end || !(value > 0))
      problems.push_back("--lr needs a positive number, got '" + *lr + "'");
  }
  if (args->get("adapters") && args->get("resume"))
    return error(kExitUsage, "--adapters and --resume exclude each other (a checkpoint holds "
                             "the adapters)");
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
      if (path->empty() || path->back() == '/' || ::access(dir.c_str(), W_OK) != 0) {
        problems.push_back(std::string("--") + flag + " " + *path +
                           ": cannot write there (directory '" + dir +
                           "' is missing or read-only)");
        continue;
      }
      // ... and each replaces only a regular file: never a directory, a
      // device, a FIFO, or anything under /proc.
      if (!std::strcmp(flag, "save-adapters")) {
        if (Status s = checkPeftAdapterDir(*path); !s)
          problems.push_back("--save-adapters " + s.getError());
      } else if (Status s = checkReplaceableFile(*path); !s) {
        problems.push_back(std::string("--") + flag + " " + s.getError());
      }
    }
  for (auto [flag, a, b] :
       {std::tuple<const char *, const char *, const char *>{"batching", "pad", "pack"},
        {"labels", "shifted", "unshifted"},
        {"shuffle", "on", "off"}})
    if (std::optional<std::string> value = args->get(flag); value && *value != a && *value != b)
      problems.push_back(std::string("--") + flag + " must be " + a + " or " + b + ", got '" +
                         *value + "'");
  std::optional<TokenDType> tokenDType = TokenDType::U16;
  if (std::optional<std::string> text = args->get("token-dtype"))
    if (!(tokenDType = parseTokenDType(*text))) {
      problems.push_back("--token-dtype must be uint16 or uint32, got '" + *text + "'");
      tokenDType = TokenDType::U16;
    }
  const std::vector<std::string> &weightFiles = args->getAll("weights");
  std::optional<std::string> init = args->get("init");
  std::optional<uint64_t> randomInitSeed;
  if (init) {
    int64_t initSeed;
    if (init->compare(0, 7, "random:") != 0 ||
        !parseCount("init", init->substr(7), 0, initSeed, message))
      problems.push_back("--init must be random:SEED, got '" + *init + "'");
    else
      randomInitSeed = static_cast<uint64_t>(initSeed);
    if (!weightFiles.empty())
      problems.push_back("--init and --weights exclude each other");
  } else if (weightFiles.empty()) {
    problems.push_back("no weights: pass --weights FILE or --init random:SEED");
  }
  LoopOptions loop = parseLoopOptions(*args, problems);
  if (loop.gradAccum > 1 && args->get("profile"))
    problems.push_back("--profile times the fused step; it does not run with --grad-accum " +
                       std::to_string(loop.gradAccum));
  // Data parallelism: --gpus N launches the ranks (each runs this command
  // again, under RANK/WORLD_SIZE); under those variables this process is one.
  Expected<std::optional<RankInfo>> rankEnv =
      rankFromEnvironment([](const char *name) { return std::getenv(name); });
  if (!rankEnv)
    problems.push_back(rankEnv.getError());
  bool ranked = rankEnv && *rankEnv;
  int64_t gpuCount = 0;
  if (std::optional<std::string> gpus = args->get("gpus")) {
    if (!parseCount("gpus", *gpus, 1, gpuCount, message))
      problems.push_back(message);
    else if (gpuCount > 1024)
      problems.push_back("--gpus " + *gpus + ": more ranks than one host has GPUs");
    if (ranked)
      problems.push_back("--gpus starts its own ranks; under RANK/WORLD_SIZE (torchrun) "
                         "leave it out: each process is one rank");
    if (args->get("device"))
      problems.push_back("--gpus N uses GPUs 0..N-1; leave out --device (or set "
                         "CUDA_VISIBLE_DEVICES)");
  } else if (ranked && args->get("device")) {
    problems.push_back("--device: under RANK/WORLD_SIZE each rank uses GPU LOCAL_RANK "
                       "(set CUDA_VISIBLE_DEVICES to choose them)");
  } else if (!ranked && rankEnv && args->get("rendezvous")) {
    problems.push_back("--rendezvous needs --gpus N or RANK/WORLD_SIZE");
  }
  // The loop programs have no all-reduce (kiln compile refuses
  // --data-parallel with --loop-programs).
  if ((args->get("gpus") || ranked) && (loop.gradAccum > 1 || loop.evalData))
    problems.push_back("--grad-accum and --eval-data do not run data-parallel yet; compile the "
                       "accumulation in (kiln compile --data-parallel --grad-accum=N)");
  // Only token windows are sharded over the ranks (TokenWindowSource::setShard).
  if ((args->get("gpus") || ranked) && args->get("data") && isDocumentFile(*args->get("data")))
    problems.push_back("--data " + *args->get("data") +
                       " is a fine-tuning dataset; data-parallel "
                       "runs read raw token files only (a dataset's micro-batches are not "
                       "sharded over the ranks yet)");
  if (!problems.empty()) {
    bool missing = problems.size() > 1 || problems.front().compare(0, 10, "missing --") == 0;
    return error(kExitUsage,
                 joinProblems(problems) + (missing ? " (see 'kiln-run train --help')" : ""));
  }

  std::string rendezvousDir = args->get("rendezvous").value_or("");
  if (args->get("gpus")) {
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
    return launchRanks(static_cast<int>(gpuCount), "kiln-run", rankArgs, rendezvousDir);
  }
  std::unique_ptr<RankSession> rank;
  if (ranked) {
    Expected<std::unique_ptr<RankSession>> started = RankSession::start(**rankEnv, rendezvousDir);
    if (!started)
      return error(kExitUsage, started.getError());
    rank = std::move(*started);
    device = (*rankEnv)->localRank;
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
    for (const char *flag : {"steps", "batch", "seq", "seed", "lr", "init", "resume", "token-dtype",
                             "graphs", "adapters", "lr-schedule", "warmup", "min-lr-ratio"})
      if (std::optional<std::string> value = args->get(flag))
        settings[std::string("--") + flag] = *value;
    settings["WORLD_SIZE"] = std::to_string(rank->getRank().world);
    if (Status s = rank->getRendezvous().checkRanks(artifactPath, *hash, settings); !s)
      return error(kExitBadInput, s.getError());
    std::printf("data parallel: %d rank%s, rendezvous %s, artifact %s\n", rank->getRank().world,
                rank->getRank().world == 1 ? "" : "s", rank->getRendezvous().getDirectory().c_str(),
                hash->c_str());
  }
  for (const std::string &symbol : step->getSymbols())
    if (!shapes.front().count(symbol))
      return error(kExitBadInput, artifactPath + ": the step has size symbol '" + symbol +
                                      "'; kiln-run binds only batch and seq");
  for (const SymbolBindings &sizes : shapes)
    if (Status status = checkGuards(step->getGuards(), sizes); !status)
      return error(kExitGuard,
                   "--batch/--seq" +
                       (shapes.size() > 1 ? " (" + formatShape(sizes) + ")" : std::string()) +
                       ": " + status.getError());

  // Run-time accumulation and evaluation run the loop programs.
  if ((loop.gradAccum > 1 || loop.evalData) && !step->getProgram("accum")) {
    std::string flags = loop.gradAccum > 1 && loop.evalData ? "--grad-accum and --eval-data need"
                        : loop.gradAccum > 1                ? "--grad-accum needs"
                                                            : "--eval-data needs";
    return error(kExitUsage,
                 flags + " the loop programs, which " + artifactPath +
                     " lacks (compile with kiln compile --emit=artifact --loop-programs)");
  }

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
              artifactPath.c_str(), step->getParams().size(), trainable, step->getKernels().size(),
              step->getGuards().size());
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
    std::printf(
        "weights %s%s: %zu tensors, every frozen parameter matches\n", weightFiles.front().c_str(),
        shards.size() > 1 ? (" + " + std::to_string(shards.size() - 1) + " shards").c_str() : "",
        tensors);
  }
  int64_t startStep = 0;
  LoopState resumed_loop;
  if (std::optional<std::string> resume = args->get("resume")) {
    Expected<SafetensorsFile> ckpt = SafetensorsFile::open(*resume);
    if (!ckpt)
      return error(kExitBadInput, ckpt.getError());
    Expected<int64_t> resumed = checkCheckpoint(*step, *ckpt);
    if (!resumed)
      return error(kExitBadInput, resumed.getError());
    startStep = *resumed;
    Expected<LoopState> state = readLoopState(*ckpt);
    if (!state)
      return error(kExitBadInput, state.getError());
    resumed_loop = *state;
    std::printf("resume %s: step %lld\n", resume->c_str(), static_cast<long long>(startStep));
  }
  // The data order continues at the checkpoint's cursor (older checkpoints:
  // the steps it counts, each --grad-accum micro-batches).
  uint64_t startCursor = resumed_loop.dataCursor.value_or(static_cast<uint64_t>(startStep) *
                                                          static_cast<uint64_t>(loop.gradAccum));
  std::optional<PeftAdapterInit> adapters;
  if (std::optional<std::string> dir = args->get("adapters")) {
    Expected<PeftAdapterInit> opened = openPeftAdapters(*step, *dir);
    if (!opened)
      return error(kExitBadInput, opened.getError());
    adapters.emplace(std::move(*opened));
    std::printf("adapters %s: %zu LoRA tensors (PEFT), replacing the init program's\n",
                dir->c_str(), adapters->tensors.size());
  }

  // Data: the first step's micro-batches (one per shape), so a bad file
  // fails now (--input alone feeds fixed tensors instead).
  std::optional<TokenFile> tokens, evalTokens;
  std::optional<DocumentFile> documents, evalDocuments;
  std::unique_ptr<BatchSource> data, evalData;
  // --data, or --eval-data (heldOut: a dataset's documents in file order).
  auto openData = [&](const std::string &path, bool heldOut, std::optional<TokenFile> &tokens,
                      std::optional<DocumentFile> &documents,
                      std::unique_ptr<BatchSource> &data) -> int {
    std::set<std::string> fixedNames;
    for (const std::string &spec : args->getAll("input"))
      fixedNames.insert(spec.substr(0, spec.find('=')));
    std::vector<std::string> inputs;
    if (const StepProgram *program = step->getProgram("step")) {
      for (const ProgramBinding &arg : program->args)
        if (arg.role == "input" && !fixedNames.count(arg.name))
          inputs.push_back(arg.name);
    } else {
      inputs = {"input_ids", "labels"};
    }
    uint32_t vocab = static_cast<uint32_t>(step->getVocabSize().value_or(0));
    bool dataset = isDocumentFile(path);
    for (const char *flag : {"batching", "labels", "shuffle"})
      if (!dataset && args->get(flag))
        return error(kExitUsage, std::string("--") + flag + " is for a fine-tuning dataset; " +
                                     path +
                                     " is raw token ids (scripts/kiln_dataset.py writes one)");
    if (dataset) {
      Expected<DocumentFile> opened = DocumentFile::open(path);
      if (!opened)
        return error(kExitBadInput, opened.getError());
      documents.emplace(std::move(*opened));
      TokenDType fileDType = documents->getHeader().dtype;
      if (args->get("token-dtype") && *tokenDType != fileDType)
        return error(kExitUsage, path + ": the dataset holds " +
                                     (fileDType == TokenDType::U16 ? "uint16" : "uint32") +
                                     " tokens; --token-dtype " + *args->get("token-dtype") +
                                     " does not apply (drop it)");
      DocumentBatching batching;
      batching.mode = args->get("batching").value_or("pad") == "pack" ? DocumentBatching::Mode::Pack
                                                                      : DocumentBatching::Mode::Pad;
      batching.shiftedLabels = args->get("labels").value_or("shifted") == "shifted";
      batching.shuffle = !heldOut && args->get("shuffle").value_or("on") == "on";
      batching.seed = static_cast<uint64_t>(seed);
      batching.vocabSize = vocab;
      Expected<std::unique_ptr<DocumentSource>> made =
          DocumentSource::create(*documents, shapes, inputs, batching);
      if (!made)
        return error(kExitBadInput, made.getError());
      data = std::move(*made);
    } else {
      Expected<TokenFile> opened = TokenFile::open(path, *tokenDType);
      if (!opened)
        return error(kExitBadInput, opened.getError());
      tokens.emplace(std::move(*opened));
      auto windows = std::make_unique<TokenWindowSource>(*tokens, shapes, inputs,
                                                         static_cast<uint64_t>(seed), vocab);
      // Rank r reads rows r*batch .. (r+1)*batch-1 of each step's order:
      // together the ranks read what one process with world*batch would.
      if (rank)
        windows->setShard(static_cast<uint64_t>(rank->getRank().rank));
      data = std::move(windows);
    }
    return 0;
  };
  if (args->get("data")) {
    if (int rc = openData(*args->get("data"), false, tokens, documents, data))
      return rc;
    MicroBatch first;
    for (size_t i = 0; i < shapes.size(); ++i)
      if (Status status = data->seek(startCursor + i); !status || !(status = data->next(first)))
        return error(kExitBadInput, status.getError());
    std::printf("%s\n", data->describe().c_str());
  }
  if (loop.evalData) {
    if (int rc = openData(*loop.evalData, true, evalTokens, evalDocuments, evalData))
      return rc;
    MicroBatch first;
    if (Status status = evalData->seek(0); !status)
      return error(kExitBadInput, "--eval-data: " + status.getError());
    for (int64_t i = 0; i < loop.evalBatches; ++i)
      if (Status status = evalData->next(first); !status)
        return error(kExitBadInput, "--eval-data: " + status.getError());
    std::printf("eval %s, %lld micro-batch(es) every %lld steps\n", evalData->describe().c_str(),
                static_cast<long long>(loop.evalBatches), static_cast<long long>(loop.evalEvery));
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
      return error(kExitNoDevice, "--device " + std::to_string(device) + ": " + opened.getError());
    gpu.emplace(std::move(*opened));
    if (rank) {
      if (Status s = rank->connect(*gpu); !s)
        return error(kExitNoDevice, s.getError());
      const Nccl &nccl = rank->getCommunicator()->getNccl();
      std::printf("nccl: %s (%s), rank %d of %d on device %lld, NCCL_NVLS_ENABLE=%s\n",
                  nccl.getVersionString().c_str(), nccl.getLibrary().c_str(), rank->getRank().rank,
                  rank->getRank().world, static_cast<long long>(device),
                  std::getenv("NCCL_NVLS_ENABLE") ? std::getenv("NCCL_NVLS_ENABLE") : "unset");
    }
    const DeviceInfo &info = gpu->getInfo();
    std::vector<KernelModule> modules;
    size_t jitted = 0;
    for (const auto &kernel : step->getKernels()) {
      Expected<KernelImageChoice> image =
          step->selectImage(kernel.first, info.computeCapabilityMajor, info.computeCapabilityMinor);
      if (!image)
        return error(kExitNoDevice, image.getError());
      Expected<KernelModule> module = KernelModule::load(
          *gpu, step->getContainer().contents(image->section), image->needsJit, image->section);
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
    if (cublasStatus_t status = lt->cublasLtCreate(&handle); status != CUBLAS_STATUS_SUCCESS)
      return error(kExitNoDevice, "cublasLtCreate failed: " + lt->describe(status));
    lt->cublasLtDestroy(handle);
    deviceNote = formatDevice(info) + ", " + std::to_string(modules.size()) +
                 " kernel image(s) loaded (" + std::to_string(jitted) + " by PTX JIT), cuBLASLt " +
                 lt->getVersionString() + " started";
  }
  if (!step->hasStepProgram())
    return error(kExitNotBuilt, "the artifact has no step program (artifact, " +
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
  return executeSteps(*step, *gpu, *lt, weightFiles, *args, shapes, startStep, steps, logEvery,
                      static_cast<uint64_t>(seed), data.get(), randomInitSeed, loop, evalData.get(),
                      startCursor, adapters ? &*adapters : nullptr, tuning ? &*tuning : nullptr,
                      dbPath, rank.get());
}
