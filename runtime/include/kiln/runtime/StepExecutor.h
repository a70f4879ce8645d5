//===- StepExecutor.h - Run a compiled step program on the GPU --*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Executes the "step" (and once, the "init") program of a .kiln artifact at
// fixed symbol values (batch, seq): named persistent tensors (parameters,
// optimizer state, frozen weights, what the init program makes) live in
// their own allocations; every other buffer of a program gets an offset in
// one arena: the artifact's memory_plan evaluated at the run's sizes when it
// holds there, else a liveness-based first-fit plan made at load time. A
// step enqueues the ops in order (cuLaunchKernel per launch, cuBLASLt per
// GEMM) and ends by copying
// the new parameters and state over the old ones, so the whole step is one
// stream of work a CUDA Graph captures once and replays.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_STEPEXECUTOR_H
#define KILN_RUNTIME_STEPEXECUTOR_H

#include "kiln/runtime/CublasLt.h"
#include "kiln/runtime/Device.h"
#include "kiln/runtime/StepArtifact.h"
#include "kiln/runtime/StepProgram.h"

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

/// One device allocation. Move-only.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  static Expected<DeviceBuffer> allocate(const Device &device, size_t bytes);
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  ~DeviceBuffer();
  CUdeviceptr get() const { return ptr; }
  size_t size() const { return bytes; }

private:
  const CudaDriver *driver = nullptr;
  CUdeviceptr ptr = 0;
  size_t bytes = 0;
};

/// A named persistent tensor.
struct NamedTensor {
  artifact::DType dtype = artifact::DType::F32;
  std::vector<int64_t> shape;
  int64_t count = 0;
  DeviceBuffer memory;
};

/// Host bytes of \p count elements converted from \p from to \p to (floats
/// among F64/F32/BF16/F16 with round-to-nearest-even, integers among
/// I64/I32/U32/U16/U8/BOOL); an error names the pair it cannot convert.
Expected<std::string> convertElements(const void *data, artifact::DType from,
                                      artifact::DType to, size_t count);

class ProgramRunner;

/// One op's device time in a profiled step: a kernel's name, "gemm MxNxK
/// DTYPE", "memset", "memcpy" or "result copies".
struct ActionTime {
  std::string label;
  double ms = 0;
};

class StepExecutor {
public:
  struct Options {
    artifact::SymbolBindings sizes; ///< batch, seq
    uint64_t seed = 0;              ///< init program and dropout seeds
    bool useGraphs = true;
    /// Without weights: parameters and frozen weights drawn from this seed
    /// (benchmarks): matrices U(-0.02·√3, 0.02·√3) (std 0.02), norm
    /// weights 1, other vectors 0.
    std::optional<uint64_t> randomInitSeed;
  };
  /// Decodes the step (and init) program, loads the kernel modules for this
  /// device, uploads parameters and frozen weights from \p weights (may be
  /// null when the init program or a checkpoint provides every tensor),
  /// zeroes the optimizer state, plans and allocates the arena, and runs the
  /// init program once.
  static Expected<std::unique_ptr<StepExecutor>>
  create(const StepArtifact &artifact, const Device &device, const CublasLt &lt,
         const std::vector<artifact::SafetensorsFile> *weights, const Options &options);
  ~StepExecutor();

  /// Names of the data inputs the step reads ("input_ids", "labels").
  std::vector<std::string> getDataInputs() const;
  /// Elements and dtype of data input \p name.
  Expected<std::pair<artifact::DType, int64_t>> getInputSpec(const std::string &name) const;
  /// Uploads \p count elements of dtype \p dtype into data input \p name
  /// (converted to its buffer's dtype).
  Status setInput(const std::string &name, const void *data, artifact::DType dtype,
                  size_t count);
  /// Overwrites parameters / state from a checkpoint ("params/<name>",
  /// "state/<name>"); tensors it lacks stay as they are.
  Status loadCheckpoint(const artifact::SafetensorsFile &checkpoint);
  /// Runs one step numbered \p step (1-based, as the optimizer's bias
  /// correction counts) at learning rate \p lr; returns the loss.
  Expected<double> runStep(int64_t step, double lr);
  /// runStep without the CUDA Graph, timing every op (\p times gets them).
  Expected<double> runProfiledStep(int64_t step, double lr, std::vector<ActionTime> &times);
  /// The compiled learning rate, if the step records one.
  std::optional<double> getDefaultLr() const;
  /// Host copies of the trainable parameters and optimizer state.
  Status readTrainable(std::vector<std::pair<std::string, NamedTensor *>> &params,
                       std::vector<std::pair<std::string, NamedTensor *>> &state);
  Expected<std::string> download(const NamedTensor &tensor) const;
  /// Device bytes: persistent tensors, step arena, GEMM workspace.
  size_t getPersistentBytes() const;
  size_t getArenaBytes() const;
  /// The arena follows the artifact's memory_plan (else a run-time plan).
  bool usesArtifactPlan() const;
  size_t getGraphCaptures() const;
  size_t getLaunchCount() const;
  size_t getGemmCount() const;

private:
  StepExecutor() = default;
  Expected<double> runStepWith(int64_t step, double lr, std::vector<ActionTime> *times);
  const Device *device = nullptr;
  const CublasLt *lt = nullptr;
  cublasLtHandle_t handle = nullptr;
  std::map<std::string, NamedTensor> store;
  std::vector<std::string> paramNames, stateNames;
  std::vector<KernelModule> modules;
  std::unique_ptr<ProgramRunner> step;
  std::unique_ptr<GraphCache> graphs;
  Options options;
  std::optional<double> defaultLr;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_STEPEXECUTOR_H
