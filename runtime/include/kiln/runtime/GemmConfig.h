//===- GemmConfig.h - A cuBLASLt algorithm's configuration ------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A cublasLtMatmulAlgo_t is opaque, but what makes it one algorithm is its
// configuration: the algorithm id (cublasLtMatmulAlgoGetIds), tile, stages,
// split-K count and reduction scheme, CTA swizzling, custom option, inner
// and cluster shape. `kiln-run tune` searches beyond cuBLASLt's heuristic
// list by setting these (the thin LoRA GEMMs gain from split-K), so the
// tuning database stores the winner's configuration as text, and `train`
// rebuilds the algorithm from it (cublasLtMatmulAlgoInit, the attributes,
// cublasLtMatmulAlgoCheck) when the heuristic does not offer it
// (docs/tuning.md, "Candidates beyond the heuristic").
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_GEMMCONFIG_H
#define KILN_RUNTIME_GEMMCONFIG_H

#include "kiln/runtime/CublasLt.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::runtime {

struct GemmConfig {
  int32_t algoId = 0;        ///< CUBLASLT_ALGO_CONFIG_ID (read-only: cublasLtMatmulAlgoInit sets it)
  uint32_t tile = 0;         ///< cublasLtMatmulTile_t
  uint32_t stages = 0;       ///< cublasLtMatmulStages_t
  int32_t splitK = 1;        ///< K splits, 1: none
  uint32_t reduction = 0;    ///< cublasLtReductionScheme_t of the splits
  uint32_t swizzle = 0;      ///< CTA swizzling, 0 or 1
  uint32_t customOption = 0; ///< up to CUBLASLT_ALGO_CAP_CUSTOM_OPTION_MAX
  uint16_t innerShape = 0;   ///< cublasLtMatmulInnerShape_t
  uint16_t clusterShape = 0; ///< cublasLtClusterShape_t (0: auto)

  bool operator==(const GemmConfig &o) const;
  bool operator!=(const GemmConfig &o) const { return !(*this == o); }
  bool operator<(const GemmConfig &o) const;

  /// "id=66,tile=20,stages=31,splitk=4,reduction=2,swizzle=0,custom=0,inner=0,cluster=0":
  /// every field, in this order (the database's "config").
  std::string encode() const;
  /// encode()'s text back; an error names the first field that is wrong
  /// (missing, out of order, not a number, out of range).
  static Expected<GemmConfig> decode(std::string_view text);
  /// For the report: "id 66 tile 20 stages 31 split-K 4 (fp32 partials)".
  std::string describe() const;
};

/// A GEMM that a heuristic top-K serves poorly: one of m, n at most 64 (the
/// LoRA down projections, the adapters' gradients) or a reduction much
/// longer than the output is wide (k >= 4 max(m, n)): a small output, few
/// CTAs unless K is split; or k at most 64 (the up projections, the
/// adapters' input gradients): a wide output written at a fraction of the
/// memory bandwidth, where the tile decides.
bool isThinGemm(uint64_t m, uint64_t n, uint64_t k);

/// The split-K counts worth trying for a reduction of \p k: 2, 4, 8, 16,
/// 32, each leaving every split at least kMinSplitK elements of K.
constexpr uint64_t kMinSplitK = 256;
std::vector<int32_t> splitKCounts(uint64_t k);

/// The reduction schemes, in the order tune tries them, that \p mask allows
/// (CUBLASLT_ALGO_CAP_REDUCTION_SCHEME_MASK): fp32 partials in the
/// workspace first, then in place, then partials of the output type.
std::vector<uint32_t> reductionSchemes(uint32_t mask);

/// The configuration of \p algo, read attribute by attribute.
Expected<GemmConfig> readGemmConfig(const CublasLt &lt, const cublasLtMatmulAlgo_t &algo);
/// Sets every attribute of \p config but the id on \p algo (an algorithm
/// cublasLtMatmulAlgoInit made for config.algoId).
Status applyGemmConfig(const CublasLt &lt, const GemmConfig &config, cublasLtMatmulAlgo_t &algo);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_GEMMCONFIG_H
