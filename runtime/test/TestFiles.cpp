//===- TestFiles.cpp - Writes and damages files for kiln-run tests -*- C++
//-*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// kiln-test-files: the fixtures of the kiln-run command tests, generated at
// test time so no binary file is committed, and the tools to damage them.
//
//   artifact OUT                 a sample .kiln (meta, guards, params, a
//   kernel) weights OUT [--wrong-shape|--missing]   weights matching the sample
//   artifact tokens OUT COUNT [--dtype uint32] [--max V] checkpoint OUT
//   --megabytes N --generation G [--pause-at-mb K --marker FILE]
//   verify-checkpoint FILE --generation G
//   resume OUT --step N          a checkpoint for the sample artifact
//   peft-adapters DIR            LoRA adapters of bench/configs.py's "tiny"
//                                config; check_peft.py loads them with PEFT
//   gemm-step OUT [--with-state] a GEMM-only step program (OUT.kiln, weights
//                                OUT.safetensors, input OUT.x.bin); with an
//                                optimizer-state argument w/momentum
//   gemm-resume OUT [--drop-state]  a checkpoint for it (without the state)
//   lora-step OUT                a GEMM-only LoRA step whose init program
//                                makes the adapters (OUT.kiln, OUT.x.bin)
//   launch-step OUT              step + init programs launching two kernels
//                                (one of them four times), for inspect
//   set-section FILE NAME TEXT   rewrite one section (checksums valid)
//   get-section FILE NAME        print one section
//   list-sections FILE           print the section names
//   poke FILE BYTE VALUE         set one byte
//   truncate FILE SIZE
//   flip FILE BYTE BIT
//   reseal FILE                  recompute every checksum (after flip)
//
//===----------------------------------------------------------------------===//

#include "AddScalarPtx.h"

#include "kiln/artifact/Artifact.h"
#include "kiln/artifact/Safetensors.h"
#include "kiln/runtime/Checkpoint.h"
#include "kiln/runtime/MemoryPlanSection.h"
#include "kiln/runtime/TuningDb.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <string>
#include <unistd.h>
#include <vector>

using namespace kiln::artifact;
using namespace kiln::runtime;

static int fail(const std::string &message) {
  std::fprintf(stderr, "kiln-test-files: %s\n", message.c_str());
  return 1;
}

/// \p cubinOnly: the kernel has just this cubin ("sm_80"), no PTX.
/// \p dataParallel: meta says kiln compile --data-parallel made it.
static int writeArtifact(const std::string &out, const std::string &cubinOnly, bool badMemoryPlan,
                         bool dataParallel = false) {
  ArtifactWriter writer;
  writer.add("meta", std::string(R"({"format":"kiln-step","creator":"kiln-test-files",)"
                                 R"("targets":["sm_90"],"symbols":["batch","seq"],)") +
                         (dataParallel ? R"("data_parallel":{"bucket_mb":25,"buckets":2},)" : "") +
                         R"("vocab_size":1000})");
  writer.add(
      "guards",
      R"([{"kind":"range","expr":"seq","min":8,"max":1024,"origin":"--dynamic seq=8..1024:8"},)"
      R"({"kind":"divisible","expr":"seq","divisor":8,"origin":"--dynamic seq=8..1024:8"},)"
      R"({"kind":"range","expr":"batch","min":1,"max":64,"origin":"--dynamic batch=1..64"}])");
  // No step program, so no arena buffers; --bad-memory-plan: a base that
  // is no earlier buffer.
  writer.add("memory_plan",
             std::string(R"({"format":"kiln-memory-plan","version":1,"alignment":256,)"
                         R"("planned_at":{"batch":64,"seq":1024},"arena_bytes":0,)"
                         R"("persistent_bytes":192,"workspace_bytes":33554432,"buffers":)") +
                 (badMemoryPlan ? R"([{"buffer":1,"size":"4","base":3}]})" : "[]}"));
  writer.add(
      "params",
      R"([{"name":"embed","source":"model.embed_tokens.weight","dtype":"F32","shape":[10,4],"trainable":false},)"
      R"({"name":"lora_A","dtype":"F32","shape":[2,4],"trainable":true}])");
  // Real PTX (it loads on a GPU), or just one fake cubin.
  if (cubinOnly.empty())
    writer.add("kernels/add/compute_75.ptx", kAddScalarPtx);
  else
    writer.add("kernels/add/" + cubinOnly + ".cubin", std::string("\x7f"
                                                                  "ELF fake cubin",
                                                                  15));
  writer.add("kernels/add/source", "extern \"C\" __global__ void add_scalar(float *x, float value, "
                                   "unsigned n) {\n  unsigned i = blockIdx.x * blockDim.x + "
                                   "threadIdx.x;\n  if (i < n) x[i] += value;\n}\n");
  // No step program: train validates, then stops (exit 5). An unknown
  // section is carried (and checksummed) all the same.
  writer.add("notes", "opaque payload of a later writer");
  Status status = writer.write(out);
  return status ? 0 : fail(status.getError());
}

