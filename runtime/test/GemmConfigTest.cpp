//===- GemmConfigTest.cpp - Tests for GEMM configurations -------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The configuration tune stores for a GEMM beyond cuBLASLt's heuristic
// (GemmConfig.h): its text round trip and errors, which GEMMs are searched
// and with which splits, and — with cuBLASLt loaded, no GPU needed — that a
// configuration set on an algorithm reads back equal and gives the same
// bytes each time (what lets train rebuild exactly what tune measured).
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/runtime/GemmConfig.h"

#include <cstring>

using namespace kiln::runtime;

static GemmConfig sample() {
  GemmConfig c;
  c.algoId = 66;
  c.tile = 20;
  c.stages = 31;
  c.splitK = 4;
  c.reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  c.swizzle = 1;
  c.customOption = 3;
  c.innerShape = 2;
  c.clusterShape = 9;
  return c;
}

static void expectBad(const std::string &text, const std::string &error) {
  Expected<GemmConfig> c = GemmConfig::decode(text);
  CHECK(!c);
  if (!c)
    CHECK_EQ(c.getError(), error);
}

static void testText() {
  GemmConfig c = sample();
  CHECK_EQ(c.encode(),
           "id=66,tile=20,stages=31,splitk=4,reduction=2,swizzle=1,custom=3,inner=2,cluster=9");
  Expected<GemmConfig> back = GemmConfig::decode(c.encode());
  CHECK(back && *back == c);
  Expected<GemmConfig> plain = GemmConfig::decode(GemmConfig().encode());
  CHECK(plain && *plain == GemmConfig());
  CHECK_EQ(c.describe(), "id 66 tile 20 stages 31 split-K 4 (fp32 partials) swizzle custom 3");
  CHECK_EQ(GemmConfig().describe(), "id 0 tile 0 stages 0");
  // Order: the configuration's fields, id first.
  GemmConfig d = c;
  d.splitK = 8;
  CHECK(c < d && !(d < c) && c != d);

  std::string good = c.encode();
  expectBad("", "expected 'id=' at offset 0");
  expectBad("tile=20", "expected 'id=' at offset 0");
  expectBad("id=66", "ends before 'tile'");
  expectBad("id=x6,tile=20", "'id' needs a decimal number, got 'x6'");
  expectBad("id=066,tile=20", "'id' needs a decimal number, got '066'");
  expectBad("id=-1,tile=20", "'id' needs a decimal number, got '-1'");
  expectBad("id=2147483648,tile=20", "'id' is out of range (2147483648)");
  expectBad("id=1,tile=99999999999", "'tile' needs a decimal number, got '99999999999'");
  expectBad("id=1,stages=1", "expected 'tile=' at offset 5");
  expectBad(good + ",x=1", "unexpected text after 'cluster'");
  std::string reduction = good;
  reduction.replace(reduction.find("reduction=2"), 11, "reduction=8");
  expectBad(reduction, "'reduction' is out of range (8)");
  std::string inner = good;
  inner.replace(inner.find("inner=2"), 7, "inner=65536");
  expectBad(inner, "'inner' is out of range (65536)");
}

static void testSearchSpace() {
  // The 1b config's LoRA GEMMs (hidden 2048, intermediate 8192, r 16).
  CHECK(isThinGemm(8192, 16, 2048));  // x A, q/k/v/o
  CHECK(isThinGemm(8192, 48, 2048));  // x A of the concatenated q, k, v
  CHECK(isThinGemm(2048, 16, 8192));  // A's gradient of the down projection
  CHECK(isThinGemm(16, 8192, 8192));  // B's gradient
  CHECK(isThinGemm(2048, 2048, 8192)); // a long K over a small output
  CHECK(isThinGemm(8192, 2048, 16));   // (x A) B: a wide output, K = r
  CHECK(isThinGemm(8192, 8192, 32));   // the gate/up up projections
  CHECK(!isThinGemm(8192, 2048, 512)); // k/v's frozen GEMMs
  CHECK(!isThinGemm(8192, 512, 2048));
  CHECK(!isThinGemm(8192, 8192, 2048)); // the frozen GEMMs
  CHECK(!isThinGemm(8192, 2048, 8192));
  CHECK(splitKCounts(16).empty());
  CHECK(splitKCounts(511) == std::vector<int32_t>{});
  CHECK(splitKCounts(512) == std::vector<int32_t>{2});
  CHECK((splitKCounts(2048) == std::vector<int32_t>{2, 4, 8}));
  CHECK((splitKCounts(8192) == std::vector<int32_t>{2, 4, 8, 16, 32}));
  CHECK(reductionSchemes(0).empty());
  CHECK((reductionSchemes(CUBLASLT_REDUCTION_SCHEME_MASK) ==
         std::vector<uint32_t>{CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE,
                               CUBLASLT_REDUCTION_SCHEME_INPLACE,
                               CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE}));
  CHECK((reductionSchemes(CUBLASLT_REDUCTION_SCHEME_INPLACE) ==
         std::vector<uint32_t>{CUBLASLT_REDUCTION_SCHEME_INPLACE}));
}

static void testAlgorithmRoundTrip() {
  Expected<CublasLt> lt = CublasLt::load();
  CHECK(lt);
  if (!lt)
    return std::printf("%s\n", lt.getError().c_str()), void();
  // The id is cublasLtMatmulAlgoInit's (it needs a GPU): everything else
  // is set and read on the algorithm's own bytes.
  GemmConfig c = sample();
  c.algoId = 0;
  cublasLtMatmulAlgo_t first{}, second{};
  CHECK(applyGemmConfig(*lt, c, first));
  CHECK(applyGemmConfig(*lt, c, second));
  CHECK(!std::memcmp(&first, &second, sizeof(first)));
  Expected<GemmConfig> read = readGemmConfig(*lt, first);
  CHECK(read);
  if (read) {
    CHECK(*read == c);
    CHECK_EQ(read->encode(), c.encode());
  }
  // Another split is other bytes: the database's "algo" tells them apart.
  GemmConfig other = c;
  other.splitK = 8;
  cublasLtMatmulAlgo_t third{};
  CHECK(applyGemmConfig(*lt, other, third));
  CHECK(std::memcmp(&first, &third, sizeof(first)) != 0);
  Expected<GemmConfig> back = GemmConfig::decode(read ? read->encode() : "");
  cublasLtMatmulAlgo_t rebuilt{};
  CHECK(back && applyGemmConfig(*lt, *back, rebuilt));
  CHECK(!std::memcmp(&first, &rebuilt, sizeof(first)));
}

int main() {
  testText();
  testSearchSpace();
  testAlgorithmRoundTrip();
  return finishChecks();
}
