//===- StepProgramTest.cpp - Step program decoding, arena plan, dtypes ----===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The CPU side of step execution: decoding errors, the arena plan (buffers
// live at the same time never overlap; dead ones are reused), and the
// element conversions weights and inputs go through on upload.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/runtime/StepExecutor.h"
#include "kiln/runtime/StepProgram.h"
#include "kiln/artifact/MemoryPlanSection.h"

#include <cstring>
#include <tuple>

using namespace kiln::runtime;
using namespace kiln::artifact;

// x[n,64] -> a = k0(x) -> b = k1(a) -> view c of b -> gemm(c, w) -> d;
// e = k2(x) is a result. a dies at op 3, so b or d may take its place.
static const char *kProgram = R"({
  "format": "kiln-step-program", "version": 1, "function": "main", "default_lr": 0.001,
  "buffers": [
    {"dtype": "F32", "shape": ["n", "64"]},
    {"dtype": "F32", "shape": ["64", "32"]},
    {"dtype": "F32", "shape": ["n", "64"]},
    {"dtype": "F32", "shape": ["n", "64"]},
    {"dtype": "F32", "shape": ["n*64"]},
    {"dtype": "F32", "shape": ["n", "32"]},
    {"dtype": "BF16", "shape": ["n", "64"]},
    {"dtype": "F32", "shape": []}
  ],
  "args": [{"role": "input", "name": "x", "buffer": 0},
           {"role": "param", "name": "w", "buffer": 1}],
  "results": [{"role": "loss", "name": "loss", "buffer": 7},
              {"role": "other", "buffer": 6}],
  "ops": [
    {"op": "alloc", "result": 2},
    {"op": "launch", "kernel": "k0", "module": "module0", "args": [0, 2], "symbols": ["n"],
     "items": "n*64", "per": 256, "block": 256, "shared": "0"},
    {"op": "alloc", "result": 3},
    {"op": "launch", "kernel": "k1", "module": "module0", "args": [2, 3], "symbols": ["n"],
     "items": "n", "per": 1, "block": 64, "shared": "4*n + 8"},
    {"op": "view", "source": 3, "result": 4},
    {"op": "alloc", "result": 5},
    {"op": "gemm", "a": 3, "b": 1, "c": 5, "trans_a": false, "trans_b": false, "m": "n",
     "n": "32", "k": "64", "batch": "1", "strides": ["0", "0", "0"], "epilogue": "none",
     "compute": "F32"},
    {"op": "alloc", "result": 6},
    {"op": "launch", "kernel": "k2", "module": "module1", "args": [0, 6], "symbols": ["n"],
     "items": "n*64", "per": 256, "block": 256, "shared": "0"},
    {"op": "alloc", "result": 7},
    {"op": "fill", "target": 7, "value": 0},
    {"op": "launch", "kernel": "k3", "module": "module1", "args": [5, 4, 7], "symbols": ["n"],
     "items": "n", "per": 1, "block": 256, "shared": "0"}
  ]
})";

static bool overlaps(const ArenaPlan &plan, int a, int b) {
  size_t a0 = plan.offsets[a], a1 = a0 + plan.bytes[a];
  size_t b0 = plan.offsets[b], b1 = b0 + plan.bytes[b];
  return a0 < b1 && b0 < a1;
}

static void testDecodeAndPlan() {
  Expected<StepProgram> program = StepProgram::decode(kProgram, "step");
  CHECK(program);
  if (!program) {
    std::fprintf(stderr, "%s\n", program.getError().c_str());
    return;
  }
  CHECK(program->defaultLr && *program->defaultLr == 0.001);
  CHECK(program->ops.size() == 12);
  CHECK(program->ops[1].kind == ProgramOp::Kind::Launch);
  CHECK(*program->ops[3].shared->evaluate({{"n", 10}}) == 48);
  CHECK(program->ops[6].kind == ProgramOp::Kind::Gemm);
  CHECK(program->ops[6].strides.size() == 3);
  CHECK(*program->elementCount(4, {{"n", 3}}) == 192);
  CHECK(*program->elementCount(7, {{"n", 3}}) == 1);

  Expected<ArenaPlan> plan = program->planArena({{"n", 100}}, 256);
  CHECK(plan);
  if (!plan)
    return;
  CHECK(!plan->inArena[0] && !plan->inArena[1] && !plan->inArena[4]);
  CHECK(plan->inArena[2] && plan->inArena[3] && plan->inArena[7]);
  CHECK(plan->bytes[6] == 100 * 64 * 2);
  for (size_t id = 0; id < plan->offsets.size(); ++id)
    if (plan->inArena[id])
      CHECK(plan->offsets[id] % 256 == 0);
  // Live together: a and b (op 3), b and d (op 6, b read through its view
  // until op 11), d, e and the loss (results live to the end).
  CHECK(!overlaps(*plan, 2, 3));
  CHECK(!overlaps(*plan, 3, 5));
  CHECK(!overlaps(*plan, 3, 6) && !overlaps(*plan, 5, 6) && !overlaps(*plan, 6, 7));
  CHECK(!overlaps(*plan, 3, 7) && !overlaps(*plan, 5, 7));
  // a is dead after op 3: the gemm output d (25.6 KB) reuses its bytes.
  CHECK(plan->offsets[5] == plan->offsets[2]);
  size_t sum = 0;
  for (size_t id = 0; id < plan->offsets.size(); ++id)
    if (plan->inArena[id])
      sum += (plan->bytes[id] + 255) / 256 * 256;
  CHECK(plan->size < sum);
}

static void testDecodeErrors() {
  struct Case {
    const char *json, *error;
  } cases[] = {
      {R"({"format":"kiln-step-program","version":7})",
       "step: not a version 1 to 6 kiln-step-program"},
      {R"({"format":"kiln-step-program","version":1,"buffers":[{"dtype":"F31","shape":[]}],"args":[],"results":[],"ops":[]})",
       "step: buffer 0: unknown dtype 'F31'"},
      {R"({"format":"kiln-step-program","version":1,"buffers":[],"args":[],"results":[],"ops":[{"op":"frob"}]})",
       "step: op 0 (frob): unknown op"},
      {R"({"format":"kiln-step-program","version":1,"buffers":[{"dtype":"F32","shape":[]}],"args":[],"results":[],"ops":[{"op":"launch","kernel":"k","module":"m","items":"n","shared":"0","per":1,"block":2048,"args":[0],"symbols":[]}]})",
       "step: op 0 (launch): bad per/block"},
      {R"({"format":"kiln-step-program","version":1,"buffers":[{"dtype":"F32","shape":[]}],"args":[],"results":[],"ops":[{"op":"copy","source":0,"target":1}]})",
       "step: op 0 (copy): buffer id 1 out of range"},
  };
  for (const Case &c : cases) {
    Expected<StepProgram> program = StepProgram::decode(c.json, "step");
    CHECK(!program);
    CHECK_EQ(program.getError(), c.error);
  }
}

