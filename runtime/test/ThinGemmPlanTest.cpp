//===- ThinGemmPlanTest.cpp - Tests for the thin-GEMM plan ------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Which descriptors Kiln's thin-GEMM kernels take (ThinGemmPlan.h): the 1b
// step's LoRA GEMMs each get their instantiation, grid, split over K and
// workspace; everything else is refused with its reason; the split rule;
// and the plan agrees with kernels/ThinGemm.cuh's instantiation table
// (tiles, threads, slice, stages: its shared memory) for every kernel.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include <algorithm>

#include "ThinGemmPlan.h"

#include <fstream>
#include <regex>
#include <sstream>

using namespace kiln::runtime::thin;

namespace {
constexpr int kSms = 132;                          // H200
constexpr size_t kWorkspace = size_t{32} << 20;    // kGemmWorkspaceBytes
constexpr int64_t T = 8192;                        // 1b: batch 4 x seq 2048

Problem problem(int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  Problem p;
  p.m = m, p.n = n, p.k = k, p.transA = ta, p.transB = tb;
  p.lda = ta ? m : k;
  p.ldb = tb ? k : n;
  p.ldc = n;
  return p;
}

Plan plan(const Problem &p, size_t workspace = kWorkspace) {
  std::string why;
  Plan result = planThinGemm(p, kSms, workspace, why);
  if (result.kernel.empty())
    std::fprintf(stderr, "refused: %s\n", why.c_str());
  return result;
}

void expectRefused(const Problem &p, const std::string &reason) {
  std::string why;
  Plan result = planThinGemm(p, kSms, kWorkspace, why);
  CHECK(result.kernel.empty());
  CHECK_EQ(why, reason);
}

void testSmallK() {
  // gate/up up projection: C[T, 8192] = s t [B, 0]^T, B stored [8192, 32].
  Plan g = plan(problem(T, 8192, 32, false, true));
  CHECK_EQ(g.kernel, "kiln_thin_gemm_k32_nt_bf16");
  CHECK(g.shape == 'k' && g.gridX == 64 && g.gridY == 64 && g.splits == 1 && g.threads == 256);
  // The fp32 staging tile (128 x 132 floats) is larger than two stages.
  CHECK(g.sharedBytes == 128 * 132 * 4 && g.partialBytes == 0 && g.counters == 0);
  // dX += s dT A (A [48, 2048]), and k, v up.
  CHECK_EQ(plan(problem(T, 2048, 48, false, false)).kernel, "kiln_thin_gemm_k48_nn_bf16");
  CHECK(plan(problem(T, 512, 48, false, true)).gridX == 4);
  CHECK_EQ(plan(problem(T, 8192, 16, false, false)).kernel, "kiln_thin_gemm_k16_nn_bf16");
}

void testSmallN() {
  // Down projections x A^T: 128 row tiles of 64 cover the SMs, no split.
  Plan d = plan(problem(T, 48, 2048, false, true));
  CHECK_EQ(d.kernel, "kiln_thin_gemm_n48_nt_bf16");
  CHECK(d.tileM == 64 && d.tileN == 48 && d.gridX == 1 && d.gridY == 128 && d.splits == 1);
  CHECK(d.threads == 128);
  // Four stages of A [64][72] and B [48][72] bf16.
  CHECK(d.sharedBytes == 4 * (64 * 72 + 48 * 72) * 2);
  CHECK_EQ(plan(problem(T, 32, 8192, false, false)).kernel, "kiln_thin_gemm_n32_nn_bf16");
  // dB = s dy^T t of q: 32 row tiles, split 4 over K = 8192.
  Plan b = plan(problem(2048, 48, T, true, false));
  CHECK_EQ(b.kernel, "kiln_thin_gemm_n48_tn_bf16");
  CHECK(b.gridY == 32 && b.splits == 4);
  CHECK(b.partialBytes == size_t{4} * 2048 * 48 * 4 && b.counters == 32);
  // k, v dB: 8 tiles, 16 splits of 512.
  CHECK(plan(problem(512, 48, T, true, false)).splits == 16);
  // The workspace bounds the split: 2 fit 1 MiB of partials.
  CHECK(plan(problem(2048, 48, T, true, false), size_t{1} << 20).splits == 2);
}

void testSmallM() {
  // dA = s dT^T x: M = r.
  Plan a = plan(problem(16, 8192, T, true, false));
  CHECK_EQ(a.kernel, "kiln_thin_gemm_m16_tn_bf16");
  CHECK(a.shape == 'm' && a.tileM == 16 && a.tileN == 64 && a.gridX == 128 && a.gridY == 1);
  CHECK(a.splits == 1);
  Plan q = plan(problem(48, 2048, T, true, false));
  CHECK(q.gridX == 32 && q.splits == 4 && q.counters == 32);
}

void testRefusals() {
  Problem batched = problem(T, 48, 2048, false, true);
  batched.batch = 2;
  expectRefused(batched, "batched");
  Problem bias = problem(T, 48, 2048, false, true);
  bias.epilogue = true;
  expectRefused(bias, "an epilogue");
  Problem f32 = problem(T, 48, 2048, false, true);
  f32.bf16Result = false;
  expectRefused(f32, "not bf16");
  expectRefused(problem(48, 48, 48, true, true), "both operands transposed");
  Problem odd = problem(T, 48, 2048, false, true);
  odd.lda = 2052;
  expectRefused(odd, "a row stride not a multiple of 8 elements");
  Problem narrow = problem(T, 48, 2048, false, true);
  narrow.ldc = 40;
  expectRefused(narrow, "a row stride below its width");
  expectRefused(problem(T, 2048, 2048, false, true), "no dimension of 16, 32, 48 or 64");
  expectRefused(problem(T, 2000, 32, false, true), "small K, but M or N not a multiple of 128");
  expectRefused(problem(T + 32, 48, 2048, false, true), "small N, but M not a multiple of 64");
  expectRefused(problem(16, 8192, 8200, true, false), "K not a multiple of 64");
  expectRefused(problem(T, 24, 2048, false, true), "no dimension of 16, 32, 48 or 64");
}

void testSplits() {
  // Enough tiles: no split.
  CHECK(chooseSplits(128, 128, kSms, 1000) == 1);
  // Doubled until 7/8 of the SMs are covered: 4 tiles -> 32 splits.
  CHECK(chooseSplits(4, 1024, kSms, 1000) == 32);
  // Each split keeps kMinSliceSteps slices: 32 slices -> at most 8.
  CHECK(chooseSplits(4, 32, kSms, 1000) == 8);
  // Splits divide the slices evenly: 36 slices split 4 (9 each), not 8.
  CHECK(chooseSplits(1, 36, kSms, 1000) == 4);
  // The workspace's bound.
  CHECK(chooseSplits(4, 1024, kSms, 3) == 2);
}
// Each KILN_THIN_GEMM_LAYOUTS(shape, BM, BN, BK, WM, WN, ST, ...) row of the
// header against the plan of a problem of that kind in each layout.
void testInstantiationTable() {
  std::ifstream file(KILN_THIN_GEMM_CUH);
  CHECK(file.good());
  std::stringstream text;
  text << file.rdbuf();
  std::string source = text.str();
  std::regex row(R"(KILN_THIN_GEMM_LAYOUTS\(([kmn])(\d+), (\d+), (\d+), (\d+), (\d+), (\d+), (\d+),)");
  int rows = 0;
  for (auto it = std::sregex_iterator(source.begin(), source.end(), row);
       it != std::sregex_iterator(); ++it) {
    const std::smatch &m = *it;
    char shape = m[1].str()[0];
    int64_t thin = std::stoll(m[2]), bm = std::stoll(m[3]), bn = std::stoll(m[4]),
            bk = std::stoll(m[5]), wm = std::stoll(m[6]), wn = std::stoll(m[7]),
            stages = std::stoll(m[8]);
    ++rows;
    for (const char *layout : {"nn", "nt", "tn"}) {
      bool ta = layout[0] == 't', tb = layout[1] == 't';
      Problem p = shape == 'k'   ? problem(1024, 1024, thin, ta, tb)
                  : shape == 'n' ? problem(1024, thin, 4096, ta, tb)
                                 : problem(thin, 1024, 4096, ta, tb);
      Plan got = plan(p);
      std::string name = "kiln_thin_gemm_" + m[1].str() + m[2].str() + "_" + layout + "_bf16";
      CHECK_EQ(got.kernel, name);
      CHECK(got.tileM == bm && got.tileN == bn);
      CHECK(got.threads == static_cast<unsigned>(32 * wm * wn));
      // Config<>'s shared memory: Stages x (A + B slices, rows padded by 8),
      // or the fp32 staging tile if larger.
      int64_t a = ta ? bk * (bm + 8) : bm * (bk + 8), b = tb ? bn * (bk + 8) : bk * (bn + 8);
      size_t ring = static_cast<size_t>(stages * (a + b) * 2);
      size_t staging = static_cast<size_t>(bm * (bn + 4) * 4);
      CHECK(got.sharedBytes == std::max(ring, staging));
      if (shape == 'k')
        CHECK(bk == thin && got.splits == 1);
      else
        CHECK(bk == kSliceK);
    }
  }
  CHECK(rows == 12);
}
} // namespace

int main() {
  testSmallK();
  testSmallN();
  testSmallM();
  testRefusals();
  testSplits();
  testInstantiationTable();
  return checkFailures() != 0;
}
