//===- PipelineOptions.cpp - The specs of kiln compile's pipelines --------===//
//
// The optimizer and LoRA specs are the CLI's compact strings
// (`adamw:lr=1e-4,betas=0.9/0.95`, `r=16,alpha=32,targets=REGEX`); they are
// parsed here so kiln compile and kiln-opt's pipelines read them alike.
//
//===----------------------------------------------------------------------===//

#include "kiln/Pipelines/Pipelines.h"

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

FailureOr<LoraPassOptions> parseLoraSpec(StringRef spec, StringRef skip, std::string &error) {
  // PEFT's names; `rank` is accepted for r. The regex may hold commas, so
  // targets= runs to the end.
  LoraPassOptions options;
  options.alpha = 32; // PEFT's LoraConfig default is alpha 8 with r 8;
  options.rank = 16;  // Kiln's default is the common r=16, alpha=32.
  options.skip = skip.str();
  auto [settingsText, targets] = spec.split("targets=");
  if (spec.contains("targets="))
    options.targets = targets.str();
  SmallVector<StringRef> settings;
  settingsText.split(settings, ',', -1, /*KeepEmpty=*/false);
  for (StringRef setting : settings) {
    auto [key, value] = setting.split('=');
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
    } else if (key == "alpha") {
      options.alpha = number;
    } else if (key == "dropout") {
      options.dropout = number;
    } else {
      error = ("unknown --lora setting '" + key + "' (r, alpha, dropout, targets)").str();
      return failure();
    }
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
  if (options.doubleQuant && options.quant.empty()) {
    error = "--double-quant needs --quant nf4";
    return failure();
  }
  if (!options.quant.empty() && options.quant != "nf4") {
    error = "unknown --quant scheme '" + options.quant + "' (nf4)";
    return failure();
  }
  if (until == "step" &&
      failed(parseOptimizerSpec(options.optimizer, options.clipGradNorm, error)))
    return failure();
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