// Version 2: a GEMM's alpha and beta (1: C accumulates in place); version 1
// programs, non-finite alphas, other betas and beta with a bias are refused.
static std::string gemmProgram(int version, const std::string &fields) {
  return R"({"format":"kiln-step-program","version":)" + std::to_string(version) +
         R"(,"buffers":[{"dtype":"BF16","shape":["n","64"]},{"dtype":"BF16","shape":["64","32"]},)"
         R"({"dtype":"BF16","shape":["32"]},{"dtype":"BF16","shape":["n","32"]}],"args":[],"results":[],)"
         R"("ops":[{"op":"alloc","result":3},{"op":"gemm","a":0,"b":1,"c":3,"trans_a":false,)"
         R"("trans_b":false,"m":"n","n":"32","k":"64","batch":"1","strides":["0","0","0"],)"
         R"("epilogue":"none","compute":"F32")" +
         fields + "}]}";
}

// Launch variants (docs/tuning.md): other launch shapes of a loop kernel,
// decoded in order; malformed lists fail naming the launch and the variant.
static std::string variantProgram(const std::string &variants) {
  return R"({"format":"kiln-step-program","version":1,"buffers":[{"dtype":"F32","shape":["n"]}],"args":[],"results":[],"ops":[{"op":"launch","kernel":"k","module":"m","items":"n","shared":"0","per":256,"block":256,"args":[0],"symbols":["n"])" +
         variants + "}]}";
}

static void testLaunchVariants() {
  Expected<StepProgram> none = StepProgram::decode(variantProgram(""), "step");
  CHECK(none && none->ops[0].variants.empty());
  Expected<StepProgram> program = StepProgram::decode(
      variantProgram(R"(,"variants":[{"per":128,"block":128},{"per":4096,"block":256}])"), "step");
  CHECK(program);
  if (program) {
    const ProgramOp &op = program->ops[0];
    CHECK(op.variants.size() == 2);
    CHECK(op.variants.size() == 2 && op.variants[0].per == 128 && op.variants[0].block == 128 &&
          op.variants[1].per == 4096 && op.variants[1].block == 256);
    CHECK(op.per == 256 && op.block == 256); // the default stays the launch's own
  }
  struct Case {
    const char *variants, *error;
  } cases[] = {
      {R"(,"variants":{"per":128})",
       "step: op 0 (launch): 'variants' must be an array of at most 8 launch shapes"},
      {R"(,"variants":[1])", "step: op 0 (launch): variant 0 is not an object"},
      {R"(,"variants":[{"per":128}])",
       "step: op 0 (launch): variant 0: missing or non-integer 'block'"},
      {R"(,"variants":[{"per":0,"block":128}])", "step: op 0 (launch): variant 0: bad per/block"},
      {R"(,"variants":[{"per":512,"block":2048}])",
       "step: op 0 (launch): variant 0: bad per/block"},
      {R"(,"variants":[{"per":256,"block":256}])",
       "step: op 0 (launch): variant 0 repeats a launch shape"},
      {R"(,"variants":[{"per":512,"block":512},{"per":512,"block":512}])",
       "step: op 0 (launch): variant 1 repeats a launch shape"},
      {R"(,"variants":[{"per":1,"block":1},{"per":2,"block":1},{"per":3,"block":1},{"per":4,"block":1},{"per":5,"block":1},{"per":6,"block":1},{"per":7,"block":1},{"per":8,"block":1},{"per":9,"block":1}])",
       "step: op 0 (launch): 'variants' must be an array of at most 8 launch shapes"},
  };
  for (const Case &c : cases) {
    Expected<StepProgram> bad = StepProgram::decode(variantProgram(c.variants), "step");
    CHECK(!bad);
    if (!bad)
      CHECK_EQ(bad.getError(), c.error);
  }
}

static void testGemmAlphaBeta() {
  Expected<StepProgram> plain = StepProgram::decode(gemmProgram(1, ""), "step");
  CHECK(plain);
  if (plain)
    CHECK(plain->ops[1].alpha == 1 && plain->ops[1].beta == 0);
  Expected<StepProgram> scaled =
      StepProgram::decode(gemmProgram(2, R"(,"alpha":0.5,"beta":1)"), "step");
  CHECK(scaled);
  if (scaled)
    CHECK(scaled->ops[1].alpha == 0.5 && scaled->ops[1].beta == 1);
  struct Case {
    int version;
    const char *fields, *error;
  } cases[] = {
      {1, R"(,"beta":1)", "step: op 1 (gemm): 'alpha' and 'beta' need a version 2 program"},
      {2, R"(,"alpha":"2")", "step: op 1 (gemm): 'alpha' is not a finite number"},
      {2, R"(,"beta":0.5)", "step: op 1 (gemm): 'beta' is neither 0 nor 1"},
      {2, R"(,"bias":2,"beta":1)", "step: op 1 (gemm): a GEMM with 'beta' 1 has no 'bias'"},
  };
  for (const Case &c : cases) {
    Expected<StepProgram> program = StepProgram::decode(gemmProgram(c.version, c.fields), "step");
    CHECK(!program);
    if (!program)
      CHECK_EQ(program.getError(), c.error);
  }
}

// Version 3: a GEMM's leading dimensions. The K-concatenated LoRA GEMM
// reads A = [x | t] of buffer 0 ([n, 72]: 64 columns of x, 8 of t) at row
// stride 72 and writes t (buffer 4, [n, 72] too) at column 64 through ldc.
static std::string ldProgram(int version, const std::string &ld) {
  return R"({"format":"kiln-step-program","version":)" + std::to_string(version) +
         R"(,"buffers":[{"dtype":"BF16","shape":["n","72"]},{"dtype":"BF16","shape":["72","32"]},)"
         R"({"dtype":"BF16","shape":["n","32"]}],"args":[],"results":[],)"
         R"("ops":[{"op":"alloc","result":2},{"op":"gemm","a":0,"b":1,"c":2,"trans_a":false,)"
         R"("trans_b":false,"m":"n","n":"32","k":"64","batch":"1","strides":["0","0","0"],)"
         R"("epilogue":"none","compute":"F32")" +
         (ld.empty() ? "" : R"(,"ld":)" + ld) + "}]}";
}

