//===- StreamHold.cpp - Tune's timing at the GPU's pace -------------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// tune times a candidate as N back-to-back calls between two events. For a
// 10 µs GEMM the host's cublasLtMatmul call takes about as long as the
// kernel, so the GPU waits between calls and the events measure the host:
// two tune runs then disagree on the same algorithm by far more than the
// GPU's noise, and what wins does not win in train, whose CUDA Graph
// launches back to back. Holding the stream behind a kernel that polls a
// counter in mapped host memory until the block is enqueued makes the block
// run at the GPU's pace. Each hold waits for its own ticket, so a hold
// released before the GPU reaches it returns at once.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/StepExecutor.h"

using namespace kiln::runtime;

namespace {
/// A hold never outlasts this: a block the host could not enqueue in time
/// is then timed as before, and nothing hangs.
constexpr unsigned long long kHoldTimeoutNs = 50'000'000; // 50 ms
} // namespace

Status StepExecutor::holdStream() {
  if (!hold.kernel || hold.unavailable)
    return Status::success();
  const CudaDriver &driver = device->getDriver();
  if (!hold.counter) {
    void *host = nullptr;
    if (driver.cuMemHostAlloc(&host, sizeof(unsigned long long),
                              CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE) !=
        CUDA_SUCCESS) {
      hold.unavailable = true;
      return Status::success();
    }
    hold.counter = static_cast<unsigned long long *>(host);
    *hold.counter = 0;
    if (driver.cuMemHostGetDevicePointer_v2(&hold.deviceCounter, host, 0) != CUDA_SUCCESS) {
      driver.cuMemFreeHost(host);
      hold.counter = nullptr;
      hold.unavailable = true;
      return Status::success();
    }
  }
  unsigned long long ticket = ++hold.ticket;
  unsigned long long timeout = kHoldTimeoutNs;
  void *args[] = {&hold.deviceCounter, &ticket, &timeout};
  return device->check(driver.cuLaunchKernel(hold.kernel, 1, 1, 1, 1, 1, 1, 0,
                                             device->getStream(), args, nullptr),
                       "cuLaunchKernel (kiln_hold)");
}

void StepExecutor::releaseStream() {
  if (hold.counter)
    __atomic_store_n(hold.counter, hold.ticket, __ATOMIC_RELEASE);
}
