//===- Nf4GemmTest.cpp - NF4 roles, pairing, the "nf4" tuning entry -------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The CPU side of the fused NF4 GEMM in the step (no GPU): a launch's "nf4"
// roles decode and are checked against the program (one line per bad
// field), each marked weight pairs with its GEMM as forward or input
// gradient with the reason where the sm_90a kernel cannot run it, the
// dequantize launches that may be skipped, the KILN_NF4_GEMM hook, and the
// tuning database's "nf4" entries round trip and reject bad ones.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/runtime/Nf4Gemm.h"
#include "kiln/runtime/StepProgram.h"
#include "kiln/runtime/TuningDb.h"

#include <cstdlib>
#include <string>

using namespace kiln::runtime;
using namespace kiln::artifact;

// x [n, 128] -> W = dequantize(codes, absmax) [256, 128] -> y = x W^T;
// again for the backward: dx += dy W. Marked as the compiler marks them.
static std::string program(const std::string &firstRoles, const std::string &secondRoles,
                           const std::string &secondGemm = "") {
  std::string gemm2 = secondGemm.empty()
                          ? R"({"op": "gemm", "a": 5, "b": 7, "c": 6, "trans_a": false,
       "trans_b": false, "m": "n", "n": "128", "k": "256", "batch": "1",
       "strides": ["0", "0", "0"], "epilogue": "none", "compute": "F32", "beta": 1})"
                          : secondGemm;
  return R"({
  "format": "kiln-step-program", "version": 2, "function": "main",
  "buffers": [
    {"dtype": "BF16", "shape": ["n", "128"]},
    {"dtype": "U8", "shape": ["16384"]},
    {"dtype": "F32", "shape": ["512"]},
    {"dtype": "BF16", "shape": ["256", "128"]},
    {"dtype": "BF16", "shape": ["n", "256"]},
    {"dtype": "BF16", "shape": ["n", "256"]},
    {"dtype": "BF16", "shape": ["n", "128"]},
    {"dtype": "BF16", "shape": ["256", "128"]},
    {"dtype": "F32", "shape": []}
  ],
  "args": [{"role": "input", "name": "x", "buffer": 0},
           {"role": "param", "name": "w.nf4_codes", "buffer": 1},
           {"role": "param", "name": "w.nf4_absmax", "buffer": 2},
           {"role": "input", "name": "dy", "buffer": 5}],
  "results": [{"role": "loss", "name": "loss", "buffer": 8},
              {"role": "other", "buffer": 4}, {"role": "other", "buffer": 6}],
  "ops": [
    {"op": "alloc", "result": 3},
    {"op": "launch", "kernel": "dq", "module": "module0", "args": [1, 2, 3], "symbols": [],
     "items": "32768", "per": 256, "block": 256, "shared": "0")" +
         firstRoles + R"(},
    {"op": "alloc", "result": 4},
    {"op": "gemm", "a": 0, "b": 3, "c": 4, "trans_a": false, "trans_b": true, "m": "n",
     "n": "256", "k": "128", "batch": "1", "strides": ["0", "0", "0"], "epilogue": "none",
     "compute": "F32"},
    {"op": "alloc", "result": 7},
    {"op": "launch", "kernel": "dq", "module": "module0", "args": [1, 2, 7], "symbols": [],
     "items": "32768", "per": 256, "block": 256, "shared": "0")" +
         secondRoles + R"(},
    {"op": "alloc", "result": 6},
    )" + gemm2 + R"(,
    {"op": "alloc", "result": 8}
  ]
})";
}

static std::string roles(int weight, int reader, bool exclusive = true,
                         const std::string &extra = "") {
  return R"(, "nf4": {"exclusive": )" + std::string(exclusive ? "true" : "false") +
         R"(, "weights": [{"weight": )" + std::to_string(weight) +
         R"(, "codes": 1, "absmax": 2, "rows": 256, "cols": 128, "block": 64, "readers": [)" +
         std::to_string(reader) + "]" + extra + "}]}";
}

