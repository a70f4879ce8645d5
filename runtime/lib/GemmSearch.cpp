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

#include <algorithm>
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
  std::set<GemmConfig> seen;
  for (const cublasLtMatmulAlgo_t &seed : seeds)
    if (Expected<GemmConfig> c = readGemmConfig(*lt, seed))
      seen.insert(*c);
  // Appends \p algo to \p to unless its configuration was seen or the
  // check rejects it; counts the check against \p budget.
  auto consider = [&](const cublasLtMatmulAlgo_t &algo, std::vector<cublasLtMatmulAlgo_t> &to,
                      size_t &budget) {
    Expected<GemmConfig> c = readGemmConfig(*lt, algo);
    if (!c || !seen.insert(*c).second || budget == 0)
      return false;
    --budget;
    if (!checkAlgo(g, algo))
      return false;
    to.push_back(algo);
    return true;
  };
  std::vector<int32_t> splits = splitKCounts(g.k);

  // 1. Split-K of the heuristic's choices: their tiles, more CTAs over K.
  std::vector<cublasLtMatmulAlgo_t> found;
  size_t budget = kMaxChecks / 4;
  for (const cublasLtMatmulAlgo_t &seed : seeds) {
    if (!capability<int32_t>(*lt, seed, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT))
      continue;
    std::vector<uint32_t> schemes = reductionSchemes(
        capability<uint32_t>(*lt, seed, CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK));
    for (int32_t split : splits)
      for (uint32_t scheme : schemes) {
        cublasLtMatmulAlgo_t algo = seed;
        if (setConfig(*lt, algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, split) &&
            setConfig(*lt, algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, scheme))
          consider(algo, found, budget);
      }
  }

  // 2. Every algorithm id for these types: each tile and split count (the
  // first reduction scheme it allows), with cuBLASLt's stages or else the
  // deepest that check. Each id has an equal share of the checks, and the
  // ids' lists are interleaved, so a limit cuts all of them alike rather
  // than the ids listed last.
  std::vector<int> ids(kMaxAlgoIds);
  int idCount = 0;
  if (cublasStatus_t s = lt->cublasLtMatmulAlgoGetIds(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F,
                                                      g.abType, g.abType, g.outType, g.outType,
                                                      kMaxAlgoIds, ids.data(), &idCount);
      s != CUBLAS_STATUS_SUCCESS)
    return Error{g.label + ": cublasLtMatmulAlgoGetIds failed: " + lt->describe(s)};
  std::vector<std::vector<cublasLtMatmulAlgo_t>> perId(static_cast<size_t>(std::max(idCount, 0)));
  for (int i = 0; i < idCount; ++i) {
    cublasLtMatmulAlgo_t base{};
    if (lt->cublasLtMatmulAlgoInit(handle, CUBLAS_COMPUTE_32F, CUDA_R_32F, g.abType, g.abType,
                                   g.outType, g.outType, ids[i], &base) != CUBLAS_STATUS_SUCCESS)
      continue;
    size_t share = std::max<size_t>(64, (kMaxChecks - kMaxChecks / 4) / idCount);
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
        for (size_t s = 0; s < stages.size() && share > 0; ++s) {
          uint32_t stage = s == 0 ? stages[0] : stages[stages.size() - s];
          cublasLtMatmulAlgo_t algo = configured;
          if (setConfig(*lt, algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, stage) &&
              consider(algo, perId[static_cast<size_t>(i)], share))
            break;
        }
      }
  }
  for (size_t round = 0, added = 1; added && found.size() < limit; ++round) {
    added = 0;
    for (const std::vector<cublasLtMatmulAlgo_t> &list : perId)
      if (round < list.size() && found.size() < limit) {
        found.push_back(list[round]);
        ++added;
      }
  }
  if (found.size() > limit)
    found.resize(limit);
  return found;
}
