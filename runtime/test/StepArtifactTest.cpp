//===- StepArtifactTest.cpp - Tests for the runtime's artifact view -*- C++
//-*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Section decoding errors, kernel image choice per device architecture and
// shape buckets.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/runtime/StepArtifact.h"

#include <cstdlib>
#include <filesystem>

using namespace kiln::runtime;
using namespace kiln::artifact;

static Expected<StepArtifact>
decode(const std::vector<std::pair<std::string, std::string>> &sections) {
  ArtifactWriter writer;
  for (const auto &[name, contents] : sections)
    writer.add(name, contents);
  Expected<Artifact> container = Artifact::parse(*writer.serialize(), "a.kiln");
  if (!container)
    return container.takeError();
  return StepArtifact::decode(std::move(*container), "a.kiln");
}

static const char *kMeta =
    R"({"format":"kiln-step","targets":["sm_90"],"symbols":["batch","seq"]})";
/// meta with nothing but the format.
static const char *kBareMeta = R"({"format":"kiln-step"})";
/// The smallest valid step program (no buffers, no ops).
static const char *kProgram =
    R"({"format":"kiln-step-program","version":1,"buffers":[],"args":[],"results":[],"ops":[]})";

static void testImageChoice() {
  Expected<StepArtifact> step = decode({{"meta", kMeta},
                                        {"kernels/gemm_epilogue/sm_80.cubin", "a"},
                                        {"kernels/gemm_epilogue/sm_86.cubin", "b"},
                                        {"kernels/gemm_epilogue/sm_90a.cubin", "c"},
                                        {"kernels/gemm_epilogue/compute_80.ptx", "d"},
                                        {"kernels/gemm_epilogue/source", "e"},
                                        {"kernels/norm/sm_80.cubin", "f"}});
  CHECK(step);
  if (!step)
    return;
  CHECK(step->getKernels().size() == 2);
  auto choose = [&](const char *kernel, int major, int minor) {
    Expected<KernelImageChoice> choice = step->selectImage(kernel, major, minor);
    if (!choice)
      return choice.getError();
    return choice->section + (choice->needsJit ? " (jit)" : "");
  };
  CHECK_EQ(choose("gemm_epilogue", 8, 0), "kernels/gemm_epilogue/sm_80.cubin");
  // A later minor of the same major runs the newest cubin not newer than it.
  CHECK_EQ(choose("gemm_epilogue", 8, 9), "kernels/gemm_epilogue/sm_86.cubin");
  // sm_90a runs on sm_90 only.
  CHECK_EQ(choose("gemm_epilogue", 9, 0), "kernels/gemm_epilogue/sm_90a.cubin");
  // No cubin of major 10: JIT from PTX.
  CHECK_EQ(choose("gemm_epilogue", 10, 0), "kernels/gemm_epilogue/compute_80.ptx (jit)");
  CHECK_EQ(choose("gemm_epilogue", 7, 5),
           "a.kiln: kernel 'gemm_epilogue' has no image for this sm_75 device "
           "(it has: sm_80, sm_86, sm_90a, compute_80); recompile with "
           "--target sm_75");
  CHECK_EQ(choose("norm", 9, 0), "a.kiln: kernel 'norm' has no image for this sm_90 device (it "
                                 "has: sm_80); recompile with --target sm_90");
  CHECK_EQ(choose("missing", 9, 0), "a.kiln: no kernel 'missing' in the artifact");
}

