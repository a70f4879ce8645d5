//===- GemmConfig.cpp - A cuBLASLt algorithm's configuration --------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/GemmConfig.h"

#include <algorithm>
#include <cstdlib>
#include <limits>
#include <tuple>

using namespace kiln::runtime;

namespace {
/// The fields in encode()'s order, with the largest value each may hold.
struct FieldSpec {
  const char *name;
  uint64_t max;
};
constexpr FieldSpec kFields[] = {
    {"id", std::numeric_limits<int32_t>::max()},      {"tile", 0xffffffffull},
    {"stages", 0xffffffffull},                        {"splitk", std::numeric_limits<int32_t>::max()},
    {"reduction", CUBLASLT_REDUCTION_SCHEME_MASK},    {"swizzle", 0xffffffffull},
    {"custom", 0xffffffffull},                        {"inner", 0xffffull},
    {"cluster", 0xffffull}};
constexpr size_t kFieldCount = sizeof(kFields) / sizeof(kFields[0]);

auto tie(const GemmConfig &c) {
  return std::tie(c.algoId, c.tile, c.stages, c.splitK, c.reduction, c.swizzle, c.customOption,
                  c.innerShape, c.clusterShape);
}

std::string reductionName(uint32_t scheme) {
  switch (scheme) {
  case CUBLASLT_REDUCTION_SCHEME_INPLACE: return "in place";
  case CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE: return "fp32 partials";
  case CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE: return "output-type partials";
  default: return "reduction " + std::to_string(scheme);
  }
}

template <typename T>
Status getAttribute(const CublasLt &lt, const cublasLtMatmulAlgo_t &algo,
                    cublasLtMatmulAlgoConfigAttributes_t attribute, const char *name, T &value) {
  size_t written = 0;
  cublasStatus_t s =
      lt.cublasLtMatmulAlgoConfigGetAttribute(&algo, attribute, &value, sizeof(value), &written);
  if (s != CUBLAS_STATUS_SUCCESS || written != sizeof(value))
    return Error{std::string("cublasLtMatmulAlgoConfigGetAttribute(") + name +
                 ") failed: " + lt.describe(s)};
  return Status::success();
}

template <typename T>
Status setAttribute(const CublasLt &lt, cublasLtMatmulAlgo_t &algo,
                    cublasLtMatmulAlgoConfigAttributes_t attribute, const char *name,
                    const T &value) {
  cublasStatus_t s = lt.cublasLtMatmulAlgoConfigSetAttribute(&algo, attribute, &value, sizeof(value));
  if (s != CUBLAS_STATUS_SUCCESS)
    return Error{std::string("cublasLtMatmulAlgoConfigSetAttribute(") + name +
                 ") failed: " + lt.describe(s)};
  return Status::success();
}
} // namespace

bool GemmConfig::operator==(const GemmConfig &o) const { return tie(*this) == tie(o); }
bool GemmConfig::operator<(const GemmConfig &o) const { return tie(*this) < tie(o); }

std::string GemmConfig::encode() const {
  uint64_t values[kFieldCount] = {static_cast<uint64_t>(algoId),
                                  tile,
                                  stages,
                                  static_cast<uint64_t>(splitK),
                                  reduction,
                                  swizzle,
                                  customOption,
                                  innerShape,
                                  clusterShape};
  std::string text;
  for (size_t i = 0; i < kFieldCount; ++i)
    text += (i ? "," : "") + std::string(kFields[i].name) + "=" + std::to_string(values[i]);
  return text;
}

