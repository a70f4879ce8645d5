//===- StepArtifact.h - The runtime's view of a .kiln artifact --*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Decodes the sections kiln-run understands (docs/artifact.md): "meta"
// (with its shape buckets), "guards", "params", "memory_plan", the kernel
// images and the "step", "step/<bucket>" and "init" programs, and checks
// them against each other (symbols, parameter names, kernel modules), so
// everything a run needs is validated on the CPU before any device work.
// Then it checks run inputs against them: sizes against the guards, a
// weights file against the parameter layout, the device's architecture
// against the kernel images.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_STEPARTIFACT_H
#define KILN_RUNTIME_STEPARTIFACT_H

#include "kiln/artifact/Artifact.h"
#include "kiln/artifact/Guards.h"
#include "kiln/artifact/Json.h"
#include "kiln/artifact/Safetensors.h"
#include "kiln/runtime/MemoryPlanSection.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

/// One parameter of the compiled step, as "params" lists it.
struct ParamSpec {
  std::string name;   ///< The step's name for it.
  std::string source; ///< Its name in the weights file (HF or ONNX name).
  artifact::DType dtype = artifact::DType::F32;
  std::vector<int64_t> shape;
  bool trainable = false;
  /// Produced by the init program (adapters, NF4 codes): the weights file
  /// need not hold it.
  bool fromInit = false;
  /// A frozen weight the step divides by (an RMSNorm gradient computed
  /// from the norm's output, kiln-norm-grad-from-output): loading refuses
  /// one with a zero element.
  bool nonzero = false;
  /// The weight the exporter folded this one from (ONNX metadata
  /// pkg.onnxscript.optimizer.folded_from), e.g. "model.x.q_proj.weight"
  /// for its transpose "val_95"; empty if none.
  std::string foldedFrom;
  /// For a 2-D foldedFrom: whether this parameter is that weight's
  /// transpose (folded_transposed), when the artifact records it. Without
  /// it only the shapes tell, which a square weight cannot.
  std::optional<bool> foldedTransposed;
  /// Other names of the weight it is read from (foldedFrom when set, else
  /// source): one tensor tied under several names, of which a checkpoint
  /// keeps one (Hugging Face keeps the input embedding's).
  std::vector<std::string> aliases;
  /// The names a weights file may hold it under, in the order tried.
  std::vector<std::string> lookupNames() const;
  /// The value the model file held inline (small tensors only), as the
  /// dtype's little-endian bytes; empty if none. Used when the weights lack
  /// the tensor, and instead of --init random.
  std::string value;
};

/// How a parameter's bytes come out of a weights file.
struct WeightMatch {
  const artifact::TensorInfo *tensor = nullptr;    ///< null: absent (allowed)
  bool transpose = false;                          ///< A 2-D folded_from weight, stored transposed.
  const artifact::SafetensorsFile *file = nullptr; ///< The shard holding it.
};

/// The index of the first element of \p bytes (elements of the float dtype
/// \p dtype) that is zero (either sign); none if there is none.
std::optional<int64_t> firstZeroElement(const std::string &bytes, artifact::DType dtype);

/// For a `nonzero` \p param: the one-line error if \p bytes (its elements
/// as \p dtype) hold a zero; success otherwise.
Status checkNonzeroWeight(const ParamSpec &param, const std::string &bytes, artifact::DType dtype);

/// One compiled image: "sm_90.cubin", "sm_90a.cubin", "compute_90.ptx".
struct KernelImage {
  int arch = 0;              ///< 10 * major + minor.
  bool archSpecific = false; ///< "a" suffix: runs on exactly this arch.
  std::string section;
};

/// The images of one kernel.
struct KernelImages {
  std::vector<KernelImage> cubins;
  std::vector<KernelImage> ptx;
  std::string source; ///< The CUDA C++ section, or empty.
};

/// What to load for one kernel on one device.
struct KernelImageChoice {
  std::string section;
  bool needsJit = false; ///< PTX, compiled by the driver at load time.
};

