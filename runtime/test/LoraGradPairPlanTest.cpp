//===- LoraGradPairPlanTest.cpp - Tests for the dT/dB pair plan -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Which adjacent GEMM pairs kernels/LoraGradPair.cuh runs (LoraGradPairPlan.h):
// the 1b step's adapter backward pairs in either order get their strip,
// grid and workspace; dT written into the columns beside Y is accepted, an
// output over an input, different Y, unsupported ranks, layouts and
// workspace overflows are refused with a reason; the launch arguments; the
// plan's shared memory agrees with the kernel's Layout for every
// instantiation the support module carries.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "LoraGradPairPlan.h"

#include <fstream>
#include <regex>
#include <sstream>

using namespace kiln::runtime::pair;

namespace {
constexpr int kSms = 132;                       // H200
constexpr size_t kWorkspace = size_t{32} << 20; // kGemmWorkspaceBytes
constexpr int64_t T = 8192;                     // 1b: batch 4 x seq 2048

/// dT = 2 Y Bm [T, R] and dB = 2 Yᵀ t [N, R] over Y [T, N] at \p y, every
/// operand in its own region 1 GiB apart.
std::pair<Gemm, Gemm> adapter(int64_t n, int64_t r, uint64_t y = 1ull << 30) {
  Gemm dT, dB;
  dT.a = y, dT.b = 2ull << 30, dT.c = 3ull << 30;
  dT.m = T, dT.n = r, dT.k = n, dT.lda = n, dT.ldb = r, dT.ldc = r, dT.alpha = 2;
  dB.a = y, dB.b = 4ull << 30, dB.c = 5ull << 30;
  dB.m = n, dB.n = r, dB.k = T, dB.lda = n, dB.ldb = r, dB.ldc = r, dB.transA = true, dB.alpha = 2;
  return {dT, dB};
}

Plan plan(const Gemm &a, const Gemm &b, std::string *why = nullptr) {
  std::string reason;
  Plan p = planLoraGradPair(a, b, kSms, kWorkspace, reason);
  if (why)
    *why = reason;
  CHECK(p.kernel.empty() == !reason.empty());
  return p;
}

void refused(const Gemm &a, const Gemm &b, const std::string &expected) {
  std::string why;
  Plan p = plan(a, b, &why);
  CHECK(p.kernel.empty());
  if (why.find(expected) == std::string::npos) {
    std::fprintf(stderr, "expected a refusal naming '%s', got '%s'\n", expected.c_str(),
                 why.c_str());
    ++checkFailures();
  }
}

} // namespace

