//===- Rendezvous.cpp - Ranks of a data-parallel run meet in a directory --===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/Rendezvous.h"

#include "kiln/artifact/Crc32c.h"
#include "kiln/artifact/FileIO.h"
#include "kiln/artifact/Json.h"

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <fcntl.h>
#include <fstream>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace kiln::runtime;
using kiln::artifact::Json;

namespace {

std::optional<int64_t> parseInt(const char *text) {
  if (!text || !*text)
    return std::nullopt;
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(text, &end, 10);
  if (*end || errno == ERANGE || value < INT_MIN || value > INT_MAX)
    return std::nullopt;
  return value;
}

std::optional<std::string> readFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return std::nullopt;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

} // namespace

Expected<std::optional<RankInfo>>
kiln::runtime::rankFromEnvironment(const std::function<const char *(const char *)> &getenv) {
  const char *rank = getenv("RANK"), *world = getenv("WORLD_SIZE"), *local = getenv("LOCAL_RANK"),
             *localWorld = getenv("LOCAL_WORLD_SIZE");
  if (!rank && !world && !local)
    return std::optional<RankInfo>();
  for (auto [name, value] : {std::pair{"RANK", rank}, {"WORLD_SIZE", world}})
    if (!value)
      return Error{std::string(name) + " is not set, but " +
                   (rank    ? "RANK"
                    : world ? "WORLD_SIZE"
                            : "LOCAL_RANK") +
                   " is: a data-parallel rank needs RANK, WORLD_SIZE and LOCAL_RANK"};
  std::optional<int64_t> w = parseInt(world);
  if (!w || *w < 1)
    return Error{"WORLD_SIZE='" + std::string(world) + "' is not a positive integer"};
  std::optional<int64_t> r = parseInt(rank);
  if (!r || *r < 0 || *r >= *w)
    return Error{"RANK='" + std::string(rank) +
                 "' is not an integer in [0, WORLD_SIZE=" + std::to_string(*w) + ")"};
  RankInfo info;
  info.rank = static_cast<int>(*r);
  info.world = static_cast<int>(*w);
  info.localRank = info.rank;
  if (local) {
    std::optional<int64_t> l = parseInt(local);
    if (!l || *l < 0 || *l >= *w)
      return Error{"LOCAL_RANK='" + std::string(local) +
                   "' is not an integer in [0, WORLD_SIZE=" + std::to_string(*w) + ")"};
    info.localRank = static_cast<int>(*l);
  }
  if (localWorld) {
    std::optional<int64_t> lw = parseInt(localWorld);
    if (!lw || *lw != *w)
      return Error{"LOCAL_WORLD_SIZE='" + std::string(localWorld) + "' differs from WORLD_SIZE=" +
                   std::to_string(*w) + ": kiln-run's data parallelism runs on one host"};
  }
  if (info.localRank != info.rank)
    return Error{"LOCAL_RANK=" + std::to_string(info.localRank) + " differs from RANK=" +
                 std::to_string(info.rank) + ": kiln-run's data parallelism runs on one host"};
  return std::optional<RankInfo>(info);
}

Expected<std::string> kiln::runtime::fileContentHash(const std::string &path) {
  Expected<artifact::MappedFile> file = artifact::MappedFile::open(path);
  if (!file)
    return file.takeError();
  uint32_t crc = artifact::crc32c(0, file->data(), file->size());
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return "crc32c:" + std::string(hex) + " bytes:" + std::to_string(file->size());
}

Rendezvous::Rendezvous(std::string dir, RankInfo rank, double timeoutSeconds)
    : dir(std::move(dir)), rank(rank), timeoutSeconds(timeoutSeconds) {
  while (this->dir.size() > 1 && this->dir.back() == '/')
    this->dir.pop_back();
}

Status Rendezvous::open() const {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    return Error{"rendezvous " + dir + ": not a directory"};
  if (::access(dir.c_str(), W_OK) != 0)
    return Error{"rendezvous " + dir + ": not writable"};
  if (rank.rank == 0)
    for (const char *name : {"nccl-id", "failed", "rank-0.json"})
      if (exists(path(name)))
        return Error{"rendezvous " + dir + " holds '" + name +
                     "' of an earlier run; give each run an empty directory"};
  return Status::success();
}

Status Rendezvous::writeAtomically(const std::string &name, const std::string &bytes) const {
  return artifact::writeFileAtomically(path(name),
                                       [&](artifact::FileWriter &out) { return out.write(bytes); });
}

Status Rendezvous::waitFor(const std::function<bool()> &ready, const std::string &what) const {
  auto start = std::chrono::steady_clock::now();
  while (true) {
    if (ready())
      return Status::success();
    if (std::optional<std::string> failed = failure())
      return Error{"stopped while waiting for " + what + ": " + *failed};
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > timeoutSeconds) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeoutSeconds);
      return Error{"rendezvous " + dir + ": " + what + " did not arrive within " + seconds + " s"};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Expected<std::string> Rendezvous::shareUniqueId(const std::string &id) const {
  if (rank.rank == 0) {
    if (id.size() != 128)
      return Error{"the NCCL unique id is " + std::to_string(id.size()) + " bytes, not 128"};
    if (Status s = writeAtomically("nccl-id", id); !s)
      return s.takeError();
    return id;
  }
  std::string got;
  Status s = waitFor(
      [&] {
        std::optional<std::string> bytes = readFile(path("nccl-id"));
        if (!bytes || bytes->size() != 128)
          return false;
        got = *bytes;
        return true;
      },
      "rank 0's NCCL unique id (" + path("nccl-id") + ")");
  if (!s)
    return s.takeError();
  return got;
}

