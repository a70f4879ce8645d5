//===- kiln-run.cpp - Kiln runtime driver tool ------------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Exit codes (Commands.h): 0 success, 1 bad input file, 2 usage error, 3 no
// usable CUDA driver, device or library, 4 guard violation, 5 not built yet.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "KilnVersion.h"
#include "kiln/runtime/CublasLt.h"
#include "kiln/runtime/CudaDriver.h"

#include <cuda.h>

#include <cstdio>
#include <cstring>
#include <functional>

using namespace kiln::run;

namespace {
constexpr const char *kUsage =
    "USAGE: kiln-run <command> [arguments]\n"
    "\n"
    "COMMANDS:\n"
    "  devices     List the visible CUDA devices\n"
    "  inspect     Print a .kiln artifact: FILE\n"
    "  ckpt-info   Validate a safetensors file and list its tensors: FILE\n"
    "  train       Train a compiled step: STEP.kiln --data TOKENS.bin --steps "
    "N\n"
    "              (see 'kiln-run train --help')\n"
    "  data-stats  Check a fine-tuning dataset and report its padding waste:\n"
    "              DATA.kdocs --seq S (see 'kiln-run data-stats --help')\n"
    "  report      Planned and measured peak memory, step time and tokens/s of\n"
    "              artifacts: STEP.kiln... --batch B --seq S (see 'kiln-run report --help')\n"
    "  tune        Measure the step's candidates on this GPU and write the\n"
    "              tuning database: STEP.kiln --batch B --seq S\n"
    "              (see 'kiln-run tune --help')\n"
    "\n"
    "OPTIONS:\n"
    "  -h, --help  Show this help ('kiln-run COMMAND --help': the command's)\n"
    "  --version   Show the Kiln version and commit, the CUDA toolkit kiln-run\n"
    "              was built with, and the cuBLASLt and driver found now\n";

/// "13.0" from CUDA's 13000.
std::string cudaVersionString(int version) {
  return std::to_string(version / 1000) + "." + std::to_string(version % 1000 / 10);
}

int printVersion() {
  using namespace kiln::runtime;
  std::printf("kiln-run (Kiln " KILN_VERSION ", git " KILN_GIT_HASH ")\n");
  std::printf("  CUDA toolkit %s (built with)\n", cudaVersionString(CUDA_VERSION).c_str());
  // Both are loaded at run time; neither needs a GPU to report a version.
  Expected<CublasLt> lt = CublasLt::load();
  if (lt)
    std::printf("  cuBLASLt %s (%s)\n", lt->getVersionString().c_str(), lt->getLibrary().c_str());
  else
    std::printf("  cuBLASLt not found\n");
  Expected<CudaDriver> driver = CudaDriver::load();
  if (driver)
    std::printf("  CUDA driver %s\n", cudaVersionString(driver->getDriverVersion()).c_str());
  else
    std::printf("  CUDA driver not found\n");
  return 0;
}
} // namespace

bool kiln::run::isHelp(int argc, char **argv) {
  return argc == 1 && (!std::strcmp(argv[0], "-h") || !std::strcmp(argv[0], "--help"));
}

namespace {
std::string errorPrefix;
std::function<void(const std::string &)> errorHook;
} // namespace

void kiln::run::setErrorContext(std::string prefix, std::function<void(const std::string &)> hook) {
  errorPrefix = std::move(prefix);
  errorHook = std::move(hook);
}

int kiln::run::error(int exitCode, const std::string &message) {
  std::fprintf(stderr, "kiln-run: error: %s%s\n", errorPrefix.c_str(), message.c_str());
  std::fflush(stderr);
  if (errorHook)
    errorHook(message);
  return exitCode;
}

std::optional<Arguments> Arguments::parse(int argc, char **argv,
                                          const std::vector<std::string> &known,
                                          std::string &errorMessage) {
  Arguments args;
  for (int i = 0; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
      if (arg.size() > 1 && arg[0] == '-') {
        errorMessage = "unknown option '" + arg + "'";
        return std::nullopt;
      }
      args.positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2), value;
    size_t equals = name.find('=');
    bool inlineValue = equals != std::string::npos;
    if (inlineValue) {
      value = name.substr(equals + 1);
      name = name.substr(0, equals);
    }
    bool isKnown = false;
    for (const std::string &candidate : known)
      isKnown |= candidate == name;
    if (!isKnown) {
      errorMessage = "unknown option '--" + name + "'";
      return std::nullopt;
    }
    if (!inlineValue) {
      if (i + 1 >= argc) {
        errorMessage = "option '--" + name + "' needs a value";
        return std::nullopt;
      }
      value = argv[++i];
    }
    args.flags[name].push_back(value);
  }
  return args;
}

std::optional<std::string> Arguments::get(const std::string &name) const {
  auto it = flags.find(name);
  if (it == flags.end())
    return std::nullopt;
  return it->second.back();
}

const std::vector<std::string> &Arguments::getAll(const std::string &name) const {
  static const std::vector<std::string> none;
  auto it = flags.find(name);
  return it == flags.end() ? none : it->second;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  const char *command = argv[1];
  if (!std::strcmp(command, "-h") || !std::strcmp(command, "--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!std::strcmp(command, "--version"))
    return printVersion();
  struct {
    const char *name;
    int (*run)(int, char **);
    const std::vector<std::string> &flags;
  } commands[] = {{"devices", runDevices, kNoFlags},
                  {"inspect", runInspect, kNoFlags},
                  {"ckpt-info", runCkptInfo, kNoFlags},
                  {"train", runTrain, kTrainFlags},
                  {"data-stats", runDataStats, kDataStatsFlags},
                  {"report", runReport, kReportFlags},
                  {"tune", runTune, kTuneFlags}};
  if (!std::strcmp(command, "--list-options")) {
    // Hidden: every command and the flags it accepts, for the test that
    // each --help lists them.
    for (const auto &entry : commands) {
      std::printf("%s", entry.name);
      for (const std::string &flag : entry.flags)
        std::printf(" --%s", flag.c_str());
      std::printf("\n");
    }
    return 0;
  }
  for (const auto &entry : commands)
    if (!std::strcmp(command, entry.name))
      return entry.run(argc - 2, argv + 2);
  return error(kExitUsage,
               "unknown command '" + std::string(command) + "' (see 'kiln-run --help')");
}