static void testGemmLeadingDims() {
  Expected<StepProgram> packed = StepProgram::decode(ldProgram(1, ""), "step");
  CHECK(packed);
  Expected<StepProgram> strided = StepProgram::decode(ldProgram(3, R"(["72","32","32"])"), "step");
  CHECK(strided);
  if (!packed || !strided)
    return;
  CHECK(packed->ops[1].lds.empty());
  CHECK(strided->ops[1].lds.size() == size_t(3));
  SymbolBindings sizes{{"n", 5}};
  std::vector<int64_t> elements{5 * 72, 72 * 32, 5 * 32};
  // Packed: A is [5, 64] at stride 64, B the first 64 rows of [72, 32].
  Expected<std::vector<GemmMatrix>> p = gemmMatrices(*packed, packed->ops[1], sizes, elements);
  CHECK(p);
  if (p) {
    CHECK((*p)[0].ld == int64_t(64));
    CHECK((*p)[0].extent() == int64_t(5 * 64));
    CHECK((*p)[1].extent() == int64_t(64 * 32));
  }
  Expected<std::vector<GemmMatrix>> s = gemmMatrices(*strided, strided->ops[1], sizes, elements);
  CHECK(s);
  if (s) {
    CHECK((*s)[0].ld == int64_t(72));
    // The last row starts at 4 * 72 and reads 64 elements.
    CHECK((*s)[0].extent() == int64_t(4 * 72 + 64));
    CHECK((*s)[2].extent() == int64_t(5 * 32));
  }
  // A row stride past the buffer's end, or below the width, is refused.
  Expected<StepProgram> wide = StepProgram::decode(ldProgram(3, R"(["80","32","32"])"), "step");
  CHECK(wide);
  if (wide) {
    Expected<std::vector<GemmMatrix>> bad = gemmMatrices(*wide, wide->ops[1], sizes, elements);
    CHECK(!bad);
    if (!bad)
      CHECK_EQ(bad.getError(),
               "a (5x64, ld 80) reaches element 384 of buffer 0, which holds 360");
  }
  Expected<StepProgram> narrow = StepProgram::decode(ldProgram(3, R"(["72","16","32"])"), "step");
  CHECK(narrow);
  if (narrow) {
    Expected<std::vector<GemmMatrix>> bad = gemmMatrices(*narrow, narrow->ops[1], sizes, elements);
    CHECK(!bad);
    if (!bad)
      CHECK_EQ(bad.getError(), "'ld' of b is 16, less than its width 32");
  }
  // A packed GEMM whose matrix does not fit (a damaged program) too.
  std::vector<int64_t> small{5 * 64 - 1, 72 * 32, 5 * 32};
  CHECK(!gemmMatrices(*packed, packed->ops[1], sizes, small));
  struct Case {
    int version;
    const char *ld, *error;
  } cases[] = {
      {2, R"(["72","32","32"])", "step: op 1 (gemm): 'ld' needs a version 3 program"},
      {3, R"(["72","32"])", "step: op 1 (gemm): 'ld' needs three expressions"},
      {3, R"(["72","32",32])", "step: op 1 (gemm): bad 'ld': not a string"},
  };
  for (const Case &c : cases) {
    Expected<StepProgram> program = StepProgram::decode(ldProgram(c.version, c.ld), "step");
    CHECK(!program);
    if (!program)
      CHECK_EQ(program.getError(), c.error);
  }
}

// Version 3: views at an offset and row stride. Buffer 0 is [x | t]
// ([n, 72]); view 1 its first 64 columns (x), view 2 the last 8 (t). A GEMM
// writes t through ldc 72 and reads [x | t] whole; `user` is the op that
// touches view `probe` besides.
static std::string viewProgram(int version, const std::string &view2, const std::string &user) {
  return R"({"format":"kiln-step-program","version":)" + std::to_string(version) +
         R"(,"buffers":[{"dtype":"BF16","shape":["n","72"]},{"dtype":"BF16","shape":["n","64"]},)"
         R"({"dtype":"BF16","shape":["n","8"]},{"dtype":"BF16","shape":["64","8"]},)"
         R"({"dtype":"BF16","shape":["72","32"]},{"dtype":"BF16","shape":["n","32"]}],)"
         R"("args":[],"results":[],"ops":[{"op":"alloc","result":0},)"
         R"({"op":"view","source":0,"result":1,"offset":"0","row_stride":"72"},)"
         R"({"op":"view","source":0,"result":2)" +
         view2 +
         R"(},{"op":"gemm","a":1,"b":3,"c":2,"trans_a":false,)"
         R"("trans_b":false,"m":"n","n":"8","k":"64","batch":"1","strides":["0","0","0"],)"
         R"("epilogue":"none","compute":"F32","ld":["72","8","72"]},{"op":"alloc","result":5},)"
         R"({"op":"gemm","a":0,"b":4,"c":5,"trans_a":false,)"
         R"("trans_b":false,"m":"n","n":"32","k":"72","batch":"1","strides":["0","0","0"],)"
         R"("epilogue":"none","compute":"F32"})" +
         user + "]}";
}

