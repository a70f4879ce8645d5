//===- Checkpoint.cpp - Training checkpoints and PEFT adapters --*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/Checkpoint.h"

#include <cerrno>
#include <cstdlib>
#include <map>
#include <set>
#include <sys/stat.h>

using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {
constexpr const char *kStepKey = "kiln.step";
constexpr const char *kPeftWeightsFile = "adapter_model.safetensors";
constexpr const char *kPeftConfigFile = "adapter_config.json";

bool endsWith(const std::string &text, const std::string &suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}
} // namespace

Status kiln::runtime::writeCheckpoint(const std::string &path, int64_t step,
                                      const std::vector<TensorData> &params,
                                      const std::vector<TensorData> &state,
                                      const WriteProgress &progress, const LoopState &loop) {
  std::vector<TensorData> tensors;
  for (TensorData tensor : params) {
    tensor.name = "params/" + tensor.name;
    tensors.push_back(std::move(tensor));
  }
  for (TensorData tensor : state) {
    tensor.name = "state/" + tensor.name;
    tensors.push_back(std::move(tensor));
  }
  std::map<std::string, std::string> metadata = {{kStepKey, std::to_string(step)}};
  if (loop.dataCursor)
    metadata["kiln.data_cursor"] = std::to_string(*loop.dataCursor);
  if (loop.gradAccum)
    metadata["kiln.grad_accum"] = std::to_string(*loop.gradAccum);
  return writeSafetensors(path, tensors, metadata, progress);
}

Expected<LoopState> kiln::runtime::readLoopState(const SafetensorsFile &checkpoint) {
  LoopState loop;
  for (const char *key : {"kiln.data_cursor", "kiln.grad_accum"}) {
    auto it = checkpoint.getMetadata().find(key);
    if (it == checkpoint.getMetadata().end())
      continue;
    char *end = nullptr;
    errno = 0;
    long long value = std::strtoll(it->second.c_str(), &end, 10);
    if (it->second.empty() || *end || errno || value < 0 ||
        (std::string(key) == "kiln.grad_accum" && value < 1))
      return Error{
          checkpoint.getPath() + ": metadata '" + key + "' is '" + it->second + "', not a " +
          (std::string(key) == "kiln.grad_accum" ? "positive" : "non-negative") + " integer"};
    if (std::string(key) == "kiln.data_cursor")
      loop.dataCursor = static_cast<uint64_t>(value);
    else
      loop.gradAccum = value;
  }
  return loop;
}

Expected<int64_t> kiln::runtime::checkCheckpoint(const StepArtifact &artifact,
                                                 const SafetensorsFile &checkpoint) {
  const std::string &path = checkpoint.getPath();
  auto it = checkpoint.getMetadata().find(kStepKey);
  char *end = nullptr;
  errno = 0;
  long long step =
      it == checkpoint.getMetadata().end() ? -1 : std::strtoll(it->second.c_str(), &end, 10);
  if (step < 0 || errno || it->second.empty() || *end)
    return Error{path + ": not a kiln-run checkpoint (no integer metadata '" + kStepKey + "')"};
  for (const ParamSpec &param : artifact.getParams()) {
    if (!param.trainable)
      continue;
    std::string name = "params/" + param.name;
    const TensorInfo *found = checkpoint.find(name);
    if (!found)
      return Error{path + ": checkpoint lacks '" + name + "' (expected " +
                   describeTensorType(param.dtype, param.shape) + ")"};
    if (found->dtype != param.dtype || found->shape != param.shape)
      return Error{path + ": '" + name + "' is " + describeTensorType(found->dtype, found->shape) +
                   ", but the artifact expects " + describeTensorType(param.dtype, param.shape)};
  }
  // The optimizer state the step reads, every tensor of it: a missing one
  // would resume from zeros, silently not the state that was saved.
  const StepProgram *program = artifact.getProgram("step");
  if (!program)
    return static_cast<int64_t>(step);
  std::set<std::string> expected;
  for (const ProgramBinding &arg : program->args) {
    if (arg.role != "state" || !expected.insert("state/" + arg.name).second)
      continue;
    std::string name = "state/" + arg.name;
    const ProgramBuffer &buffer = program->buffers[arg.buffer];
    // State shapes are static; a symbolic one is checked by element count
    // when the executor loads it.
    std::vector<int64_t> shape;
    bool isStatic = true;
    for (const SizeExpr &dim : buffer.shape) {
      Expected<int64_t> value = dim.evaluate({});
      if (!value) {
        isStatic = false;
        break;
      }
      shape.push_back(*value);
    }
    std::string type =
        isStatic ? describeTensorType(buffer.dtype, shape) : std::string(dtypeName(buffer.dtype));
    const TensorInfo *found = checkpoint.find(name);
    if (!found)
      return Error{path + ": checkpoint lacks optimizer state '" + name + "' (expected " + type +
                   "); it was not saved for this step"};
    if (found->dtype != buffer.dtype || (isStatic && found->shape != shape))
      return Error{path + ": '" + name + "' is " + describeTensorType(found->dtype, found->shape) +
                   ", but the step expects " + type};
  }
  for (const TensorInfo &tensor : checkpoint.getTensors())
    if (tensor.name.compare(0, 6, "state/") == 0 && !expected.count(tensor.name))
      return Error{path + ": checkpoint holds optimizer state '" + tensor.name +
                   "', which the step does not have (saved with another optimizer or model?)"};
  return static_cast<int64_t>(step);
}

