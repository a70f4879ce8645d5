//===- AttentionLayoutTest.cpp - seq-major attention roles, no GPU --------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// kiln-attention-layout's [B, S, H, D] attention tensors on the runtime's
// side, without a GPU: a version 5 step program's `seq_major` roles decode
// into layout bits (and bad ones are refused with the op named), the
// attention's shape is read off the [B, H, S, D] views of its buffers
// (attentionShape), the attention scratch estimate is that of the dense
// step, cuDNN's graph gets each tensor's dims and strides
// (attentionTensorLayout), and kiln_fa90's kernels are looked up by the
// layout (kiln/artifact/HopperAttention.h).
//
//===----------------------------------------------------------------------===//

#include "Check.h"
#include "ProgramRunner.h"

#include "kiln/artifact/HopperAttention.h"

#include <cstdint>
#include <string>
#include <vector>

using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {

// The attention-roles program of StepProgramTest with v, o, dO, dV and dV's
// fp32 accumulator stored [b, s, heads, 64] (the bench's layout).
const char *kProgram = R"({
  "format": "kiln-step-program", "version": 5, "function": "main",
  "buffers": [
    {"dtype": "BF16", "shape": ["b", "4", "s", "64"]}, {"dtype": "BF16", "shape": ["b", "2", "s", "64"]},
    {"dtype": "BF16", "shape": ["b", "s", "2", "64"]}, {"dtype": "BF16", "shape": ["b", "s", "4", "64"]},
    {"dtype": "BF16", "shape": ["b", "s", "4", "64"]}, {"dtype": "F32", "shape": ["b", "2", "s", "64"]},
    {"dtype": "F32", "shape": ["b", "s", "2", "64"]}, {"dtype": "BF16", "shape": ["b", "2", "s", "64"]},
    {"dtype": "BF16", "shape": ["b", "s", "2", "64"]}, {"dtype": "BF16", "shape": ["b", "4", "s", "64"]}
  ],
  "args": [{"role": "input", "name": "q", "buffer": 0}, {"role": "input", "name": "k", "buffer": 1},
           {"role": "input", "name": "v", "buffer": 2}, {"role": "input", "name": "do", "buffer": 4}],
  "results": [],
  "ops": [
    {"op": "alloc", "result": 3},
    {"op": "launch", "kernel": "fwd", "module": "m", "args": [0, 1, 2, 3], "symbols": ["b", "s"],
     "items": "b*s", "per": 64, "block": 128, "shared": "0",
     "attention": {"direction": "forward", "causal": true, "scale": 0.125, "q": 0, "k": 1, "v": 2,
                   "o": 3, "seq_major": ["v", "o"], "replaces": []}},
    {"op": "alloc", "result": 5}, {"op": "fill", "target": 5, "value": 0},
    {"op": "alloc", "result": 6}, {"op": "fill", "target": 6, "value": 0},
    {"op": "alloc", "result": 9}, {"op": "alloc", "result": 7}, {"op": "alloc", "result": 8},
    {"op": "launch", "kernel": "bwd", "module": "m", "args": [0, 1, 2, 4, 3, 9, 5, 6],
     "symbols": ["b", "s"], "items": "b*s", "per": 64, "block": 128, "shared": "0",
     "attention": {"direction": "backward", "causal": true, "scale": 0.125, "q": 0, "k": 1,
                   "v": 2, "o": 3, "do": 4, "dq": 9, "dk": 7, "dv": 8,
                   "seq_major": ["v", "o", "do", "dv"], "replaces": [3, 5, 10, 11]}},
    {"op": "launch", "kernel": "n1", "module": "m", "args": [5, 7], "symbols": [],
     "items": "1", "per": 1, "block": 1, "shared": "0"},
    {"op": "launch", "kernel": "n2", "module": "m", "args": [6, 8], "symbols": [],
     "items": "1", "per": 1, "block": 1, "shared": "0"}
  ]})";