static void testStridedViews() {
  SymbolBindings sizes{{"n", 5}};
  const std::string t = R"(,"offset":"64","row_stride":"72")";
  Expected<StepProgram> good = StepProgram::decode(viewProgram(3, t, ""), "step");
  CHECK(good);
  if (good) {
    Expected<std::vector<int64_t>> reachable = reachableElements(*good, sizes);
    CHECK(reachable);
    if (!reachable)
      return;
    // t's first element is 64 into [n, 72]: 296 elements are left after it.
    std::vector<int64_t> elements = *reachable;
    CHECK(elements == (std::vector<int64_t>{360, 360, 296, 512, 2304, 160}));
    CHECK(good->ops[2].offset && good->ops[2].offset->getText() == "64");
    CHECK(good->ops[2].rowStride && good->ops[2].rowStride->getText() == "72");
    Status s = checkStridedViews(*good, sizes, elements);
    CHECK(s);
    if (!s)
      std::printf("  %s\n", s.getError().c_str());
    for (int gemm : {3, 5})
      CHECK(gemmMatrices(*good, good->ops[gemm], sizes, elements));
    // Both views share the alloc's memory and keep it live.
    LiveRanges live = good->liveRanges();
    CHECK(live.root[1] == 0);
    CHECK(live.root[2] == 0);
    CHECK(live.lastUse[0] == size_t(5));
  }
  // A kernel that writes t's columns at their row stride is accepted.
  const std::string launch =
      R"(,{"op":"launch","kernel":"k","module":"m","items":"n","shared":"0","per":1,"block":32,)";
  Expected<StepProgram> strided =
      StepProgram::decode(viewProgram(3, t, launch + R"("args":[2],"symbols":[],"row_strides":[72]})"), "step");
  CHECK(strided);
  if (strided) {
    CHECK(strided->ops[6].rowStrides == std::vector<int64_t>{72});
    Expected<std::vector<int64_t>> elements = reachableElements(*strided, sizes);
    CHECK(elements && checkStridedViews(*strided, sizes, *elements));
  }
  struct Case {
    std::string view2, user, error;
  } cases[] = {
      // A launch's row stride must be the buffer's own.
      {t, launch + R"("args":[2],"symbols":[],"row_strides":[80]})",
       "op 6 (launch): indexes buffer 2 at row stride 80; it is columns at row stride 72"},
      {t, launch + R"("args":[5],"symbols":[],"row_strides":[40]})",
       "op 6 (launch): indexes buffer 5 at row stride 40; it is packed"},
      // Past the end of [n, 72]: the last row's t ends at 4 * 72 + 65 + 8.
      {R"(,"offset":"65","row_stride":"72")", "",
       "op 2 (view): reaches element 361 of buffer 0, which holds 360"},
      {R"(,"offset":"64","row_stride":"4")", "",
       "op 2 (view): offset 64 or row stride 4 is out of range (width 8)"},
      // A kernel, a fill or a packed reshape may not index columns.
      {t, R"(,{"op":"fill","target":2,"value":0})",
       "op 6: indexes buffer 2 (columns at row stride 72) as packed; only GEMMs may read it"},
      {t, R"(,{"op":"launch","kernel":"k","module":"m","items":"n","shared":"0","per":1,"block":32,"args":[2],"symbols":[]})",
       "op 6: indexes buffer 2 (columns at row stride 72) as packed; only GEMMs may read it"},
      {t, R"(,{"op":"gemm","a":2,"b":3,"c":5,"trans_a":true,"trans_b":false,"m":"8","n":"8","k":"n","batch":"1","strides":["0","0","0"],"epilogue":"none","compute":"F32"})",
       "op 6 (gemm): reads buffer 2 (columns at row stride 72) without that leading dimension"},
  };
  for (const Case &c : cases) {
    Expected<StepProgram> program = StepProgram::decode(viewProgram(3, c.view2, c.user), "step");
    CHECK(program);
    if (!program)
      continue;
    Expected<std::vector<int64_t>> elements = reachableElements(*program, sizes);
    CHECK(elements);
    if (!elements)
      continue;
    Status s = checkStridedViews(*program, sizes, *elements);
    CHECK(!s);
    if (!s)
      CHECK_EQ(s.getError(), c.error);
  }
  for (auto [version, strides, error] :
       {std::tuple<int, std::string, std::string>{
            2, "[0]", "step: op 0 (launch): 'row_strides' needs a version 3 program"},
        {3, "[0,0]", "step: op 0 (launch): 'row_strides' needs one integer per arg"},
        {3, "[-8]", "step: op 0 (launch): bad 'row_strides' entry"}}) {
    Expected<StepProgram> bad = StepProgram::decode(
        R"({"format":"kiln-step-program","version":)" + std::to_string(version) +
            R"(,"buffers":[{"dtype":"F32","shape":["8"]}],"args":[],"results":[],"ops":[)" +
            launch.substr(1) + R"("args":[0],"symbols":[],"row_strides":)" + strides + "}]}",
        "step");
    CHECK(!bad);
    if (!bad)
      CHECK_EQ(bad.getError(), error);
  }
  Expected<StepProgram> old = StepProgram::decode(viewProgram(2, t, ""), "step");
  CHECK(!old);
  if (!old)
    CHECK_EQ(old.getError(), "step: op 1 (view): 'offset' needs a version 3 program");
}

