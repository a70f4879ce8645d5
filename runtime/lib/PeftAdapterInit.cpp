//===- PeftAdapterInit.cpp - Start LoRA adapters from PEFT's files -------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/PeftAdapterInit.h"

#include "kiln/artifact/FileIO.h"
#include "kiln/artifact/Json.h"
#include "kiln/runtime/Checkpoint.h"

#include <cstdio>
#include <map>
#include <set>

using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {
bool isLoraParam(const ParamSpec &param) {
  return param.trainable && static_cast<bool>(peftAdapterName(param.name));
}

bool isFloatDType(DType dtype) {
  return dtype == DType::F64 || dtype == DType::F32 || dtype == DType::BF16 || dtype == DType::F16;
}

std::string formatNumber(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%g", value);
  return text;
}

/// adapter_config.json against meta "lora": a different r or alpha would
/// train other adapters than PEFT's (and scale them differently).
Status checkConfig(const std::string &path, const Json &lora) {
  Expected<MappedFile> file = MappedFile::open(path);
  if (!file)
    return Error{file.getError()};
  Expected<Json> config = Json::parse(file->view());
  if (!config)
    return Error{path + ": " + config.getError()};
  if (!config->isObject())
    return Error{path + ": expected a JSON object (PEFT's adapter_config.json)"};
  if (const Json *type = config->get("peft_type");
      type && !(type->isString() && type->getString() == "LORA"))
    return Error{path + ": peft_type is not \"LORA\"; kiln-run starts LoRA adapters only"};
  for (const char *flag : {"use_rslora", "use_dora"})
    if (const Json *on = config->get(flag); on && on->getBool())
      return Error{path + ": " + flag +
                   " is true; the artifact's LoRA is plain LoRA (alpha / r scaling)"};
  const Json *rank = config->get("r");
  const Json *alpha = config->get("lora_alpha");
  if (!rank || !rank->isInteger() || !alpha || !alpha->isNumber())
    return Error{path + ": needs an integer \"r\" and a number \"lora_alpha\""};
  int64_t wantRank = lora.get("r") ? lora.get("r")->getInteger() : 0;
  double wantAlpha = lora.get("alpha") ? lora.get("alpha")->getNumber() : 0;
  if (rank->getInteger() != wantRank || alpha->getNumber() != wantAlpha)
    return Error{path + ": r " + std::to_string(rank->getInteger()) + ", lora_alpha " +
                 formatNumber(alpha->getNumber()) + "; the artifact was compiled with r=" +
                 std::to_string(wantRank) + ",alpha=" + formatNumber(wantAlpha)};
  return Status::success();
}
} // namespace

Expected<PeftAdapterInit> kiln::runtime::openPeftAdapters(const StepArtifact &artifact,
                                                          const std::string &dir) {
  const Json *lora = artifact.getMeta().get("lora");
  if (!lora)
    return Error{
        "--adapters: the artifact has no LoRA adapters (compile with kiln compile --lora)"};
  if (Status s = checkConfig(dir + "/adapter_config.json", *lora); !s)
    return s.takeError();
  Expected<SafetensorsFile> file = SafetensorsFile::open(dir + "/adapter_model.safetensors");
  if (!file)
    return file.takeError();
  PeftAdapterInit result{std::move(*file), {}};
  const std::string &path = result.file.getPath();
  std::set<std::string> expected;
  for (const ParamSpec &param : artifact.getParams()) {
    if (!isLoraParam(param))
      continue;
    std::string name = *peftAdapterName(param.name);
    expected.insert(name);
    const TensorInfo *info = result.file.find(name);
    if (!info)
      return Error{path + ": lacks '" + name + "' (" +
                   describeTensorType(param.dtype, param.shape) + "), the step's adapter '" +
                   param.name + "'"};
    if (!isFloatDType(info->dtype) || info->shape != param.shape)
      return Error{path + ": '" + name + "' is " + describeTensorType(info->dtype, info->shape) +
                   ", but the step's adapter is " + describeTensorType(param.dtype, param.shape)};
    result.tensors.push_back({param.name, name});
  }
  if (result.tensors.empty())
    return Error{
        "--adapters: the artifact's parameters hold no LoRA weight (<module>.lora_A.weight)"};
  for (const TensorInfo &info : result.file.getTensors())
    if (!expected.count(info.name))
      return Error{path + ": holds '" + info.name +
                   "', which is no LoRA parameter of the step (adapters of another model, "
                   "or other target modules?)"};
  return result;
}

Status kiln::runtime::uploadPeftAdapters(const PeftAdapterInit &adapters, StepExecutor &executor,
                                         const Device &device) {
  std::vector<std::pair<std::string, NamedTensor *>> params, state;
  if (Status s = executor.readTrainable(params, state); !s)
    return s;
  std::map<std::string, NamedTensor *> byName(params.begin(), params.end());
  for (const auto &[param, fileName] : adapters.tensors) {
    auto it = byName.find(param);
    if (it == byName.end())
      return Error{"--adapters: the step program has no parameter '" + param + "'"};
    NamedTensor &t = *it->second;
    const TensorInfo *info = adapters.file.find(fileName);
    if (static_cast<int64_t>(info->getElementCount()) != t.count)
      return Error{adapters.file.getPath() + ": '" + fileName + "' has the wrong element count"};
    Expected<std::string> bytes =
        convertElements(adapters.file.data(*info), info->dtype, t.dtype, t.count);
    if (!bytes)
      return Error{adapters.file.getPath() + ": '" + fileName + "': " + bytes.getError()};
    if (!bytes->empty())
      if (Status s = device.check(
              device.getDriver().cuMemcpyHtoD_v2(t.memory.get(), bytes->data(), bytes->size()),
              "cuMemcpyHtoD");
          !s)
        return s;
  }
  return device.synchronize();
}