Status Rendezvous::checkRanks(const std::string &artifactPath, const std::string &hash,
                              const std::map<std::string, std::string> &settings) const {
  Json mine = Json::object();
  mine.set("artifact", Json::string(artifactPath));
  mine.set("hash", Json::string(hash));
  Json values = Json::object();
  for (const auto &[key, value] : settings)
    values.set(key, Json::string(value));
  mine.set("settings", std::move(values));
  std::string me = "rank-" + std::to_string(rank.rank) + ".json";
  if (Status s = writeAtomically(me, mine.print() + "\n"); !s)
    return s;
  std::map<int, Json> ranks;
  for (int k = 0; k < rank.world; ++k) {
    std::string name = "rank-" + std::to_string(k) + ".json";
    std::string error;
    Status s = waitFor(
        [&] {
          std::optional<std::string> text = readFile(path(name));
          if (!text)
            return false;
          Expected<Json> parsed = Json::parse(*text);
          if (!parsed || !parsed->isObject() || !parsed->get("hash") ||
              !parsed->get("hash")->isString() || !parsed->get("artifact") ||
              !parsed->get("artifact")->isString() || !parsed->get("settings") ||
              !parsed->get("settings")->isObject()) {
            error = "rendezvous " + path(name) + ": not a rank record";
            return true;
          }
          ranks.emplace(k, std::move(*parsed));
          return true;
        },
        "rank " + std::to_string(k) + "'s record (" + path(name) + ")");
    if (!s)
      return s;
    if (!error.empty())
      return Error{error};
  }
  // Every rank compares against rank 0, so all name the same pair.
  const Json &first = ranks.at(0);
  for (int k = 1; k < rank.world; ++k) {
    const Json &other = ranks.at(k);
    if (first.get("hash")->getString() != other.get("hash")->getString())
      return Error{"rank 0 runs " + first.get("artifact")->getString() + " (" +
                   first.get("hash")->getString() + ") but rank " + std::to_string(k) + " runs " +
                   other.get("artifact")->getString() + " (" + other.get("hash")->getString() +
                   "): every rank needs the same artifact"};
    const Json &a = *first.get("settings"), &b = *other.get("settings");
    std::map<std::string, std::string> left, right;
    for (const Json *side : {&a, &b}) {
      auto &into = side == &a ? left : right;
      for (const auto &member : side->getMembers())
        into[member.key] =
            member.value.isString() ? member.value.getString() : member.value.print();
    }
    for (const auto &[key, value] : left) {
      auto it = right.find(key);
      std::string theirs = it == right.end() ? "(unset)" : it->second;
      if (theirs != value)
        return Error{"rank 0 and rank " + std::to_string(k) + " differ in " + key + ": " + value +
                     " vs " + theirs};
    }
    for (const auto &[key, value] : right)
      if (!left.count(key))
        return Error{"rank 0 and rank " + std::to_string(k) + " differ in " + key +
                     ": (unset) vs " + value};
  }
  return Status::success();
}

void Rendezvous::markFailed(const std::string &message) const {
  // The first failure wins: O_EXCL on a temporary name, then link() (which
  // never replaces) onto "failed".
  std::string text = "rank " + std::to_string(rank.rank) + ": " + message + "\n";
  std::string temp = path(".failed.tmp-" + std::to_string(::getpid()));
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0)
    return;
  ssize_t written = ::write(fd, text.data(), text.size());
  ::close(fd);
  if (written == static_cast<ssize_t>(text.size()))
    (void)::link(temp.c_str(), path("failed").c_str());
  ::unlink(temp.c_str());
}

std::optional<std::string> Rendezvous::failure() const {
  std::optional<std::string> text = readFile(path("failed"));
  if (!text)
    return std::nullopt;
  while (!text->empty() && (text->back() == '\n' || text->back() == '\r'))
    text->pop_back();
  return oneLine(*text);
}

Status Rendezvous::publish(const std::string &name, const std::string &text) const {
  return writeAtomically(name + "-" + std::to_string(rank.rank), text);
}

std::map<int, std::string> Rendezvous::collect(const std::string &name, double seconds) const {
  std::map<int, std::string> found;
  auto start = std::chrono::steady_clock::now();
  while (true) {
    for (int k = 0; k < rank.world; ++k)
      if (!found.count(k))
        if (std::optional<std::string> text = readFile(path(name + "-" + std::to_string(k))))
          found[k] = *text;
    if (static_cast<int>(found.size()) == rank.world ||
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds)
      return found;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}