/// A step program launching one kernel three times and another once, and an
/// init program launching the first again: kiln-run inspect lists each
/// kernel once with its launch count. For inspect only (no cubins).
static int writeLaunchStep(const std::string &out) {
  ArtifactWriter writer;
  writer.add("meta", R"({"format":"kiln-step","creator":"kiln-test-files",)"
                     R"("targets":[],"symbols":["n"]})");
  writer.add("guards", "[]");
  writer.add("params", R"([{"name":"w","source":"w","dtype":"F32","shape":[4],"trainable":true}])");
  writer.add("kernels/module0/source", "// two kernels");
  // Kiln's sm_90a attention module: inspect lists its entry points.
  writer.add("kernels/kiln_fa90/source",
             "extern \"C\" __global__ void __launch_bounds__(384, 1)\n"
             "kiln_fa90_bwd_bf16_d64(const float *q) {}\n"
             "extern \"C\" __global__ void kiln_fa90_bwd_finish_bf16(float *x) {}\n");
  auto launch = [](const char *kernel) {
    return std::string(R"({"op":"launch","kernel":")") + kernel +
           R"(","module":"module0","args":[0,1],"symbols":["n"],"items":"n","per":256,)"
           R"("block":256,"shared":"0"})";
  };
  std::string buffers =
      R"("buffers":[{"dtype":"F32","shape":["n"]},{"dtype":"F32","shape":["n"]}],)";
  writer.add("step", R"({"format":"kiln-step-program","version":1,"function":"main",)" + buffers +
                         R"("args":[{"role":"input","name":"x","buffer":0}],)"
                         R"("results":[{"role":"loss","name":"loss","buffer":1}],"ops":[)" +
                         R"({"op":"alloc","result":1},)" + launch("main_k0_silu") + "," +
                         launch("main_k1_exp") + "," + launch("main_k0_silu") + "," +
                         launch("main_k0_silu") + "]}");
  writer.add("init",
             std::string(R"({"format":"kiln-step-program","version":1,"function":"kiln_init",)"
                         R"("buffers":[{"dtype":"I64","shape":[]},{"dtype":"F32","shape":["4"]}],)"
                         R"("args":[{"role":"rng_seed","buffer":0}],)"
                         R"("results":[{"role":"param","name":"w","buffer":1}],"ops":[)") +
                 R"({"op":"alloc","result":1},)" + launch("main_k0_silu") + "]}");
  Status status = writer.write(out);
  return status ? 0 : fail(status.getError());
}

static int writeWeights(const std::string &out, const std::string &variant) {
  std::vector<float> embed(40, 0.5f), extra(3, 1.0f);
  std::vector<TensorData> tensors;
  if (variant == "--wrong-shape")
    tensors.push_back({"model.embed_tokens.weight", DType::F32, {4, 10}, embed.data()});
  else if (variant != "--missing")
    tensors.push_back({"model.embed_tokens.weight", DType::F32, {10, 4}, embed.data()});
  tensors.push_back({"unused", DType::F32, {3}, extra.data()});
  Status status = writeSafetensors(out, tensors);
  return status ? 0 : fail(status.getError());
}

static int writeTokens(const std::string &out, long count, bool wide, long maxToken) {
  std::string bytes;
  for (long i = 0; i < count; ++i) {
    uint32_t token = static_cast<uint32_t>((i * 7919) % (maxToken + 1));
    for (int b = 0; b < (wide ? 4 : 2); ++b)
      bytes += static_cast<char>(token >> (8 * b));
  }
  Status status = writeFileAtomically(out, [&](FileWriter &writer) { return writer.write(bytes); });
  return status ? 0 : fail(status.getError());
}