static void testDecodeErrors() {
  CHECK_EQ(decode({{"step", "x"}}).getError(), "a.kiln: the artifact has no 'meta' section");
  CHECK_EQ(decode({{"meta", "{"}}).getError(),
           "a.kiln: meta: invalid JSON at byte 1: expected a string key");
  CHECK_EQ(decode({{"meta", R"({"targets":"sm_90"})"}}).getError(),
           "a.kiln: meta \"targets\" is not an array of strings");
  CHECK_EQ(decode({{"meta", kMeta}, {"guards", R"([{"kind":"range"}])"}}).getError(),
           "a.kiln: guards[0]: expected an object with string \"kind\" and "
           "\"expr\"");
  CHECK_EQ(decode({{"meta", kMeta}, {"params", R"([{"name":"w","dtype":"F31","shape":[1]}])"}})
               .getError(),
           "a.kiln: params[0]: unknown dtype 'F31'");
  CHECK_EQ(decode({{"meta", kMeta}, {"kernels/k/sm_90.elf", ""}}).getError(),
           "a.kiln: unknown kernel image 'kernels/k/sm_90.elf' (expected "
           "sm_XY.cubin, compute_XY.ptx or source)");
  CHECK_EQ(decode({{"meta", kMeta}, {"kernels/sm_90.cubin", ""}}).getError(),
           "a.kiln: bad kernel section name 'kernels/sm_90.cubin'");
  // The programs are decoded with the artifact, before any device work.
  CHECK_EQ(decode({{"meta", kMeta}, {"step", "garbage"}}).getError(),
           "a.kiln: section 'step': invalid JSON at byte 0: unexpected character");
  CHECK_EQ(decode({{"meta", kMeta}, {"step", kProgram}, {"init", "{}"}}).getError(),
           "a.kiln: section 'init': not a version 1 to 6 kiln-step-program");
  Expected<StepArtifact> ok = decode(
      {{"meta", R"({"format":"kiln-step","vocab_size":32000})"},
       {"params",
        R"([{"name":"w","source":"model.w","dtype":"BF16","shape":[2,3],"trainable":false}])"}});
  CHECK(ok && ok->getVocabSize() == 32000 && ok->getParams().size() == 1 &&
        ok->getParams()[0].source == "model.w" && !ok->hasStepProgram());
}

