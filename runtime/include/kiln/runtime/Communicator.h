//===- Communicator.h - One rank's NCCL communicator ------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The step program's all_reduce ops on one rank (docs/runtime.md,
// "Data-parallel training"): an NCCL communicator over the run's ranks and
// a communication stream of its own. allReduce() makes the communication
// stream wait for what the compute stream has enqueued so far (an event),
// enqueues the bucket's ncclAllReduce(avg) calls in one NCCL group, and
// records the bucket's done event; wait() makes the compute stream wait for
// it. Inside a CUDA Graph capture these events become the graph's edges:
// the exchange is a branch of the step graph that joins at the wait.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_COMMUNICATOR_H
#define KILN_RUNTIME_COMMUNICATOR_H

#include "kiln/runtime/Device.h"
#include "kiln/runtime/Nccl.h"

#include <atomic>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime {

class Communicator {
public:
  /// One buffer pair of a bucket: \p recv becomes the mean of \p send.
  struct Item {
    CUdeviceptr send = 0, recv = 0;
    size_t count = 0;
    nccl::DataType type = nccl::Float32;
  };

  /// Joins the communicator of \p world ranks (this one is \p rank) that
  /// \p id names, on \p device (current on this thread).
  static Expected<std::unique_ptr<Communicator>> create(const Device &device, const Nccl &nccl,
                                                        const std::string &id, int rank, int world);
  ~Communicator();
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;

  /// Creates bucket \p bucket's events (before any capture).
  Status prepareBucket(int64_t bucket);
  /// Starts bucket \p bucket after what \p compute holds so far.
  Status allReduce(int64_t bucket, const std::vector<Item> &items, CUstream compute) const;
  /// \p compute waits for bucket \p bucket.
  Status wait(int64_t bucket, CUstream compute) const;
  /// Stops every NCCL operation of this rank (another thread may call it;
  /// blocked kernels return). Later calls fail.
  void abort();
  /// An asynchronous NCCL error (a peer failed), or success.
  Status asyncError() const;

  int getRank() const { return rank; }
  int getWorld() const { return world; }
  const Nccl &getNccl() const { return *nccl; }

private:
  Communicator(const Device &device, const Nccl &nccl) : device(&device), nccl(&nccl) {}
  Status check(nccl::Result result, const char *what) const;
  const Device *device;
  const Nccl *nccl;
  nccl::Comm_t comm = nullptr;
  CUstream stream = nullptr;
  std::map<int64_t, std::pair<CUevent, CUevent>> events; ///< ready, done
  int rank = 0, world = 1;
  std::atomic<bool> aborted{false};
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_COMMUNICATOR_H
