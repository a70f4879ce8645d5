//===- LoraGradPairPlan.cpp - An adapter's dT and dB as one launch --------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "LoraGradPairPlan.h"

#include <algorithm>
#include <utility>

using namespace kiln::runtime::pair;

namespace {

/// Bytes a row-major [rows, cols] bf16 matrix at row stride \p ld spans.
uint64_t span(int64_t rows, int64_t cols, int64_t ld) {
  return rows <= 0 ? 0 : static_cast<uint64_t>((rows - 1) * ld + cols) * 2;
}

/// A row-major bf16 matrix in device memory.
struct Strided {
  uint64_t base;
  int64_t rows, cols, ld;
};

/// No element of \p x is an element of \p y: their byte spans are apart,
/// or they share a row stride and x's columns sit beside y's in every row
/// (dT written into the columns of [Y | dT] beside Y).
bool apart(Strided x, Strided y) {
  uint64_t xEnd = x.base + span(x.rows, x.cols, x.ld), yEnd = y.base + span(y.rows, y.cols, y.ld);
  if (xEnd <= y.base || yEnd <= x.base)
    return true;
  if (x.ld != y.ld)
    return false;
  if (x.base < y.base)
    std::swap(x, y);
  uint64_t delta = x.base - y.base;
  if (delta % 2)
    return false;
  int64_t column = static_cast<int64_t>((delta / 2) % static_cast<uint64_t>(x.ld));
  return column >= y.cols && column + x.cols <= x.ld;
}

/// The shared memory of the instantiation (Layout in the .cuh).
size_t sharedBytes(int64_t rank, int64_t strip, Shape shape) {
  int64_t pitchY = strip + 8, pitchR = rank + 8;
  int64_t stage = shape.tileRows * pitchY + shape.tileRows * pitchR;
  int64_t rowBlocks = shape.tileRows / 16, parts = 8 / rowBlocks;
  int64_t red = rowBlocks * (parts - 1) * 16 * rank;
  return static_cast<size_t>((shape.stages * stage + strip * pitchR) * 2 + red * 4);
}

bool isDT(const Gemm &g) { return !g.transA && !g.transB; }
bool isDB(const Gemm &g) { return g.transA && !g.transB; }

} // namespace

