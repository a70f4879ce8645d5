//===- Communicator.cpp - One rank's NCCL communicator ----------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/Communicator.h"

#include <cstring>

using namespace kiln::runtime;

Status Communicator::check(nccl::Result result, const char *what) const {
  if (result == nccl::Success)
    return Status::success();
  return Error{std::string(what) + " failed: " + nccl->describe(result)};
}

Expected<std::unique_ptr<Communicator>> Communicator::create(const Device &device, const Nccl &nccl,
                                                             const std::string &id, int rank,
                                                             int world) {
  if (id.size() != sizeof(nccl::UniqueId))
    return Error{"the NCCL unique id is " + std::to_string(id.size()) + " bytes, not 128"};
  std::unique_ptr<Communicator> c(new Communicator(device, nccl));
  c->rank = rank;
  c->world = world;
  const CudaDriver &driver = device.getDriver();
  if (Status s = device.check(driver.cuStreamCreate(&c->stream, CU_STREAM_NON_BLOCKING),
                              "cuStreamCreate (communication stream)");
      !s)
    return s.takeError();
  nccl::UniqueId unique;
  std::memcpy(unique.internal, id.data(), sizeof unique.internal);
  if (Status s = c->check(nccl.ncclCommInitRank(&c->comm, world, unique, rank), "ncclCommInitRank");
      !s)
    return s.takeError();
  return c;
}

Communicator::~Communicator() {
  const CudaDriver &driver = device->getDriver();
  if (comm)
    aborted ? (void)0 : (void)nccl->ncclCommDestroy(comm);
  for (auto &[bucket, pair] : events) {
    driver.cuEventDestroy_v2(pair.first);
    driver.cuEventDestroy_v2(pair.second);
  }
  if (stream)
    driver.cuStreamDestroy_v2(stream);
}

Status Communicator::prepareBucket(int64_t bucket) {
  if (events.count(bucket))
    return Status::success();
  const CudaDriver &driver = device->getDriver();
  CUevent ready = nullptr, done = nullptr;
  if (Status s =
          device->check(driver.cuEventCreate(&ready, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      !s)
    return s;
  if (Status s =
          device->check(driver.cuEventCreate(&done, CU_EVENT_DISABLE_TIMING), "cuEventCreate");
      !s) {
    driver.cuEventDestroy_v2(ready);
    return s;
  }
  events[bucket] = {ready, done};
  return Status::success();
}

Status Communicator::allReduce(int64_t bucket, const std::vector<Item> &items,
                               CUstream compute) const {
  auto it = events.find(bucket);
  if (it == events.end())
    return Error{"all_reduce bucket " + std::to_string(bucket) + " was not prepared"};
  if (aborted)
    return Error{"the NCCL communicator was aborted"};
  const CudaDriver &driver = device->getDriver();
  if (Status s = device->check(driver.cuEventRecord(it->second.first, compute), "cuEventRecord");
      !s)
    return s;
  if (Status s =
          device->check(driver.cuStreamWaitEvent(stream, it->second.first, 0), "cuStreamWaitEvent");
      !s)
    return s;
  if (Status s = check(nccl->ncclGroupStart(), "ncclGroupStart"); !s)
    return s;
  for (const Item &item : items)
    if (Status s = check(nccl->ncclAllReduce(reinterpret_cast<const void *>(item.send),
                                             reinterpret_cast<void *>(item.recv), item.count,
                                             item.type, nccl::Avg, comm, stream),
                         "ncclAllReduce");
        !s) {
      (void)nccl->ncclGroupEnd();
      return s;
    }
  if (Status s = check(nccl->ncclGroupEnd(), "ncclGroupEnd"); !s)
    return s;
  return device->check(driver.cuEventRecord(it->second.second, stream), "cuEventRecord");
}

Status Communicator::wait(int64_t bucket, CUstream compute) const {
  auto it = events.find(bucket);
  if (it == events.end())
    return Error{"all_reduce bucket " + std::to_string(bucket) + " was not prepared"};
  return device->check(device->getDriver().cuStreamWaitEvent(compute, it->second.second, 0),
                       "cuStreamWaitEvent");
}

void Communicator::abort() {
  if (comm && !aborted) {
    aborted = true;
    (void)nccl->ncclCommAbort(comm);
  }
}

Status Communicator::asyncError() const {
  if (!comm || aborted)
    return Status::success();
  nccl::Result result = nccl::Success;
  if (Status s = check(nccl->ncclCommGetAsyncError(comm, &result), "ncclCommGetAsyncError"); !s)
    return s;
  return check(result, "NCCL (asynchronous)");
}
