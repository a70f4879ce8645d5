//===- Checkpoint.h - Training checkpoints and PEFT adapters ----*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// What `kiln-run train --save/--resume/--save-adapters` write and read
// (docs/runtime.md). A checkpoint is one safetensors file: trainable
// parameters as "params/<name>", optimizer state as "state/<name>/<slot>",
// and the number of completed steps as metadata "kiln.step". Adapters are
// written the way PEFT saves them — a directory with adapter_model.safetensors
// (tensor names "base_model.model.<module>.lora_A.weight") and
// adapter_config.json — so PeftModel.from_pretrained loads them. All files
// are replaced atomically.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CHECKPOINT_H
#define KILN_RUNTIME_CHECKPOINT_H

#include "kiln/runtime/StepArtifact.h"

#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

/// Where the training loop stands, saved beside the step count so that
/// --resume continues the data order: metadata "kiln.data_cursor" (the
/// micro-batches drawn, BatchSource::getCursor) and "kiln.grad_accum".
struct LoopState {
  std::optional<uint64_t> dataCursor;
  std::optional<int64_t> gradAccum;
};

/// Writes a checkpoint of \p params (by the step's parameter names) and
/// \p state (named "<param>/<slot>") after \p step completed steps.
Status writeCheckpoint(const std::string &path, int64_t step,
                       const std::vector<artifact::TensorData> &params,
                       const std::vector<artifact::TensorData> &state,
                       const artifact::WriteProgress &progress = nullptr,
                       const LoopState &loop = {});

/// The LoopState a checkpoint holds (keys absent: nullopt); a present key
/// that is not a non-negative integer is an error naming it.
Expected<LoopState> readLoopState(const artifact::SafetensorsFile &checkpoint);

/// Checks \p checkpoint against \p artifact's trainable parameters and,
/// when it has a step program, the optimizer state the step reads (every
/// "state/<param>/<slot>" present with the same dtype and shape, none
/// extra), and returns its step counter.
Expected<int64_t> checkCheckpoint(const StepArtifact &artifact,
                                  const artifact::SafetensorsFile &checkpoint);

/// The LoRA settings PEFT's adapter_config.json records.
struct LoraConfig {
  int64_t rank = 16;
  double alpha = 32;
  std::vector<std::string> targetModules; ///< e.g. q_proj, v_proj
  std::string baseModel;                  ///< name or path; may be empty
};

/// PEFT's saved name for an adapter weight named \p name in the step
/// ("model.layers.0.self_attn.q_proj.lora_A.weight" ->
/// "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"); an
/// error for a name that is not a LoRA weight.
Expected<std::string> peftAdapterName(const std::string &name);

/// Whether writePeftAdapters(\p dir) may write: \p dir is absent (and
/// creatable as far as checkReplaceableFile sees) or a directory whose two
/// files are absent or regular. kiln-run train checks before training.
Status checkPeftAdapterDir(const std::string &dir);

/// Writes \p dir/adapter_model.safetensors and \p dir/adapter_config.json
/// (creating \p dir if needed). \p adapters are named as in the step.
Status writePeftAdapters(const std::string &dir, const std::vector<artifact::TensorData> &adapters,
                         const LoraConfig &config);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CHECKPOINT_H
