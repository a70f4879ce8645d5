//===- MemoryPlanTest.cpp - The memory_plan section and its chain ---------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The compiler's arena plan as the runtime reads it: byte sizes multiplied
// out into one expression, the base chain evaluated at other sizes, the
// overlap check that sends a plan which no longer fits back to a run-time
// plan, and one-line decode errors naming the field.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/artifact/ArenaScratch.h"
#include "kiln/runtime/MemoryPlanSection.h"
#include "kiln/runtime/PersistentPool.h"

using namespace kiln::runtime;
using namespace kiln::artifact;

// x1 = buffer 1 [n] and x2 = buffer 2 [64] live together (op 2); x1 dies,
// then x3 = buffer 3 [p] lives with x2. Planned where x3 fits below x2 (in
// x1's old place, offset 0) the chain is valid only while 4p <= 4n rounded.
static const char *kGapProgram = R"({
  "format": "kiln-step-program", "version": 1, "function": "main",
  "buffers": [
    {"dtype": "F32", "shape": ["n"]},
    {"dtype": "F32", "shape": ["n"]},
    {"dtype": "F32", "shape": ["64"]},
    {"dtype": "F32", "shape": ["p"]}
  ],
  "args": [{"role": "input", "name": "x", "buffer": 0}],
  "results": [{"role": "other", "buffer": 3}],
  "ops": [
    {"op": "alloc", "result": 1},
    {"op": "alloc", "result": 2},
    {"op": "launch", "kernel": "k0", "module": "m", "args": [0, 1, 2], "symbols": [],
     "items": "n", "per": 256, "block": 256, "shared": "0"},
    {"op": "alloc", "result": 3},
    {"op": "launch", "kernel": "k1", "module": "m", "args": [2, 3], "symbols": [],
     "items": "p", "per": 256, "block": 256, "shared": "0"}
  ]
})";

static void testProduct() {
  Expected<SizeExpr> batch = SizeExpr::parse("batch"), seq1 = SizeExpr::parse("seq + 1"),
                     seqm = SizeExpr::parse("seq - 1"), k = SizeExpr::parse("2048");
  Expected<SizeExpr> p = SizeExpr::product({*batch, *seq1, *k}, 2);
  CHECK(p);
  CHECK_EQ(p->getText(), "4096*batch*seq + 4096*batch");
  CHECK(*p->evaluate({{"batch", 3}, {"seq", 5}}) == 3 * 6 * 2048 * 2);
  CHECK_EQ(SizeExpr::product({*seq1, *seqm}, 1)->getText(), "seq*seq - 1");
  CHECK_EQ(SizeExpr::product({}, 4)->getText(), "4");
  CHECK_EQ(SizeExpr::product({*seq1, *seqm}, 0)->getText(), "0");
  Expected<SizeExpr> huge = SizeExpr::parse("4611686018427387904*seq");
  Expected<SizeExpr> overflow = SizeExpr::product({*huge}, 4);
  CHECK(!overflow);
  CHECK_EQ(overflow.getError(), "size expression product overflows int64");
}

