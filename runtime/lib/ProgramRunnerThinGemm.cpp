//===- ProgramRunnerThinGemm.cpp - Kiln's thin-GEMM kernels in a step -----===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// With --thin-gemm on, a GEMM whose descriptor ThinGemmPlan takes (bf16, one
// of M, N, K 16..64, no epilogue, batch 1, aligned) runs through
// kernels/ThinGemm.cuh from the support module instead of cuBLASLt. Off by
// default: on the H200 the kernels were slower than cuBLASLt's choice for
// most of the 1b step's LoRA GEMMs (docs/benchmarks.md, "Kiln's thin-GEMM
// kernels"). The split launches' partials use the GEMM workspace, which
// ops share one at a time on the stream; their tile counters are the
// runner's own, zeroed once and left zero by every launch.
//
//===----------------------------------------------------------------------===//

#include "ProgramRunner.h"
#include "ThinGemmPlan.h"

using namespace kiln::runtime;

Status ProgramRunner::applyThinGemm(Gemm &g, const SharedMemory &memory) {
  if (!memory.thinGemm || !memory.support)
    return Status::success();
  const DeviceInfo &info = device->getInfo();
  if (info.computeCapabilityMajor < 8) // cp.async, bf16 mma.sync
    return Status::success();
  thin::Problem p;
  p.m = static_cast<int64_t>(g.m), p.n = static_cast<int64_t>(g.n),
  p.k = static_cast<int64_t>(g.k);
  p.batch = g.batch;
  p.lda = g.lda, p.ldb = g.ldb, p.ldc = g.ldc;
  p.transA = g.transA, p.transB = g.transB;
  p.bf16Operands = g.abType == CUDA_R_16BF;
  p.bf16Result = g.outType == CUDA_R_16BF;
  p.epilogue = g.epilogue;
  std::string why;
  thin::Plan plan = thin::planThinGemm(p, info.multiprocessorCount, kWorkspaceBytes, why);
  if (plan.kernel.empty() || plan.counters > thin::kMaxCounters)
    return Status::success();
  if ((g.a | g.b | g.c) % 16) // views at an offset: 16-byte vectors need aligned rows
    return Status::success();
  Expected<CUfunction> function = memory.support->getFunction(plan.kernel);
  if (!function)
    return function.takeError();
  const CudaDriver &driver = device->getDriver();
  if (Status s = device->check(driver.cuFuncSetAttribute(
                                   *function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                   static_cast<int>(plan.sharedBytes)),
                               "cuFuncSetAttribute (kiln_thin_gemm)");
      !s)
    return s;
  if (plan.splits > 1 && !thinCounters.get()) {
    Expected<DeviceBuffer> counters =
        DeviceBuffer::allocate(*device, thin::kMaxCounters * sizeof(uint32_t));
    if (!counters)
      return counters.takeError();
    if (Status s = device->check(
            driver.cuMemsetD8_v2(counters->get(), 0, thin::kMaxCounters * sizeof(uint32_t)),
            "cuMemsetD8 (thin-GEMM counters)");
        !s)
      return s;
    thinCounters = std::move(*counters);
  }
  g.thin.function = *function;
  g.thin.kernel = plan.kernel;
  g.thin.gridX = plan.gridX;
  g.thin.gridY = plan.gridY;
  g.thin.splits = plan.splits;
  g.thin.threads = plan.threads;
  g.thin.shared = static_cast<unsigned>(plan.sharedBytes);
  g.label += " (" + plan.kernel + ")";
  ++thinGemms;
  return Status::success();
}

Status ProgramRunner::enqueueThinGemm(const Gemm &g, CUstream stream) const {
  thin::LaunchArgs args;
  args.a = g.a, args.b = g.b, args.c = g.c;
  args.partials = workspace;
  args.counters = thinCounters.get();
  args.m = static_cast<int64_t>(g.m), args.n = static_cast<int64_t>(g.n),
  args.k = static_cast<int64_t>(g.k);
  args.lda = g.lda, args.ldb = g.ldb, args.ldc = g.ldc;
  args.alpha = g.alpha, args.beta = g.beta;
  args.splits = static_cast<int32_t>(g.thin.splits);
  void *params[] = {&args};
  return device->check(device->getDriver().cuLaunchKernel(
                           g.thin.function, g.thin.gridX, g.thin.gridY, g.thin.splits,
                           g.thin.threads, 1, 1, g.thin.shared, stream, params, nullptr),
                       "cuLaunchKernel (kiln_thin_gemm)");
}
