//===- ProgramRunnerNf4.cpp - Fused NF4 GEMMs in a prepared step ----------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// For each NF4 weight the compiler marked (a dequantize launch's "nf4"
// roles) whose one reader the fused kernel can run (Nf4Pairing.cpp), the
// runner decides who runs the GEMM: the KILN_NF4_GEMM test hook, else the
// tuning database's "nf4" entry, else the fixed rule, dequantize + cuBLASLt
// (on the H200 the fused kernel loses on every 1b shape: docs/lora-qlora.md).
// A fused GEMM's action becomes the kernel on the codes; a dequantize
// launch whose every weight's readers run fused is skipped.
//
//===----------------------------------------------------------------------===//

#include "ProgramRunner.h"

#include "kiln/runtime/Nf4Gemm.h"

#include "Nf4GemmImage.h"

#include <cstdint>

using namespace kiln::runtime;
using namespace kiln::artifact;

Status kiln::runtime::loadNf4Gemm(StepExecutor &x, const StepProgram &program,
                                  const Device &device) {
  bool marked = false;
  for (const ProgramOp &op : program.ops)
    marked |= op.kind == ProgramOp::Kind::Launch && op.nf4.has_value();
  const DeviceInfo &info = device.getInfo();
  // The cubin is sm_90a: exactly compute capability 9.0.
  if (!marked || info.computeCapabilityMajor != 9 || info.computeCapabilityMinor != 0)
    return Status::success();
  Expected<KernelModule> module = KernelModule::load(
      device,
      std::string_view(reinterpret_cast<const char *>(kNf4GemmImage), sizeof(kNf4GemmImage)),
      /*isPtx=*/false, "the fused NF4 GEMM (sm_90a)");
  if (!module)
    return module.takeError();
  x.modules.push_back(std::move(*module));
  x.nf4Module = &x.modules.back();
  return Status::success();
}

Status ProgramRunner::prepareNf4(const SymbolBindings &sizes, const SharedMemory &memory) {
  const StepProgram &p = program;
  std::vector<Nf4GemmPair> pairs = pairNf4Gemms(p, sizes);
  if (pairs.empty())
    return Status::success();
  Expected<std::string> override = nf4GemmOverride();
  if (!override)
    return fail(override.getError());
  const CudaDriver &driver = device->getDriver();
  std::vector<size_t> fusedGemms;
  auto note = [&](const std::string &why) {
    if (nf4Note.empty())
      nf4Note = why;
  };
  for (const Nf4GemmPair &pair : pairs) {
    ++nf4Marked;
    if (!pair.unsupported.empty()) {
      note(pair.label() + ": " + pair.unsupported);
      continue;
    }
    if (!memory.nf4) {
      note("the fused NF4 GEMM is built for sm_90a only");
      continue;
    }
    const ProgramOp &gemmOp = p.ops[pair.gemm];
    const Nf4Weight &w = p.ops[pair.launch].nf4->weights[pair.weight];
    // Each op's first action (the executor built one for every GEMM and launch).
    auto actionOf = [&](size_t op) -> std::pair<Action, size_t> {
      size_t at = op < opAction.size() ? opAction[op] : SIZE_MAX;
      return at < actions.size() ? actions[at] : std::make_pair(Action::Skipped, SIZE_MAX);
    };
    std::pair<Action, size_t> gemmAction = actionOf(pair.gemm);
    std::pair<Action, size_t> launchAction = actionOf(pair.launch);
    if (gemmAction.first != Action::Gemm || launchAction.first != Action::Launch) {
      note(pair.label() + ": not a cuBLASLt GEMM after a kernel launch here");
      continue;
    }
    Nf4Run run;
    run.a = pointers[gemmOp.a];
    run.c = pointers[gemmOp.c];
    run.codes = pointers[w.codes];
    run.doubleQuant = w.doubleQuant();
    if (run.doubleQuant) {
      run.absmaxCodes = pointers[w.absmaxCodes];
      run.scale = pointers[w.absmaxScale];
      run.offset = pointers[w.absmaxOffset];
    } else {
      run.absmax = pointers[w.absmax];
    }
    // 16-byte rows and tiles (Nf4Gemm90.cuh); the arena aligns to 256.
    if ((run.a | run.c | run.codes) % 16) {
      note(pair.label() + ": an operand is not 16-byte aligned");
      continue;
    }
    const char *entry = pair.forward ? (run.doubleQuant ? "kiln_nf4_gemm90_fwd_dq"
                                                        : "kiln_nf4_gemm90_fwd")
                                     : (run.doubleQuant ? "kiln_nf4_gemm90_dgrad_dq"
                                                        : "kiln_nf4_gemm90_dgrad");
    Expected<CUfunction> function = memory.nf4->getFunction(entry);
    if (!function)
      return fail(function.getError());
    if (Status s = device->check(
            driver.cuFuncSetAttribute(*function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                      static_cast<int>(kNf4GemmSharedBytes)),
            "cuFuncSetAttribute (the fused NF4 GEMM)");
        !s)
      return fail(s.getError());
    run.function = *function;
    run.m = static_cast<int>(pair.m);
    run.n = static_cast<int>(pair.n);
    run.k = static_cast<int>(pair.k);
    run.gridX = static_cast<unsigned>(pair.n / kNf4GemmRows);
    run.gridY = static_cast<unsigned>(pair.m / kNf4GemmTokens);
    run.alpha = static_cast<float>(pair.alpha);
    run.beta = static_cast<float>(pair.beta);
    run.gemm = gemmAction.second;
    run.launch = launchAction.second;
    run.gemmAction = opAction[pair.gemm];
    run.launchAction = opAction[pair.launch];
    run.hash = hashSignature(pair.signature);
    run.shape = pair.shape;
    run.label = pair.label();
    // Who runs it: the hook, the database, the fixed rule.
    if (*override == "fused") {
      run.fused = true;
    } else if (override->empty()) {
      const TuningEntry *tuned =
          memory.tuning ? memory.tuning->find(*memory.tuningKey, "nf4", run.hash, run.shape)
                        : nullptr;
      run.fused = tuned && tuned->impl == kNf4Fused;
      ++(tuned ? tunedOps : defaultOps);
    }
    if (run.fused) {
      actions[run.gemmAction] = {Action::Nf4Gemm, nf4List.size()};
      fusedGemms.push_back(pair.gemm);
      ++nf4Fused;
    } else {
      ++nf4Dequant;
    }
    nf4List.push_back(std::move(run));
  }
  for (size_t launchOp : skippableNf4Launches(p, fusedGemms)) {
    std::pair<Action, size_t> &action = actions[opAction[launchOp]];
    action = {Action::Skipped, action.second};
    ++nf4Skipped;
    --launches;
  }
  return Status::success();
}