Plan kiln::runtime::pair::planLoraGradPair(const Gemm &first, const Gemm &second, int sms,
                                            size_t workspaceBytes, std::string &why,
                                            Shape shape) {
  Plan plan;
  auto refuse = [&](const char *reason) {
    why = reason;
    return Plan{};
  };
  int dTIndex = isDT(first) && isDB(second) ? 0 : isDB(first) && isDT(second) ? 1 : -1;
  if (dTIndex < 0)
    return refuse("not a dT (A Bm) and dB (Aᵀ t) pair");
  const Gemm &dT = dTIndex == 0 ? first : second, &dB = dTIndex == 0 ? second : first;
  if (dT.a != dB.a || dT.lda != dB.lda)
    return refuse("the two GEMMs read different Y");
  if (!dT.bf16 || !dB.bf16 || dT.epilogue || dB.epilogue || dT.batch != 1 || dB.batch != 1)
    return refuse("bf16 without epilogue, batch 1 only");
  const int64_t rows = dT.m, cols = dT.k, rank = dT.n;
  if (dB.m != cols || dB.k != rows || dB.n != rank)
    return refuse("the shapes do not match dT [T, R] = Y [T, N] Bm and dB [N, R] = Yᵀ t");
  if (rank != 16 && rank != 32 && rank != 48 && rank != 64)
    return refuse("rank not 16, 32, 48 or 64");
  if (shape.tileRows != 16 && shape.tileRows != 32 && shape.tileRows != 64)
    return refuse("tile rows not 16, 32 or 64");
  if (rows % shape.tileRows)
    return refuse("tokens not a multiple of the tile rows");
  if (dT.lda < cols || dT.ldb < rank || dT.ldc < rank || dB.ldb < rank || dB.ldc < rank)
    return refuse("a row stride below its width");
  for (int64_t ld : {dT.lda, dT.ldb, dT.ldc, dB.ldb, dB.ldc})
    if (ld % 8)
      return refuse("a row stride not a multiple of 8 elements");
  for (uint64_t p : {dT.a, dT.b, dT.c, dB.b, dB.c})
    if (p % 16)
      return refuse("an operand not 16-byte aligned");
  // The outputs are written apart from every input and from each other.
  const Strided y{dT.a, rows, cols, dT.lda}, bm{dT.b, cols, rank, dT.ldb},
      t{dB.b, rows, rank, dB.ldb}, outT{dT.c, rows, rank, dT.ldc}, outB{dB.c, cols, rank, dB.ldc};
  for (const Strided &out : {outT, outB})
    if (!apart(out, y) || !apart(out, bm) || !apart(out, t))
      return refuse("an output overlaps an input");
  if (!apart(outT, outB))
    return refuse("the outputs overlap");

  int64_t wc = rank <= shape.wideRank && cols % 512 == 0 ? 64 : cols % 256 == 0 ? 32 : 0;
  if (!wc)
    return refuse("outputs not a multiple of 256");
  plan.strip = 8 * wc;
  plan.kernel = "kiln_lora_grad_pair_r" + std::to_string(rank) + "_w" + std::to_string(wc) +
                "_m" + std::to_string(shape.tileRows) + "_s" + std::to_string(shape.stages);
  plan.rows = rows, plan.cols = cols, plan.rank = rank, plan.dT = dTIndex;
  plan.tileRows = shape.tileRows;
  plan.sharedBytes = sharedBytes(rank, plan.strip, shape);
  if (plan.sharedBytes > 227 * 1024)
    return refuse("the tile does not fit shared memory");
  // One wave: as many CTAs as fit the SMs at this shared memory.
  const int64_t perSm = std::max<int64_t>(1, (228 * 1024) / (plan.sharedBytes + 1024));
  const int64_t gridX = cols / plan.strip, tiles = rows / shape.tileRows;
  int64_t groups = std::clamp<int64_t>((sms * perSm) / gridX, 1, tiles);
  auto partT = [&] { return static_cast<size_t>(gridX * rows * rank * 4); };
  auto partB = [&](int64_t g) { return static_cast<size_t>(g * cols * rank * 4); };
  if (partT() + partB(1) > workspaceBytes)
    return refuse("the partials do not fit the GEMM workspace");
  while (groups > 1 && partT() + partB(groups) > workspaceBytes)
    --groups;
  int64_t perGroup = (tiles + groups - 1) / groups;
  groups = (tiles + perGroup - 1) / perGroup;
  plan.gridX = static_cast<unsigned>(gridX);
  plan.gridY = static_cast<unsigned>(groups);
  plan.tilesPerGroup = static_cast<int>(perGroup);
  plan.partialTBytes = partT();
  plan.partialBBytes = partB(groups);
  return plan;
}

void kiln::runtime::pair::fillLaunchArgs(const Plan &plan, const Gemm &first, const Gemm &second,
                                         uint64_t workspace, LaunchArgs &args,
                                         FinishArgs &finish) {
  const Gemm &dT = plan.dT == 0 ? first : second, &dB = plan.dT == 0 ? second : first;
  args.y = dT.a, args.bm = dT.b, args.t = dB.b;
  args.partT = workspace;
  args.partB = workspace + plan.partialTBytes;
  args.rows = plan.rows, args.cols = plan.cols;
  args.ldy = dT.lda, args.ldbm = dT.ldb, args.ldt = dB.ldb;
  args.tilesPerGroup = plan.tilesPerGroup;
  finish.partT = args.partT, finish.partB = args.partB;
  finish.dT = dT.c, finish.dB = dB.c;
  finish.rows = plan.rows, finish.cols = plan.cols, finish.rank = plan.rank;
  finish.lddT = dT.ldc, finish.lddB = dB.ldc;
  finish.slicesT = static_cast<int32_t>(plan.gridX);
  finish.slicesB = static_cast<int32_t>(plan.gridY);
  finish.alpha1 = dT.alpha, finish.beta1 = dT.beta;
  finish.alpha2 = dB.alpha, finish.beta2 = dB.beta;
}

unsigned kiln::runtime::pair::finishBlocks(const Plan &plan, int sms) {
  int64_t quads = (plan.rows + plan.cols) * plan.rank / 4; // one thread each
  return static_cast<unsigned>(
      std::clamp<int64_t>((quads + kThreads - 1) / kThreads, 1, static_cast<int64_t>(sms) * 8));
}
