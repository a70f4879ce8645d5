//===- ThinGemmPlan.cpp - Which GEMMs Kiln's thin-GEMM kernel runs ---------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "ThinGemmPlan.h"

namespace kiln::runtime::thin {

namespace {
bool thinSize(int64_t v) { return v == 16 || v == 32 || v == 48 || v == 64; }
} // namespace

unsigned chooseSplits(int64_t tiles, int64_t slices, int sms, int64_t maxSplitsByBytes) {
  unsigned splits = 1;
  // One CTA per SM streams at its share of the bandwidth (the ring keeps
  // three slices, ~40 KB, in flight); 7/8 of the SMs is a wave.
  while (8 * tiles * splits < 7 * static_cast<int64_t>(sms) && slices % (2 * splits) == 0 &&
         slices / (2 * splits) >= kMinSliceSteps && 2 * splits <= maxSplitsByBytes)
    splits *= 2;
  return splits;
}

Plan planThinGemm(const Problem &p, int sms, size_t workspaceBytes, std::string &why) {
  Plan plan;
  auto refuse = [&](const std::string &reason) {
    why = reason;
    return Plan{};
  };
  if (p.batch != 1)
    return refuse("batched");
  if (p.epilogue)
    return refuse("an epilogue");
  if (!p.bf16Operands || !p.bf16Result)
    return refuse("not bf16");
  if (p.transA && p.transB)
    return refuse("both operands transposed");
  if (p.m <= 0 || p.n <= 0 || p.k <= 0)
    return refuse("an empty GEMM");
  // Row strides: at least the stored width, whole 16-byte chunks.
  int64_t widthA = p.transA ? p.m : p.k, widthB = p.transB ? p.k : p.n;
  if (p.lda < widthA || p.ldb < widthB || p.ldc < p.n)
    return refuse("a row stride below its width");
  if (p.lda % 8 || p.ldb % 8 || p.ldc % 8)
    return refuse("a row stride not a multiple of 8 elements");
  std::string layout = p.transA ? "tn" : p.transB ? "nt" : "nn";
  // A and B slices as stored, rows padded by 8 elements (ThinGemm.cuh's Tile).
  auto tile = [](int64_t rows, int64_t width) { return rows * (width + 8); };
  if (thinSize(p.k)) {
    if (p.m % 128 || p.n % 128)
      return refuse("small K, but M or N not a multiple of 128");
    plan.shape = 'k';
    plan.tileM = plan.tileN = 128;
    plan.threads = 256;
    int64_t a = p.transA ? tile(p.k, 128) : tile(128, p.k);
    int64_t b = p.transB ? tile(128, p.k) : tile(p.k, 128);
    size_t ring = 2 * static_cast<size_t>(a + b) * 2; // two stages
    size_t staging = 128 * (128 + 4) * 4;
    plan.sharedBytes = ring > staging ? ring : staging;
  } else if (thinSize(p.n) || thinSize(p.m)) {
    bool thinN = thinSize(p.n);
    int64_t thin = thinN ? p.n : p.m, wide = thinN ? p.m : p.n;
    if (wide % kWideTile)
      return refuse(std::string("small ") + (thinN ? "N, but M" : "M, but N") +
                    " not a multiple of 64");
    if (p.k % kSliceK)
      return refuse("K not a multiple of 64");
    plan.shape = thinN ? 'n' : 'm';
    plan.tileM = thinN ? kWideTile : thin;
    plan.tileN = thinN ? thin : kWideTile;
    plan.threads = 128;
    int64_t a = p.transA ? tile(kSliceK, plan.tileM) : tile(plan.tileM, kSliceK);
    int64_t b = p.transB ? tile(plan.tileN, kSliceK) : tile(kSliceK, plan.tileN);
    size_t ring = 4 * static_cast<size_t>(a + b) * 2;
    size_t staging = static_cast<size_t>(plan.tileM) * (plan.tileN + 4) * 4;
    plan.sharedBytes = ring > staging ? ring : staging;
  } else {
    return refuse("no dimension of 16, 32, 48 or 64");
  }
  plan.gridX = static_cast<unsigned>(p.n / plan.tileN);
  plan.gridY = static_cast<unsigned>(p.m / plan.tileM);
  if (plan.gridY > 65535)
    return refuse("too many row tiles");
  if (plan.shape != 'k') {
    size_t perSplit = static_cast<size_t>(p.m) * p.n * 4;
    int64_t maxByBytes = static_cast<int64_t>(workspaceBytes / perSplit);
    plan.splits = chooseSplits(int64_t{plan.gridX} * plan.gridY, p.k / kSliceK, sms, maxByBytes);
    if (plan.splits > 1) {
      plan.partialBytes = perSplit * plan.splits;
      plan.counters = static_cast<size_t>(plan.gridX) * plan.gridY;
    }
  }
  plan.kernel = "kiln_thin_gemm_" + std::string(1, plan.shape) +
                std::to_string(plan.shape == 'k' ? p.k : plan.shape == 'n' ? p.n : p.m) + "_" +
                layout + "_bf16";
  return plan;
}

} // namespace kiln::runtime::thin