static void testWeightMatching() {
  Expected<StepArtifact> step = decode(
      {{"meta", kBareMeta},
       {"params", R"([{"name":"val_95","dtype":"F32","shape":[2,3],"folded_from":"q.weight"},)"
                  R"({"name":"norm","dtype":"F32","shape":[3]},)"
                  R"({"name":"codes","dtype":"U8","shape":[4],"init":true},)"
                  R"({"name":"a.lora_A.weight","dtype":"F32","shape":[1,3],"trainable":true}])"},
       // "codes" is marked "init": the init program must make it.
       {"init",
        R"({"format":"kiln-step-program","version":1,"buffers":[{"dtype":"U8","shape":["4"]}],)"
        R"("args":[],"results":[{"role":"param","name":"codes","buffer":0}],)"
        R"("ops":[{"op":"alloc","result":0}]})"}});
  CHECK(step && step->getParams().size() == 4);
  if (!step)
    return;
  char dir[] = "/tmp/kiln-step-artifact-test-XXXXXX";
  CHECK(::mkdtemp(dir));
  std::string path = std::string(dir) + "/w.safetensors";
  std::vector<float> values(6, 1.f);
  auto check = [&](std::vector<TensorData> tensors) {
    CHECK(writeSafetensors(path, tensors));
    Expected<SafetensorsFile> file = SafetensorsFile::open(path);
    CHECK(file);
    return file ? step->checkWeights(*file) : Status(Error{"unreadable"});
  };
  // By the ONNX initializer name.
  CHECK(check(
      {{"val_95", DType::F32, {2, 3}, values.data()}, {"norm", DType::F32, {3}, values.data()}}));
  // By the PyTorch name it was folded from, stored transposed.
  CHECK(check(
      {{"q.weight", DType::F32, {3, 2}, values.data()}, {"norm", DType::F32, {3}, values.data()}}));
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  Expected<WeightMatch> match = step->matchWeight(step->getParams()[0], *file);
  CHECK(match && match->tensor && match->transpose);
  CHECK_EQ(check({{"q.weight", DType::F32, {6}, values.data()},
                  {"norm", DType::F32, {3}, values.data()}})
               .getError(),
           path + ": weight 'q.weight' is F32 [6], but the artifact expects "
                  "F32 [2, 3] (for 'val_95', folded from it)");
  CHECK_EQ(check({{"norm", DType::F32, {3}, values.data()}}).getError(),
           path + ": missing weight 'val_95' (or 'q.weight', which it was "
                  "folded from) (parameter 'val_95', expected F32 [2, 3])");
  CHECK_EQ(check({{"val_95", DType::F32, {2, 3}, values.data()}}).getError(),
           path + ": missing weight 'norm' (parameter 'norm', expected F32 "
                  "[3])");
  // Shards of one checkpoint: each tensor in one of them.
  {
    std::string second = std::string(dir) + "/w2.safetensors";
    CHECK(writeSafetensors(path, {{"q.weight", DType::F32, {3, 2}, values.data()}}));
    CHECK(writeSafetensors(second, {{"norm", DType::F32, {3}, values.data()}}));
    std::vector<SafetensorsFile> shards;
    for (const std::string &p : {path, second})
      if (Expected<SafetensorsFile> f = SafetensorsFile::open(p))
        shards.push_back(std::move(*f));
    CHECK(shards.size() == 2 && step->checkWeights(shards));
    Expected<WeightMatch> norm = step->matchWeight(step->getParams()[1], shards);
    CHECK(norm && norm->file == &shards[1]);
    shards.pop_back();
    CHECK(writeSafetensors(second, {{"other", DType::F32, {3}, values.data()}}));
    if (Expected<SafetensorsFile> f = SafetensorsFile::open(second))
      shards.push_back(std::move(*f));
    CHECK_EQ(step->checkWeights(shards).getError(),
             path + ": missing weight 'norm' (parameter 'norm', expected F32 [3]) "
                    "(in none of the 2 weights files)");
  }
  // A frozen parameter with the model file's value needs no weight.
  Expected<StepArtifact> inlined = decode(
      {{"meta", kBareMeta},
       {"params", R"([{"name":"rope","dtype":"F32","shape":[2],"value":"0000803f00000040"}])"}});
  CHECK(inlined && inlined->getParams()[0].value.size() == 8);
  CHECK(writeSafetensors(path, {{"norm", DType::F32, {3}, values.data()}}));
  if (inlined) {
    Expected<SafetensorsFile> without = SafetensorsFile::open(path);
    CHECK(without && inlined->checkWeights(*without));
  }
  std::string cleanup = "rm -rf " + std::string(dir);
  CHECK(std::system(cleanup.c_str()) == 0);
}

static void testValueErrors() {
  CHECK_EQ(decode({{"meta", kBareMeta},
                   {"params", R"([{"name":"r","dtype":"F32","shape":[2],"value":"00"}])"}})
               .getError(),
           "a.kiln: params[0]: 'value' must be hex of 2 F32 elements");
}