std::vector<std::vector<int64_t>> shapesAt(const StepProgram &p, const SymbolBindings &sizes) {
  std::vector<std::vector<int64_t>> shapes;
  for (const ProgramBuffer &b : p.buffers) {
    std::vector<int64_t> shape;
    for (const SizeExpr &d : b.shape)
      shape.push_back(*d.evaluate(sizes));
    shapes.push_back(shape);
  }
  return shapes;
}

std::string replaced(std::string text, const std::string &from, const std::string &to) {
  size_t at = text.find(from);
  CHECK(at != std::string::npos);
  if (at != std::string::npos)
    text.replace(at, from.size(), to);
  return text;
}

void testDecode() {
  Expected<StepProgram> p = StepProgram::decode(kProgram, "step");
  CHECK(p);
  if (!p) {
    std::fprintf(stderr, "%s\n", p.getError().c_str());
    return;
  }
  const AttentionRoles &forward = *p->ops[1].attention, &backward = *p->ops[9].attention;
  CHECK(forward.seqMajor == (kSeqMajorV | kSeqMajorO));
  CHECK(backward.seqMajor == (kSeqMajorV | kSeqMajorO | kSeqMajorDout | kSeqMajorDv));
  CHECK(forward.isSeqMajor(kSeqMajorV) && !forward.isSeqMajor(kSeqMajorQ));

  struct Case {
    std::string from, to, error;
  } cases[] = {
      {"\"version\": 5", "\"version\": 4",
       "step: op 1 (launch): 'attention': 'seq_major' needs a version 5 program"},
      {"\"seq_major\": [\"v\", \"o\"]", "\"seq_major\": [\"v\", \"dv\"]",
       "step: op 1 (launch): 'attention': 'seq_major' entry 'dv' is not a role of this forward"},
      {"\"seq_major\": [\"v\", \"o\"]", "\"seq_major\": [\"v\", \"v\"]",
       "step: op 1 (launch): 'attention': 'seq_major' repeats 'v'"},
      {"\"seq_major\": [\"v\", \"o\"]", "\"seq_major\": \"v\"",
       "step: op 1 (launch): 'attention': 'seq_major' is not an array of role names"},
      {"\"seq_major\": [\"v\", \"o\", \"do\", \"dv\"]", "\"seq_major\": [\"v\", 3]",
       "step: op 9 (launch): 'attention': 'seq_major' entry (not a string) is not a role of this "
       "backward"},
  };
  for (const Case &c : cases) {
    Expected<StepProgram> bad = StepProgram::decode(replaced(kProgram, c.from, c.to), "step");
    CHECK(!bad);
    if (!bad)
      CHECK_EQ(bad.getError(), c.error);
  }
}