static void testChain() {
  Expected<StepProgram> program = StepProgram::decode(kGapProgram, "step");
  CHECK(program);
  if (!program)
    return;
  Expected<StepMemoryPlan> plan = planStepMemory(*program, {{"n", 1024}, {"p", 512}});
  CHECK(plan);
  if (!plan)
    return;
  CHECK(plan->buffers.size() == 3);
  CHECK(plan->persistentBytes == 4096); // the input x
  CHECK(plan->arenaBytes == 4096 + 256);
  // x2 sits on x1; x3 takes x1's place at offset 0.
  CHECK(plan->buffers[1].buffer == 2 && plan->buffers[1].base == 1);
  CHECK(plan->buffers[2].buffer == 3 && plan->buffers[2].base == -1);
  CHECK_EQ(plan->buffers[0].size.getText(), "4*n");

  // Through the section and back.
  std::string json = encodeMemoryPlan(*plan);
  Expected<StepMemoryPlan> decoded = decodeMemoryPlan(json, "section 'memory_plan'");
  CHECK(decoded);
  if (!decoded)
    return;
  CHECK(decoded->plannedAt.at("n") == 1024 && decoded->arenaBytes == plan->arenaBytes);
  CHECK(decoded->workspaceBytes == kGemmWorkspaceBytes);

  // At the planned sizes the chain is planArena's layout.
  Expected<ArenaPlan> direct = program->planArena({{"n", 1024}, {"p", 512}}, kArenaAlignment);
  Expected<ArenaPlan> chained = evaluateMemoryPlan(*decoded, *program, {{"n", 1024}, {"p", 512}});
  CHECK(chained && direct);
  CHECK(chained->offsets == direct->offsets && chained->size == direct->size);
  CHECK(checkArenaPlan(*program, *chained));

  // At other sizes: x2 moves with x1's end (offset 4n aligned up).
  Expected<ArenaPlan> grown = evaluateMemoryPlan(*decoded, *program, {{"n", 3000}, {"p", 100}});
  CHECK(grown);
  CHECK(grown->offsets[1] == 0 && grown->offsets[2] == 12032 && grown->offsets[3] == 0);
  CHECK(grown->size == 12032 + 256);
  CHECK(checkArenaPlan(*program, *grown));
  std::string note = "stale";
  Expected<ArenaPlan> chosen =
      chooseArenaPlan(*program, &*decoded, {{"n", 3000}, {"p", 100}}, note);
  CHECK(chosen && note.empty() && chosen->offsets == grown->offsets);
  chosen = chooseArenaPlan(*program, nullptr, {{"n", 3000}, {"p", 100}}, note);
  CHECK(chosen && note.empty());
}

static void testConflictFallsBack() {
  Expected<StepProgram> program = StepProgram::decode(kGapProgram, "step");
  Expected<StepMemoryPlan> plan = planStepMemory(*program, {{"n", 1024}, {"p", 512}});
  CHECK(program && plan);
  if (!program || !plan)
    return;
  // x3 outgrows x1's old place: at offset 0 it runs into x2.
  SymbolBindings sizes{{"n", 1024}, {"p", 4096}};
  Expected<ArenaPlan> chained = evaluateMemoryPlan(*plan, *program, sizes);
  CHECK(chained);
  Status checked = checkArenaPlan(*program, *chained);
  CHECK(!checked);
  CHECK_EQ(checked.getError(), "buffers 2 and 3 are live at once and overlap");
  std::string note;
  Expected<ArenaPlan> chosen = chooseArenaPlan(*program, &*plan, sizes, note);
  CHECK(chosen);
  CHECK_EQ(note, "the artifact's memory plan does not fit these sizes (buffers 2 and 3 are "
                 "live at once and overlap); planning the arena at run time");
  CHECK(checkArenaPlan(*program, *chosen));
  CHECK(chosen->offsets[3] == 4096 + 256);

  // A plan for another program (buffer 0 is an argument) is not used either.
  StepMemoryPlan other = *plan;
  other.buffers[0].buffer = 0;
  chosen = chooseArenaPlan(*program, &other, {{"n", 1024}, {"p", 512}}, note);
  CHECK(chosen);
  CHECK_EQ(note, "the artifact's memory plan does not fit these sizes (buffer 0 is not an "
                 "alloc of the step program); planning the arena at run time");
  other = *plan;
  other.buffers.pop_back();
  chosen = chooseArenaPlan(*program, &other, {{"n", 1024}, {"p", 512}}, note);
  CHECK_EQ(note, "the artifact's memory plan does not fit these sizes (buffer 3 has no place "
                 "in the plan); planning the arena at run time");
}

