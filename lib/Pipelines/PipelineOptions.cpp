//===- PipelineOptions.cpp - The specs of kiln compile's pipelines --------===//
//
// The optimizer and LoRA specs are the CLI's compact strings
// (`adamw:lr=1e-4,betas=0.9/0.95`, `r=16,alpha=32,targets=q_proj,v_proj`); they are
// parsed here so kiln compile and kiln-opt's pipelines read them alike.
//
//===----------------------------------------------------------------------===//

#include "kiln/Pipelines/Pipelines.h"

#include <cmath>

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace mlir;

namespace kiln {

FailureOr<TrainStepPassOptions> parseOptimizerSpec(StringRef spec, double clipGradNorm,
                                                   std::string &error) {
  // PyTorch's defaults fill what is not given.
  TrainStepPassOptions options;
  auto [name, rest] = spec.split(':');
  options.optimizer = name.str();
  if (name == "sgd") {
    options.weightDecay = 0;
    options.lr = 1e-3;
  } else if (name != "adamw") {
    error = ("unknown optimizer '" + name + "' (adamw or sgd)").str();
    return failure();
  }
  SmallVector<StringRef> settings;
  rest.split(settings, ',', -1, /*KeepEmpty=*/false);
  for (StringRef setting : settings) {
    std::pair<StringRef, StringRef> keyValue = setting.split('=');
    StringRef key = keyValue.first, value = keyValue.second; // lambdas capture them
    auto number = [&](double &out) {
      if (!value.trim().getAsDouble(out))
        return true;
      error = ("optimizer setting '" + setting + "' needs a number").str();
      return false;
    };
    bool ok = true;
    if (key == "lr")
      ok = number(options.lr);
    else if (key == "weight_decay")
      ok = number(options.weightDecay);
    else if (key == "eps" && name == "adamw")
      ok = number(options.eps);
    else if (key == "betas" && name == "adamw") {
      auto [b1, b2] = value.split('/');
      ok = !b1.getAsDouble(options.beta1) && !b2.getAsDouble(options.beta2);
      if (!ok)
        error = ("optimizer setting '" + setting + "' needs betas=B1/B2").str();
    } else if (key == "momentum" && name == "sgd")
      ok = number(options.momentum);
    else if (key == "dampening" && name == "sgd")
      ok = number(options.dampening);
    else if (key == "nesterov" && name == "sgd")
      options.nesterov = value == "1" || value == "true";
    else {
      error = ("unknown " + name + " setting '" + key + "'").str();
      return failure();
    }
    if (!ok)
      return failure();
  }
  options.maxGradNorm = clipGradNorm;
  return options;
}

namespace {

/// PEFT's target_modules list as the pass's regex: each name matches a
/// whole dotted component sequence at the end of the module name (PEFT:
/// `key == name or key.endswith("." + name)`), the weight's `.weight` after
/// it; `/` also separates, for names from ONNX node scopes.
FailureOr<std::string> moduleNamesRegex(ArrayRef<StringRef> names, std::string &error) {
  std::string alternatives;
  for (StringRef name : names) {
    if (name.empty() ||
        name.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                               "0123456789_.") != StringRef::npos ||
        name.front() == '.' || name.back() == '.') {
      error = ("--lora targets entry '" + name +
               "' is not a module name (targets=q_proj,v_proj lists names, as PEFT's "
               "target_modules; a regex is targets_regex=REGEX or targets=re:REGEX)")
                  .str();
      return failure();
    }
    if (!alternatives.empty())
      alternatives += '|';
    for (char c : name) {
      if (c == '.')
        alternatives += '\\';
      alternatives += c;
    }
  }
  return "(^|[./])(" + alternatives + ")([./]weight)?$";
}

} // namespace