// A forward attention launch and its backward, whose dk/dv accumulate in
// fp32 (ops 3-4 fill, 7-8 narrow): the roles and replaced ops decode; bad
// ones are refused with the op named.
static void testAttentionRoles() {
  const char *program = R"({
  "format": "kiln-step-program", "version": 1, "function": "main",
  "buffers": [
    {"dtype": "BF16", "shape": ["b", "4", "s", "64"]}, {"dtype": "BF16", "shape": ["b", "2", "s", "64"]},
    {"dtype": "BF16", "shape": ["b", "2", "s", "64"]}, {"dtype": "BF16", "shape": ["b", "4", "s", "64"]},
    {"dtype": "BF16", "shape": ["b", "4", "s", "64"]}, {"dtype": "F32", "shape": ["b", "2", "s", "64"]},
    {"dtype": "F32", "shape": ["b", "2", "s", "64"]}, {"dtype": "BF16", "shape": ["b", "2", "s", "64"]},
    {"dtype": "BF16", "shape": ["b", "2", "s", "64"]}, {"dtype": "BF16", "shape": ["b", "4", "s", "64"]}
  ],
  "args": [{"role": "input", "name": "q", "buffer": 0}, {"role": "input", "name": "k", "buffer": 1},
           {"role": "input", "name": "v", "buffer": 2}, {"role": "input", "name": "do", "buffer": 4}],
  "results": [],
  "ops": [
    {"op": "alloc", "result": 3},
    {"op": "launch", "kernel": "fwd", "module": "m", "args": [0, 1, 2, 3], "symbols": ["b", "s"],
     "items": "b*s", "per": 64, "block": 128, "shared": "0",
     "attention": {"direction": "forward", "causal": true, "scale": 0.125, "q": 0, "k": 1, "v": 2,
                   "o": 3, "replaces": []}},
    {"op": "alloc", "result": 5}, {"op": "fill", "target": 5, "value": 0},
    {"op": "alloc", "result": 6}, {"op": "fill", "target": 6, "value": 0},
    {"op": "launch", "kernel": "bwd", "module": "m", "args": [0, 1, 2, 4, 3, 9, 5, 6],
     "symbols": ["b", "s"], "items": "b*s", "per": 64, "block": 128, "shared": "0",
     "attention": {"direction": "backward", "causal": true, "scale": 0.125, "q": 0, "k": 1,
                   "v": 2, "o": 3, "do": 4, "dq": 9, "dk": 7, "dv": 8, "replaces": [3, 5, 7, 8]}},
    {"op": "launch", "kernel": "n1", "module": "m", "args": [5, 7], "symbols": [],
     "items": "1", "per": 1, "block": 1, "shared": "0"},
    {"op": "launch", "kernel": "n2", "module": "m", "args": [6, 8], "symbols": [],
     "items": "1", "per": 1, "block": 1, "shared": "0"}
  ]})";
  Expected<StepProgram> decoded = StepProgram::decode(program, "step");
  CHECK(decoded);
  if (!decoded) {
    std::fprintf(stderr, "%s\n", decoded.getError().c_str());
    return;
  }
  const std::optional<AttentionRoles> &forward = decoded->ops[1].attention;
  const std::optional<AttentionRoles> &backward = decoded->ops[6].attention;
  CHECK(forward && !forward->backward && forward->causal && forward->scale == 0.125);
  CHECK(forward && forward->q == 0 && forward->k == 1 && forward->v == 2 && forward->o == 3);
  CHECK(backward && backward->backward && backward->dout == 4 && backward->dq == 9);
  CHECK(backward && backward->dk == 7 && backward->dv == 8);
  CHECK(backward && backward->replaces == std::vector<size_t>({3, 5, 7, 8}));
  CHECK(!decoded->ops[7].attention);
  CHECK(forward && !forward->masked && backward && !backward->masked);
  {
    // A masked launch (its kernel applies a mask: kiln_fa90's variant only).
    std::string json = program;
    json.replace(json.find("\"direction\": \"forward\""), 22,
                 "\"direction\": \"forward\", \"masked\": true");
    Expected<StepProgram> masked = StepProgram::decode(json, "step");
    CHECK(masked && masked->ops[1].attention && masked->ops[1].attention->masked);
  }

  struct Case {
    std::string from, to, error;
  } cases[] = {
      {"\"replaces\": [3, 5, 7, 8]", "\"replaces\": [3, 6]",
       "step: op 6: 'attention' replaces op 6, which is not a fill or launch of this program"},
      {"\"replaces\": [3, 5, 7, 8]", "\"replaces\": [2]",
       "step: op 6: 'attention' replaces op 2, which is not a fill or launch of this program"},
      {"\"replaces\": [3, 5, 7, 8]", "\"replaces\": [40]",
       "step: op 6: 'attention' replaces op 40, which is not a fill or launch of this program"},
      {"\"direction\": \"forward\"", "\"direction\": \"sideways\"",
       "step: op 1 (launch): 'attention': direction 'sideways' is neither forward nor backward"},
      {"\"scale\": 0.125, \"q\": 0, \"k\": 1, \"v\": 2,\n                   \"o\"",
       "\"scale\": -1, \"q\": 0, \"k\": 1, \"v\": 2,\n                   \"o\"",
       "step: op 1 (launch): 'attention': scale must be a positive number"},
      {"\"dv\": 8", "\"dv\": 10", "step: op 6 (launch): 'attention': buffer id 10 out of range"},
      {"\"direction\": \"forward\"", "\"direction\": \"forward\", \"masked\": 1",
       "step: op 1 (launch): 'attention': 'masked' is not a boolean"},
  };
  for (const Case &c : cases) {
    std::string json = program;
    size_t at = json.find(c.from);
    CHECK(at != std::string::npos);
    if (at == std::string::npos)
      continue;
    json.replace(at, c.from.size(), c.to);
    Expected<StepProgram> bad = StepProgram::decode(json, "step");
    CHECK(!bad);
    CHECK_EQ(bad.getError(), c.error);
  }
}

static void testConvert() {
  float values[] = {1.0f, -2.5f, 3.14159265f, 1e-8f, 65504.0f, 1.00390625f};
  Expected<std::string> bf16 = convertElements(values, DType::F32, DType::BF16, 6);
  CHECK(bf16 && bf16->size() == 12);
  uint16_t h[6];
  std::memcpy(h, bf16->data(), 12);
  CHECK(h[0] == 0x3f80 && h[1] == 0xc020 && h[2] == 0x4049);
  CHECK(h[5] == 0x3f80); // 1 + 2^-8 is a tie: rounds to even (1.0)
  Expected<std::string> back = convertElements(bf16->data(), DType::BF16, DType::F32, 6);
  float f[6];
  std::memcpy(f, back->data(), 24);
  CHECK(f[0] == 1.0f && f[1] == -2.5f && f[2] == 3.140625f);

  Expected<std::string> f16 = convertElements(values, DType::F32, DType::F16, 6);
  std::memcpy(h, f16->data(), 12);
  CHECK(h[0] == 0x3c00 && h[1] == 0xc100 && h[2] == 0x4248 && h[4] == 0x7bff);
  Expected<std::string> f16back = convertElements(f16->data(), DType::F16, DType::F32, 6);
  std::memcpy(f, f16back->data(), 24);
  CHECK(f[0] == 1.0f && f[1] == -2.5f && f[4] == 65504.0f);

  uint32_t tokens[] = {0, 7, 65535, 4000000000u};
  Expected<std::string> wide = convertElements(tokens, DType::U32, DType::I64, 4);
  int64_t ids[4];
  std::memcpy(ids, wide->data(), 32);
  CHECK(ids[1] == 7 && ids[2] == 65535 && ids[3] == 4000000000LL);
  Expected<std::string> bad = convertElements(values, DType::F32, DType::I64, 1);
  CHECK(!bad);
  CHECK_EQ(bad.getError(), "cannot convert F32 to I64");
}