static void testPairing() {
  Expected<StepProgram> p = StepProgram::decode(program(roles(3, 3), roles(7, 7)), "step");
  CHECK(p);
  if (!p)
    return std::fprintf(stderr, "%s\n", p.getError().c_str()), void();
  CHECK(p->ops[1].nf4 && p->ops[1].nf4->exclusive && p->ops[1].nf4->weights.size() == 1);
  CHECK(p->ops[1].nf4->weights[0].absmax == 2 && !p->ops[1].nf4->weights[0].doubleQuant());
  std::vector<Nf4GemmPair> pairs = pairNf4Gemms(*p, {{"n", 512}});
  CHECK(pairs.size() == 2);
  if (pairs.size() != 2)
    return;
  // The forward: x W^T, W [n, k] = [256, 128].
  CHECK(pairs[0].launch == 1 && pairs[0].gemm == 3 && pairs[0].forward);
  CHECK(pairs[0].m == 512 && pairs[0].n == 256 && pairs[0].k == 128);
  CHECK_EQ(pairs[0].unsupported, "");
  CHECK_EQ(pairs[0].label(), "nf4 512x256x128 fwd");
  // The input gradient: dy W, W [k, n] = [256, 128], accumulating.
  CHECK(pairs[1].launch == 5 && pairs[1].gemm == 7 && !pairs[1].forward && pairs[1].beta == 1);
  CHECK(pairs[1].n == 128 && pairs[1].k == 256);
  CHECK_EQ(pairs[1].unsupported, "");
  CHECK_EQ(pairs[1].shape, "m=512,n=128,k=256");
  // The two are different problems (direction, beta).
  CHECK(pairs[0].signature != pairs[1].signature);
  // Tokens not a multiple of the kernel's 256: not a candidate, and why.
  std::vector<Nf4GemmPair> odd = pairNf4Gemms(*p, {{"n", 100}});
  CHECK(odd.size() == 2 && odd[0].unsupported.find("is not a multiple") != std::string::npos);
  // Which launches may be skipped.
  CHECK(skippableNf4Launches(*p, {}).empty());
  CHECK(skippableNf4Launches(*p, {3}) == std::vector<size_t>{1});
  CHECK((skippableNf4Launches(*p, {3, 7}) == std::vector<size_t>{1, 5}));
  // A launch that also writes something else is never skipped.
  Expected<StepProgram> shared =
      StepProgram::decode(program(roles(3, 3, /*exclusive=*/false), roles(7, 7)), "step");
  CHECK(shared && skippableNf4Launches(*shared, {3, 7}) == std::vector<size_t>{5});
}

static void testUnsupportedForms() {
  // The weight as the GEMM's A (W^T dy^T): the kernel reads it as B only.
  std::string weightAsA = R"({"op": "gemm", "a": 7, "b": 5, "c": 6, "trans_a": true,
       "trans_b": true, "m": "128", "n": "n", "k": "256", "batch": "1",
       "strides": ["0", "0", "0"], "epilogue": "none", "compute": "F32"})";
  Expected<StepProgram> p =
      StepProgram::decode(program(roles(3, 3), roles(7, 7), weightAsA), "step");
  CHECK(p);
  if (!p)
    return std::fprintf(stderr, "%s\n", p.getError().c_str()), void();
  std::vector<Nf4GemmPair> pairs = pairNf4Gemms(*p, {{"n", 512}});
  CHECK(pairs.size() == 2 && pairs[1].unsupported == "the weight is the GEMM's A");
  // Blocks other than 64.
  std::string roles128 = roles(3, 3);
  roles128.replace(roles128.find("\"block\": 64"), 11, "\"block\": 128");
  Expected<StepProgram> blocks = StepProgram::decode(program(roles128, roles(7, 7)), "step");
  CHECK(blocks);
  if (blocks) {
    std::vector<Nf4GemmPair> b = pairNf4Gemms(*blocks, {{"n", 512}});
    CHECK(!b.empty() && b[0].unsupported.find("blocks of 128") != std::string::npos);
  }
}

static void expectBad(const std::string &json, const std::string &fragment) {
  Expected<StepProgram> p = StepProgram::decode(json, "step");
  CHECK(!p);
  if (p)
    return;
  CHECK(p.getError().find('\n') == std::string::npos);
  if (p.getError().find(fragment) == std::string::npos) {
    std::fprintf(stderr, "expected '%s' in: %s\n", fragment.c_str(), p.getError().c_str());
    ++checkFailures();
  }
}

