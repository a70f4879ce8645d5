//===- ProgramRunnerLoraPair.cpp - An adapter's dT and dB in one pass -----===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Two adjacent GEMMs of a step that are one LoRA adapter's backward over
// the same output gradient Y (dT = a1 Y Bm, dB = a2 Yᵀ t: the program puts
// them side by side) run as kernels/LoraGradPair.cuh's one pass over Y and
// its finishing launch, where LoraGradPairPlan takes them; the others stay
// with cuBLASLt. The partials use the GEMM workspace, which ops share one at
// a time on the stream. Only with --lora-grad-pairs on: measured slower than
// cuBLASLt's two GEMMs in the H200's 1b and small steps (docs/benchmarks.md,
// "Fourteenth session"), so every GEMM stays on cuBLASLt by default.
//
//===----------------------------------------------------------------------===//

#include "LoraGradPairPlan.h"
#include "ProgramRunner.h"

using namespace kiln::runtime;

pair::Gemm ProgramRunner::describePair(const Gemm &g) {
  pair::Gemm d;
  d.a = g.a, d.b = g.b, d.c = g.c;
  d.m = static_cast<int64_t>(g.m), d.n = static_cast<int64_t>(g.n),
  d.k = static_cast<int64_t>(g.k), d.batch = g.batch;
  d.lda = g.lda, d.ldb = g.ldb, d.ldc = g.ldc;
  d.transA = g.transA, d.transB = g.transB;
  d.bf16 = g.abType == CUDA_R_16BF && g.outType == CUDA_R_16BF;
  d.epilogue = g.epilogue;
  d.alpha = g.alpha, d.beta = g.beta;
  return d;
}

Status ProgramRunner::prepareLoraPairs(const SharedMemory &memory) {
  if (!memory.loraPairs || !memory.support)
    return Status::success();
  const DeviceInfo &info = device->getInfo();
  if (info.computeCapabilityMajor < 8) // cp.async, bf16 mma.sync
    return Status::success();
  const CudaDriver &driver = device->getDriver();
  for (size_t i = 0; i + 1 < actions.size(); ++i) {
    if (actions[i].first != Action::Gemm || actions[i + 1].first != Action::Gemm)
      continue;
    const Gemm &first = gemmList[actions[i].second], &second = gemmList[actions[i + 1].second];
    if (first.thin.function || second.thin.function)
      continue;
    std::string why;
    pair::Plan plan = pair::planLoraGradPair(describePair(first), describePair(second),
                                             info.multiprocessorCount, kWorkspaceBytes, why);
    if (plan.kernel.empty())
      continue;
    Expected<CUfunction> kernel = memory.support->getFunction(plan.kernel);
    if (!kernel)
      return kernel.takeError();
    Expected<CUfunction> finish = memory.support->getFunction("kiln_lora_grad_pair_finish");
    if (!finish)
      return finish.takeError();
    if (Status s = device->check(driver.cuFuncSetAttribute(
                                     *kernel, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     static_cast<int>(plan.sharedBytes)),
                                 "cuFuncSetAttribute (kiln_lora_grad_pair)");
        !s)
      return s;
    LoraPair p;
    p.kernel = *kernel;
    p.finish = *finish;
    p.gridX = plan.gridX, p.gridY = plan.gridY;
    p.shared = static_cast<unsigned>(plan.sharedBytes);
    p.finishGrid = pair::finishBlocks(plan, info.multiprocessorCount);
    pair::fillLaunchArgs(plan, describePair(first), describePair(second), workspace, p.args,
                         p.finishArgs);
    p.gemms = {actions[i].second, actions[i + 1].second};
    p.label = "lora grad pair " + std::to_string(plan.rows) + "x" + std::to_string(plan.cols) +
              "x" + std::to_string(plan.rank) + " (" + plan.kernel + ")";
    actions[i] = {Action::LoraPair, pairList.size()};
    actions[i + 1] = {Action::PairedGemm, p.gemms[1]};
    pairList.push_back(std::move(p));
    ++i;
  }
  loraPairCount = pairList.size();
  return Status::success();
}

Status ProgramRunner::enqueueLoraPair(const LoraPair &p, CUstream stream) const {
  const CudaDriver &driver = device->getDriver();
  pair::LaunchArgs args = p.args;
  pair::FinishArgs finish = p.finishArgs;
  void *params[] = {&args};
  if (Status s = device->check(driver.cuLaunchKernel(p.kernel, p.gridX, p.gridY, 1,
                                                     pair::kThreads, 1, 1, p.shared, stream,
                                                     params, nullptr),
                               "cuLaunchKernel (kiln_lora_grad_pair)");
      !s)
    return s;
  void *finishParams[] = {&finish};
  return device->check(driver.cuLaunchKernel(p.finish, p.finishGrid, 1, 1, pair::kThreads, 1, 1,
                                             0, stream, finishParams, nullptr),
                       "cuLaunchKernel (kiln_lora_grad_pair_finish)");
}