static void testBuckets() {
  const char *meta =
      R"({"format":"kiln-step","symbols":["batch","seq"],"buckets":[)"
      R"({"function":"main__seq_8","section":"step/main__seq_8","values":{"seq":8}},)"
      R"({"function":"main__batch_2__seq_16","section":"step/main__batch_2__seq_16",)"
      R"("values":{"batch":2,"seq":16}}]})";
  Expected<StepArtifact> step = decode({{"meta", meta},
                                        {"step", kProgram},
                                        {"step/main__seq_8", kProgram},
                                        {"step/main__batch_2__seq_16", kProgram}});
  CHECK(step);
  if (!step)
    return;
  const std::vector<BucketSpec> &buckets = step->getBuckets();
  CHECK(buckets.size() == 2);
  if (buckets.size() != 2)
    return;
  CHECK_EQ(buckets[0].function, "main__seq_8");
  CHECK_EQ(buckets[0].section, "step/main__seq_8");
  CHECK((buckets[0].values == SymbolBindings{{"seq", 8}}));
  CHECK_EQ(buckets[1].section, "step/main__batch_2__seq_16");
  CHECK((buckets[1].values == SymbolBindings{{"batch", 2}, {"seq", 16}}));
  // Every pinned value must match; other symbols may be anything.
  CHECK(step->selectBucket({{"batch", 4}, {"seq", 8}}) == &buckets[0]);
  CHECK(step->selectBucket({{"batch", 2}, {"seq", 16}}) == &buckets[1]);
  CHECK(step->selectBucket({{"batch", 4}, {"seq", 16}}) == nullptr);
  CHECK(step->selectBucket({{"batch", 2}, {"seq", 12}}) == nullptr);
  CHECK(step->selectBucket({{"batch", 2}}) == nullptr);

  // No "buckets": none, and the symbolic step serves every size.
  Expected<StepArtifact> plain = decode({{"meta", kMeta}, {"step", kProgram}});
  CHECK(plain && plain->getBuckets().empty() &&
        plain->selectBucket({{"batch", 2}, {"seq", 8}}) == nullptr);

  // A malformed entry: one line naming the entry.
  auto error = [](const char *buckets,
                  std::vector<std::pair<std::string, std::string>> extra = {}) {
    std::vector<std::pair<std::string, std::string>> sections = {
        {"meta", std::string(R"({"format":"kiln-step","symbols":["batch","seq"],"buckets":)") +
                     buckets + "}"},
        {"step/main__seq_8", kProgram}};
    sections.insert(sections.end(), extra.begin(), extra.end());
    Expected<StepArtifact> step = decode(sections);
    return step ? std::string("decoded") : step.getError();
  };
  CHECK_EQ(error(R"({"seq":8})"), "a.kiln: meta \"buckets\" is not an array");
  CHECK_EQ(error(R"([{"function":"main__seq_8","values":{"seq":8}}])"),
           "a.kiln: meta \"buckets\" entry 0: expected {\"function\", \"section\", "
           "\"values\"}");
  CHECK_EQ(
      error(R"([{"function":"main__seq_8","section":"step/main__seq_8","values":{"seq":8}},)"
            R"({"function":"main__seq_16","section":"step/main__seq_16","values":{"seq":16}}])"),
      "a.kiln: meta \"buckets\" entry 1 (main__seq_16): no section "
      "'step/main__seq_16' in the artifact");
  CHECK_EQ(error(R"([{"function":"main__seq_8","section":"step/main__seq_8","values":{"seq":0}}])"),
           "a.kiln: meta \"buckets\" entry 0 (main__seq_8): 'seq' must be a positive integer");
  CHECK_EQ(
      error(R"([{"function":"main__seq_8","section":"step/main__seq_8","values":{"seq":"8"}}])"),
      "a.kiln: meta \"buckets\" entry 0 (main__seq_8): 'seq' must be a positive integer");
  CHECK_EQ(error(R"([{"function":"main__seq_8","section":"step/main__seq_8","values":{"len":8}}])"),
           "a.kiln: meta \"buckets\" entry 0 (main__seq_8): 'len' is not a size symbol of "
           "the step (meta \"symbols\")");
  CHECK_EQ(error(R"([{"function":"main__seq_8","section":"step/main__seq_8","values":{}}])"),
           "a.kiln: meta \"buckets\" entry 0 (main__seq_8): 'values' pins no symbol");
  CHECK_EQ(error(R"([{"function":"main__seq_8","section":"step/main__seq_8","values":{"seq":8}}])"),
           "decoded");
}

/// A program of one op making buffer 1 (\p first: a weight op of
/// \p weight unless given) and one launch of \p module.
static std::string program(const std::string &weight, const std::string &module,
                           const std::string &shape = "seq", std::string first = "") {
  if (first.empty())
    first = R"({"op":"weight","name":")" + weight + R"(","result":1})";
  return R"({"format":"kiln-step-program","version":1,)"
         R"("buffers":[{"dtype":"F32","shape":[")" +
         shape +
         R"("]},{"dtype":"F32","shape":["4"]}],)"
         R"("args":[{"role":"input","name":"x","buffer":0}],"results":[],)"
         R"("ops":[)" +
         first + R"(,{"op":"launch","kernel":"k","module":")" + module +
         R"(","args":[0,1],"symbols":["seq"],"items":"seq","per":1,"block":32,"shared":"0"}]})";
}