/// Tensor i of generation g holds the int32 values g * 1000003 + i + k.
static std::vector<int32_t> pattern(int generation, int index, size_t count) {
  std::vector<int32_t> values(count);
  for (size_t k = 0; k < count; ++k)
    values[k] = static_cast<int32_t>(generation * 1000003 + index + k);
  return values;
}

constexpr size_t kTensorMegabytes = 4;
constexpr size_t kTensorElements = kTensorMegabytes * (1u << 20) / 4;

static int writeCheckpoint(const std::string &out, long megabytes, int generation,
                           long pauseAtMegabytes, const std::string &marker) {
  std::vector<std::vector<int32_t>> storage;
  std::vector<TensorData> tensors;
  for (long i = 0; i * static_cast<long>(kTensorMegabytes) < megabytes; ++i) {
    storage.push_back(pattern(generation, static_cast<int>(i), kTensorElements));
    tensors.push_back({"params/t" + std::to_string(i),
                       DType::I32,
                       {static_cast<int64_t>(kTensorElements)},
                       storage.back().data()});
  }
  bool paused = false;
  WriteProgress progress = [&](uint64_t written, uint64_t) {
    if (paused || pauseAtMegabytes < 0 || written < static_cast<uint64_t>(pauseAtMegabytes) << 20)
      return;
    // Mid-write: tell the test, then wait to be killed.
    paused = true;
    int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0)
      ::close(fd);
    ::sleep(60);
  };
  Status status =
      writeSafetensors(out, tensors, {{"kiln.step", std::to_string(generation)}}, progress);
  return status ? 0 : fail(status.getError());
}

static int verifyCheckpoint(const std::string &path, int generation) {
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  if (!file)
    return fail(file.getError());
  if (!file->hasChecksums())
    return fail(path + ": no checksums");
  if (file->getMetadata().at("kiln.step") != std::to_string(generation))
    return fail(path + ": generation " + file->getMetadata().at("kiln.step") + ", expected " +
                std::to_string(generation));
  for (size_t i = 0; i < file->getTensors().size(); ++i) {
    const TensorInfo *tensor = file->find("params/t" + std::to_string(i));
    if (!tensor)
      return fail(path + ": missing params/t" + std::to_string(i));
    std::vector<int32_t> expected = pattern(generation, static_cast<int>(i), kTensorElements);
    if (tensor->getByteSize() != expected.size() * 4 ||
        std::memcmp(file->data(*tensor), expected.data(), expected.size() * 4))
      return fail(path + ": params/t" + std::to_string(i) + " differs");
  }
  std::printf("%s: generation %d, %zu tensors intact\n", path.c_str(), generation,
              file->getTensors().size());
  return 0;
}

static int writeResume(const std::string &out, long step) {
  std::vector<float> lora(8, 0.125f), m(8, 0.f), v(8, 0.f);
  Status status =
      kiln::runtime::writeCheckpoint(out, step, {{"lora_A", DType::F32, {2, 4}, lora.data()}},
                                     {{"lora_A/exp_avg", DType::F32, {2, 4}, m.data()},
                                      {"lora_A/exp_avg_sq", DType::F32, {2, 4}, v.data()}});
  return status ? 0 : fail(status.getError());
}

/// A checkpoint for `gemm-step --with-state` after 2 steps; --drop-state
/// leaves its optimizer state out.
static int writeGemmResume(const std::string &out, bool dropState) {
  std::vector<float> w(6, 0.5f), momentum(6, 0.f);
  std::vector<TensorData> state;
  if (!dropState)
    state.push_back({"w/momentum", DType::F32, {3, 2}, momentum.data()});
  Status status =
      kiln::runtime::writeCheckpoint(out, 2, {{"w", DType::F32, {3, 2}, w.data()}}, state);
  return status ? 0 : fail(status.getError());
}