/// A shape bucket: a copy of the step with some size symbols pinned.
struct BucketSpec {
  std::string function;            ///< "main__seq_512"
  std::string section;             ///< "step/main__seq_512"
  artifact::SymbolBindings values; ///< the pinned symbols: {"seq": 512}
};

class StepArtifact {
public:
  /// Opens and validates \p path (container and the decoded sections).
  static Expected<StepArtifact> open(const std::string &path);
  /// Decodes an already validated container; \p origin names it in errors.
  static Expected<StepArtifact> decode(artifact::Artifact container, const std::string &origin);

  const artifact::Artifact &getContainer() const { return container; }
  const artifact::Json &getMeta() const { return meta; }
  const std::vector<std::string> &getTargets() const { return targets; }
  const std::vector<std::string> &getSymbols() const { return symbols; }
  const std::vector<artifact::Guard> &getGuards() const { return guards; }
  const std::vector<ParamSpec> &getParams() const { return params; }
  const std::map<std::string, KernelImages> &getKernels() const { return kernels; }
  /// meta "vocab_size", when the compiler recorded it.
  std::optional<int64_t> getVocabSize() const { return vocabSize; }
  bool hasStepProgram() const { return container.find("step") != nullptr; }
  /// The decoded program of section \p section ("step", "step/<function>",
  /// "init"), or null when the artifact has no such section.
  const StepProgram *getProgram(const std::string &section) const;
  /// The compiler's arena plan of the step ("memory_plan"), if it wrote one.
  const std::optional<StepMemoryPlan> &getMemoryPlan() const { return memoryPlan; }
  /// The shape buckets (meta "buckets"), in the compiler's order; empty
  /// when it compiled none.
  const std::vector<BucketSpec> &getBuckets() const { return buckets; }
  /// The bucket whose pinned values all equal those in \p sizes, else
  /// nullptr (the symbolic step serves them).
  const BucketSpec *selectBucket(const artifact::SymbolBindings &sizes) const;

  /// Checks \p weights against the parameters (by source name): present,
  /// same dtype and shape, and no zero element in a `nonzero` one (or in its
  /// inline value). Trainable ones and those the init program makes may be
  /// absent, but must match when present.
  Status checkWeights(const artifact::SafetensorsFile &weights) const;

  /// Finds \p param in \p weights: by source name, else by its folded_from
  /// name with the same shape or, for 2-D, the transposed one. An error
  /// names both and the shapes.
  Expected<WeightMatch> matchWeight(const ParamSpec &param,
                                    const artifact::SafetensorsFile &weights) const;

  /// The same over the shards of a sharded checkpoint (Hugging Face's
  /// model-0000K-of-0000N.safetensors): the first shard holding the tensor
  /// (or its folded_from name) decides; a parameter none holds is missing.
  Expected<WeightMatch> matchWeight(const ParamSpec &param,
                                    const std::vector<artifact::SafetensorsFile> &shards) const;
  Status checkWeights(const std::vector<artifact::SafetensorsFile> &shards) const;

  /// Picks the image of \p kernel for a device of compute capability
  /// \p major.minor: a cubin of the same major and a minor no newer than the
  /// device's, else PTX of an arch no newer than the device's (JIT).
  Expected<KernelImageChoice> selectImage(const std::string &kernel, int major, int minor) const;

private:
  StepArtifact(artifact::Artifact container) : container(std::move(container)) {}
  /// The decoded sections against each other (StepArtifactCheck.cpp).
  Status checkConsistency() const;
  artifact::Artifact container;
  artifact::Json meta;
  std::vector<std::string> targets, symbols;
  std::vector<artifact::Guard> guards;
  std::vector<ParamSpec> params;
  std::map<std::string, KernelImages> kernels;
  std::optional<int64_t> vocabSize;
  std::optional<StepMemoryPlan> memoryPlan;
  std::vector<BucketSpec> buckets;
  std::map<std::string, StepProgram> programs;
  std::string origin;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_STEPARTIFACT_H