static void testConsistency() {
  const char *params = R"([{"name":"w","dtype":"F32","shape":[4]}])";
  auto error = [&](std::vector<std::pair<std::string, std::string>> sections) {
    sections.insert(sections.begin(), {"meta", kMeta});
    sections.push_back({"kernels/module0/compute_80.ptx", "ptx"});
    Expected<StepArtifact> step = decode(sections);
    return step ? std::string("decoded") : step.getError();
  };
  CHECK_EQ(error({{"params", params}, {"step", program("w", "module0")}}), "decoded");
  // A frozen weight the step reads must be listed.
  CHECK_EQ(error({{"params", "[]"}, {"step", program("w", "module0")}}),
           "a.kiln: section 'step': op 0 (weight): weight 'w' is not in \"params\"");
  CHECK_EQ(error({{"params", params}, {"step", program("w", "module9")}}),
           "a.kiln: section 'step': op 1 (launch): kernel module 'module9' is not in the "
           "artifact (no kernels/module9/ section)");
  CHECK_EQ(error({{"params", params}, {"step", program("w", "module0", "2*len")}}),
           "a.kiln: section 'step': buffer 0: size expression '2*len' uses 'len', which is "
           "not in meta \"symbols\"");
  std::string role = program("w", "module0");
  role.replace(role.find("\"input\""), 7, "\"bogus\"");
  CHECK_EQ(error({{"params", params}, {"step", role}}),
           "a.kiln: section 'step': args entry 0: unknown role 'bogus'");
  // The init program takes seeds, and makes exactly the "init" parameters.
  CHECK_EQ(error({{"params", params}, {"init", program("w", "module0")}}),
           "a.kiln: section 'init': args entry 0: role 'input'; the init program takes only "
           "rng_seed arguments");
  CHECK_EQ(error({{"params", R"([{"name":"w","dtype":"F32","shape":[4],"init":true}])"}}),
           "a.kiln: params: 'w' is marked \"init\", but the artifact has no init program");
  // A bucket names a step/ program.
  CHECK_EQ(decode({{"meta", R"({"format":"kiln-step","symbols":["seq"],"buckets":[)"
                            R"({"function":"f","section":"meta","values":{"seq":8}}]})"}})
               .getError(),
           "a.kiln: meta \"buckets\" entry 0 (f): section 'meta' is not a step/<function> "
           "program");
  // The memory plan, at its own sizes, is the step's.
  std::string step = program("", "module0", "seq", R"({"op":"alloc","result":1})");
  std::string plan =
      R"({"format":"kiln-memory-plan","version":1,"alignment":256,)"
      R"("planned_at":{"batch":1,"seq":8},"arena_bytes":256,"persistent_bytes":32,)"
      R"("workspace_bytes":33554432,"buffers":[{"buffer":1,"size":"16","base":-1}]})";
  CHECK_EQ(error({{"params", params}, {"step", step}, {"memory_plan", plan}}), "decoded");
  auto with = [&](const std::string &from, const std::string &to) {
    std::string changed = plan;
    changed.replace(changed.find(from), from.size(), to);
    return error({{"params", params}, {"step", step}, {"memory_plan", changed}});
  };
  CHECK_EQ(with("\"persistent_bytes\":32", "\"persistent_bytes\":33"),
           "a.kiln: section 'memory_plan': 'persistent_bytes' is 33, but the step's arguments, "
           "weights and constants take 32 at planned_at");
  CHECK_EQ(with("\"workspace_bytes\":33554432", "\"workspace_bytes\":1"),
           "a.kiln: section 'memory_plan': 'workspace_bytes' is 1, but the executor's GEMM "
           "workspace is 33554432");
  CHECK_EQ(with("\"planned_at\":{\"batch\":1,", "\"planned_at\":{\"len\":1,"),
           "a.kiln: section 'memory_plan': 'planned_at' names 'len', which is not in meta "
           "\"symbols\"");
  CHECK_EQ(with("{\"buffer\":1,", "{\"buffer\":0,"),
           "a.kiln: section 'memory_plan': at its planned_at sizes: buffer 0 is not an alloc of "
           "the step program");
}