int main() {
  // The 1b gate projection: N 8192, R 32: 512-column strips, one wave of
  // 128 CTAs, 16 tiles of 64 rows each; partials 16 + 8 slices.
  auto [dT, dB] = adapter(8192, 32);
  Plan gate = plan(dT, dB);
  CHECK(gate.kernel == "kiln_lora_grad_pair_r32_w64_m64_s2");
  CHECK(gate.dT == 0 && gate.strip == 512 && gate.gridX == 16 && gate.gridY == 8);
  CHECK(gate.tilesPerGroup == 16 && gate.rows == T && gate.cols == 8192 && gate.rank == 32);
  CHECK(gate.partialTBytes == size_t{16} * T * 32 * 4);
  CHECK(gate.partialBBytes == size_t{8} * 8192 * 32 * 4);
  CHECK(gate.partialTBytes + gate.partialBBytes <= kWorkspace);
  // The program's other order (up: dB's GEMM first, dT accumulating).
  Gemm up = dT;
  up.beta = 1;
  Plan swapped = plan(dB, up);
  CHECK(swapped.dT == 1 && swapped.kernel == gate.kernel && swapped.gridX == gate.gridX);

  // q/k/v (R 48): 256-column strips; k and v (N 512): two strips.
  auto [qT, qB] = adapter(2048, 48);
  Plan q = plan(qT, qB);
  CHECK(q.kernel == "kiln_lora_grad_pair_r48_w32_m64_s2" && q.strip == 256 && q.gridX == 8);
  CHECK(q.gridY == 16 && q.tilesPerGroup == 8);
  auto [kT, kB] = adapter(512, 48);
  CHECK(plan(kT, kB).gridX == 2);
  // down and o: dT into the columns of [Y | dT] beside Y (ld N + R).
  auto [oT, oB] = adapter(2048, 16);
  oT.lda = oB.lda = 2064, oT.ldc = 2064, oT.c = oT.a + 2048 * 2;
  Plan o = plan(oT, oB);
  CHECK(o.kernel == "kiln_lora_grad_pair_r16_w64_m64_s2" && o.gridX == 4 && o.gridY == 32);
  // ... but not when dT's columns reach into Y's.
  Gemm inside = oT;
  inside.c = oT.a + 2040 * 2;
  refused(inside, oB, "overlaps an input");
  Gemm overB = oB;
  overB.c = oB.b; // dB over t
  refused(oT, overB, "overlaps an input");
  Gemm same = oB;
  same.c = oT.c; // the two outputs at one place
  same.ldc = oT.ldc;
  refused(oT, same, "overlap");

  // The launch arguments: partials at the workspace, dB's after dT's.
  LaunchArgs args;
  FinishArgs finish;
  fillLaunchArgs(gate, dT, dB, 7ull << 30, args, finish);
  CHECK(args.y == dT.a && args.bm == dT.b && args.t == dB.b && args.ldy == 8192);
  CHECK(args.partT == 7ull << 30 && args.partB == (7ull << 30) + gate.partialTBytes);
  CHECK(finish.dT == dT.c && finish.dB == dB.c && finish.slicesT == 16 && finish.slicesB == 8);
  CHECK(finish.alpha1 == 2 && finish.beta1 == 0 && finish.alpha2 == 2 && finish.lddT == 32);
  fillLaunchArgs(swapped, dB, up, 0, args, finish);
  CHECK(args.bm == dT.b && args.t == dB.b && finish.beta1 == 1 && finish.beta2 == 0);
  CHECK(finishBlocks(gate, kSms) == (2 * 8192 * 32 / 4 + 255) / 256);

  // Refusals.
  Gemm otherY = dB;
  otherY.a += 4096;
  refused(dT, otherY, "different Y");
  refused(dT, dT, "not a dT");
  auto [r8T, r8B] = adapter(8192, 8);
  refused(r8T, r8B, "rank");
  Gemm f32 = dT;
  f32.bf16 = false;
  refused(f32, dB, "bf16");
  Gemm bias = dT;
  bias.epilogue = true;
  refused(bias, dB, "epilogue");
  Gemm transB = dT;
  transB.transB = true;
  refused(transB, dB, "not a dT");
  auto [oddT, oddB] = adapter(8192, 32);
  oddT.m = oddB.k = T - 8; // tokens not a multiple of 64
  refused(oddT, oddB, "multiple of the tile rows");
  auto [narrowT, narrowB] = adapter(768 + 128, 16);
  refused(narrowT, narrowB, "multiple of 256");
  Gemm misaligned = dT;
  misaligned.c += 8;
  refused(misaligned, dB, "aligned");
  Gemm ld = dB;
  ld.ldb = 36;
  refused(dT, ld, "multiple of 8");
  std::string why;
  CHECK(planLoraGradPair(dT, dB, kSms, size_t{8} << 20, why).kernel.empty());
  CHECK(why.find("workspace") != std::string::npos);
  // A smaller workspace: fewer row groups, the partials still fit.
  Plan tight = planLoraGradPair(dT, dB, kSms, size_t{20} << 20, why);
  CHECK(!tight.kernel.empty() && tight.partialTBytes + tight.partialBBytes <= size_t{20} << 20);
  CHECK(tight.gridY < gate.gridY);

  // The plan's shared memory is the kernel's Layout for every instantiation
  // the support module carries (the .cuh's KILN_LORA_PAIR lines).
  std::ifstream cuh(KILN_LORA_GRAD_PAIR_CUH);
  std::stringstream text;
  text << cuh.rdbuf();
  std::string source = text.str();
  CHECK(source.find("KILN_LORA_PAIR_SHAPES(64, 2)") != std::string::npos);
  std::regex line(R"(KILN_LORA_PAIR\((\d+), (\d+), BM, S\))");
  int instances = 0;
  for (auto it = std::sregex_iterator(source.begin(), source.end(), line);
       it != std::sregex_iterator(); ++it, ++instances) {
    int64_t r = std::stoll((*it)[1]), wc = std::stoll((*it)[2]);
    auto [pT, pB] = adapter(wc == 64 ? 8192 : 768, r);
    Shape shape;
    shape.wideRank = wc == 64 ? 64 : 0;
    Plan p = planLoraGradPair(pT, pB, kSms, kWorkspace, why, shape);
    CHECK(p.kernel == "kiln_lora_grad_pair_r" + std::to_string(r) + "_w" + std::to_string(wc) +
                          "_m64_s2");
    int64_t strip = 8 * wc, pitchY = strip + 8, pitchR = r + 8;
    int64_t bytes = (2 * (64 * pitchY + 64 * pitchR) + strip * pitchR) * 2 + 4 * 16 * r * 4;
    CHECK(p.sharedBytes == static_cast<size_t>(bytes) && p.sharedBytes <= 227 * 1024);
  }
  CHECK(instances == 7);
  return checkFailures() != 0;
}