Status ProgramRunner::enqueueNf4(const Nf4Run &run, bool fused, CUstream stream) const {
  if (!fused) {
    // The default: the dequantize launch (again, if the step ran it) and
    // cuBLASLt on its output.
    if (Status s = recordAction({Action::Launch, run.launch}, stream); !s)
      return s;
    const Gemm &g = gemmList[run.gemm];
    return enqueueGemm(run.gemm, g.algo, g.a, g.b, stream);
  }
  CUdeviceptr a = run.a, codes = run.codes, c = run.c;
  CUdeviceptr absmax = run.absmax, absmaxCodes = run.absmaxCodes, scale = run.scale,
              offset = run.offset;
  int m = run.m, n = run.n, k = run.k;
  float alpha = run.alpha, beta = run.beta;
  void *plain[] = {&a, &codes, &absmax, &c, &m, &n, &k, &alpha, &beta};
  void *doubled[] = {&a, &codes, &absmaxCodes, &scale, &offset, &c, &m, &n, &k, &alpha, &beta};
  return device->check(device->getDriver().cuLaunchKernel(
                           run.function, run.gridX, run.gridY, 1, kNf4GemmThreads, 1, 1,
                           kNf4GemmSharedBytes, stream, run.doubleQuant ? doubled : plain, nullptr),
                       "cuLaunchKernel (the fused NF4 GEMM)");
}

std::vector<StepExecutor::Nf4Site> ProgramRunner::getNf4Sites() const {
  std::vector<StepExecutor::Nf4Site> sites;
  for (const Nf4Run &run : nf4List)
    sites.push_back({run.gemmAction, run.launchAction, run.hash, run.shape, run.label, run.c,
                     gemmList[run.gemm].cBytes, run.fused});
  return sites;
}

Status ProgramRunner::enqueueNf4Site(size_t site, bool fused, CUstream stream) const {
  return enqueueNf4(nf4List.at(site), fused, stream);
}

std::string StepExecutor::getNf4Summary() const {
  const ProgramRunner &r = *current->runner;
  if (!r.nf4Marked)
    return "";
  std::string line = "nf4 gemms: " + std::to_string(r.nf4Fused) + " of " +
                     std::to_string(r.nf4Marked) + " on the codes (fused, sm_90a), " +
                     std::to_string(r.nf4Marked - r.nf4Fused) + " dequantize + cuBLASLt";
  if (r.nf4Skipped)
    line += ", " + std::to_string(r.nf4Skipped) + " dequantize launches skipped";
  if (!r.nf4Note.empty())
    line += " (" + r.nf4Note + ")";
  return line;
}