void testShapeAndScratch() {
  Expected<StepProgram> p = StepProgram::decode(kProgram, "step");
  if (!p)
    return;
  SymbolBindings sizes = {{"b", 2}, {"s", 128}};
  std::vector<std::vector<int64_t>> shapes = shapesAt(*p, sizes);
  Expected<AttentionShape> forward = attentionShape(*p, *p->ops[1].attention, shapes);
  Expected<AttentionShape> backward = attentionShape(*p, *p->ops[9].attention, shapes);
  CHECK(forward && backward);
  if (!forward || !backward)
    return;
  // The [B, H, S, D] views: 4 query heads, 2 kv heads, 128 rows each.
  CHECK(forward->batch == 2 && forward->heads == 4 && forward->kvHeads == 2 &&
        forward->seq == 128 && forward->kvSeq == 128 && forward->headDim == 64);
  CHECK(backward->heads == 4 && backward->kvHeads == 2 && backward->seq == 128);
  CHECK_EQ(forward->describe(), "forward b2 h4 kv2 s128 d64 causal bshd v o");
  CHECK_EQ(backward->describe(), "backward b2 h4 kv2 s128 d64 causal bshd v o do dv");

  // A buffer whose layout is not the role's: the dense o read as seq-major
  // has 128 heads of 4 rows, which match nothing.
  Expected<StepProgram> wrong = StepProgram::decode(
      replaced(kProgram, "\"seq_major\": [\"v\", \"o\"]", "\"seq_major\": [\"v\"]"), "step");
  CHECK(wrong);
  if (wrong) {
    Expected<AttentionShape> s = attentionShape(*wrong, *wrong->ops[1].attention, shapes);
    CHECK(!s);
    if (!s)
      CHECK_EQ(s.getError(), "attention buffer 3 does not match the query");
  }

  // The scratch kiln-run adds (statistics [B, H, S] fp32, the backward's
  // workspace) is the dense step's: 2 * 4 * 128 * 4 bytes of statistics.
  Expected<ArenaPlan> arena = p->planArena(sizes, kArenaAlignment);
  CHECK(arena);
  if (!arena)
    return;
  Expected<AttentionScratchEstimate> scratch = estimateAttentionScratch(*p, *arena, sizes, 0);
  CHECK(scratch);
  if (scratch) {
    CHECK(scratch->calls == 2 && scratch->statistics == 2 * 4 * 128 * 4);
    CHECK(scratch->workspace ==
          size_t(2 * 4 * 128 * 64 * 4 + 2 * 2 * 4 * 128 * 64 * 2 + 2 * 4 * 128 * 4));
  }

  // kiln_fa90's kernels, by the bits each reads.
  CHECK_EQ(hopperAttentionKernel(forward->dtype, forward->headDim, forward->seqMajor),
           "kiln_fa90_fwd_bf16_d64_bshd_v_o");
  CHECK_EQ(
      hopperAttentionBackwardKernel(backward->dtype, backward->headDim, "", backward->seqMajor),
      "kiln_fa90_bwd_bf16_d64_bshd_v_do_dv");
  CHECK_EQ(hopperAttentionBackwardKernel(backward->dtype, backward->headDim, "prep_",
                                         backward->seqMajor),
           "kiln_fa90_bwd_prep_bf16_d64_bshd_o_do");
}

std::string join(const std::vector<int64_t> &v) {
  std::string s;
  for (int64_t x : v)
    s += (s.empty() ? "" : " ") + std::to_string(x);
  return s;
}

// cuDNN's graph: dims always [B, H, S, D]; strides per the tensor's layout.
void testCudnnStrides() {
  AttentionShape s;
  s.backward = true;
  s.batch = 2;
  s.heads = 8;
  s.kvHeads = 2;
  s.seq = 16;
  s.kvSeq = 32;
  s.headDim = 64;
  s.seqMajor = kSeqMajorV | kSeqMajorO | kSeqMajorDout | kSeqMajorDv;
  struct Case {
    unsigned bit;
    const char *dims, *strides;
  } cases[] = {
      {kSeqMajorQ, "2 8 16 64", "8192 1024 64 1"}, // dense [B, H, S, D]
      {kSeqMajorK, "2 2 32 64", "4096 2048 64 1"}, // dense, kv heads and rows
      {kSeqMajorV, "2 2 32 64", "4096 64 128 1"},  // [B, L, Hkv, D]
      {kSeqMajorO, "2 8 16 64", "8192 64 512 1"},  // [B, S, H, D]
      {kSeqMajorDout, "2 8 16 64", "8192 64 512 1"}, {kSeqMajorDq, "2 8 16 64", "8192 1024 64 1"},
      {kSeqMajorDk, "2 2 32 64", "4096 2048 64 1"},  {kSeqMajorDv, "2 2 32 64", "4096 64 128 1"},
  };
  for (const Case &c : cases) {
    AttentionTensorLayout t = attentionTensorLayout(s, c.bit);
    CHECK_EQ(join(t.dims), c.dims);
    CHECK_EQ(join(t.strides), c.strides);
  }
}

} // namespace

int main() {
  testDecode();
  testShapeAndScratch();
  testCudnnStrides();
  return checkFailures() != 0;
}