// A square weight folded into its transpose has the same shape either way:
// only the artifact's folded_transposed says which (a linear layer's W^T).
static void testSquareFoldedWeights() {
  Expected<StepArtifact> step =
      decode({{"meta", kBareMeta},
              {"params", R"([{"name":"val_7","dtype":"F32","shape":[2,2],"folded_from":"o.weight",)"
                         R"("folded_transposed":true},)"
                         R"({"name":"val_8","dtype":"F32","shape":[2,2],"folded_from":"p.weight"},)"
                         R"({"name":"val_9","dtype":"F32","shape":[2,3],"folded_from":"q.weight",)"
                         R"("folded_transposed":false}])"}});
  CHECK(step && step->getParams().size() == 3);
  if (!step)
    return;
  CHECK(step->getParams()[0].foldedTransposed == std::optional<bool>(true));
  char dir[] = "/tmp/kiln-step-artifact-test-XXXXXX";
  CHECK(::mkdtemp(dir));
  std::string path = std::string(dir) + "/w.safetensors";
  std::vector<float> values(6, 1.f);
  CHECK(writeSafetensors(path, {{"o.weight", DType::F32, {2, 2}, values.data()},
                                {"p.weight", DType::F32, {2, 2}, values.data()},
                                {"q.weight", DType::F32, {3, 2}, values.data()}}));
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  CHECK(file);
  if (!file)
    return;
  Expected<WeightMatch> square = step->matchWeight(step->getParams()[0], *file);
  CHECK(square && square->tensor && square->transpose);
  CHECK_EQ(step->matchWeight(step->getParams()[1], *file).getError(),
           path + ": weight 'p.weight' is square, and the artifact does not record whether "
                  "'val_8' holds it or its transpose (compile it again with this Kiln)");
  CHECK_EQ(step->matchWeight(step->getParams()[2], *file).getError(),
           path + ": weight 'q.weight' is F32 [3, 2], but the artifact's 'val_9' (F32 [2, 3]) "
                  "is that weight itself");
  // The flag without a folded 2-D weight is damage.
  Expected<StepArtifact> bad =
      decode({{"meta", kBareMeta},
              {"params", R"([{"name":"n","dtype":"F32","shape":[3],"folded_transposed":true}])"}});
  CHECK(!bad &&
        bad.getError().find("'folded_transposed' needs 'folded_from'") != std::string::npos);
  std::filesystem::remove_all(dir);
}

// A frozen weight the step divides by (kiln-norm-grad-from-output): a zero
// element in the file or in the artifact's own value is refused in one line.
static void testNonzeroWeights() {
  Expected<StepArtifact> step =
      decode({{"meta", kBareMeta},
              {"params", R"([{"name":"norm.weight","dtype":"BF16","shape":[3],"nonzero":true},)"
                         R"({"name":"inline","dtype":"F32","shape":[2],"nonzero":true,)"
                         R"("value":"0000803f00000080"}])"}});
  CHECK(step && step->getParams().size() == 2 && step->getParams()[0].nonzero);
  if (!step)
    return;
  char dir[] = "/tmp/kiln-step-artifact-test-XXXXXX";
  CHECK(::mkdtemp(dir));
  std::string path = std::string(dir) + "/w.safetensors";
  std::vector<float> good = {1.f, 0.5f, -2.f}, bad = {1.f, 0.f, -2.f};
  for (const std::vector<float> *values : {&good, &bad}) {
    CHECK(writeSafetensors(path, {{"norm.weight", DType::F32, {3}, values->data()}}));
    Expected<SafetensorsFile> file = SafetensorsFile::open(path);
    CHECK(file);
    if (!file)
      continue;
    // The file's tensor is checked (F32 here), then the inline value (-0).
    CHECK_EQ(step->checkWeights(*file).getError(),
             std::string("weight '") + (values == &bad ? "norm.weight': element 1" :
                                        "inline': element 1") +
                 " is zero, but the step divides by it (the RMSNorm gradient from the norm's "
                 "output); recompile with --norm-grad-from-output=false");
  }
  std::string bf16 = {'\x80', '\x3f', '\x00', '\x80'}; // 1.0, -0.0
  CHECK(firstZeroElement(bf16, DType::BF16) == std::optional<int64_t>(1));
  CHECK(!firstZeroElement(bf16.substr(0, 2), DType::BF16));
  Expected<StepArtifact> trained = decode(
      {{"meta", kBareMeta},
       {"params", R"([{"name":"n","dtype":"F32","shape":[3],"trainable":true,"nonzero":true}])"}});
  CHECK(!trained &&
        trained.getError().find("'nonzero' is for frozen weights only") != std::string::npos);
  std::filesystem::remove_all(dir);
}

