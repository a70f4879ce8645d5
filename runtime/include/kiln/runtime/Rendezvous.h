//===- Rendezvous.h - Ranks of a data-parallel run meet in a directory -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The host side of `kiln-run train --gpus N` and of runs under torchrun-style
// environment variables, without CUDA or NCCL (so CI tests it): the rank
// environment (RANK, WORLD_SIZE, LOCAL_RANK), and a rendezvous directory
// every rank of one host sees, where
//  - rank 0 publishes the NCCL unique id (`nccl-id`, 128 bytes) that the
//    others wait for;
//  - each rank publishes what it runs (`rank-K.json`: the artifact's path
//    and content hash, and the settings that must agree: steps, shapes,
//    seed, ...), and every rank compares all of them before any GPU work;
//  - a rank that fails leaves `failed` ("rank K: <message>"), which the
//    others watch for, so they stop instead of hanging in an all-reduce.
// Files are written to a temporary name and renamed, so a reader never
// sees half a file.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_RENDEZVOUS_H
#define KILN_RUNTIME_RENDEZVOUS_H

#include "kiln/runtime/Expected.h"

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace kiln::runtime {

/// One process's place in a data-parallel run.
struct RankInfo {
  int rank = 0, world = 1, localRank = 0;
};

/// Reads RANK, WORLD_SIZE and LOCAL_RANK (and LOCAL_WORLD_SIZE, if set,
/// which must equal WORLD_SIZE: one host) through \p getenv. None set:
/// nullopt (a plain run). A partial or malformed set is one line naming the
/// variable and its value.
Expected<std::optional<RankInfo>>
rankFromEnvironment(const std::function<const char *(const char *)> &getenv);

/// The content hash kiln-run compares between ranks: "crc32c:XXXXXXXX
/// bytes:N" of the whole file.
Expected<std::string> fileContentHash(const std::string &path);

class Rendezvous {
public:
  /// Ranks wait for each other at most \p timeoutSeconds.
  Rendezvous(std::string dir, RankInfo rank, double timeoutSeconds = 300);

  /// Checks that the directory exists, is writable and, for rank 0, holds
  /// no earlier run's files.
  Status open() const;

  /// Rank 0 publishes \p id (128 bytes); every other rank waits for it and
  /// returns it.
  Expected<std::string> shareUniqueId(const std::string &id) const;

  /// Publishes this rank's artifact (\p path, \p hash) and \p settings, waits
  /// for every rank's, and compares: the first difference is one line
  /// naming both ranks ("rank 0 runs a.kiln (crc32c:... bytes:...) but rank
  /// 1 runs b.kiln (...)", "rank 0 and rank 1 differ in --steps: 10 vs 20").
  Status checkRanks(const std::string &path, const std::string &hash,
                    const std::map<std::string, std::string> &settings) const;

  /// Leaves "rank K: message" as the run's failure, unless one is there.
  void markFailed(const std::string &message) const;
  /// The first failure any rank (or the launcher) left, if there is one.
  std::optional<std::string> failure() const;

  /// Publishes \p text under \p name for rank 0 to collect (peak memory).
  Status publish(const std::string &name, const std::string &text) const;
  /// Waits (at most \p seconds) for \p name of every rank; missing ones
  /// are absent from the result.
  std::map<int, std::string> collect(const std::string &name, double seconds) const;

  const std::string &getDirectory() const { return dir; }
  const RankInfo &getRank() const { return rank; }

private:
  std::string path(const std::string &name) const { return dir + "/" + name; }
  Status writeAtomically(const std::string &name, const std::string &bytes) const;
  /// Polls until \p ready returns true, a failure is marked (its text), or
  /// the timeout passes (\p what names what was awaited).
  Status waitFor(const std::function<bool()> &ready, const std::string &what) const;
  std::string dir;
  RankInfo rank;
  double timeoutSeconds;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_RENDEZVOUS_H