FailureOr<LoraPassOptions> parseLoraSpec(StringRef spec, StringRef skip, std::string &error) {
  // PEFT's LoraConfig names (r, lora_alpha, lora_dropout, target_modules)
  // and short ones (rank, alpha, dropout, targets). PEFT's defaults except
  // r: Kiln's is the common 16.
  LoraPassOptions options;
  options.rank = 16;
  options.alpha = 8;
  options.skip = skip.str();
  StringRef rest = spec.trim();
  if (rest.empty()) {
    error = "--lora needs settings, e.g. r=16,alpha=32,targets=q_proj,v_proj";
    return failure();
  }
  SmallVector<StringRef> names; // targets= / target_modules=
  bool listing = false;         // the last setting was such a list
  bool namesGiven = false, regexGiven = false;
  while (!(rest = rest.ltrim()).empty()) {
    // A regex may hold commas: it runs to the end.
    for (StringRef prefix : {"targets_regex=", "targets=re:", "target_modules=re:"})
      if (rest.starts_with(prefix)) {
        options.targets = rest.drop_front(prefix.size()).str();
        regexGiven = true;
        if (options.targets.empty()) {
          error = ("--lora " + prefix + " needs a regex").str();
          return failure();
        }
        rest = "";
        listing = false;
      }
    if (rest.empty())
      break;
    auto [setting, tail] = rest.split(',');
    rest = tail;
    setting = setting.trim();
    if (setting.empty())
      continue;
    auto [key, value] = setting.split('=');
    if (!setting.contains('=')) {
      if (!listing) {
        error = ("--lora setting '" + setting + "' needs KEY=VALUE").str();
        return failure();
      }
      names.push_back(setting); // targets=q_proj,v_proj: the next name
      continue;
    }
    listing = key == "targets" || key == "target_modules";
    if (listing) {
      namesGiven = true;
      if (!value.empty())
        names.push_back(value);
      continue;
    }
    double number;
    if (value.trim().getAsDouble(number)) {
      error = ("--lora setting '" + setting + "' needs a number").str();
      return failure();
    }
    if (key == "r" || key == "rank") {
      if (number != static_cast<int64_t>(number)) {
        error = "--lora r must be an integer";
        return failure();
      }
      options.rank = static_cast<int64_t>(number);
    } else if (key == "alpha" || key == "lora_alpha") {
      options.alpha = number;
    } else if (key == "dropout" || key == "lora_dropout") {
      options.dropout = number;
    } else {
      error = ("unknown --lora setting '" + key + "' (r, alpha, dropout, targets, targets_regex)")
                  .str();
      return failure();
    }
  }
  if (namesGiven && regexGiven) {
    error = "--lora takes targets= (names) or a regex, not both";
    return failure();
  }
  if (namesGiven) {
    if (names.empty()) {
      error = "--lora targets= needs module names, e.g. targets=q_proj,v_proj";
      return failure();
    }
    FailureOr<std::string> regex = moduleNamesRegex(names, error);
    if (failed(regex))
      return failure();
    options.targets = *regex;
  }
  return options;
}

LogicalResult verifyPipelineOptions(const PipelineOptions &options, std::string &error) {
  const std::string &until = options.until;
  if (until != "forward" && until != "grads" && until != "step") {
    error = "unknown pipeline stage '" + until + "' (forward, grads or step)";
    return failure();
  }
  if (!options.lora.empty() && failed(parseLoraSpec(options.lora, options.loraSkip, error)))
    return failure();
  if (options.loraKConcat && options.lora.empty()) {
    error = "--lora-k-concat needs --lora";
    return failure();
  }
  if (options.loraGroupFrozen && !options.loraKConcat) {
    error = "--lora-group-frozen needs --lora-k-concat";
    return failure();
  }
  if (options.loraGroupGrads != "off" && options.loraGroupGrads != "narrow" &&
      options.loraGroupGrads != "all") {
    error = "--lora-group-grads must be off, narrow or all, not '" + options.loraGroupGrads + "'";
    return failure();
  }
  if (options.loraGroupGrads != "off" && !options.loraGroupFrozen) {
    error = "--lora-group-grads needs --lora-group-frozen";
    return failure();
  }
  if (options.doubleQuant && options.quant.empty()) {
    error = "--double-quant needs --quant nf4";
    return failure();
  }
  if (!options.quant.empty() && options.quant != "nf4") {
    error = "unknown --quant scheme '" + options.quant + "' (nf4)";
    return failure();
  }
  if (until == "step" && failed(parseOptimizerSpec(options.optimizer, options.clipGradNorm, error)))
    return failure();
  if (options.dataParallel < 0 || !std::isfinite(options.dataParallel)) {
    error = "--data-parallel bucket-mb must be a positive number of MiB";
    return failure();
  }
  if (options.dataParallel > 0 && until == "forward") {
    error = "--data-parallel needs a backward pass (--emit=grads-mlir, step-mlir or later)";
    return failure();
  }
  if (options.ceChunkTokens < 0) {
    error = "--ce-chunk-tokens must be >= 0 (0: automatic), got " +
            std::to_string(options.ceChunkTokens);
    return failure();
  }
  if (options.loopPrograms && until != "step") {
    error = "--loop-programs needs the optimizer step (--emit=step-mlir or artifact)";
    return failure();
  }
  if (options.loopPrograms && options.gradAccum != 1) {
    error = "--loop-programs accumulates micro-batches at run time (kiln-run train "
            "--grad-accum); drop --grad-accum=" +
            std::to_string(options.gradAccum);
    return failure();
  }
  // The loop programs are copied from @main after kiln-data-parallel: their
  // per-micro-batch all-reduces would average token-weighted sums wrongly.
  if (options.loopPrograms && options.dataParallel > 0) {
    error = "--data-parallel and --loop-programs cannot be combined yet (the run-time "
            "loop's programs have no all-reduce); use --grad-accum=N with --data-parallel";
    return failure();
  }
  if (options.attentionLayout != "bhsd" && options.attentionLayout != "bshd") {
    error = "unknown --attention-layout '" + options.attentionLayout + "' (bhsd or bshd)";
    return failure();
  }
  if (options.rematBudget != "none" && until == "forward") {
    error = "--remat-budget needs a backward pass (--emit=grads-mlir or step-mlir)";
    return failure();
  }
  return success();
}

LogicalResult PipelineOptions::parseFromString(StringRef text, raw_ostream &errorStream) {
  if (failed(mlir::detail::PassOptions::parseFromString(text, errorStream)))
    return failure();
  std::string error;
  if (failed(verifyPipelineOptions(*this, error))) {
    errorStream << error << "\n";
    return failure();
  }
  return success();
}

} // namespace kiln