/// The "tiny" config of bench/configs.py: 2 layers, d=64, 4 heads of 16 with
/// 2 kv heads, ffn 128, r=4, alpha=8. Tensor k (in name order) holds
/// k + i/1024 at element i, which check_peft.py recomputes.
static int writePeftAdapters(const std::string &dir) {
  struct Linear {
    const char *module;
    int in, out;
  } linears[] = {{"self_attn.q_proj", 64, 64}, {"self_attn.k_proj", 64, 32},
                 {"self_attn.v_proj", 64, 32}, {"self_attn.o_proj", 64, 64},
                 {"mlp.gate_proj", 64, 128},   {"mlp.up_proj", 64, 128},
                 {"mlp.down_proj", 128, 64}};
  const int rank = 4;
  std::vector<TensorData> tensors;
  for (int layer = 0; layer < 2; ++layer)
    for (const Linear &linear : linears) {
      std::string prefix = "model.layers." + std::to_string(layer) + "." + linear.module;
      tensors.push_back({prefix + ".lora_A.weight", DType::F32, {rank, linear.in}, nullptr});
      tensors.push_back({prefix + ".lora_B.weight", DType::F32, {linear.out, rank}, nullptr});
    }
  std::sort(tensors.begin(), tensors.end(),
            [](const TensorData &a, const TensorData &b) { return a.name < b.name; });
  std::vector<std::vector<float>> storage;
  for (size_t k = 0; k < tensors.size(); ++k) {
    std::vector<float> values(tensors[k].shape[0] * tensors[k].shape[1]);
    for (size_t i = 0; i < values.size(); ++i)
      values[i] = static_cast<float>(k) + static_cast<float>(i) / 1024.0f;
    storage.push_back(std::move(values));
    tensors[k].data = storage.back().data();
  }
  kiln::runtime::LoraConfig config;
  config.rank = rank;
  config.alpha = 8;
  config.targetModules = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                          "gate_proj", "up_proj", "down_proj"};
  Status status = kiln::runtime::writePeftAdapters(dir, tensors, config);
  return status ? 0 : fail(status.getError());
}

/// A step program of GEMMs only (no kernels, so no compiler needed): x
/// [batch, seq] and w [seq, 2]; c = x w, d = (x w)^T through trans_a/trans_b,
/// loss = d[0, 0] (a view), new w = x^T c. With x = [[1,2,3],[4,5,6]] and
/// w = [[1,0],[0,1],[1,1]]: step 1 loss 4, step 2 loss 376. Writes OUT.kiln,
/// OUT.safetensors (w) and OUT.x.bin.
/// \p dataParallel: as kiln compile --data-parallel makes it, the new w
/// and the loss are averaged over the ranks (all_reduce, in place) before
/// the step ends: with every rank fed the same x, the losses stay 4, 376.
static int writeGemmStep(const std::string &out, bool withState, bool dataParallel = false) {
  ArtifactWriter writer;
  writer.add("meta",
             std::string(R"({"format":"kiln-step","creator":"kiln-test-files",)"
                         R"("targets":[],"symbols":["batch","seq"])") +
                 (dataParallel ? R"(,"data_parallel":{"bucket_mb":25,"buckets":2}})" : "}"));
  writer.add("guards", "[]");
  writer.add("params",
             R"([{"name":"w","source":"w","dtype":"F32","shape":[3,2],"trainable":true}])");
  // --with-state: one optimizer-state tensor, passed through unchanged.
  std::string stateBuffer = withState ? R"(,{"dtype":"F32","shape":["3","2"]})" : "";
  std::string stateBinding = withState ? R"(,{"role":"state","name":"w/momentum","buffer":6})" : "";
  std::string step =
      R"({"format":"kiln-step-program","version":1,"function":"main","default_lr":0.1,
    "buffers":[{"dtype":"F32","shape":["batch","seq"]},{"dtype":"F32","shape":["seq","2"]},
      {"dtype":"F32","shape":["batch","2"]},{"dtype":"F32","shape":["2","batch"]},
      {"dtype":"F32","shape":[]},{"dtype":"F32","shape":["seq","2"]})" +
      stateBuffer + R"(],
    "args":[{"role":"input","name":"x","buffer":0},{"role":"param","name":"w","buffer":1})" +
      stateBinding + R"(],
    "results":[{"role":"loss","name":"loss","buffer":4},{"role":"param","name":"w","buffer":5})" +
      stateBinding + R"(],
    "ops":[{"op":"alloc","result":2},
      {"op":"gemm","a":0,"b":1,"c":2,"trans_a":false,"trans_b":false,"m":"batch","n":"2","k":"seq",
       "batch":"1","strides":["0","0","0"],"epilogue":"none","compute":"F32"},
      {"op":"alloc","result":3},
      {"op":"gemm","a":1,"b":0,"c":3,"trans_a":true,"trans_b":true,"m":"2","n":"batch","k":"seq",
       "batch":"1","strides":["0","0","0"],"epilogue":"none","compute":"F32"},
      {"op":"view","source":3,"result":4},
      {"op":"alloc","result":5},
      {"op":"gemm","a":0,"b":2,"c":5,"trans_a":true,"trans_b":false,"m":"seq","n":"2","k":"batch",
       "batch":"1","strides":["0","0","0"],"epilogue":"none","compute":"F32"})" +
      std::string(dataParallel ? R"(,
      {"op":"all_reduce","bucket":0,"reduce":"avg","ins":[5],"outs":[5]},
      {"op":"all_reduce","bucket":1,"reduce":"avg","ins":[4],"outs":[4],"loss":true},
      {"op":"all_reduce_wait","bucket":0,"buffers":[5]},
      {"op":"all_reduce_wait","bucket":1,"buffers":[4]})"
                               : "") +
      "]}";
  writer.add("step", step);
  // The compiler's plan at the sizes the test runs (the executor uses it).
  Expected<StepProgram> program = StepProgram::decode(step, "step");
  Expected<StepMemoryPlan> plan =
      program ? planStepMemory(*program, {{"batch", 2}, {"seq", 3}}) : program.takeError();
  if (!plan)
    return fail(plan.getError());
  writer.add("memory_plan", encodeMemoryPlan(*plan));
  if (Status status = writer.write(out + ".kiln"); !status)
    return fail(status.getError());
  std::vector<float> w = {1, 0, 0, 1, 1, 1}, x = {1, 2, 3, 4, 5, 6};
  if (Status status = writeSafetensors(out + ".safetensors", {{"w", DType::F32, {3, 2}, w.data()}});
      !status)
    return fail(status.getError());
  Status status = writeFileAtomically(out + ".x.bin", [&](FileWriter &writer) {
    return writer.write(std::string(reinterpret_cast<const char *>(x.data()), x.size() * 4));
  });
  return status ? 0 : fail(status.getError());
}