// Tied weights: one tensor under several names, of which a checkpoint keeps
// one. The parameter's aliases stand in for the name it is read by (its
// source, or its folded_from), and the missing-weight error lists them.
static void testTiedAliases() {
  Expected<StepArtifact> step = decode(
      {{"meta", kBareMeta},
       {"params", R"([{"name":"lm_head.weight","dtype":"F32","shape":[4,2],)"
                  R"("aliases":["model.embed_tokens.weight"]},)"
                  R"({"name":"val_3","dtype":"F32","shape":[2,4],"folded_from":"lm_head.weight",)"
                  R"("folded_transposed":true,"aliases":["model.embed_tokens.weight"]}])"}});
  CHECK(step && step->getParams().size() == 2);
  if (!step)
    return;
  char dir[] = "/tmp/kiln-step-artifact-test-XXXXXX";
  CHECK(::mkdtemp(dir));
  std::string path = std::string(dir) + "/w.safetensors";
  std::vector<float> values(8, 1.f);
  CHECK(writeSafetensors(path, {{"model.embed_tokens.weight", DType::F32, {4, 2}, values.data()}}));
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  CHECK(file);
  if (!file)
    return;
  Expected<WeightMatch> direct = step->matchWeight(step->getParams()[0], *file);
  CHECK(direct && direct->tensor && direct->tensor->name == "model.embed_tokens.weight" &&
        !direct->transpose);
  Expected<WeightMatch> folded = step->matchWeight(step->getParams()[1], *file);
  CHECK(folded && folded->tensor && folded->tensor->name == "model.embed_tokens.weight" &&
        folded->transpose);
  CHECK(writeSafetensors(path, {{"other", DType::F32, {4, 2}, values.data()}}));
  Expected<SafetensorsFile> other = SafetensorsFile::open(path);
  CHECK(other);
  if (other) {
    CHECK_EQ(step->matchWeight(step->getParams()[0], *other).getError(),
             path +
                 ": missing weight 'lm_head.weight' (or its tied name "
                 "'model.embed_tokens.weight') (parameter 'lm_head.weight', expected F32 [4, 2])");
    CHECK_EQ(step->matchWeight(step->getParams()[1], *other).getError(),
             path + ": missing weight 'val_3' (or 'lm_head.weight', which it was folded from; or "
                    "its tied name 'model.embed_tokens.weight') (parameter 'val_3', expected F32 "
                    "[2, 4])");
  }
  Expected<StepArtifact> bad =
      decode({{"meta", kBareMeta},
              {"params", R"([{"name":"n","dtype":"F32","shape":[3],"aliases":[]}])"}});
  CHECK(!bad &&
        bad.getError().find("'aliases' must be a non-empty list of names") != std::string::npos);
  std::filesystem::remove_all(dir);
}

int main() {
  testConsistency();
  testBuckets();
  testValueErrors();
  testImageChoice();
  testDecodeErrors();
  testWeightMatching();
  testSquareFoldedWeights();
  testNonzeroWeights();
  testTiedAliases();
  return finishChecks();
}
