//===- GemmSearch.cpp - GEMM algorithms beyond cuBLASLt's heuristic ------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// cuBLASLt's heuristic ranks a handful of configurations; for the thin LoRA
// GEMMs (a rank-16 side, or a small output over a long K) its top 8 differ
// little and leave most SMs idle. `kiln-run tune` therefore also offers
// configurations built by hand: split-K of the heuristic's own choices,
// then every algorithm id cuBLASLt has for the types with each of its tiles,
// stages and split counts; cublasLtMatmulAlgoCheck must accept each one
// for this GEMM within the step's GEMM workspace. tune screens them on the
// step's operands and measures the fastest few like the heuristic's
// (Autotune.cpp); train rebuilds a chosen one from its configuration
// (docs/tuning.md, "Candidates beyond the heuristic").
//
//===----------------------------------------------------------------------===//

#include "ProgramRunner.h"

#include <set>

using namespace kiln::runtime;

namespace {
/// The most cublasLtMatmulAlgoCheck calls one GEMM's search may make: the
/// enumeration is bounded even where an algorithm lists many tiles.
constexpr size_t kMaxChecks = 20000;
/// The most algorithm ids asked for.
constexpr int kMaxAlgoIds = 256;

template <typename T>
std::vector<T> capabilityList(const CublasLt &lt, const cublasLtMatmulAlgo_t &algo,
                              cublasLtMatmulAlgoCapAttributes_t attribute) {
  size_t bytes = 0;
  if (lt.cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, nullptr, 0, &bytes) !=
          CUBLAS_STATUS_SUCCESS ||
      bytes == 0)
    return {};
  std::vector<T> values(bytes / sizeof(T));
  size_t written = 0;
  if (lt.cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, values.data(),
                                           values.size() * sizeof(T),
                                           &written) != CUBLAS_STATUS_SUCCESS)
    return {};
  values.resize(written / sizeof(T));
  return values;
}

template <typename T>
T capability(const CublasLt &lt, const cublasLtMatmulAlgo_t &algo,
             cublasLtMatmulAlgoCapAttributes_t attribute) {
  T value{};
  size_t written = 0;
  if (lt.cublasLtMatmulAlgoCapGetAttribute(&algo, attribute, &value, sizeof(value), &written) !=
      CUBLAS_STATUS_SUCCESS)
    return T{};
  return value;
}

template <typename T>
bool setConfig(const CublasLt &lt, cublasLtMatmulAlgo_t &algo,
               cublasLtMatmulAlgoConfigAttributes_t attribute, T value) {
  return lt.cublasLtMatmulAlgoConfigSetAttribute(&algo, attribute, &value, sizeof(value)) ==
         CUBLAS_STATUS_SUCCESS;
}
} // namespace

bool ProgramRunner::checkAlgo(const Gemm &g, const cublasLtMatmulAlgo_t &algo) const {
  cublasLtMatmulHeuristicResult_t result{};
  return lt->cublasLtMatmulAlgoCheck(handle, g.desc, g.first, g.second, g.result, g.result, &algo,
                                     &result) == CUBLAS_STATUS_SUCCESS &&
         result.workspaceSize <= kWorkspaceBytes;
}

Expected<cublasLtMatmulAlgo_t> ProgramRunner::buildConfiguredAlgo(const Gemm &g,
                                                                  const GemmConfig &config) const {
  cublasLtMatmulAlgo_t algo{};
  if (cublasStatus_t s =
          lt->cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, g.abType, g.abType,
                                     g.outType, g.outType, config.algoId, &algo);
      s != CUBLAS_STATUS_SUCCESS)
    return Error{g.label + ": cuBLASLt has no algorithm id " + std::to_string(config.algoId) +
                 " for its types (" + lt->describe(s) + ")"};
  if (Status s = applyGemmConfig(*lt, config, algo); !s)
    return Error{g.label + ": " + s.getError()};
  if (!checkAlgo(g, algo))
    return Error{g.label + ": cublasLtMatmulAlgoCheck rejects " + config.describe() +
                 " within the " + std::to_string(kWorkspaceBytes >> 20) + " MiB workspace"};
  return algo;
}

