//===- PeftAdapterInit.h - Start LoRA adapters from PEFT's files -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// `kiln-run train --adapters DIR`: the run's LoRA adapters come from a PEFT
// adapter directory (adapter_model.safetensors under PEFT's names,
// adapter_config.json) instead of the init program, so Kiln and PyTorch+PEFT
// train from the very same adapter values. Checked against the artifact on
// the host before any device work; uploaded over the init program's values.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_PEFTADAPTERINIT_H
#define KILN_RUNTIME_PEFTADAPTERINIT_H

#include "kiln/runtime/Device.h"
#include "kiln/runtime/StepArtifact.h"
#include "kiln/runtime/StepExecutor.h"

#include <string>
#include <utility>
#include <vector>

namespace kiln::runtime {

/// A PEFT adapter directory matched to a step's LoRA parameters.
struct PeftAdapterInit {
  artifact::SafetensorsFile file;
  /// (the step's parameter name, the file's tensor name), one per LoRA
  /// parameter of the step.
  std::vector<std::pair<std::string, std::string>> tensors;
};

/// Opens \p dir and checks it against \p artifact: meta "lora" present;
/// adapter_config.json has peft_type LORA, the artifact's r
/// and alpha, and no rsLoRA or DoRA; adapter_model.safetensors holds
/// exactly one floating-point tensor of the step's shape for every trainable
/// LoRA parameter (named "base_model.model.<name>") and nothing else.
Expected<PeftAdapterInit> openPeftAdapters(const StepArtifact &artifact, const std::string &dir);

/// Overwrites the executor's adapters with \p adapters' values (converted
/// to each parameter's dtype).
Status uploadPeftAdapters(const PeftAdapterInit &adapters, StepExecutor &executor,
                          const Device &device);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_PEFTADAPTERINIT_H