/// A LoRA step of GEMMs only: the init program makes the adapters
/// m.lora_A.weight = [[0.5, -0.25, 0.125]] (a constant) and m.lora_B.weight
/// = zeros [2, 1] (a fill); the step's loss is (x A^T)[0, 0] and it returns
/// the adapters unchanged. With x = [[1,2,3],[4,5,6]] (--batch 2 --seq 3)
/// every step's loss is 0.375. Writes OUT.kiln and OUT.x.bin.
static int writeLoraStep(const std::string &out) {
  ArtifactWriter writer;
  writer.add("meta", R"({"format":"kiln-step","creator":"kiln-test-files",)"
                     R"("targets":[],"symbols":["batch","seq"],)"
                     R"("lora":{"r":1,"alpha":2,"dropout":0}})");
  writer.add("guards", "[]");
  writer.add("params",
             R"([{"name":"m.lora_A.weight","source":"m.lora_A.weight","dtype":"F32","shape":[1,3],)"
             R"("trainable":true,"init":true},)"
             R"({"name":"m.lora_B.weight","source":"m.lora_B.weight","dtype":"F32","shape":[2,1],)"
             R"("trainable":true,"init":true}])");
  // 0.5, -0.25, 0.125 as little-endian fp32.
  writer.add("init", R"({"format":"kiln-step-program","version":1,"function":"kiln_init",
    "buffers":[{"dtype":"I64","shape":[]},{"dtype":"F32","shape":["1","3"]},
      {"dtype":"F32","shape":["2","1"]}],
    "args":[{"role":"rng_seed","buffer":0}],
    "results":[{"role":"param","name":"m.lora_A.weight","buffer":1},
      {"role":"param","name":"m.lora_B.weight","buffer":2}],
    "ops":[{"op":"constant","result":1,"bytes":"0000003f000080be0000003e"},
      {"op":"alloc","result":2},{"op":"fill","target":2,"value":0}]})");
  writer.add("step",
             R"({"format":"kiln-step-program","version":1,"function":"main","default_lr":0.1,
    "buffers":[{"dtype":"F32","shape":["batch","seq"]},{"dtype":"F32","shape":["1","3"]},
      {"dtype":"F32","shape":["2","1"]},{"dtype":"F32","shape":["batch","1"]},
      {"dtype":"F32","shape":[]}],
    "args":[{"role":"input","name":"x","buffer":0},
      {"role":"param","name":"m.lora_A.weight","buffer":1},
      {"role":"param","name":"m.lora_B.weight","buffer":2}],
    "results":[{"role":"loss","name":"loss","buffer":4},
      {"role":"param","name":"m.lora_A.weight","buffer":1},
      {"role":"param","name":"m.lora_B.weight","buffer":2}],
    "ops":[{"op":"alloc","result":3},
      {"op":"gemm","a":0,"b":1,"c":3,"trans_a":false,"trans_b":true,"m":"batch","n":"1","k":"seq",
       "batch":"1","strides":["0","0","0"],"epilogue":"none","compute":"F32"},
      {"op":"view","source":3,"result":4}]})");
  if (Status status = writer.write(out + ".kiln"); !status)
    return fail(status.getError());
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  Status status = writeFileAtomically(out + ".x.bin", [&](FileWriter &writer) {
    return writer.write(std::string(reinterpret_cast<const char *>(x.data()), x.size() * 4));
  });
  return status ? 0 : fail(status.getError());
}