static void testDecodeErrors() {
  const std::string head = R"({"format":"kiln-memory-plan","version":1,)";
  const std::string totals = R"("arena_bytes":512,"persistent_bytes":0,"workspace_bytes":0,)";
  struct Case {
    std::string json;
    const char *error;
  } cases[] = {
      {"{", "section 'memory_plan': invalid JSON at byte 1: expected a string key"},
      {R"({"format":"kiln-memory-plan","version":2})",
       "section 'memory_plan': not a version 1 kiln-memory-plan"},
      {head + R"("alignment":100})", "section 'memory_plan': 'alignment' must be a power of two"},
      {head + R"("alignment":256,"arena_bytes":-1})",
       "section 'memory_plan': missing or negative integer 'arena_bytes'"},
      {head + R"("alignment":256,)" + totals + R"("planned_at":{"seq":"x"}})",
       "section 'memory_plan': 'planned_at': 'seq' is not an integer"},
      {head + R"("alignment":256,)" + totals + R"("planned_at":{}})",
       "section 'memory_plan': missing array 'buffers'"},
      {head + R"("alignment":256,)" + totals +
           R"("planned_at":{},"buffers":[{"buffer":1,"size":"4*n*","base":-1}]})",
       "section 'memory_plan': buffers entry 0: 'size': bad size expression '4*n*' at byte 4: "
       "expected an integer or a symbol"},
      {head + R"("alignment":256,)" + totals +
           R"("planned_at":{},"buffers":[{"buffer":1,"size":"4","base":-1},{"buffer":2,"size":"4","base":5}]})",
       "section 'memory_plan': buffers entry 1: 'base' 5 is not a buffer listed before it"},
      {head + R"("alignment":256,)" + totals +
           R"("planned_at":{},"buffers":[{"buffer":1,"size":"4","base":-1},{"buffer":1,"size":"4","base":-1}]})",
       "section 'memory_plan': buffers entry 1: buffer 1 is listed twice"},
      {head + R"("alignment":256,)" + totals + R"("planned_at":{},"buffers":[{"size":"4"}]})",
       "section 'memory_plan': buffers entry 0: missing or bad 'buffer'"},
  };
  for (const Case &c : cases) {
    Expected<StepMemoryPlan> plan = decodeMemoryPlan(c.json, "section 'memory_plan'");
    CHECK(!plan);
    CHECK_EQ(plan.getError(), c.error);
  }
}

// Buffer 1 [64] f32 lives over ops 0-1, buffer 2 over ops 3-4; both sit at
// offset 0 of a 256-byte arena. Scratch memory (AttentionScratch.cpp) goes
// where no buffer is live over its ops.
static const char *kScratchProgram = R"({
  "format": "kiln-step-program", "version": 1, "function": "main",
  "buffers": [
    {"dtype": "F32", "shape": ["64"]},
    {"dtype": "F32", "shape": ["64"]},
    {"dtype": "F32", "shape": ["64"]}
  ],
  "args": [{"role": "input", "name": "x", "buffer": 0}],
  "results": [],
  "ops": [
    {"op": "alloc", "result": 1},
    {"op": "launch", "kernel": "k0", "module": "m", "args": [0, 1], "symbols": [],
     "items": "64", "per": 256, "block": 256, "shared": "0"},
    {"op": "launch", "kernel": "k1", "module": "m", "args": [0], "symbols": [],
     "items": "64", "per": 256, "block": 256, "shared": "0"},
    {"op": "alloc", "result": 2},
    {"op": "launch", "kernel": "k2", "module": "m", "args": [0, 2], "symbols": [],
     "items": "64", "per": 256, "block": 256, "shared": "0"}
  ]
})";

