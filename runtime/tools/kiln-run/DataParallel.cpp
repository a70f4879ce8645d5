//===- DataParallel.cpp - kiln-run train --gpus N and its ranks -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "DataParallel.h"

#include "Commands.h"

#include "kiln/runtime/Device.h"

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

using namespace kiln::run;
using namespace kiln::runtime;

namespace {

/// A fresh directory under $TMPDIR (or /tmp); empty on failure.
std::string makeTemporaryDirectory() {
  const char *tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-rendezvous-XXXXXX";
  std::vector<char> buffer(pattern.begin(), pattern.end());
  buffer.push_back('\0');
  if (!::mkdtemp(buffer.data()))
    return "";
  return buffer.data();
}

/// Removes the files of a rendezvous directory this process made, then it.
void removeDirectory(const std::string &dir) {
  if (DIR *d = ::opendir(dir.c_str())) {
    while (dirent *entry = ::readdir(d)) {
      std::string name = entry->d_name;
      if (name != "." && name != "..")
        ::unlink((dir + "/" + name).c_str());
    }
    ::closedir(d);
  }
  ::rmdir(dir.c_str());
}

std::string describeStatus(int status) {
  if (WIFEXITED(status))
    return "exit status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const char *name = ::strsignal(WTERMSIG(status));
    return "killed by signal " + std::to_string(WTERMSIG(status)) +
           (name ? std::string(" (") + name + ")" : std::string());
  }
  return "status " + std::to_string(status);
}

/// The rank a failure marker names ("rank K: ..."), if it names one.
std::optional<int> rankOfFailure(const std::string &text) {
  int rank = -1;
  if (std::sscanf(text.c_str(), "rank %d:", &rank) == 1 && rank >= 0)
    return rank;
  return std::nullopt;
}

} // namespace

int kiln::run::launchRanks(int gpus, const std::string &argv0, const std::vector<std::string> &args,
                           const std::string &rendezvous) {
  std::string dir = rendezvous;
  bool own = dir.empty();
  if (own && (dir = makeTemporaryDirectory()).empty())
    return error(kExitUsage, std::string("--gpus: cannot make a rendezvous directory: ") +
                                 std::strerror(errno));
  Rendezvous meeting(dir, RankInfo{0, gpus, 0});
  if (Status s = meeting.open(); !s) {
    if (own)
      removeDirectory(dir);
    return error(kExitUsage, "--rendezvous: " + s.getError());
  }
  const char *injected = std::getenv("KILN_RUN_LAUNCH_EXEC"); // tests: a fake rank
  std::string exe = injected && *injected ? injected : "/proc/self/exe";
  std::vector<std::string> argvText = {argv0, "train"};
  argvText.insert(argvText.end(), args.begin(), args.end());
  std::vector<char *> argvPointers;
  for (std::string &a : argvText)
    argvPointers.push_back(a.data());
  argvPointers.push_back(nullptr);

  std::fflush(stdout);
  std::fflush(stderr);
  std::map<pid_t, int> rankOf;
  for (int rank = 0; rank < gpus; ++rank) {
    pid_t pid = ::fork();
    if (pid < 0) {
      error(kExitNoDevice, std::string("--gpus: fork failed: ") + std::strerror(errno));
      for (auto &[child, r] : rankOf)
        ::kill(child, SIGKILL);
      while (::wait(nullptr) > 0) {
      }
      if (own)
        removeDirectory(dir);
      return kExitNoDevice;
    }
    if (pid == 0) {
      std::string r = std::to_string(rank), w = std::to_string(gpus);
      ::setenv("RANK", r.c_str(), 1);
      ::setenv("LOCAL_RANK", r.c_str(), 1);
      ::setenv("WORLD_SIZE", w.c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", w.c_str(), 1);
      ::setenv("KILN_RENDEZVOUS", dir.c_str(), 1);
      ::setenv("KILN_RUN_LAUNCHED", "1", 1);
      ::setenv("NCCL_NVLS_ENABLE", "0", 0); // NVLink multicast off unless the user chose
      ::execv(exe.c_str(), argvPointers.data());
      std::fprintf(stderr, "kiln-run: error: rank %d: cannot run %s: %s\n", rank, exe.c_str(),
                   std::strerror(errno));
      std::_Exit(127);
    }
    rankOf[pid] = rank;
  }

  // Wait; after the first failure the others get a grace period to see the
  // failure marker and abort their communicators, then SIGKILL.
  double grace = 10;
  if (const char *text = std::getenv("KILN_RUN_STOP_GRACE"))
    grace = std::strtod(text, nullptr);
  int failedRank = -1, failedCode = 0;
  std::string failedHow;
  auto failedAt = std::chrono::steady_clock::now();
  bool killed = false;
  while (!rankOf.empty()) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, failedRank >= 0 ? WNOHANG : 0);
    if (pid < 0 && errno == EINTR)
      continue;
    if (pid < 0)
      break;
    if (pid == 0) {
      double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - failedAt).count();
      if (!killed && waited > grace) {
        for (auto &[child, rank] : rankOf)
          ::kill(child, SIGKILL);
        killed = true;
      }
      ::usleep(20000);
      continue;
    }
    int rank = rankOf[pid];
    rankOf.erase(pid);
    bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (ok || failedRank >= 0)
      continue;
    // The failing rank's own marker names it (a stopped peer may exit first).
    failedRank = rank;
    failedCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    failedHow = describeStatus(status);
    if (std::optional<std::string> marker = meeting.failure())
      if (std::optional<int> named = rankOfFailure(*marker); named && *named != rank) {
        failedRank = *named;
        failedHow = "see its error above";
        failedCode = kExitStopped;
      }
    if (!meeting.failure())
      Rendezvous(dir, RankInfo{rank, gpus, rank}).markFailed(failedHow);
    failedAt = std::chrono::steady_clock::now();
  }
  if (own)
    removeDirectory(dir);
  if (failedRank < 0)
    return 0;
  char graceText[32];
  std::snprintf(graceText, sizeof graceText, "%g", grace);
  return error(failedCode ? failedCode : 1,
               "rank " + std::to_string(failedRank) + " of " + std::to_string(gpus) + " failed (" +
                   failedHow + "); stopped the other ranks" +
                   (killed ? std::string(" (killed after ") + graceText + " s)" : std::string()));
}

