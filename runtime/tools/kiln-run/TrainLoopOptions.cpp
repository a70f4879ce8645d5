//===- TrainLoopOptions.cpp - kiln-run train's loop flags -----------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "TrainLoopOptions.h"

#include "kiln/artifact/FileIO.h"
#include "kiln/runtime/TrainMetrics.h"

#include <cerrno>
#include <cstdlib>
#include <sys/stat.h>
#include <unistd.h>

using namespace kiln::run;
using namespace kiln::runtime;

bool kiln::run::parseCount(const std::string &flag, const std::string &text, int64_t minimum,
                           int64_t &out, std::string &message) {
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

std::string kiln::run::joinProblems(const std::vector<std::string> &problems) {
  if (problems.size() == 1)
    return problems.front();
  std::string text = std::to_string(problems.size()) + " problems with the flags: ";
  for (size_t i = 0; i < problems.size(); ++i)
    text += (i ? "; " : "") + problems[i];
  return text;
}

LoopOptions kiln::run::parseLoopOptions(const Arguments &args, std::vector<std::string> &problems) {
  LoopOptions o;
  std::string message;
  auto count = [&](const char *flag, int64_t minimum, int64_t &out) {
    if (std::optional<std::string> text = args.get(flag))
      if (!parseCount(flag, *text, minimum, out, message))
        problems.push_back(message);
  };
  auto needs = [&](const char *flag, const char *other, const char *why) {
    if (args.get(flag) && !args.get(other))
      problems.push_back(std::string("--") + flag + " needs --" + other + why);
  };
  if (std::optional<std::string> kind = args.get("lr-schedule")) {
    if (std::optional<LrSchedule::Kind> parsed = parseLrScheduleKind(*kind))
      o.schedule.kind = *parsed;
    else
      problems.push_back("--lr-schedule must be constant, linear or cosine, got '" + *kind + "'");
  }
  count("warmup", 0, o.schedule.warmup);
  if (std::optional<std::string> text = args.get("min-lr-ratio")) {
    char *end = nullptr;
    double value = std::strtod(text->c_str(), &end);
    if (text->empty() || *end || !(value >= 0 && value <= 1))
      problems.push_back("--min-lr-ratio needs a number from 0 to 1, got '" + *text + "'");
    else if (o.schedule.kind == LrSchedule::Kind::Constant)
      problems.push_back("--min-lr-ratio needs --lr-schedule linear or cosine (a constant "
                         "schedule does not decay)");
    else
      o.schedule.minRatio = value;
  }
  count("grad-accum", 1, o.gradAccum);
  o.evalData = args.get("eval-data");
  count("eval-every", 1, o.evalEvery);
  count("eval-batches", 1, o.evalBatches);
  needs("eval-data", "eval-every", " (how many steps apart to evaluate)");
  needs("eval-every", "eval-data", " (the held-out data)");
  needs("eval-batches", "eval-data", "");
  count("save-every", 1, o.saveEvery);
  count("keep-last", 1, o.keepLast);
  needs("save-every", "save", " (the checkpoint name the periodic ones are named after)");
  needs("keep-last", "save-every", " (it rotates the periodic checkpoints)");
  o.logFile = args.get("log-file");
  if (o.logFile) {
    struct stat info;
    std::string dir = artifact::parentDirectory(*o.logFile);
    if (o.logFile->empty() || o.logFile->back() == '/' || ::access(dir.c_str(), W_OK) != 0)
      problems.push_back("--log-file " + *o.logFile + ": cannot write there (directory '" + dir +
                         "' is missing or read-only)");
    else if (::stat(o.logFile->c_str(), &info) == 0 && !S_ISREG(info.st_mode))
      problems.push_back("--log-file " + *o.logFile +
                         ": not a regular file; refusing to append to it");
    else if (Status s = artifact::checkReplaceableFile(lossCurvePath(*o.logFile)); !s)
      problems.push_back("--log-file " + *o.logFile + ": its loss curve " + s.getError());
  }
  return o;
}