// Data parallelism: g = k0(x); bucket 0 reduces g in place and x into h
// (out of place); the wait comes before k1 reads them. The wait keeps both
// live (planArena may not reuse their bytes while the exchange runs).
static const char *kAllReduce = R"({
  "format": "kiln-step-program", "version": 1, "function": "main",
  "buffers": [
    {"dtype": "F32", "shape": ["64"]},
    {"dtype": "F32", "shape": ["64"]},
    {"dtype": "F32", "shape": ["64"]},
    {"dtype": "F32", "shape": ["64"]},
    {"dtype": "F32", "shape": []}
  ],
  "args": [{"role": "input", "name": "x", "buffer": 0}],
  "results": [{"role": "loss", "name": "loss", "buffer": 4}],
  "ops": [
    {"op": "alloc", "result": 1},
    {"op": "launch", "kernel": "k0", "module": "module0", "args": [0, 1], "symbols": [],
     "items": "64", "per": 256, "block": 256, "shared": "0"},
    {"op": "alloc", "result": 2},
    {"op": "all_reduce", "bucket": 0, "reduce": "avg", "ins": [1, 0], "outs": [1, 2]},
    {"op": "alloc", "result": 3},
    {"op": "launch", "kernel": "k2", "module": "module0", "args": [0, 3], "symbols": [],
     "items": "64", "per": 256, "block": 256, "shared": "0"},
    {"op": "all_reduce_wait", "bucket": 0, "buffers": [1, 0, 2]},
    {"op": "alloc", "result": 4},
    {"op": "launch", "kernel": "k1", "module": "module0", "args": [1, 2, 3, 4], "symbols": [],
     "items": "1", "per": 1, "block": 32, "shared": "0"}
  ]
})";

static void testAllReduce() {
  Expected<StepProgram> program = StepProgram::decode(kAllReduce, "step");
  CHECK(program);
  if (!program)
    return;
  const ProgramOp &reduce = program->ops[3];
  CHECK(reduce.kind == ProgramOp::Kind::AllReduce);
  CHECK(reduce.bucket == 0 && !reduce.loss);
  CHECK(reduce.ins == std::vector<int>({1, 0}) && reduce.outs == std::vector<int>({1, 2}));
  CHECK(program->ops[6].kind == ProgramOp::Kind::AllReduceWait);
  LiveRanges live = program->liveRanges();
  CHECK(live.lastUse[1] == 8 && live.lastUse[2] == 8);
  // Buffer 3 is allocated while bucket 0 is in flight: it may not share
  // bytes with the bucket's buffers 1 and 2.
  Expected<ArenaPlan> plan = program->planArena({}, 256);
  CHECK(plan);
  if (plan) {
    CHECK(plan->offsets[3] != plan->offsets[1] && plan->offsets[3] != plan->offsets[2]);
    CHECK(plan->offsets[1] != plan->offsets[2]);
  }

  auto withOps = [](const std::string &ops) {
    std::string json = kAllReduce;
    size_t begin = json.find("\"ops\": [");
    return json.substr(0, begin) + "\"ops\": [" + ops + "]\n}";
  };
  const std::string prefix = R"({"op": "alloc", "result": 1}, {"op": "alloc", "result": 2}, )";
  struct Case {
    std::string ops;
    const char *error;
  } cases[] = {
      {prefix + R"({"op": "all_reduce", "bucket": 0, "reduce": "sum", "ins": [1], "outs": [1]})",
       "step: op 2 (all_reduce): reduce 'sum' is not avg"},
      {prefix + R"({"op": "all_reduce", "bucket": 0, "reduce": "avg", "ins": [1, 2], "outs": [1]})",
       "step: op 2 (all_reduce): 'ins' and 'outs' need the same non-zero number of buffers"},
      {prefix + R"({"op": "all_reduce", "bucket": 0, "reduce": "avg", "ins": [1], "outs": [4]})",
       "step: op 2 (all_reduce): buffers 1 and 4 differ in dtype or shape"},
      {prefix + R"({"op": "all_reduce", "bucket": -1, "reduce": "avg", "ins": [1], "outs": [1]})",
       "step: op 2 (all_reduce): negative bucket"},
      {prefix + R"({"op": "all_reduce", "bucket": 0, "reduce": "avg", "ins": [9], "outs": [1]})",
       "step: op 2 (all_reduce): bad buffer id in 'ins'"},
      {prefix + R"({"op": "all_reduce_wait", "bucket": 0, "buffers": [1]})",
       "step: op 2 (all_reduce_wait): bucket 0 has no all_reduce before it still to wait for"},
      {prefix + R"({"op": "all_reduce", "bucket": 0, "reduce": "avg", "ins": [1], "outs": [1]})",
       "step: op 2 (all_reduce): bucket 0 is never waited for (no all_reduce_wait)"},
      {prefix + R"({"op": "all_reduce", "bucket": 0, "reduce": "avg", "ins": [1], "outs": [1]},
                   {"op": "all_reduce_wait", "bucket": 0, "buffers": [2]})",
       "step: op 3 (all_reduce_wait): 'buffers' are not those of bucket 0's all_reduce (op 2)"},
      {prefix + R"({"op": "all_reduce", "bucket": 0, "reduce": "avg", "ins": [1], "outs": [1]},
                   {"op": "fill", "target": 1, "value": 0},
                   {"op": "all_reduce_wait", "bucket": 0, "buffers": [1]})",
       "step: op 3: touches buffer 1 while all_reduce bucket 0 is in flight (before its "
       "all_reduce_wait)"},
      {prefix + R"({"op": "all_reduce", "bucket": 0, "reduce": "avg", "ins": [1], "outs": [1]},
                   {"op": "all_reduce_wait", "bucket": 0, "buffers": [1]},
                   {"op": "all_reduce", "bucket": 0, "reduce": "avg", "ins": [2], "outs": [2]},
                   {"op": "all_reduce_wait", "bucket": 0, "buffers": [2]})",
       "step: op 4 (all_reduce): bucket 0 appears twice"},
  };
  for (const Case &c : cases) {
    Expected<StepProgram> bad = StepProgram::decode(withOps(c.ops), "step");
    CHECK(!bad);
    CHECK_EQ(bad.getError(), c.error);
  }
  // Integers cannot be averaged.
  std::string ints = kAllReduce;
  ints.replace(ints.find("\"F32\""), 5, "\"I64\"");
  Expected<StepProgram> badType = StepProgram::decode(ints, "step");
  CHECK(!badType);
  CHECK_EQ(badType.getError(),
           "step: op 3 (all_reduce): buffer 0 is I64; all_reduce averages F32, F64, BF16 or F16");
}

