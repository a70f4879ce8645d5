//===- Commands.h - kiln-run subcommands ------------------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUN_COMMANDS_H
#define KILN_RUN_COMMANDS_H

#include "kiln/artifact/Guards.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {
class StepArtifact;
}

namespace kiln::run {

/// Exit codes of every subcommand.
constexpr int kExitBadInput = 1; ///< Artifact, weights, data or checkpoint.
constexpr int kExitUsage = 2;    ///< Flags.
constexpr int kExitNoDevice = 3; ///< No driver/device, wrong arch, no cuBLASLt.
constexpr int kExitGuard = 4;    ///< Sizes violate the artifact's guards.
constexpr int kExitNotBuilt = 5; ///< A part of the runtime not built yet.
constexpr int kExitStopped = 6;  ///< A data-parallel rank stopped: another failed.

/// Prints "kiln-run: error: <message>" and returns \p exitCode.
int error(int exitCode, const std::string &message);
/// A data-parallel rank: errors start with \p prefix ("rank 1: ") and are
/// passed to \p hook (which tells the other ranks).
void setErrorContext(std::string prefix, std::function<void(const std::string &)> hook);

/// `--name value` / `--name=value` flags and positional arguments.
struct Arguments {
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> flags;

  /// Splits argv; a flag not in \p known (or a value-less one) is an error.
  static std::optional<Arguments>
  parse(int argc, char **argv, const std::vector<std::string> &known, std::string &errorMessage);
  /// The last value of --name, if given.
  std::optional<std::string> get(const std::string &name) const;
  const std::vector<std::string> &getAll(const std::string &name) const;
};

/// `COMMAND -h` or `COMMAND --help` (the only argument).
bool isHelp(int argc, char **argv);

/// The flags each command accepts (kiln-run --list-options prints them).
extern const std::vector<std::string> kNoFlags;
extern const std::vector<std::string> kTrainFlags;
extern const std::vector<std::string> kDataStatsFlags;
extern const std::vector<std::string> kReportFlags;
extern const std::vector<std::string> kTuneFlags;

/// Parses a non-negative integer flag (at least \p minimum); false with a message otherwise.
bool parseCount(const std::string &flag, const std::string &text, int64_t minimum, int64_t &out,
                std::string &message);
/// Parses --batch/--seq: comma lists of positive integers, zipped (a list
/// of one repeats) into the run's shapes.
bool parseShapes(const std::string &batchText, const std::string &seqText,
                 std::vector<artifact::SymbolBindings> &shapes, std::string &message);
/// "batch=4,seq=512".
std::string formatShape(const artifact::SymbolBindings &sizes);

int runDevices(int argc, char **argv);
int runInspect(int argc, char **argv);
/// inspect's list of the marked NF4 GEMMs (InspectNf4.cpp); 0 or an exit code.
int printNf4Gemms(const kiln::runtime::StepArtifact &step, const char *path);
int runCkptInfo(int argc, char **argv);
int runTrain(int argc, char **argv);
int runDataStats(int argc, char **argv);
int runReport(int argc, char **argv);
int runTune(int argc, char **argv);

} // namespace kiln::run

#endif // KILN_RUN_COMMANDS_H