Expected<std::vector<cublasLtMatmulAlgo_t>>
ProgramRunner::getGemmSearchSpace(size_t gemm, const std::vector<cublasLtMatmulAlgo_t> &seeds,
                                  size_t limit) const {
  const Gemm &g = gemmList.at(gemm);
  std::vector<cublasLtMatmulAlgo_t> found;
  std::set<GemmConfig> seen;
  for (const cublasLtMatmulAlgo_t &seed : seeds)
    if (Expected<GemmConfig> c = readGemmConfig(*lt, seed))
      seen.insert(*c);
  size_t checks = 0;
  // Adds \p algo unless its configuration was seen or the check rejects it;
  // false once the search is to stop.
  auto consider = [&](const cublasLtMatmulAlgo_t &algo) {
    if (found.size() >= limit || checks >= kMaxChecks)
      return false;
    Expected<GemmConfig> c = readGemmConfig(*lt, algo);
    if (!c || !seen.insert(*c).second)
      return true;
    ++checks;
    if (checkAlgo(g, algo))
      found.push_back(algo);
    return found.size() < limit && checks < kMaxChecks;
  };
  std::vector<int32_t> splits = splitKCounts(g.k);

  // 1. Split-K of the heuristic's choices: their tiles, more CTAs over K.
  for (const cublasLtMatmulAlgo_t &seed : seeds) {
    if (!capability<int32_t>(*lt, seed, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT))
      continue;
    std::vector<uint32_t> schemes = reductionSchemes(
        capability<uint32_t>(*lt, seed, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK));
    for (int32_t split : splits)
      for (uint32_t scheme : schemes) {
        cublasLtMatmulAlgo_t algo = seed;
        if (setConfig(*lt, algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, split) &&
            setConfig(*lt, algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme) &&
            !consider(algo))
          return found;
      }
  }

  // 2. Every algorithm id for these types: each tile, split count (the
  // first reduction scheme it allows) and the deepest stages that check.
  std::vector<int> ids(kMaxAlgoIds);
  int idCount = 0;
  if (cublasStatus_t s = lt->cublasLtMatmulAlgoGetIds(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F,
                                                      g.abType, g.abType, g.outType, g.outType,
                                                      kMaxAlgoIds, ids.data(), &idCount);
      s != CUBLAS_STATUS_SUCCESS)
    return Error{g.label + ": cublasLtMatmulAlgoGetIds failed: " + lt->describe(s)};
  for (int i = 0; i < idCount; ++i) {
    cublasLtMatmulAlgo_t base{};
    if (lt->cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, g.abType, g.abType,
                                   g.outType, g.outType, ids[i], &base) != CUBLAS_STATUS_SUCCESS)
      continue;
    std::vector<uint32_t> tiles = capabilityList<uint32_t>(*lt, base, CUBLASLT_ALGO_CAP_TILE_IDS);
    if (tiles.empty())
      tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
    std::vector<uint32_t> stages =
        capabilityList<uint32_t>(*lt, base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    stages.insert(stages.begin(), CUBLASLT_MATMUL_STAGES_UNDEFINED);
    std::vector<uint32_t> schemes = reductionSchemes(
        capability<uint32_t>(*lt, base, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK));
    std::vector<int32_t> counts = {1};
    if (capability<int32_t>(*lt, base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT) && !schemes.empty())
      counts.insert(counts.end(), splits.begin(), splits.end());
    for (uint32_t tile : tiles)
      for (int32_t split : counts) {
        cublasLtMatmulAlgo_t configured = base;
        if (!setConfig(*lt, configured, CUBLASLT_ALGO_CONFIG_TILE_ID, tile) ||
            !setConfig(*lt, configured, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, split) ||
            !setConfig(*lt, configured, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME,
                       split > 1 ? schemes.front()
                                 : static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE)))
          continue;
        // Undefined stages (cuBLASLt's choice) first, then the deepest
        // pipeline the shared memory holds: a long K streams through it.
        for (size_t s = 0; s < stages.size(); ++s) {
          uint32_t stage = s == 0 ? stages[0] : stages[stages.size() - s];
          cublasLtMatmulAlgo_t algo = configured;
          if (!setConfig(*lt, algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, stage))
            continue;
          size_t before = found.size();
          if (!consider(algo))
            return found;
          if (found.size() > before)
            break;
        }
      }
  }
  return found;
}