// The fused LM head (docs/artifact.md, "The fused LM head"): it decodes,
// every buffer it names is live at it (the chunk is planned once, beside
// hidden_grad), and malformed ones are refused with the op named.
static void testLinearCrossEntropy() {
  const char *program = R"({
  "format": "kiln-step-program", "version": 1, "function": "main",
  "buffers": [
    {"dtype": "BF16", "shape": ["n", "64"]}, {"dtype": "BF16", "shape": ["64", "256"]},
    {"dtype": "I64", "shape": ["n"]}, {"dtype": "F32", "shape": []},
    {"dtype": "F32", "shape": []}, {"dtype": "BF16", "shape": ["n", "64"]},
    {"dtype": "BF16", "shape": ["64", "256"]}, {"dtype": "F32", "shape": ["16", "256"]},
    {"dtype": "F32", "shape": ["n + 1"]}, {"dtype": "F32", "shape": ["64", "256"]}
  ],
  "args": [{"role": "input", "name": "h", "buffer": 0}, {"role": "param", "name": "w", "buffer": 1},
           {"role": "input", "name": "y", "buffer": 2}, {"role": "other", "buffer": 3}],
  "results": [{"role": "loss", "name": "loss", "buffer": 4}, {"role": "other", "buffer": 5},
              {"role": "other", "buffer": 6}],
  "ops": [
    {"op": "alloc", "result": 4}, {"op": "alloc", "result": 5}, {"op": "alloc", "result": 6},
    {"op": "alloc", "result": 9}, {"op": "alloc", "result": 7}, {"op": "alloc", "result": 8},
    {"op": "linear_cross_entropy", "hidden": 0, "weight": 1, "labels": 2, "grad": 3, "loss": 4,
     "hidden_grad": 5, "weight_grad": 6, "chunk": 7, "stats": 8, "weight_accum": 9,
     "transpose_weight": false, "ignore_index": -100, "softcap": 0, "chunk_tokens": 16}
  ]})";
  Expected<StepProgram> decoded = StepProgram::decode(program, "step");
  CHECK(decoded);
  if (!decoded) {
    std::fprintf(stderr, "%s\n", decoded.getError().c_str());
    return;
  }
  const ProgramOp &op = decoded->ops[6];
  CHECK(op.kind == ProgramOp::Kind::LinearCrossEntropy && op.head);
  CHECK(op.head && op.head->chunkTokens == 16 && op.head->weightAccum == 9 &&
        op.head->ignoreIndex == -100 && !op.head->transposeWeight);
  Expected<ArenaPlan> plan = decoded->planArena({{"n", 100}}, 256);
  CHECK(plan);
  if (plan) {
    CHECK(plan->bytes[7] == 16 * 256 * 4 && plan->bytes[8] == 101 * 4);
    for (int a : {4, 5, 6, 7, 8, 9})
      for (int b : {4, 5, 6, 7, 8, 9})
        CHECK(a == b || !overlaps(*plan, a, b));
  }
  // A bf16 head's chunk may be bf16 (bf16 logits): half the bytes.
  {
    std::string bf16 = program;
    std::string from = R"({"dtype": "F32", "shape": ["16", "256"]})";
    size_t at = bf16.find(from);
    CHECK(at != std::string::npos);
    if (at != std::string::npos)
      bf16.replace(at, from.size(), R"({"dtype": "BF16", "shape": ["16", "256"]})");
    Expected<StepProgram> half = StepProgram::decode(bf16, "step");
    CHECK(half);
    if (half) {
      Expected<ArenaPlan> halfPlan = half->planArena({{"n", 100}}, 256);
      CHECK(halfPlan && halfPlan->bytes[7] == 16 * 256 * 2);
    }
  }
  struct Case {
    std::string from, to, error;
  } cases[] = {
      {"\"chunk_tokens\": 16", "\"chunk_tokens\": 0",
       "step: op 6 (linear_cross_entropy): 'chunk_tokens' must be positive"},
      {"\"softcap\": 0", "\"softcap\": -2",
       "step: op 6 (linear_cross_entropy): 'softcap' must be a finite number >= 0"},
      {"\"weight_accum\": 9", "\"weight_accum\": -1",
       "step: op 6 (linear_cross_entropy): 'weight_accum' is needed exactly for a 16-bit "
       "'weight_grad'"},
      {"\"grad\": 3, \"loss\": 4", "\"grad\": -1, \"loss\": 4",
       "step: op 6 (linear_cross_entropy): 'grad' and 'hidden_grad' come together, "
       "'weight_grad' only with them"},
      {"\"labels\": 2", "\"labels\": 3",
       "step: op 6 (linear_cross_entropy): labels must be 1-D I64 or I32"},
      {"\"chunk\": 7", "\"chunk\": 4",
       "step: op 6 (linear_cross_entropy): chunk, stats and weight_accum must be F32 (2-D, 1-D, "
       "2-D); a BF16 head's chunk may be BF16"},
      {"\"stats\": 8", "\"stats\": 12",
       "step: op 6 (linear_cross_entropy): buffer id 12 out of range"},
      {"\"transpose_weight\": false", "\"transpose_weight\": 0",
       "step: op 6 (linear_cross_entropy): missing or non-boolean 'transpose_weight'"},
  };
  for (const Case &c : cases) {
    std::string json = program;
    size_t at = json.find(c.from);
    CHECK(at != std::string::npos);
    if (at == std::string::npos)
      continue;
    json.replace(at, c.from.size(), c.to);
    Expected<StepProgram> bad = StepProgram::decode(json, "step");
    CHECK(!bad);
    if (!bad)
      CHECK_EQ(bad.getError(), c.error);
  }
}

// Version 4: a padded frozen weight (K-concatenation). Buffer 0 is W
// [64, 176] padded to [80, 192]; view 1 its first 176 columns (W with the
// adapter's 16 rows below, read by the forward GEMM at ldb 192), view 2
// the adapter's rows, which a kernel writes at row stride 192.
static std::string paddedProgram(int version, const std::string &paddedFrom) {
  return R"({"format":"kiln-step-program","version":)" + std::to_string(version) +
         R"(,"buffers":[{"dtype":"BF16","shape":["80","192"]},{"dtype":"BF16","shape":["80","176"]},)"
         R"({"dtype":"BF16","shape":["16","176"]},{"dtype":"BF16","shape":["n","80"]},)"
         R"({"dtype":"BF16","shape":["n","176"]}],)"
         R"("args":[{"role":"input","name":"x","buffer":3}],"results":[],"ops":[)"
         R"({"op":"weight","name":"w","result":0)" +
         paddedFrom +
         R"(},{"op":"view","source":0,"result":1,"offset":"0","row_stride":"192"},)"
         R"({"op":"view","source":0,"result":2,"offset":"12288","row_stride":"192"},)"
         R"({"op":"launch","kernel":"k","module":"m","items":"16","shared":"0","per":1,"block":32,)"
         R"("args":[2],"symbols":[],"row_strides":[192]},{"op":"alloc","result":4},)"
         R"({"op":"gemm","a":3,"b":1,"c":4,"trans_a":false,"trans_b":false,"m":"n","n":"176",)"
         R"("k":"80","batch":"1","strides":["0","0","0"],"epilogue":"none","compute":"F32",)"
         R"("ld":["80","192","176"]}]})";
}

