//===- ProgramRunnerTuning.cpp - Tuned choices and tune's hooks ---------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A runner applies `kiln-run tune`'s choices when it is prepared: a GEMM
// runs its entry's algorithm when cuBLASLt still offers it among its top K,
// the shape's attention the implementation its entry names. And the hooks
// tune measures with: the GEMM sites, their candidates, a GEMM with any
// algorithm and operands (docs/tuning.md).
//
//===----------------------------------------------------------------------===//

#include "ProgramRunner.h"

#include "kiln/runtime/GemmConfig.h"

#include <algorithm>
#include <cstring>
#include <optional>

using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {
static_assert(sizeof(cublasLtMatmulAlgo_t) == 64, "the database stores 64 algorithm bytes");

/// "batch=4,seq=512" (shapeKey's spelling).
std::string sizesText(const SymbolBindings &sizes) {
  std::string text;
  for (const auto &[symbol, value] : sizes)
    text += (text.empty() ? "" : ",") + symbol + "=" + std::to_string(value);
  return text;
}

/// cuBLASLt's best \p topK algorithms for \p g within the GEMM workspace.
Expected<std::vector<cublasLtMatmulAlgo_t>>
queryHeuristics(const CublasLt &lt, cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                cublasLtMatrixLayout_t first, cublasLtMatrixLayout_t second,
                cublasLtMatrixLayout_t result, int topK) {
  cublasLtMatmulPreference_t preference = nullptr;
  if (cublasStatus_t s = lt.cublasLtMatmulPreferenceCreate(&preference); s != CUBLAS_STATUS_SUCCESS)
    return Error{"cublasLtMatmulPreferenceCreate failed: " + lt.describe(s)};
  uint64_t workspaceBytes = kWorkspaceBytes;
  lt.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                          &workspaceBytes, sizeof(workspaceBytes));
  std::vector<cublasLtMatmulHeuristicResult_t> results(static_cast<size_t>(std::max(1, topK)));
  int found = 0;
  cublasStatus_t status =
      lt.cublasLtMatmulAlgoGetHeuristic(handle, desc, first, second, result, result, preference,
                                        static_cast<int>(results.size()), results.data(), &found);
  lt.cublasLtMatmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS)
    return Error{"cublasLtMatmulAlgoGetHeuristic failed: " + lt.describe(status)};
  std::vector<cublasLtMatmulAlgo_t> algos;
  for (int i = 0; i < found; ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS)
      algos.push_back(results[i].algo);
  return algos;
}
} // namespace

Status ProgramRunner::applyTunedGemm(Gemm &g, const SharedMemory &memory) {
  const TuningEntry *entry =
      memory.tuning ? memory.tuning->find(*memory.tuningKey, "gemm", g.hash, g.shape) : nullptr;
  if (!entry) {
    ++defaultOps;
    return Status::success();
  }
  cublasLtMatmulAlgo_t wanted;
  // Checked when the database was parsed.
  fromHex(entry->algo, &wanted, sizeof(wanted));
  if (!std::memcmp(&g.algo, &wanted, sizeof(wanted))) { // the default won
    ++tunedOps;
    return Status::success();
  }
  // A configuration tune built beyond the heuristic's list (split-K, other
  // tiles): rebuilt from the entry's "config" — from the algorithm id
  // (cublasLtMatmulAlgoInit), or set on the heuristic's choice it was made
  // from (split-K of a heuristic algorithm) — and used only where the
  // rebuilt algorithm is byte for byte the one measured and
  // cublasLtMatmulAlgoCheck accepts it for this GEMM within the workspace.
  std::optional<GemmConfig> config;
  std::string configNote;
  if (!entry->config.empty()) {
    if (Expected<GemmConfig> decoded = GemmConfig::decode(entry->config)) // checked when parsed
      config = *decoded;
    Expected<cublasLtMatmulAlgo_t> rebuilt =
        config ? buildConfiguredAlgo(g, *config) : Expected<cublasLtMatmulAlgo_t>(Error{""});
    if (rebuilt && !std::memcmp(&*rebuilt, &wanted, sizeof(wanted))) {
      g.algo = *rebuilt;
      ++tunedOps;
      return Status::success();
    }
    configNote = rebuilt ? g.label + ": its tuned configuration rebuilds differently now"
                         : rebuilt.getError();
  }
  Expected<std::vector<cublasLtMatmulAlgo_t>> candidates = queryHeuristics(
      *lt, handle, g.desc, g.first, g.second, g.result, static_cast<int>(entry->candidates));
  if (!candidates)
    return candidates.takeError();
  for (const cublasLtMatmulAlgo_t &algo : *candidates) {
    if (!std::memcmp(&algo, &wanted, sizeof(wanted))) {
      g.algo = algo;
      ++tunedOps;
      return Status::success();
    }
    Expected<GemmConfig> its = readGemmConfig(*lt, algo);
    if (!config || !its || its->algoId != config->algoId)
      continue;
    cublasLtMatmulAlgo_t configured = algo;
    if (applyGemmConfig(*lt, *config, configured) &&
        !std::memcmp(&configured, &wanted, sizeof(wanted)) && checkAlgo(g, configured)) {
      g.algo = configured;
      ++tunedOps;
      return Status::success();
    }
  }
  // Never trusted blindly: an algorithm cuBLASLt does not offer for this
  // problem now is not run.
  ++defaultOps;
  if (tuningNote.empty())
    tuningNote = configNote.empty()
                     ? g.label + ": its tuned algorithm is not among cuBLASLt's " +
                           std::to_string(entry->candidates) + " candidates now (default kept)"
                     : configNote + " (default kept)";
  return Status::success();
}

