//===- Nf4Pairing.cpp - Which NF4 GEMMs the fused kernel can run ----------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Pairs each weight of a launch's "nf4" roles with the GEMM that reads it
// and checks that GEMM against what Nf4Gemm90.cuh computes. No CUDA here:
// the CPU tests run it on hand-written step programs.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/Nf4Gemm.h"

#include <algorithm>
#include <cstdlib>
#include <set>

using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {
// Nf4Gemm90.cuh's tiles: 256 tokens, 128 weight rows, 64 of k.
constexpr int64_t kTokens = 256, kRows = 128, kDepth = 64;

std::string sizeText(int64_t m, int64_t n, int64_t k) {
  return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

/// Why the fused kernel cannot run \p gemm reading \p w (empty: it can);
/// fills the pair's sizes and direction.
std::string check(const StepProgram &p, const ProgramOp &gemm, const Nf4Weight &w,
                  const SymbolBindings &sizes, Nf4GemmPair &pair) {
  if (w.readers.size() != 1)
    return "the weight has " + std::to_string(w.readers.size()) + " readers";
  if (w.block != 64)
    return "NF4 blocks of " + std::to_string(w.block) + " (the kernel reads blocks of 64)";
  if (w.doubleQuant() && w.absmaxBlock != 256)
    return "absmax blocks of " + std::to_string(w.absmaxBlock) + " (the kernel reads 256)";
  if (gemm.b != w.weight)
    return "the weight is the GEMM's A";
  if (gemm.transA)
    return "A is transposed";
  if (gemm.epilogue != "none" || gemm.bias >= 0)
    return "epilogue " + gemm.epilogue;
  if (!gemm.lds.empty())
    return "leading dimensions other than the packed widths";
  if (p.buffers[gemm.a].dtype != DType::BF16 || p.buffers[gemm.c].dtype != DType::BF16 ||
      p.buffers[w.weight].dtype != DType::BF16)
    return "not bf16";
  if (!gemm.m || !gemm.n || !gemm.k || !gemm.batch)
    return "a size is missing";
  Expected<int64_t> m = gemm.m->evaluate(sizes), n = gemm.n->evaluate(sizes),
                    k = gemm.k->evaluate(sizes), batch = gemm.batch->evaluate(sizes);
  if (!m || !n || !k || !batch)
    return "a size does not evaluate";
  if (*batch != 1)
    return "batch " + std::to_string(*batch);
  pair.m = *m;
  pair.n = *n;
  pair.k = *k;
  // op(B) = W^T: B is [n, k] = [out, in], the forward; op(B) = W: B is
  // [k, n], the input gradient.
  pair.forward = gemm.transB;
  int64_t rows = pair.forward ? *n : *k, cols = pair.forward ? *k : *n;
  if (rows != w.rows || cols != w.cols)
    return "the GEMM's " + sizeText(*m, *n, *k) + " does not read the whole [" +
           std::to_string(w.rows) + ", " + std::to_string(w.cols) + "] weight";
  if (*m % kTokens || *n % kRows || *k % kDepth)
    return sizeText(*m, *n, *k) + " is not a multiple of the kernel's 256x128x64 tiles";
  if (*m > 0x7fffffff || *n > 0x7fffffff || *k > 0x7fffffff)
    return sizeText(*m, *n, *k) + " exceeds int32";
  return {};
}
} // namespace

std::string Nf4GemmPair::label() const {
  return "nf4 " + sizeText(m, n, k) + (forward ? " fwd" : " dgrad") + (doubleQuant ? " dq" : "");
}

std::vector<Nf4GemmPair> kiln::runtime::pairNf4Gemms(const StepProgram &program,
                                                     const SymbolBindings &sizes) {
  std::vector<Nf4GemmPair> pairs;
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const ProgramOp &op = program.ops[i];
    if (op.kind != ProgramOp::Kind::Launch || !op.nf4)
      continue;
    for (size_t w = 0; w < op.nf4->weights.size(); ++w) {
      const Nf4Weight &weight = op.nf4->weights[w];
      Nf4GemmPair pair;
      pair.launch = i;
      pair.weight = w;
      pair.gemm = weight.readers.front(); // checkNf4Roles: a later GEMM
      pair.doubleQuant = weight.doubleQuant();
      const ProgramOp &gemm = program.ops[pair.gemm];
      pair.alpha = gemm.alpha;
      pair.beta = gemm.beta;
      pair.unsupported = check(program, gemm, weight, sizes, pair);
      // One problem per direction, sizes, quantization and scaling: the
      // decoder layers' q projections are one tuning entry.
      pair.signature = std::string("nf4 ") + (pair.forward ? "fwd" : "dgrad") +
                       (pair.doubleQuant ? " dq" : "") + " alpha=" + std::to_string(pair.alpha) +
                       " beta=" + std::to_string(pair.beta) + " " +
                       sizeText(pair.m, pair.n, pair.k);
      pair.shape = "m=" + std::to_string(pair.m) + ",n=" + std::to_string(pair.n) +
                   ",k=" + std::to_string(pair.k);
      pairs.push_back(std::move(pair));
    }
  }
  return pairs;
}

std::vector<size_t> kiln::runtime::skippableNf4Launches(const StepProgram &program,
                                                        const std::vector<size_t> &fusedGemms) {
  std::set<size_t> fused(fusedGemms.begin(), fusedGemms.end());
  std::vector<size_t> skipped;
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const ProgramOp &op = program.ops[i];
    if (op.kind != ProgramOp::Kind::Launch || !op.nf4 || !op.nf4->exclusive)
      continue;
    bool all = true;
    for (const Nf4Weight &w : op.nf4->weights)
      for (size_t r : w.readers)
        all = all && fused.count(r);
    if (all)
      skipped.push_back(i);
  }
  return skipped;
}

Expected<std::string> kiln::runtime::nf4GemmOverride() {
  const char *value = std::getenv("KILN_NF4_GEMM");
  std::string v = value ? value : "";
  if (v.empty() || v == "fused" || v == "dequant")
    return v;
  return Error{"KILN_NF4_GEMM='" + v + "' is neither 'fused' nor 'dequant'"};
}