static void testPaddedWeights() {
  SymbolBindings sizes{{"n", 5}};
  Expected<StepProgram> good =
      StepProgram::decode(paddedProgram(4, R"(,"padded_from":[64,176])"), "step");
  CHECK(good);
  if (good) {
    CHECK(good->ops[0].paddedFrom == (std::vector<int64_t>{64, 176}));
    // Its own tensor: a program reading "w" packed gets another.
    CHECK_EQ(weightKey(*good, good->ops[0]), "w#padded:80x192");
    Expected<std::vector<int64_t>> elements = reachableElements(*good, sizes);
    CHECK(elements && checkStridedViews(*good, sizes, *elements));
    if (elements)
      CHECK(gemmMatrices(*good, good->ops[5], sizes, *elements));
    // The persistent bytes count the padding: [80, 192] bf16 and the input.
    Expected<size_t> persistent = persistentBytes(*good, sizes);
    CHECK(persistent && *persistent == size_t(80 * 192 * 2 + 5 * 80 * 2));
  }
  Expected<StepProgram> packed = StepProgram::decode(paddedProgram(4, ""), "step");
  CHECK(packed && packed->ops[0].paddedFrom.empty() && weightKey(*packed, packed->ops[0]) == "w");
  for (auto [version, from, error] :
       {std::tuple<int, std::string, std::string>{
            3, R"(,"padded_from":[64,176])", "step: op 0 (weight): 'padded_from' needs a version 4 program"},
        {4, R"(,"padded_from":[64])", "step: op 0 (weight): 'padded_from' needs two dims"},
        {4, R"(,"padded_from":[0,176])", "step: op 0 (weight): 'padded_from' dims are positive integers"},
        {4, R"(,"padded_from":"64")", "step: op 0 (weight): missing or non-array 'padded_from'"}}) {
    Expected<StepProgram> bad = StepProgram::decode(paddedProgram(version, from), "step");
    CHECK(!bad);
    if (!bad)
      CHECK_EQ(bad.getError(), error);
  }
  // The loader's image: W's rows at the padded row stride, zeros around.
  std::string w = "abcdef"; // 2 x 3 elements of 1 byte
  CHECK_EQ(padWeightImage(w, 1, 2, 3, 3, 4), std::string("abc\0def\0\0\0\0\0", 12));
  std::string w16 = "aAbBcCdDeEfF"; // 2 x 3 elements of 2 bytes
  CHECK_EQ(padWeightImage(w16, 2, 2, 3, 2, 5),
           std::string("aAbBcC\0\0\0\0dDeEfF\0\0\0\0", 20));
}

// Version 6: frozen weights side by side in one padded buffer (q/k/v of
// kiln-lora-k-concat's group-frozen): "w" [64, 128] and "u" [64, 48] along
// axis 1 fill the [64, 176] block of paddedProgram's buffer.
static void testWeightGroups() {
  const std::string group =
      R"(,"padded_from":[64,176],"members":[{"name":"w","size":128},{"name":"u","size":48}],)"
      R"("member_axis":1)";
  Expected<StepProgram> good = StepProgram::decode(paddedProgram(6, group), "step");
  CHECK(good);
  if (good) {
    const ProgramOp &op = good->ops[0];
    CHECK(op.members.size() == 2 && op.members[1].name == "u" && op.members[1].size == 48 &&
          op.memberAxis == 1);
    // Not the tensor of "w" padded alone.
    CHECK_EQ(weightKey(*good, op), "w#padded:80x192|u");
  }
  auto member = [](const char *name, int size) {
    return std::string(R"({"name":")") + name + R"(","size":)" + std::to_string(size) + "}";
  };
  for (auto [version, fields, error] : {
           std::tuple<int, std::string, std::string>{
               5, group, "step: op 0 (weight): 'members' needs a version 6 program"},
           {6, R"(,"members":[)" + member("w", 128) + "," + member("u", 48) + R"(],"member_axis":1)",
            "step: op 0 (weight): 'members' needs 'padded_from'"},
           {6, R"(,"padded_from":[64,176],"members":[)" + member("w", 176) + R"(],"member_axis":1)",
            "step: op 0 (weight): 'members' lists two or more weights"},
           {6, R"(,"padded_from":[64,176],"members":[)" + member("w", 128) + "," + member("u", 48) +
                   R"(],"member_axis":2)",
            "step: op 0 (weight): 'member_axis' is 0 or 1"},
           {6, R"(,"padded_from":[64,176],"members":[)" + member("u", 128) + "," + member("w", 48) +
                   R"(],"member_axis":1)",
            "step: op 0 (weight): member 0: the first member is the weight's 'name'"},
           {6, R"(,"padded_from":[64,176],"members":[)" + member("w", 128) + "," + member("u", 0) +
                   R"(],"member_axis":1)",
            "step: op 0 (weight): member 1: a name and a positive size"},
           {6, R"(,"padded_from":[64,176],"members":[)" + member("w", 128) + "," + member("u", 40) +
                   R"(],"member_axis":1)",
            "step: op 0 (weight): the members' sizes add up to 168, not 'padded_from' dim 1"}}) {
    Expected<StepProgram> bad = StepProgram::decode(paddedProgram(version, fields), "step");
    CHECK(!bad);
    if (!bad)
      CHECK_EQ(bad.getError(), error);
  }
  // The block's image: along axis 1 each row holds every member's row in
  // turn; along axis 0 the members' rows follow each other.
  CHECK_EQ(groupWeightImage({"abcd", "XY"}, 1, 1, 2, {2, 1}), std::string("abXcdY"));
  CHECK_EQ(groupWeightImage({"aAbBcCdD", "xXyY"}, 2, 1, 2, {2, 1}),
           std::string("aAbBxXcCdDyY"));
  CHECK_EQ(groupWeightImage({"abcd", "XY"}, 1, 0, 0, {2, 1}), std::string("abcdXY"));
}

int main() {
  testDecodeAndPlan();
  testDecodeErrors();
  testLaunchVariants();
  testGemmAlphaBeta();
  testGemmLeadingDims();
  testStridedViews();
  testPaddedWeights();
  testWeightGroups();
  testAttentionRoles();
  testLinearCrossEntropy();
  testConvert();
  testAllReduce();
  return checkFailures() != 0;
}