Expected<std::string> kiln::runtime::peftAdapterName(const std::string &name) {
  if (!endsWith(name, ".lora_A.weight") && !endsWith(name, ".lora_B.weight"))
    return Error{"'" + name +
                 "' is not a LoRA weight (<module>.lora_A.weight or "
                 "<module>.lora_B.weight)"};
  // PEFT wraps the model twice: PeftModel.base_model (the LoraModel) and
  // LoraModel.model (the original module tree).
  return "base_model.model." + name;
}

Status kiln::runtime::checkPeftAdapterDir(const std::string &dir) {
  struct stat info;
  if (::stat(dir.c_str(), &info) != 0) {
    if (errno != ENOENT)
      return errnoError(dir);
    // To be created: where a file of that name could be.
    return checkReplaceableFile(dir);
  }
  if (!S_ISDIR(info.st_mode))
    return Error{dir + ": exists and is not a directory (PEFT adapters are a directory)"};
  for (const char *file : {kPeftWeightsFile, kPeftConfigFile})
    if (Status status = checkReplaceableFile(dir + "/" + file); !status)
      return status;
  return Status::success();
}

Status kiln::runtime::writePeftAdapters(const std::string &dir,
                                        const std::vector<TensorData> &adapters,
                                        const LoraConfig &config) {
  if (Status status = checkPeftAdapterDir(dir); !status)
    return status;
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST)
    return errnoError(dir, "cannot create directory");
  std::vector<TensorData> renamed;
  for (TensorData tensor : adapters) {
    Expected<std::string> name = peftAdapterName(tensor.name);
    if (!name)
      return Error{dir + ": " + name.getError()};
    tensor.name = *name;
    renamed.push_back(std::move(tensor));
  }
  if (Status status = writeSafetensors(dir + "/" + kPeftWeightsFile, renamed); !status)
    return status;

  Json json = Json::object();
  json.set("peft_type", Json::string("LORA"));
  json.set("task_type", Json::string("CAUSAL_LM"));
  json.set("base_model_name_or_path",
           config.baseModel.empty() ? Json() : Json::string(config.baseModel));
  json.set("r", Json::integer(config.rank));
  json.set("lora_alpha", Json::number(config.alpha));
  json.set("lora_dropout", Json::number(0.0));
  json.set("bias", Json::string("none"));
  json.set("fan_in_fan_out", Json::boolean(false));
  json.set("inference_mode", Json::boolean(true));
  Json targets = Json::array();
  for (const std::string &target : config.targetModules)
    targets.push(Json::string(target));
  json.set("target_modules", std::move(targets));
  std::string text = json.print(/*pretty=*/true) + "\n";
  return writeFileAtomically(dir + "/" + kPeftConfigFile,
                             [&](FileWriter &writer) { return writer.write(text); });
}
