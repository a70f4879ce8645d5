//===- CheckpointTest.cpp - Tests for checkpoints and adapters --*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/runtime/Checkpoint.h"

#include <cstdlib>
#include <cstring>

using namespace kiln::runtime;
using namespace kiln::artifact;

static std::string tempDir;

static Expected<StepArtifact> sampleArtifact() {
  ArtifactWriter writer;
  writer.add("meta", R"({"format":"kiln-step"})");
  writer.add("params",
             R"([{"name":"embed","dtype":"BF16","shape":[10,4],"trainable":false},)"
             R"({"name":"q.lora_A.weight","dtype":"F32","shape":[2,4],"trainable":true}])");
  Expected<Artifact> container = Artifact::parse(*writer.serialize(), "a.kiln");
  if (!container)
    return container.takeError();
  return StepArtifact::decode(std::move(*container), "a.kiln");
}

static void testCheckpoint() {
  Expected<StepArtifact> step = sampleArtifact();
  CHECK(step);
  if (!step)
    return;
  std::vector<float> lora(8, 0.25f), m(8, 0.5f), v(8, 0.75f);
  std::string path = tempDir + "/ckpt.safetensors";
  CHECK(writeCheckpoint(path, 7, {{"q.lora_A.weight", DType::F32, {2, 4}, lora.data()}},
                        {{"q.lora_A.weight/exp_avg", DType::F32, {2, 4}, m.data()},
                         {"q.lora_A.weight/exp_avg_sq", DType::F32, {2, 4}, v.data()}}));
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  CHECK(file && file->hasChecksums());
  if (!file)
    return;
  CHECK(file->find("params/q.lora_A.weight"));
  const TensorInfo *avg = file->find("state/q.lora_A.weight/exp_avg");
  CHECK(avg && !std::memcmp(file->data(*avg), m.data(), 32));
  Expected<int64_t> resumed = checkCheckpoint(*step, *file);
  CHECK(resumed && *resumed == 7);

  // Wrong shape, missing tensor, no step counter.
  std::vector<float> wide(12, 0.f);
  CHECK(writeCheckpoint(path, 1, {{"q.lora_A.weight", DType::F32, {3, 4}, wide.data()}}, {}));
  CHECK_EQ(checkCheckpoint(*step, *SafetensorsFile::open(path)).getError(),
           path + ": 'params/q.lora_A.weight' is F32 [3, 4], but the artifact "
                  "expects F32 [2, 4]");
  CHECK(writeCheckpoint(path, 1, {}, {}));
  CHECK_EQ(checkCheckpoint(*step, *SafetensorsFile::open(path)).getError(),
           path + ": checkpoint lacks 'params/q.lora_A.weight' (expected F32 "
                  "[2, 4])");
  CHECK(writeSafetensors(path, {}));
  CHECK_EQ(checkCheckpoint(*step, *SafetensorsFile::open(path)).getError(),
           path + ": not a kiln-run checkpoint (no integer metadata "
                  "'kiln.step')");
}

/// A step with AdamW state for its one trainable parameter.
static Expected<StepArtifact> adamArtifact() {
  ArtifactWriter writer;
  writer.add("meta", R"({"format":"kiln-step","targets":[],"symbols":["batch","seq"]})");
  writer.add("params", R"([{"name":"w","dtype":"F32","shape":[2,4],"trainable":true}])");
  writer.add("step", R"({"format":"kiln-step-program","version":1,"function":"main",
    "buffers":[{"dtype":"F32","shape":["2","4"]},{"dtype":"F32","shape":["2","4"]},
      {"dtype":"F32","shape":["2","4"]}],
    "args":[{"role":"param","name":"w","buffer":0},{"role":"state","name":"w/exp_avg","buffer":1},
      {"role":"state","name":"w/exp_avg_sq","buffer":2}],
    "results":[{"role":"param","name":"w","buffer":0},{"role":"state","name":"w/exp_avg","buffer":1},
      {"role":"state","name":"w/exp_avg_sq","buffer":2}],
    "ops":[]})");
  Expected<Artifact> container = Artifact::parse(*writer.serialize(), "adam.kiln");
  if (!container)
    return container.takeError();
  return StepArtifact::decode(std::move(*container), "adam.kiln");
}