static void testBadRoles() {
  // The reader must be a later GEMM reading the weight as A or B.
  expectBad(program(roles(3, 2), roles(7, 7)), "reader op 2 is not a later GEMM");
  expectBad(program(roles(3, 7), roles(7, 7)), "reader op 7 is not a later GEMM");
  // Buffers the launch does not take, ids out of range, shapes.
  expectBad(program(roles(4, 3), roles(7, 7)), "names buffer 4, which the launch does not take");
  expectBad(program(roles(99, 3), roles(7, 7)), "bad buffer id 'weight'");
  std::string rows = roles(3, 3);
  rows.replace(rows.find("\"rows\": 256"), 11, "\"rows\": 128");
  expectBad(program(rows, roles(7, 7)), "the weight buffer is not [128, 128]");
  expectBad(program(R"(, "nf4": {"weights": []})", roles(7, 7)),
            "needs a boolean 'exclusive' and a non-empty array 'weights'");
  std::string both = roles(3, 3, true, R"(, "absmax_codes": 2)");
  expectBad(program(both, roles(7, 7)), "both 'absmax' and 'absmax_codes'");
  std::string noReaders = roles(3, 3);
  noReaders.replace(noReaders.find("[3]"), 3, "[]");
  expectBad(program(noReaders, roles(7, 7)), "needs a non-empty array 'readers'");
}

static void testOverride() {
  ::unsetenv("KILN_NF4_GEMM");
  CHECK(nf4GemmOverride() && nf4GemmOverride()->empty());
  ::setenv("KILN_NF4_GEMM", "fused", 1);
  CHECK(nf4GemmOverride() && *nf4GemmOverride() == "fused");
  ::setenv("KILN_NF4_GEMM", "cublas", 1);
  Expected<std::string> bad = nf4GemmOverride();
  CHECK(!bad && bad.getError().find("KILN_NF4_GEMM='cublas'") != std::string::npos);
  ::unsetenv("KILN_NF4_GEMM");
}

static TuningKey key() {
  TuningKey k;
  k.gpu = "NVIDIA H200";
  k.smCount = 132;
  k.ccMajor = 9;
  k.driver = 13000;
  k.cuda = 13000;
  k.cublasLt = 130100;
  k.cudnn = "none";
  return k;
}

static TuningEntry nf4Entry(bool fused) {
  TuningEntry e;
  e.kind = "nf4";
  e.hash = hashSignature("nf4 fwd dq alpha=1.000000 beta=1.000000 8192x2048x2048");
  e.shape = "m=8192,n=2048,k=2048";
  e.label = "nf4 8192x2048x2048 fwd dq";
  e.candidates = 2;
  e.choice = fused ? 1 : 0;
  e.impl = fused ? kNf4Fused : kNf4Default;
  e.defaultMs = 0.114;
  e.tunedMs = fused ? 0.1 : 0.114;
  e.error = fused ? 0.002 : 0;
  return e;
}

static void testDatabase() {
  for (bool fused : {false, true}) {
    TuningDb db;
    db.put(key(), nf4Entry(fused));
    Expected<TuningDb> back = TuningDb::parse(db.serialize(), "t.db");
    CHECK(back);
    if (!back)
      return std::fprintf(stderr, "%s\n", back.getError().c_str()), void();
    const TuningEntry *e =
        back->find(key(), "nf4", nf4Entry(fused).hash, "m=8192,n=2048,k=2048");
    CHECK(e && e->impl == (fused ? kNf4Fused : kNf4Default) && e->choice == (fused ? 1 : 0));
    CHECK_EQ(back->serialize(), db.serialize());
  }
  // An impl that does not match its choice, or another impl: one line.
  TuningDb db;
  TuningEntry wrong = nf4Entry(true);
  wrong.choice = 0;
  db.put(key(), wrong);
  Expected<TuningDb> back = TuningDb::parse(db.serialize(), "t.db");
  CHECK(!back && back.getError().find("an \"nf4\" entry has 2 candidates") != std::string::npos);
  TuningDb other;
  TuningEntry cudnn = nf4Entry(false);
  cudnn.impl = "cudnn";
  other.put(key(), cudnn);
  Expected<TuningDb> rejected = TuningDb::parse(other.serialize(), "t.db");
  CHECK(!rejected && rejected.getError().find('\n') == std::string::npos);
}

int main() {
  testPairing();
  testUnsupportedForms();
  testBadRoles();
  testOverride();
  testDatabase();
  return finishChecks();
}
