//===- DataParallel.h - kiln-run train --gpus N and its ranks ---*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Two roles (docs/runtime.md, "Data-parallel training"):
//  - the launcher (`--gpus N` without RANK in the environment) starts one
//    process per GPU — itself, or $KILN_RUN_LAUNCH_EXEC for tests — with
//    RANK, LOCAL_RANK, WORLD_SIZE and the rendezvous directory, waits, and
//    when one fails stops the others and says which;
//  - a rank (RANK/WORLD_SIZE set, by the launcher or torchrun) meets the
//    others in the rendezvous directory, checks that all run the same
//    artifact and settings, joins the NCCL communicator, and watches for a
//    failed peer (then aborts its communicator and exits).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUN_DATAPARALLEL_H
#define KILN_RUN_DATAPARALLEL_H

#include "kiln/runtime/Communicator.h"
#include "kiln/runtime/Rendezvous.h"

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace kiln::run {

/// Runs \p argv0 with \p args once per rank of \p gpus; \p rendezvous is
/// the directory to share (empty: a fresh temporary one, removed after).
/// Returns 0 when every rank succeeds, else the failed rank's exit code.
int launchRanks(int gpus, const std::string &argv0, const std::vector<std::string> &args,
                const std::string &rendezvous);

/// One rank of a data-parallel run.
class RankSession {
public:
  /// Sets up error reporting for \p rank (errors name the rank and reach
  /// the others), quiets stdout off rank 0 and opens the rendezvous
  /// (\p dir; empty: $KILN_RENDEZVOUS, or a temporary one for a world of
  /// one). Errors are returned as one line.
  static runtime::Expected<std::unique_ptr<RankSession>> start(runtime::RankInfo rank,
                                                               std::string dir);
  ~RankSession();

  const runtime::RankInfo &getRank() const { return rank; }
  bool isLeader() const { return rank.rank == 0; }
  const runtime::Rendezvous &getRendezvous() const { return *rendezvous; }
  runtime::Communicator *getCommunicator() const { return communicator.get(); }

  /// Joins the NCCL communicator on \p device (rank 0 makes the unique id)
  /// and starts watching for failed peers.
  runtime::Status connect(const runtime::Device &device);
  /// Rank 0 collects every rank's \p peakBytes and returns
  /// "rank 0 X GiB, rank 1 Y GiB" (others: empty).
  std::string peakMemorySummary(double peakBytes) const;

private:
  RankSession() = default;
  void watch();
  runtime::RankInfo rank;
  std::unique_ptr<runtime::Rendezvous> rendezvous;
  std::string ownDirectory; ///< A temporary rendezvous this rank removes.
  std::optional<runtime::Nccl> nccl;
  std::unique_ptr<runtime::Communicator> communicator;
  std::thread watcher;
  std::atomic<bool> stopping{false};
};

} // namespace kiln::run

#endif // KILN_RUN_DATAPARALLEL_H