static void testCheckpointState() {
  Expected<StepArtifact> step = adamArtifact();
  CHECK(step);
  if (!step)
    return;
  std::vector<float> w(8, 0.25f), m(8, 0.5f), v(8, 0.75f);
  std::string path = tempDir + "/adam.safetensors";
  TensorData param{"w", DType::F32, {2, 4}, w.data()};
  TensorData avg{"w/exp_avg", DType::F32, {2, 4}, m.data()};
  TensorData avgSq{"w/exp_avg_sq", DType::F32, {2, 4}, v.data()};
  CHECK(writeCheckpoint(path, 3, {param}, {avg, avgSq}));
  Expected<int64_t> resumed = checkCheckpoint(*step, *SafetensorsFile::open(path));
  CHECK(resumed && *resumed == 3);
  // One state tensor missing: refused, naming it.
  CHECK(writeCheckpoint(path, 3, {param}, {avg}));
  CHECK_EQ(checkCheckpoint(*step, *SafetensorsFile::open(path)).getError(),
           path + ": checkpoint lacks optimizer state 'state/w/exp_avg_sq' (expected F32 [2, 4]); "
                  "it was not saved for this step");
  TensorData wrong{"w/exp_avg_sq", DType::F32, {8}, v.data()};
  CHECK(writeCheckpoint(path, 3, {param}, {avg, wrong}));
  CHECK_EQ(checkCheckpoint(*step, *SafetensorsFile::open(path)).getError(),
           path + ": 'state/w/exp_avg_sq' is F32 [8], but the step expects F32 [2, 4]");
  TensorData extra{"w/momentum", DType::F32, {2, 4}, v.data()};
  CHECK(writeCheckpoint(path, 3, {param}, {avg, avgSq, extra}));
  CHECK_EQ(checkCheckpoint(*step, *SafetensorsFile::open(path)).getError(),
           path + ": checkpoint holds optimizer state 'state/w/momentum', which the step does not "
                  "have (saved with another optimizer or model?)");
}

static void testPeftAdapters() {
  CHECK_EQ(*peftAdapterName("model.layers.0.self_attn.q_proj.lora_A.weight"),
           "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  CHECK_EQ(peftAdapterName("model.layers.0.self_attn.q_proj.weight").getError(),
           "'model.layers.0.self_attn.q_proj.weight' is not a LoRA weight "
           "(<module>.lora_A.weight or <module>.lora_B.weight)");

  std::vector<float> a(8, 1.f), b(8, 2.f);
  std::string dir = tempDir + "/adapters";
  LoraConfig config;
  config.rank = 2;
  config.alpha = 4;
  config.targetModules = {"q_proj"};
  CHECK(writePeftAdapters(
      dir,
      {{"model.layers.0.self_attn.q_proj.lora_A.weight", DType::F32, {2, 4}, a.data()},
       {"model.layers.0.self_attn.q_proj.lora_B.weight", DType::F32, {4, 2}, b.data()}},
      config));
  Expected<SafetensorsFile> file = SafetensorsFile::open(dir + "/adapter_model.safetensors");
  CHECK(file && file->getTensors().size() == 2 &&
        file->find("base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"));
  Expected<MappedFile> configJson = MappedFile::open(dir + "/adapter_config.json");
  CHECK(configJson);
  if (configJson) {
    Expected<Json> json = Json::parse(configJson->view());
    CHECK(json && json->get("peft_type")->getString() == "LORA" &&
          json->get("r")->getInteger() == 2 && json->get("lora_alpha")->getNumber() == 4 &&
          json->get("target_modules")->getElements().size() == 1 &&
          json->get("base_model_name_or_path")->isNull());
  }
  // Writing again into the existing directory replaces the files.
  CHECK(writePeftAdapters(dir, {}, config));
  CHECK(SafetensorsFile::open(dir + "/adapter_model.safetensors")->getTensors().empty());
  CHECK_EQ(writePeftAdapters(dir, {{"x.weight", DType::F32, {1}, a.data()}}, config).getError(),
           dir + ": 'x.weight' is not a LoRA weight (<module>.lora_A.weight or "
                 "<module>.lora_B.weight)");
}

int main() {
  char dir[] = "/tmp/kiln-checkpoint-test-XXXXXX";
  if (!::mkdtemp(dir))
    return 1;
  tempDir = dir;
  testCheckpoint();
  testCheckpointState();
  testPeftAdapters();
  std::string cleanup = "rm -rf " + tempDir;
  if (std::system(cleanup.c_str()) != 0)
    std::fprintf(stderr, "could not remove %s\n", dir);
  return finishChecks();
}