/// Rewrites the artifact \p path with section \p name holding \p contents
/// (replaced in place, or appended): a damaged section with valid checksums.
static int setSection(const std::string &path, const std::string &name,
                      const std::string &contents) {
  Expected<Artifact> artifact = Artifact::open(path);
  if (!artifact)
    return fail(artifact.getError());
  ArtifactWriter writer;
  bool replaced = false;
  for (const Section &section : artifact->getSections()) {
    bool match = section.name == name;
    writer.add(section.name, match ? contents : std::string(artifact->contents(section)));
    replaced = replaced || match;
  }
  if (!replaced)
    writer.add(name, contents);
  Status status = writer.write(path);
  return status ? 0 : fail(status.getError());
}

/// Recomputes every checksum of the artifact \p path (after flip).
static int reseal(const std::string &path) {
  Expected<MappedFile> file = MappedFile::open(path);
  if (!file)
    return fail(file.getError());
  std::string bytes(file->view());
  resealArtifact(bytes);
  Status status =
      writeFileAtomically(path, [&](FileWriter &writer) { return writer.write(bytes); });
  return status ? 0 : fail(status.getError());
}

// A tuning database of \p entries GEMM entries whose choices all equal
// \p generation (kiln-run.kill-during-tune-db).
static TuningDb generationDb(long entries, int generation) {
  TuningDb db;
  TuningKey key;
  key.gpu = "test GPU";
  key.cudnn = "none";
  db.devices.push_back({key, {}});
  for (long i = 0; i < entries; ++i) {
    TuningEntry e;
    e.kind = "gemm";
    e.shape = "m=" + std::to_string(i) + ",n=8,k=8,batch=1";
    e.hash = hashSignature(e.shape);
    e.label = "gemm " + std::to_string(i);
    e.candidates = 8;
    e.choice = generation % 8;
    e.algo = std::string(128, static_cast<char>('0' + generation % 8));
    db.devices[0].entries.push_back(std::move(e)); // distinct: no search
  }
  return db;
}

static int writeTuningDb(const std::string &path, long entries, int generation,
                         long pauseAtKilobytes, const std::string &marker) {
  bool paused = false;
  Status s = generationDb(entries, generation).write(path, [&](uint64_t written) {
    if (paused || pauseAtKilobytes < 0 || written < static_cast<uint64_t>(pauseAtKilobytes) << 10)
      return;
    paused = true;
    int fd = ::open(marker.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0)
      ::close(fd);
    ::sleep(60);
  });
  return s ? 0 : fail(s.getError());
}

static int verifyTuningDb(const std::string &path, long entries, int generation) {
  Expected<TuningDb> db = TuningDb::load(path);
  if (!db)
    return fail(db.getError());
  if (db->serialize() != generationDb(entries, generation).serialize())
    return fail(path + ": not generation " + std::to_string(generation));
  return 0;
}