static void testScratchPlacement() {
  Expected<StepProgram> program = StepProgram::decode(kScratchProgram, "scratch");
  CHECK(program);
  Expected<ArenaPlan> plan = program->planArena({}, 256);
  CHECK(plan);
  CHECK(plan->size == 256);
  CHECK(plan->offsets[1] == 0);
  CHECK(plan->offsets[2] == 0);
  // Op 2 has nothing live: the whole arena is free there.
  std::vector<std::optional<size_t>> free = placeScratch(*program, *plan, 256, {{2, 2, 256}}, 256);
  CHECK(free.size() == 1 && free[0] && *free[0] == 0);
  // Ops 1-3 meet both buffers: no room in 256 bytes, room above them in 512.
  CHECK(!placeScratch(*program, *plan, 256, {{1, 3, 4}}, 256)[0]);
  std::vector<std::optional<size_t>> above = placeScratch(*program, *plan, 512, {{1, 3, 4}}, 256);
  CHECK(above[0] && *above[0] == 256);
  // A request placed first is in the way of the next one at the same ops.
  std::vector<std::optional<size_t>> two =
      placeScratch(*program, *plan, 512, {{2, 2, 100}, {2, 2, 100}, {2, 2, 300}}, 256);
  CHECK(two[0] && *two[0] == 0);
  CHECK(two[1] && *two[1] == 256);
  CHECK(!two[2]);
  // Nothing to place: no offset.
  CHECK(!placeScratch(*program, *plan, 512, {{2, 2, 0}}, 256)[0]);
}

// The persistent tensors' pool: every param, state and accum argument and
// weight op once, by store key; laid out aligned, empty tensors left out.
static const char *kPersistentProgram = R"({
  "format": "kiln-step-program", "version": 1, "function": "main",
  "buffers": [
    {"dtype": "BF16", "shape": ["768", "3"]},
    {"dtype": "F32", "shape": ["768", "3"]},
    {"dtype": "F32", "shape": ["n"]},
    {"dtype": "F32", "shape": ["0"]},
    {"dtype": "F32", "shape": ["5"]},
    {"dtype": "F32", "shape": ["n"]}
  ],
  "args": [{"role": "param", "name": "w", "buffer": 0},
           {"role": "state", "name": "w.m", "buffer": 1},
           {"role": "accum", "name": "w", "buffer": 2},
           {"role": "state", "name": "empty", "buffer": 3},
           {"role": "input", "name": "x", "buffer": 5}],
  "results": [],
  "ops": [
    {"op": "weight", "name": "norm", "result": 4},
    {"op": "launch", "kernel": "k0", "module": "m", "args": [0, 1, 2, 3, 4, 5], "symbols": [],
     "items": "n", "per": 256, "block": 256, "shared": "0"}
  ]
})";

static void testPersistentPoolLayout() {
  Expected<StepProgram> program = StepProgram::decode(kPersistentProgram, "persistent");
  CHECK(program);
  Expected<std::map<std::string, size_t>> bytes =
      persistentTensorBytes({&*program, &*program}, {{"n", 10}});
  CHECK(bytes);
  // The input is the caller's; accumulators are apart from the parameter.
  std::map<std::string, size_t> expected = {
      {"w", 4608}, {"w.m", 9216}, {"accum/w", 40}, {"empty", 0}, {"norm", 20}};
  CHECK(*bytes == expected);
  Expected<PoolLayout> layout = layOutPool(*bytes, 256);
  CHECK(layout);
  // By name: accum/w, norm, w, w.m; each at a multiple of 256.
  CHECK(layout->offsets.at("accum/w") == 0);
  CHECK(layout->offsets.at("norm") == 256);
  CHECK(layout->offsets.at("w") == 512);
  CHECK(layout->offsets.at("w.m") == 512 + 4608);
  CHECK(!layout->offsets.count("empty"));
  CHECK(layout->total == 512 + 4608 + 9216);
  // An unbound size is an error naming the tensor.
  Expected<std::map<std::string, size_t>> unbound = persistentTensorBytes({&*program}, {});
  CHECK(!unbound && unbound.getError().find("accum/w") != std::string::npos);
}

int main() {
  testProduct();
  testChain();
  testConflictFallsBack();
  testDecodeErrors();
  testScratchPlacement();
  testPersistentPoolLayout();
  return checkFailures() != 0;
}