const CudnnAttention *
ProgramRunner::chooseAttention(const std::vector<std::vector<int64_t>> &shapes,
                               const SymbolBindings &sizes, const SharedMemory &memory) {
  const StepProgram &p = program;
  size_t launches = 0;
  std::string signature = origin;
  for (const ProgramOp &op : p.ops)
    if (op.kind == ProgramOp::Kind::Launch && op.attention) {
      ++launches;
      Expected<AttentionShape> shape = attentionShape(p, *op.attention, shapes);
      signature += ";" + (shape ? shape->describe() : op.name);
    }
  if (!launches)
    return memory.cudnn;
  attentionHash = hashSignature(signature);
  attentionLabel = "attention (" + origin + ", " + std::to_string(launches) + " launches)";
  const TuningEntry *entry =
      memory.tuning && !memory.attentionFixed
          ? memory.tuning->find(*memory.tuningKey, "attention", attentionHash, sizesText(sizes))
          : nullptr;
  if (!entry) {
    defaultOps += launches;
    return memory.cudnn;
  }
  if (entry->impl == "cudnn" && !memory.cudnn) {
    defaultOps += launches;
    if (tuningNote.empty())
      tuningNote = attentionLabel + ": tuned for cuDNN, which is not loaded (kernels kept)";
    return nullptr;
  }
  tunedOps += launches;
  if (entry->impl == "kernels" && memory.cudnn)
    attentionNote = "the tuning database chose the kernels";
  return entry->impl == "cudnn" ? memory.cudnn : nullptr;
}

std::vector<StepExecutor::GemmSite> ProgramRunner::getGemmSites() const {
  std::vector<StepExecutor::GemmSite> sites;
  for (const Gemm &g : gemmList)
    sites.push_back({g.action, g.hash, g.shape, g.label, g.a, g.b, g.c, g.cBytes, g.cType, g.algo,
                     g.m, g.n, g.k});
  return sites;
}

Expected<std::vector<cublasLtMatmulAlgo_t>> ProgramRunner::getGemmCandidates(size_t gemm,
                                                                             int topK) const {
  const Gemm &g = gemmList.at(gemm);
  return queryHeuristics(*lt, handle, g.desc, g.first, g.second, g.result, topK);
}

Status ProgramRunner::enqueueGemm(size_t gemm, const cublasLtMatmulAlgo_t &algo, CUdeviceptr a,
                                  CUdeviceptr b, CUstream stream) const {
  const Gemm &g = gemmList.at(gemm);
  // alpha scales the product; beta = 1 accumulates into C (LoRA's sums,
  // the fused LM head's weight gradient over its chunks).
  float alpha = g.alpha, beta = g.beta;
  // Row-major C = A B is column-major C^T = B^T A^T: B goes first.
  cublasStatus_t status = lt->cublasLtMatmul(
      handle, g.desc, &alpha, reinterpret_cast<void *>(b), g.first, reinterpret_cast<void *>(a),
      g.second, &beta, reinterpret_cast<void *>(g.c), g.result, reinterpret_cast<void *>(g.c),
      g.result, &algo, reinterpret_cast<void *>(workspace), kWorkspaceBytes, stream);
  if (status != CUBLAS_STATUS_SUCCESS)
    return fail(g.label + ": cublasLtMatmul failed: " + lt->describe(status));
  return Status::success();
}

Status ProgramRunner::copyInputsFrom(const ProgramRunner &other, CUstream stream) const {
  for (const ProgramBinding &arg : program.args)
    if (arg.role == "input" && bytes[arg.buffer])
      if (Status s = device->check(
              device->getDriver().cuMemcpyDtoDAsync_v2(
                  pointers[arg.buffer], other.pointers[arg.buffer], bytes[arg.buffer], stream),
              "cuMemcpyDtoDAsync");
          !s)
        return s;
  return Status::success();
}