int main(int argc, char **argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto flag = [&](const std::string &name, const std::string &fallback) {
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == name)
        return args[i + 1];
    return fallback;
  };
  if (args.size() >= 2 && args[0] == "artifact")
    return writeArtifact(args[1], flag("--cubin-only", ""),
                         std::find(args.begin(), args.end(), "--bad-memory-plan") != args.end(),
                         std::find(args.begin(), args.end(), "--data-parallel") != args.end());
  if (args.size() == 2 && args[0] == "launch-step")
    return writeLaunchStep(args[1]);
  if (args.size() >= 2 && args[0] == "gemm-step")
    return writeGemmStep(args[1], std::find(args.begin(), args.end(), "--with-state") != args.end(),
                         std::find(args.begin(), args.end(), "--data-parallel") != args.end());
  if (args.size() >= 2 && args[0] == "gemm-resume")
    return writeGemmResume(args[1],
                           std::find(args.begin(), args.end(), "--drop-state") != args.end());
  if (args.size() == 2 && args[0] == "lora-step")
    return writeLoraStep(args[1]);
  if (args.size() >= 2 && args[0] == "weights")
    return writeWeights(args[1], args.size() > 2 ? args[2] : "");
  if (args.size() >= 3 && args[0] == "tokens")
    return writeTokens(args[1], std::atol(args[2].c_str()), flag("--dtype", "uint16") == "uint32",
                       std::atol(flag("--max", "999").c_str()));
  if (args.size() >= 2 && args[0] == "checkpoint")
    return writeCheckpoint(args[1], std::atol(flag("--megabytes", "8").c_str()),
                           std::atoi(flag("--generation", "1").c_str()),
                           std::atol(flag("--pause-at-mb", "-1").c_str()), flag("--marker", ""));
  if (args.size() >= 2 && args[0] == "resume")
    return writeResume(args[1], std::atol(flag("--step", "7").c_str()));
  if (args.size() == 2 && args[0] == "peft-adapters")
    return writePeftAdapters(args[1]);
  if (args.size() >= 2 && args[0] == "verify-checkpoint")
    return verifyCheckpoint(args[1], std::atoi(flag("--generation", "1").c_str()));
  if (args.size() >= 2 && args[0] == "tuning-db")
    return writeTuningDb(args[1], std::atol(flag("--entries", "100").c_str()),
                         std::atoi(flag("--generation", "1").c_str()),
                         std::atol(flag("--pause-at-kb", "-1").c_str()), flag("--marker", ""));
  if (args.size() >= 2 && args[0] == "verify-tuning-db")
    return verifyTuningDb(args[1], std::atol(flag("--entries", "100").c_str()),
                          std::atoi(flag("--generation", "1").c_str()));
  if (args.size() == 4 && args[0] == "set-section")
    return setSection(args[1], args[2], args[3]);
  if (args.size() == 2 && args[0] == "reseal")
    return reseal(args[1]);
  if (args.size() == 2 && args[0] == "list-sections") {
    Expected<Artifact> artifact = Artifact::open(args[1]);
    if (!artifact)
      return fail(artifact.getError());
    for (const Section &section : artifact->getSections())
      std::printf("%s\n", section.name.c_str());
    return 0;
  }
  if (args.size() == 3 && args[0] == "get-section") {
    Expected<Artifact> artifact = Artifact::open(args[1]);
    if (!artifact || !artifact->find(args[2]))
      return fail(artifact ? "no section '" + args[2] + "'" : artifact.getError());
    std::string_view text = artifact->contents(args[2]);
    std::fwrite(text.data(), 1, text.size(), stdout);
    return 0;
  }
  if (args.size() == 4 && args[0] == "poke") {
    int fd = ::open(args[1].c_str(), O_RDWR);
    unsigned char byte = static_cast<unsigned char>(std::atoi(args[3].c_str()));
    bool ok = fd >= 0 && ::pwrite(fd, &byte, 1, std::atol(args[2].c_str())) == 1;
    if (fd >= 0)
      ::close(fd);
    return ok ? 0 : fail("cannot write " + args[1]);
  }
  if (args.size() == 3 && args[0] == "truncate")
    return ::truncate(args[1].c_str(), std::atol(args[2].c_str())) == 0
               ? 0
               : fail("cannot truncate " + args[1]);
  if (args.size() == 4 && args[0] == "flip") {
    int fd = ::open(args[1].c_str(), O_RDWR);
    long at = std::atol(args[2].c_str());
    unsigned char byte;
    if (fd < 0 || ::pread(fd, &byte, 1, at) != 1)
      return fail("cannot read byte " + args[2] + " of " + args[1]);
    byte ^= static_cast<unsigned char>(1u << std::atoi(args[3].c_str()));
    bool ok = ::pwrite(fd, &byte, 1, at) == 1;
    ::close(fd);
    return ok ? 0 : fail("cannot write " + args[1]);
  }
  return fail("bad arguments (see TestFiles.cpp)");
}
