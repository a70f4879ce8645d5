//===- StepExecutor.h - Run a compiled step program on the GPU --*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Executes the "step" (and once, the "init") program of a .kiln artifact at
// one or several shapes (symbol values: batch, seq): named persistent
// tensors (parameters, optimizer state, frozen weights, what the init
// program makes) live in their own allocations; every other buffer of a
// program gets an offset in one arena, allocated once for the largest
// shape's plan: the artifact's memory_plan evaluated at the shape's sizes
// when it holds there, else a liveness-based first-fit plan made at load
// time. Each shape runs the shape bucket whose pinned values match it, else
// the symbolic step, resolved once per shape (pointers, grids, cuBLASLt
// descriptors). A step enqueues the ops in order (cuLaunchKernel per
// launch, cuBLASLt per GEMM) and ends by copying the new parameters and
// state over the old ones (those not updated in place), so the whole step
// is one stream of work a CUDA Graph captures once and replays; a new shape
// of the same program patches that graph (GraphCache).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_STEPEXECUTOR_H
#define KILN_RUNTIME_STEPEXECUTOR_H

#include "kiln/runtime/CublasLt.h"
#include "kiln/runtime/Device.h"
#include "kiln/runtime/GemmConfig.h"
#include "kiln/runtime/StepArtifact.h"
#include "kiln/runtime/StepProgram.h"
#include "kiln/runtime/TuningDb.h"

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime {

/// One device allocation, or a slice of one that another buffer owns
/// (borrowed: never freed through this object). Move-only.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  static Expected<DeviceBuffer> allocate(const Device &device, size_t bytes);
  /// \p bytes at \p ptr inside an allocation that outlives this buffer.
  static DeviceBuffer borrowed(CUdeviceptr ptr, size_t bytes);
  DeviceBuffer(DeviceBuffer &&other) noexcept;
  DeviceBuffer &operator=(DeviceBuffer &&other) noexcept;
  DeviceBuffer(const DeviceBuffer &) = delete;
  ~DeviceBuffer();
  CUdeviceptr get() const { return ptr; }
  size_t size() const { return bytes; }

private:
  const CudaDriver *driver = nullptr; ///< null for a borrowed slice
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
Expected<std::string> convertElements(const void *data, artifact::DType from, artifact::DType to,
                                      size_t count);

class ProgramRunner;
class PersistentPool;
class CudnnAttention;
class Communicator;

/// Finds or loads the persistent tensor a program's `weight` op names:
/// `key` (artifact::weightKey), the buffer's dtype and shape, and for a
/// padded weight the weight's own [rows, cols] (`paddedFrom`, else empty)
/// and its name (`source`), whose values fill the buffer's top-left block;
/// for a group (`members`, else empty) the members' values side by side
/// along `memberAxis` fill it.
using WeightLoader = std::function<Expected<NamedTensor *>(
    const std::string &key, artifact::DType dtype, const std::vector<int64_t> &shape,
    const std::string &source, const std::vector<int64_t> &paddedFrom,
    const std::vector<artifact::WeightMember> &members, int64_t memberAxis)>;

/// One op's device time in a profiled step: a kernel's name, "gemm MxNxK
/// DTYPE", "memset", "memcpy" or "result copies".
struct ActionTime {
  std::string label;
  double ms = 0;
};

class StepExecutor {
public:
  struct Options {
    /// Every shape the run uses (batch, seq), the init program's first.
    /// Each is prepared at load; the arena fits the largest.
    std::vector<artifact::SymbolBindings> shapes;
    uint64_t seed = 0; ///< init program and dropout seeds
    bool useGraphs = true;
    /// Executable CUDA Graphs kept per program; more shapes of one program
    /// patch the least recently used (GraphCache).
    size_t graphsPerProgram = 8;
    /// Without weights: parameters and frozen weights drawn from this seed
    /// (benchmarks): matrices U(-0.02·√3, 0.02·√3) (std 0.02), norm
    /// weights 1, other vectors 0.
    std::optional<uint64_t> randomInitSeed;
    /// Who runs the tiled attention launches that allow another
    /// implementation: cuDNN where it loads and supports the shape, else
    /// Kiln's sm_90a forward (kernels/kiln_fa90) where the device and shape
    /// fit, else the generated kernels (auto); always the generated kernels;
    /// cuDNN or fail; Kiln's sm_90a forward where it fits (the artifact must
    /// carry it for this device), the generated kernels elsewhere.
    enum class Attention { Auto, Kernels, Cudnn, Sm90 } attention = Attention::Auto;
    /// Data parallelism: the step's all_reduce ops run through it (NCCL);
    /// null: a run of one, where they are copies or nothing.
    Communicator *communicator = nullptr;
    /// Choices measured by `kiln-run tune` (docs/tuning.md): used for the
    /// ops whose entry matches this machine's key (getTuningKey); the others
    /// keep the defaults. An explicit --attention kernels|cudnn wins over
    /// the database.
    const TuningDb *tuning = nullptr;
    /// --thin-gemm on: the GEMMs Kiln's thin-GEMM kernels take (bf16, one
    /// of M, N, K 16..64: the LoRA GEMMs) run through them, not cuBLASLt.
    bool thinGemm = false;
    /// An adapter's dT and dB GEMMs over one output gradient as one pass
    /// (kernels/LoraGradPair.cuh); --lora-grad-pairs on. Off by default:
    /// slower in the H200's steps (docs/benchmarks.md, "Fourteenth session").
    bool loraGradPairs = false;
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

  /// Makes \p sizes the shape of the following setInput/getInputSpec/runStep
  /// calls. A shape not given at create is prepared now, if its arena plan
  /// fits the arena.
  Status selectShape(const artifact::SymbolBindings &sizes);
  /// The program serving the current shape: "step" (symbolic) or a
  /// bucket's section ("step/main__seq_512").
  const std::string &getProgramName() const;

  /// Names of the data inputs the step reads ("input_ids", "labels").
  std::vector<std::string> getDataInputs() const;
  /// Elements and dtype of data input \p name.
  Expected<std::pair<artifact::DType, int64_t>> getInputSpec(const std::string &name) const;
  /// Uploads \p count elements of dtype \p dtype into data input \p name
  /// (converted to its buffer's dtype).
  Status setInput(const std::string &name, const void *data, artifact::DType dtype, size_t count);
  /// Overwrites parameters / state from a checkpoint ("params/<name>",
  /// "state/<name>"); tensors it lacks stay as they are.
  Status loadCheckpoint(const artifact::SafetensorsFile &checkpoint);
  /// Runs one step numbered \p step (1-based, as the optimizer's bias
  /// correction counts) at learning rate \p lr; returns the loss.
  Expected<double> runStep(int64_t step, double lr);
  /// runStep without the CUDA Graph, timing every op (\p times gets them).
  Expected<double> runProfiledStep(int64_t step, double lr, std::vector<ActionTime> &times);
  /// What a program returned besides parameters and state.
  struct ProgramOutputs {
    double loss = 0;
    std::optional<double> gradNorm; ///< the step and apply (--loop-programs)
    std::optional<double> tokens;   ///< accum and eval: counted label tokens
  };
  /// Whether the artifact has the run-time loop's programs (kiln compile
  /// --loop-programs): accum, apply, eval.
  bool hasLoopPrograms() const;
  /// Adds the current inputs' gradients, weighted by their counted tokens,
  /// to the accumulators (the current shape's accum program). \p draw
  /// numbers its seeds as runStep's step number does.
  Expected<ProgramOutputs> runAccumulate(int64_t draw);
  /// The optimizer step \p step on the accumulated token-weighted mean,
  /// which also clears the accumulators; loss and gradient norm of it.
  Expected<ProgramOutputs> runApply(int64_t step, double lr);
  /// The forward-only loss of the current inputs (the eval program).
  Expected<ProgramOutputs> runEval();
  /// The gradient norm the last runStep computed, when the step returns one.
  std::optional<double> getLastGradNorm() const { return lastGradNorm; }
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
  size_t getGraphInstantiations() const;
  /// Shape switches that patched a graph in place.
  size_t getGraphUpdates() const;
  /// Why the driver last refused to patch a graph, if it did.
  std::string getGraphRefusal() const;
  size_t getLaunchCount() const;
  size_t getGemmCount() const;
  /// Of them, those run by Kiln's thin-GEMM kernels (Options::thinGemm).
  size_t getThinGemmCount() const;
  /// dT/dB GEMM pairs run as one pass (Options::loraGradPairs), two GEMMs each.
  size_t getLoraPairCount() const;
  /// "attention: 32 launches on cuDNN 9.19.0 (libcudnn.so.9), 0 on kernels"
  /// for the current shape, with the reason where cuDNN took none.
  std::string getAttentionSummary() const;
  /// "nf4 gemms: 2 of 32 fused (sm_90a), 30 dequantize + cuBLASLt, 2
  /// dequantize launches skipped" (why the first cannot run fused); empty
  /// for a step without marked NF4 launches (ProgramRunnerNf4.cpp).
  std::string getNf4Summary() const;

  //===--------------------------------------------------------------------===//
  // Tuning (docs/tuning.md)
  //===--------------------------------------------------------------------===//

  /// This machine's key: the device, the driver, the CUDA toolkit kiln-run
  /// was built with, the cuBLASLt loaded and cuDNN (loaded now if the step
  /// has attention it may run, else "none").
  const TuningKey &getTuningKey() const { return tuningKey; }
  /// Over every prepared shape: GEMMs and attention launches whose choice
  /// came from the tuning database, and those left at the defaults.
  size_t getTunedOpCount() const;
  size_t getDefaultOpCount() const;
  /// Why a matching database entry was not used (the first such), if any.
  std::string getTuningNote() const;

  /// One GEMM of the current shape, as `kiln-run tune` measures it.
  struct GemmSite {
    size_t action = 0; ///< its index among the step's ops
    std::string hash, shape, label;
    CUdeviceptr a = 0, b = 0, c = 0;
    size_t cBytes = 0;
    artifact::DType cType = artifact::DType::F32;
    cublasLtMatmulAlgo_t algo{}; ///< the one it runs now
    uint64_t m = 0, n = 0, k = 0; ///< row-major C[m, n] = A[m, k] B[k, n]
  };
  std::vector<GemmSite> getGemmSites() const;
  /// cuBLASLt's heuristic best \p topK algorithms for GEMM \p site (the
  /// first is the default).
  Expected<std::vector<cublasLtMatmulAlgo_t>> getGemmCandidates(size_t site, int topK) const;
  /// Configurations beyond the heuristic's list for GEMM \p site (at most
  /// \p limit, none equal to a configuration of \p seeds): split-K of the
  /// seeds, then every algorithm id's tiles, stages and splits, each
  /// accepted by cublasLtMatmulAlgoCheck within the step's GEMM workspace
  /// (GemmSearch.cpp, docs/tuning.md).
  Expected<std::vector<cublasLtMatmulAlgo_t>>
  getGemmSearchSpace(size_t site, const std::vector<cublasLtMatmulAlgo_t> &seeds,
                     size_t limit) const;
  /// \p algo's configuration (GemmConfig.h).
  Expected<GemmConfig> getGemmConfig(const cublasLtMatmulAlgo_t &algo) const;
  /// Tune's timing: holdStream() queues a kernel that holds the stream until
  /// releaseStream(); what is enqueued between the two then runs back to
  /// back at the GPU's pace, not the host's (µs-scale GEMMs are otherwise
  /// timed at the rate cublasLtMatmul calls are made). A no-op where the
  /// hold kernel or mapped host memory is unavailable (StreamHold.cpp).
  Status holdStream();
  void releaseStream();
  /// Enqueues GEMM \p site with \p algo, reading \p a and \p b (another
  /// site's operands of the same signature: rotated inputs) into its own c.
  Status enqueueGemm(size_t site, const cublasLtMatmulAlgo_t &algo, CUdeviceptr a,
                     CUdeviceptr b) const;
  /// A generated kernel's launch that has launch variants (docs/tuning.md,
  /// "Launch variants"), as tune measures it.
  struct LaunchSite {
    size_t action = 0; ///< its index among the step's ops
    std::string hash, shape, label;
    /// per and block of the default (first) and of each variant.
    std::vector<std::pair<int64_t, int64_t>> shapes;
    /// Every buffer it reads or writes: pointer, bytes, dtype (distinct pointers).
    struct Buffer {
      CUdeviceptr ptr = 0;
      size_t bytes = 0;
      artifact::DType dtype = artifact::DType::F32;
    };
    std::vector<Buffer> buffers;
  };
  std::vector<LaunchSite> getLaunchSites() const;
  /// Enqueues launch \p site with its launch shape \p shape (0: the default).
  Status enqueueLaunch(size_t site, size_t shape) const;
  /// A GEMM on a dequantized NF4 weight that Kiln's fused NF4 GEMM can run
  /// (kiln/runtime/Nf4Gemm.h), as tune measures it: the GEMM's action, its
  /// dequantize launch's, the database's hash and shape, its output.
  struct Nf4Site {
    size_t action = 0, launchAction = 0;
    std::string hash, shape, label;
    CUdeviceptr c = 0;
    size_t cBytes = 0;
    bool fused = false; ///< what it runs now
  };
  std::vector<Nf4Site> getNf4Sites() const;
  /// Enqueues NF4 site \p site: the fused kernel on the codes, or (false)
  /// the dequantize launch and the cuBLASLt GEMM.
  Status enqueueNf4Site(size_t site, bool fused) const;
  /// The attention of the current shape: its database hash and shape, a
  /// label, and how many launches cuDNN and the kernels run.
  struct AttentionSite {
    std::string hash, shape, label;
    size_t cudnnLaunches = 0, kernelLaunches = 0;
  };
  std::optional<AttentionSite> getAttentionSite() const;
  bool hasCudnn() const { return cudnn != nullptr; }

  /// Prepares the current shape again as variant \p name, with the choices
  /// of \p tuning (null: the defaults) and, if set, attention forced onto
  /// cuDNN (true) or the kernels (false); selectVariant switches to it ("":
  /// the shape as first prepared). Variants share the arena.
  Status prepareVariant(const std::string &name, const TuningDb *tuning,
                        std::optional<bool> attentionOnCudnn);
  Status selectVariant(const std::string &name);
  /// runStep without the graph, calling \p beforeAction(i) before op i
  /// (it may enqueue work of its own on the device's stream).
  Expected<double> runStepWithHook(int64_t step, double lr,
                                   const std::function<Status(size_t)> &beforeAction);
  /// runStep, also returning the step's device time (events around it).
  Expected<double> runTimedStep(int64_t step, double lr, double &deviceMs);
  /// Device copies of the trainable parameters and optimizer state, and
  /// putting them back (so measured steps leave the model as it was).
  Status snapshotTrainable();
  Status restoreTrainable();

private:
  /// One shape: the program serving it, resolved at its sizes.
  struct Shape {
    std::string program; ///< "step" or a bucket's section
    std::string key;     ///< "batch=4,seq=512"
    artifact::SymbolBindings sizes;
    std::unique_ptr<ProgramRunner> runner;
    /// The loop programs at this shape (null without them).
    std::unique_ptr<ProgramRunner> accum, eval;
    std::string graphKey; ///< key, plus "#variant" for a tuning variant
  };
  StepExecutor() = default;
  Expected<double> runStepWith(int64_t step, double lr, std::vector<ActionTime> *times,
                               const std::function<Status(size_t)> *hook = nullptr,
                               double *deviceMs = nullptr);
  /// The program serving \p sizes, decoded once.
  Expected<const StepProgram *> programFor(const artifact::SymbolBindings &sizes,
                                           std::string &section);
  /// The arena plan of \p sizes' program (the artifact's when it holds).
  /// \p note says why the artifact's plan was not used, if it was not.
  Expected<ArenaPlan> planFor(const artifact::SymbolBindings &sizes, std::string &note);
  Expected<Shape *> prepareShape(const artifact::SymbolBindings &sizes,
                                 const WeightLoader &loadWeight);
  /// The runner of \p sizes with \p tuning's choices and cuDNN \p cudnnFor.
  Expected<std::unique_ptr<ProgramRunner>>
  prepareRunner(const artifact::SymbolBindings &sizes, const WeightLoader &loadWeight,
                const TuningDb *tuning, const CudnnAttention *cudnnFor, bool printNote);
  /// The loader of the persistent tensors programs name: from \p weights
  /// by the artifact's parameter list, --init random, or the artifact's own
  /// values (WeightLoading.cpp).
  WeightLoader makeWeightLoader(const std::vector<artifact::SafetensorsFile> *weights);
  /// Runs the init program once at \p sizes: its results become named
  /// tensors; what only it read is freed (WeightLoading.cpp).
  Status runInitProgram(const StepProgram &init, const StepProgram &step,
                        const artifact::SymbolBindings &sizes, const WeightLoader &loadWeight);
  const Device *device = nullptr;
  const CublasLt *lt = nullptr;
  cublasLtHandle_t handle = nullptr;
  /// One allocation for the named tensors every step needs (parameters,
  /// optimizer state, accumulators, weights): one per tensor would round
  /// each up to the allocator's granularity (kiln/runtime/PersistentPool.h).
  std::unique_ptr<PersistentPool> pool;
  std::map<std::string, NamedTensor> store;
  std::vector<std::string> paramNames, stateNames;
  std::vector<KernelModule> modules;
  std::map<std::string, const KernelModule *> moduleIndex;
  std::map<std::string, std::string> moduleHashes; ///< module -> its image's hash
  struct {
    CUfunction kernel = nullptr;          ///< kiln_hold, if the support module has it
    unsigned long long *counter = nullptr; ///< mapped host memory the kernel polls
    CUdeviceptr deviceCounter = 0;
    unsigned long long ticket = 0;
    bool unavailable = false; ///< the host memory could not be mapped
  } hold;
  struct {
    CUfunction fill = nullptr, copy = nullptr;
    const KernelModule *module = nullptr; ///< theirs (also the fused LM head's kernels)
  } support;                              ///< The runtime's fill and copy kernels.
  const StepArtifact *artifact = nullptr;
  std::map<std::string, StepProgram> programs; ///< by section
  DeviceBuffer arena, workspace;
  std::map<std::string, Shape> shapes; ///< by key
  Shape *current = nullptr;
  std::unique_ptr<GraphCache> graphs;
  std::unique_ptr<CudnnAttention> cudnn;
  std::string cudnnNote; ///< why cuDNN was not loaded, if it was not
  /// kernels/kiln_fa90 for this device (Kiln's sm_90a attention forward);
  /// null: the artifact has none, or none for this device.
  const KernelModule *hopper = nullptr;
  /// The fused NF4 GEMM's module on sm_90 devices (null: none).
  const KernelModule *nf4Module = nullptr;
  friend Status loadNf4Gemm(StepExecutor &x, const artifact::StepProgram &program,
                            const Device &device);
  std::map<std::string, Shape> variants; ///< tuning variants, by graph key
  std::vector<std::pair<NamedTensor *, DeviceBuffer>> snapshot;
  TuningKey tuningKey;
  size_t variantGeneration = 0;
  Options options;
  std::optional<double> defaultLr;
  std::optional<double> lastGradNorm;
  /// The apply program (no size symbols: one runner for every shape).
  std::unique_ptr<ProgramRunner> apply;
  /// Resolves the loop programs of \p shape (LoopPrograms.cpp).
  Status prepareLoopPrograms(Shape &shape, const WeightLoader &loadWeight);
  /// Zeroed accumulators, named as the accum program's arguments.
  Status makeAccumulators(const artifact::SymbolBindings &sizes);
  /// The largest arena the loop programs need at \p sizes.
  Expected<size_t> loopArenaBytes(const artifact::SymbolBindings &sizes) const;
  Expected<ProgramOutputs> runLoopProgram(ProgramRunner &runner, const std::string &graphKey,
                                          int64_t stepNumber, int64_t draw, double lr);
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_STEPEXECUTOR_H