Expected<GemmConfig> GemmConfig::decode(std::string_view text) {
  uint64_t values[kFieldCount];
  size_t at = 0;
  for (size_t i = 0; i < kFieldCount; ++i) {
    std::string name = kFields[i].name;
    std::string_view rest = text.substr(std::min(at, text.size()));
    if (rest.compare(0, name.size() + 1, name + "=") != 0)
      return Error{"expected '" + name + "=' at offset " + std::to_string(at)};
    at += name.size() + 1;
    size_t end = text.find(',', at);
    if (end == std::string_view::npos)
      end = text.size();
    std::string digits(text.substr(at, end - at));
    if (digits.empty() || digits.size() > 10 ||
        digits.find_first_not_of("0123456789") != std::string::npos ||
        (digits.size() > 1 && digits[0] == '0'))
      return Error{"'" + name + "' needs a decimal number, got '" + digits + "'"};
    values[i] = std::strtoull(digits.c_str(), nullptr, 10);
    if (values[i] > kFields[i].max)
      return Error{"'" + name + "' is out of range (" + digits + ")"};
    at = end;
    if (i + 1 < kFieldCount) {
      if (at >= text.size())
        return Error{"ends before '" + std::string(kFields[i + 1].name) + "'"};
      ++at; // the comma
    } else if (at != text.size()) {
      return Error{"unexpected text after 'cluster'"};
    }
  }
  GemmConfig c;
  c.algoId = static_cast<int32_t>(values[0]);
  c.tile = static_cast<uint32_t>(values[1]);
  c.stages = static_cast<uint32_t>(values[2]);
  c.splitK = static_cast<int32_t>(values[3]);
  c.reduction = static_cast<uint32_t>(values[4]);
  c.swizzle = static_cast<uint32_t>(values[5]);
  c.customOption = static_cast<uint32_t>(values[6]);
  c.innerShape = static_cast<uint16_t>(values[7]);
  c.clusterShape = static_cast<uint16_t>(values[8]);
  return c;
}

std::string GemmConfig::describe() const {
  std::string text = "id " + std::to_string(algoId) + " tile " + std::to_string(tile) +
                     " stages " + std::to_string(stages);
  if (splitK > 1)
    text += " split-K " + std::to_string(splitK) + " (" + reductionName(reduction) + ")";
  if (swizzle)
    text += " swizzle";
  if (customOption)
    text += " custom " + std::to_string(customOption);
  return text;
}

bool kiln::runtime::isThinGemm(uint64_t m, uint64_t n, uint64_t k) {
  return std::min({m, n, k}) <= 64 || k >= 4 * std::max(m, n);
}

std::vector<int32_t> kiln::runtime::splitKCounts(uint64_t k) {
  std::vector<int32_t> counts;
  for (int32_t s : {2, 4, 8, 16, 32})
    if (k / static_cast<uint64_t>(s) >= kMinSplitK)
      counts.push_back(s);
  return counts;
}

std::vector<uint32_t> kiln::runtime::reductionSchemes(uint32_t mask) {
  std::vector<uint32_t> schemes;
  for (uint32_t s : {CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE, CUBLASLT_REDUCTION_SCHEME_INPLACE,
                     CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE})
    if (mask & s)
      schemes.push_back(s);
  return schemes;
}

Expected<GemmConfig> kiln::runtime::readGemmConfig(const CublasLt &lt,
                                                   const cublasLtMatmulAlgo_t &algo) {
  GemmConfig c;
  Status statuses[] = {
      getAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_ID, "id", c.algoId),
      getAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_TILE_ID, "tile", c.tile),
      getAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, "stages", c.stages),
      getAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, "splitk", c.splitK),
      getAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, "reduction", c.reduction),
      getAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, "swizzle", c.swizzle),
      getAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, "custom", c.customOption),
      getAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, "inner", c.innerShape),
      getAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, "cluster", c.clusterShape)};
  for (Status &s : statuses)
    if (!s)
      return s.takeError();
  return c;
}

Status kiln::runtime::applyGemmConfig(const CublasLt &lt, const GemmConfig &c,
                                      cublasLtMatmulAlgo_t &algo) {
  Status statuses[] = {
      setAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_TILE_ID, "tile", c.tile),
      setAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, "stages", c.stages),
      setAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, "splitk", c.splitK),
      setAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, "reduction", c.reduction),
      setAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, "swizzle", c.swizzle),
      setAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, "custom", c.customOption),
      setAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, "inner", c.innerShape),
      setAttribute(lt, algo, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, "cluster", c.clusterShape)};
  for (Status &s : statuses)
    if (!s)
      return s.takeError();
  return Status::success();
}
