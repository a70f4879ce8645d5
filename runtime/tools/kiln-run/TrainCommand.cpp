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
// images and cuBLASLt. Executing the step program is not built yet: the
// command then stops with one line saying so, and never pretends to train.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "kiln/runtime/Checkpoint.h"
#include "kiln/runtime/CublasLt.h"
#include "kiln/runtime/CudaDriver.h"
#include "kiln/runtime/Device.h"
#include "kiln/runtime/StepArtifact.h"
#include "kiln/runtime/TokenData.h"

#include <cerrno>
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
    "  --steps N               optimizer steps to run\n"
    "  --batch B, --seq S      sequences per step and tokens per sequence\n"
    "  --seed S                data-order seed (default 0)\n"
    "  --lr LR                 learning rate (default: the artifact's)\n"
    "  --log-every K           print loss, step ms, tokens/s, peak memory "
    "every K "
    "steps (default 10)\n"
    "  --save FILE             write params + optimizer state + step "
    "(safetensors)\n"
    "  --resume FILE           continue from a --save checkpoint\n"
    "  --save-adapters DIR     write LoRA weights as a PEFT adapter directory\n"
    "  --device N              CUDA device ordinal (default 0)\n";

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
} // namespace

int kiln::run::runTrain(int argc, char **argv) {
  if (argc == 1 &&
      (!std::strcmp(argv[0], "-h") || !std::strcmp(argv[0], "--help"))) {
    std::fputs(kTrainUsage, stdout);
    return 0;
  }
  std::string message;
  std::optional<Arguments> args = Arguments::parse(
      argc, argv,
      {"weights", "init", "data", "token-dtype", "steps", "batch", "seq",
       "seed", "lr", "log-every", "save", "resume", "save-adapters", "device"},
      message);
  if (!args)
    return error(kExitUsage, message + " (see 'kiln-run train --help')");
  if (args->positional.size() != 1)
    return error(kExitUsage, "'train' takes one artifact file (see 'kiln-run "
                             "train --help')");
  const std::string &artifactPath = args->positional[0];

  // Flags first: a typo should not wait for a multi-GiB weights file.
  for (const char *required : {"data", "steps", "batch", "seq"})
    if (!args->get(required))
      return error(kExitUsage, std::string("missing --") + required +
                                   " (see 'kiln-run train --help')");
  int64_t steps, batch, seq, seed = 0, logEvery = 10, device = 0;
  if (!parseCount("steps", *args->get("steps"), 1, steps, message) ||
      !parseCount("batch", *args->get("batch"), 1, batch, message) ||
      !parseCount("seq", *args->get("seq"), 1, seq, message) ||
      (args->get("seed") &&
       !parseCount("seed", *args->get("seed"), 0, seed, message)) ||
      (args->get("log-every") &&
       !parseCount("log-every", *args->get("log-every"), 1, logEvery,
                   message)) ||
      (args->get("device") &&
       !parseCount("device", *args->get("device"), 0, device, message)))
    return error(kExitUsage, message);
  if (std::optional<std::string> lr = args->get("lr")) {
    char *end = nullptr;
    double value = std::strtod(lr->c_str(), &end);
    if (lr->empty() || *end || !(value > 0))
      return error(kExitUsage,
                   "--lr needs a positive number, got '" + *lr + "'");
  }
  // Output paths: their directory must exist and be writable now, not
  // after hours of training.
  for (const char *flag : {"save", "save-adapters"})
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
  std::optional<TokenDType> tokenDType = TokenDType::U16;
  if (std::optional<std::string> text = args->get("token-dtype"))
    if (!(tokenDType = parseTokenDType(*text)))
      return error(kExitUsage, "--token-dtype must be uint16 or uint32, got '" +
                                   *text + "'");
  const std::vector<std::string> &weightFiles = args->getAll("weights");
  std::optional<std::string> init = args->get("init");
  if (init) {
    int64_t initSeed;
    if (init->compare(0, 7, "random:") != 0 ||
        !parseCount("init", init->substr(7), 0, initSeed, message))
      return error(kExitUsage,
                   "--init must be random:SEED, got '" + *init + "'");
    if (!weightFiles.empty())
      return error(kExitUsage, "--init and --weights exclude each other");
  } else if (weightFiles.empty()) {
    return error(kExitUsage, "no weights: pass --weights FILE or --init "
                             "random:SEED");
  }

  // The artifact, and the sizes against its guards.
  Expected<StepArtifact> step = StepArtifact::open(artifactPath);
  if (!step)
    return error(kExitBadInput, step.getError());
  SymbolBindings sizes{{"batch", batch}, {"seq", seq}};
  for (const std::string &symbol : step->getSymbols())
    if (!sizes.count(symbol))
      return error(kExitBadInput, artifactPath +
                                      ": the step has size symbol '" + symbol +
                                      "'; kiln-run binds only batch and seq");
  if (Status status = checkGuards(step->getGuards(), sizes); !status)
    return error(kExitGuard, "--batch/--seq: " + status.getError());

  // Weights, then a resumed checkpoint.
  size_t trainable = 0;
  for (const ParamSpec &param : step->getParams())
    trainable += param.trainable;
  std::printf("artifact %s: %zu params (%zu trainable), %zu kernels, %zu "
              "guards\n",
              artifactPath.c_str(), step->getParams().size(), trainable,
              step->getKernels().size(), step->getGuards().size());
  if (weightFiles.size() > 1)
    return error(kExitNotBuilt, "sharded weights (several --weights) are not "
                                "built yet; merge them into one file");
  for (const std::string &path : weightFiles) {
    Expected<SafetensorsFile> weights = SafetensorsFile::open(path);
    if (!weights)
      return error(kExitBadInput, weights.getError());
    if (Status status = step->checkWeights(*weights); !status)
      return error(kExitBadInput, status.getError());
    std::printf("weights %s: %zu tensors, every frozen parameter matches\n",
                path.c_str(), weights->getTensors().size());
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

  // Data: the first step's windows, so a bad file fails now.
  Expected<TokenFile> tokens = TokenFile::open(*args->get("data"), *tokenDType);
  if (!tokens)
    return error(kExitBadInput, tokens.getError());
  std::vector<uint32_t> windows;
  uint32_t vocab = static_cast<uint32_t>(step->getVocabSize().value_or(0));
  if (Status status = tokens->sampleBatch(static_cast<uint64_t>(seed),
                                          static_cast<uint64_t>(startStep),
                                          batch, seq, windows, vocab);
      !status)
    return error(kExitBadInput, status.getError());
  std::printf("data %s: %llu tokens, %lld windows of %lld per step (seed "
              "%lld)\n",
              args->get("data")->c_str(),
              static_cast<unsigned long long>(tokens->getTokenCount()),
              static_cast<long long>(batch), static_cast<long long>(seq + 1),
              static_cast<long long>(seed));

  // The device, where there is a driver: every kernel's image must load
  // (cubin, or PTX through the driver's JIT) and cuBLASLt must start on it.
  std::string deviceNote = "device checks skipped: no CUDA driver";
  if (Expected<CudaDriver> driver = CudaDriver::load()) {
    Expected<Device> gpu = Device::open(*driver, static_cast<int>(device));
    if (!gpu)
      return error(kExitNoDevice, "--device " + std::to_string(device) + ": " +
                                      gpu.getError());
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
    Expected<CublasLt> lt = CublasLt::load();
    if (!lt)
      return error(kExitNoDevice, lt.getError());
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
  (void)logEvery;
  return error(kExitNotBuilt,
               "step program execution not built yet (artifact, " +
                   std::string(weightFiles.empty() ? "" : "weights, ") +
                   "data and guards are valid; " + deviceNote +
                   "); nothing was trained");
}