Expected<std::unique_ptr<RankSession>> RankSession::start(RankInfo rank, std::string dir) {
  std::unique_ptr<RankSession> session(new RankSession());
  session->rank = rank;
  RankSession *self = session.get();
  setErrorContext("rank " + std::to_string(rank.rank) + ": ", nullptr);
  if (rank.rank != 0 && !std::freopen("/dev/null", "w", stdout))
    return Error{std::string("cannot quiet stdout: ") + std::strerror(errno)};
  if (dir.empty())
    if (const char *env = std::getenv("KILN_RENDEZVOUS"))
      dir = env;
  if (dir.empty()) {
    if (rank.world > 1)
      return Error{"RANK/WORLD_SIZE are set but there is no rendezvous directory: pass "
                   "--rendezvous DIR (one every rank sees, empty) or set KILN_RENDEZVOUS"};
    if ((dir = makeTemporaryDirectory()).empty())
      return Error{std::string("cannot make a rendezvous directory: ") + std::strerror(errno)};
    session->ownDirectory = dir;
  }
  ::setenv("NCCL_NVLS_ENABLE", "0", 0);
  session->rendezvous = std::make_unique<Rendezvous>(dir, rank);
  if (Status s = session->rendezvous->open(); !s)
    return s.takeError();
  setErrorContext("rank " + std::to_string(rank.rank) + ": ", [self](const std::string &message) {
    self->stopping = true; // this rank's own failure: the watcher must not claim it
    self->rendezvous->markFailed(message);
  });
  return session;
}

RankSession::~RankSession() {
  stopping = true;
  if (watcher.joinable())
    watcher.join();
  // Still this rank's errors; no longer a rendezvous to tell.
  setErrorContext("rank " + std::to_string(rank.rank) + ": ", nullptr);
  communicator.reset();
  if (!ownDirectory.empty())
    removeDirectory(ownDirectory);
}

Status RankSession::connect(const Device &device) {
  Expected<Nccl> loaded = Nccl::load();
  if (!loaded)
    return loaded.takeError();
  nccl.emplace(std::move(*loaded));
  std::string id;
  if (rank.rank == 0) {
    nccl::UniqueId unique;
    nccl::Result result = nccl->ncclGetUniqueId(&unique);
    if (result != nccl::Success)
      return Error{"ncclGetUniqueId failed: " + nccl->describe(result)};
    id.assign(unique.internal, sizeof unique.internal);
  }
  Expected<std::string> shared = rendezvous->shareUniqueId(id);
  if (!shared)
    return shared.takeError();
  Expected<std::unique_ptr<Communicator>> made =
      Communicator::create(device, *nccl, *shared, rank.rank, rank.world);
  if (!made)
    return made.takeError();
  communicator = std::move(*made);
  watcher = std::thread([this] { watch(); });
  return Status::success();
}

void RankSession::watch() {
  while (!stopping) {
    std::optional<std::string> failed = rendezvous->failure();
    Status async = communicator->asyncError();
    if (stopping)
      return;
    if (failed || !async) {
      // Another rank failed (or NCCL saw a peer go): nothing this rank
      // computes can finish. Abort the communicator so no kernel spins, and
      // go.
      std::string why = failed ? *failed : async.getError();
      if (!failed)
        rendezvous->markFailed(why);
      communicator->abort();
      if (!std::getenv("KILN_RUN_LAUNCHED")) // the launcher says it once
        std::fprintf(stderr, "kiln-run: error: rank %d: stopped: %s\n", rank.rank, why.c_str());
      std::fflush(stderr);
      std::_Exit(kExitStopped);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

std::string RankSession::peakMemorySummary(double peakBytes) const {
  (void)rendezvous->publish("peak", std::to_string(static_cast<long long>(peakBytes)));
  if (rank.rank != 0)
    return "";
  std::map<int, std::string> peaks = rendezvous->collect("peak", 30);
  std::string text;
  for (int k = 0; k < rank.world; ++k) {
    auto it = peaks.find(k);
    double bytes = it == peaks.end() ? -1 : std::strtod(it->second.c_str(), nullptr);
    char value[32];
    if (bytes < 0)
      std::snprintf(value, sizeof value, "?");
    else
      std::snprintf(value, sizeof value, "%.2f GiB", bytes / (1024.0 * 1024 * 1024));
    text += (text.empty() ? "" : ", ") + ("rank " + std::to_string(k) + " ") + value;
  }
  return text;
}
