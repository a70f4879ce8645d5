//===- ProgramRunner.h - One step program at fixed sizes --------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Internal to the runtime library: a program resolved at one shape's sizes
// (pointers, grids, cuBLASLt descriptors, cuDNN attention plans), recorded
// onto a stream by the StepExecutor. ProgramRunner.cpp resolves and records,
// GemmDescriptors.cpp builds the cuBLASLt descriptors.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_PROGRAMRUNNER_H
#define KILN_RUNTIME_LIB_PROGRAMRUNNER_H

#include "LoraGradPairPlan.h"
#include "kiln/artifact/ArenaScratch.h"
#include "kiln/runtime/Communicator.h"
#include "kiln/runtime/CudnnAttention.h"
#include "kiln/runtime/MemoryPlanSection.h"
#include "kiln/runtime/StepExecutor.h"

#include <array>

namespace kiln::runtime {

/// The shape of an attention launch at the run's sizes, from its buffers:
/// q and o [B, H, S, D], k and v [B, Hkv, L, D], gradients like their
/// operands, all of one dtype.
Expected<AttentionShape> attentionShape(const StepProgram &p, const AttentionRoles &a,
                                        const std::vector<std::vector<int64_t>> &shapes);

// Shared with the compiler's plan (MemoryPlanSection.h).
inline constexpr size_t kWorkspaceBytes = kGemmWorkspaceBytes;

/// Memory a runner places its buffers in; zero pointers: the runner
/// allocates its own. Runners of one executor share one arena and one GEMM
/// workspace: they run one at a time on one stream.
struct SharedMemory {
  CUdeviceptr arena = 0;
  size_t arenaBytes = 0;
  CUdeviceptr workspace = 0;
  /// kiln_fill and kiln_copy (kernels/SupportKernels.cu); null: memset and
  /// memcpy nodes.
  CUfunction fill = nullptr, copy = nullptr;
  /// cuDNN's fused attention for the launches that allow it; null: the
  /// generated kernels.
  const CudnnAttention *cudnn = nullptr;
  /// The data-parallel communicator for all_reduce ops; null: a run of one
  /// (outputs are the inputs).
  Communicator *communicator = nullptr;
  /// `kiln-run tune`'s choices for this machine (ProgramRunnerTuning.cpp).
  const TuningDb *tuning = nullptr;
  const TuningKey *tuningKey = nullptr;
  /// --attention kernels|cudnn: the database does not choose attention.
  bool attentionFixed = false;
  /// The support kernels' module (the fused LM head's kernels); null: none.
  const KernelModule *support = nullptr;
  /// kernels/kiln_fa90 (Kiln's sm_90a attention forward) where this device
  /// runs it and --attention allows it; null: none.
  const KernelModule *hopper = nullptr;
  /// Module name -> the hash of its image on this device: a launch's
  /// tuning entry is the kernel's, content and all (null: none).
  const std::map<std::string, std::string> *moduleHashes = nullptr;
  /// --thin-gemm on: GEMMs Kiln's thin-GEMM kernels take run through them
  /// (ProgramRunnerThinGemm.cpp), the others through cuBLASLt.
  bool thinGemm = false;
  /// An adapter's dT and dB GEMMs side by side over one Y run as one pass
  /// over Y (ProgramRunnerLoraPair.cpp): --lora-grad-pairs on.
  bool loraPairs = false;
  /// Kiln's fused NF4 GEMM (kernels/Nf4GemmKernels.cu) where this device
  /// runs it (sm_90); null: NF4 GEMMs stay dequantize + cuBLASLt.
  const KernelModule *nf4 = nullptr;
};

/// The persistent tensor a param, state or accum binding names in the
/// executor's store: accumulators (kiln-loop-programs) live under
/// "accum/<name>", apart from parameter names.
inline std::string persistentKey(const ProgramBinding &binding) {
  return binding.role == "accum" ? "accum/" + binding.name : binding.name;
}

/// Loads the fused NF4 GEMM into \p x where \p program has marked NF4
/// launches and \p device is sm_90 (ProgramRunnerNf4.cpp).
Status loadNf4Gemm(StepExecutor &x, const StepProgram &program, const Device &device);

class ProgramRunner {
public:
  ~ProgramRunner();
  /// Resolves every op of \p program at \p sizes, its buffers at \p plan's
  /// offsets in \p memory's arena (or an arena of its own).
  static Expected<std::unique_ptr<ProgramRunner>>
  prepare(const StepProgram &program, const std::string &origin, const Device &device,
          const CublasLt &lt, cublasLtHandle_t handle,
          const std::map<std::string, const KernelModule *> &modules,
          std::map<std::string, NamedTensor> &store, const WeightLoader &loadWeight,
          const artifact::SymbolBindings &sizes, const ArenaPlan &plan,
          const SharedMemory &memory = {});

  /// Enqueues every op, then the copies of new params/state into place.
  Status record(CUstream stream) const;
  /// Runs every op like record(), with an event pair around each, and
  /// returns each op's device time (no graph: launch gaps are excluded).
  Expected<std::vector<ActionTime>> profile(CUstream stream) const;
  Status upload(int id, const std::string &bytes, CUstream stream) const;
  Expected<std::string> downloadBuffer(int id) const;

  const StepProgram &getProgram() const { return program; }
  size_t arenaBytes() const { return arenaSize; }
  /// The compiler's memory plan placed the arena (not a run-time plan).
  bool usedArtifactPlan = false;
  size_t launches = 0, gemms = 0;
  /// Attention launches run by cuDNN, by kiln_fa90 (sm_90a), and those left
  /// to the generated kernel.
  size_t cudnnAttention = 0, kernelAttention = 0, hopperAttention = 0;
  /// Why the first attention launch that cuDNN could not take stayed a kernel.
  std::string attentionNote;
  /// cuDNN's workspace and row statistics (AttentionScratch.cpp): bytes in
  /// the GEMM workspace or the arena's free space (no memory beyond the
  /// plan), and bytes allocated beside the plan where neither had room.
  size_t scratchInPlan = 0, scratchOutside = 0;

  // Tuning (ProgramRunnerTuning.cpp).
  /// GEMMs and attention launches chosen by the tuning database, those at
  /// the defaults, and why a matching entry was not used (the first).
  size_t tunedOps = 0, defaultOps = 0;
  /// GEMMs run by Kiln's thin-GEMM kernels (--thin-gemm on).
  size_t thinGemms = 0;
  /// dT/dB GEMM pairs run by kernels/LoraGradPair.cuh (two GEMMs each).
  size_t loraPairCount = 0;
  std::string tuningNote;
  /// The attention launches' database hash (empty: none) and label.
  std::string attentionHash, attentionLabel;
  /// For kiln-run tune (StepExecutor's GemmSite).
  std::vector<StepExecutor::GemmSite> getGemmSites() const;
  Expected<std::vector<cublasLtMatmulAlgo_t>> getGemmCandidates(size_t gemm, int topK) const;
  /// StepExecutor::getGemmSearchSpace (GemmSearch.cpp).
  Expected<std::vector<cublasLtMatmulAlgo_t>>
  getGemmSearchSpace(size_t gemm, const std::vector<cublasLtMatmulAlgo_t> &seeds,
                     size_t limit) const;
  /// Enqueues GEMM \p gemm with \p algo reading \p a and \p b (record()
  /// runs each GEMM through it with its own).
  Status enqueueGemm(size_t gemm, const cublasLtMatmulAlgo_t &algo, CUdeviceptr a, CUdeviceptr b,
                     CUstream stream) const;
  /// For kiln-run tune: the launches that have variants (StepExecutor's LaunchSite).
  std::vector<StepExecutor::LaunchSite> getLaunchSites() const;
  /// Enqueues launch \p site (an index into getLaunchSites) with its shape \p shape.
  Status enqueueLaunch(size_t site, size_t shape, CUstream stream) const;
  /// Copies the data inputs (role "input") of \p other, a runner of the same
  /// program at the same sizes, into this one's.
  Status copyInputsFrom(const ProgramRunner &other, CUstream stream) const;
  // NF4 GEMMs (ProgramRunnerNf4.cpp, kiln/runtime/Nf4Gemm.h).
  /// Marked NF4 GEMMs that ran fused, those left to dequantize + cuBLASLt
  /// though the kernel could run them, dequantize launches skipped, and why
  /// the first marked one cannot run fused.
  size_t nf4Marked = 0, nf4Fused = 0, nf4Dequant = 0, nf4Skipped = 0;
  std::string nf4Note;
  std::vector<StepExecutor::Nf4Site> getNf4Sites() const;
  /// Enqueues NF4 site \p site: the fused kernel, or its dequantize launch
  /// and cuBLASLt GEMM (the default).
  Status enqueueNf4Site(size_t site, bool fused, CUstream stream) const;
  /// record() calling \p beforeAction(i) before op i.
  Status recordWithHook(CUstream stream, const std::function<Status(size_t)> &beforeAction) const;

private:
  struct Launch {
    std::string name;
    CUfunction function = nullptr;
    unsigned grid = 1, block = 1, shared = 0;
    std::vector<CUdeviceptr> pointers;
    std::vector<int64_t> symbols;
    std::vector<void *> params;
    // Launch variants (ProgramRunnerTuning.cpp): per and block of the
    // default then of the artifact's variants, the grid of each at these
    // sizes; the tuning database's hash and shape; the buffers' ids.
    std::vector<std::pair<int64_t, int64_t>> shapes;
    std::vector<unsigned> grids;
    std::string hash, shape, label;
    size_t action = 0;
    std::vector<int> args;
  };
  struct Gemm {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t first = nullptr, second = nullptr, result = nullptr;
    cublasLtMatmulAlgo_t algo{};
    CUdeviceptr a = 0, b = 0, c = 0;
    float alpha = 1, beta = 0; // beta 1: C accumulates in place (LoRA sums, the fused head)
    std::string label;         // "gemm MxNxK" for profiles
    // The tuning database's view: the signature's hash, "m=..,n=..,k=..,batch=..".
    std::string hash, shape;
    size_t action = 0, cBytes = 0;
    artifact::DType cType = artifact::DType::F32;
    // The types cublasLtMatmulAlgoInit needs, the sizes (GemmSearch.cpp).
    cudaDataType_t abType = CUDA_R_32F, outType = CUDA_R_32F;
    uint64_t m = 0, n = 0, k = 0;
    // The descriptor as stated (row-major, row strides), for the thin-GEMM
    // kernels; `thin` set: they run it instead of cuBLASLt.
    bool transA = false, transB = false, epilogue = false;
    int64_t lda = 0, ldb = 0, ldc = 0, batch = 1;
    struct Thin {
      CUfunction function = nullptr;
      std::string kernel;
      unsigned gridX = 0, gridY = 0, splits = 1, threads = 0, shared = 0;
    } thin;
  };
  struct Fill {
    CUdeviceptr target = 0;
    size_t elements = 0, elementSize = 1;
    uint32_t pattern = 0;
  };
  struct Copy {
    CUdeviceptr source = 0, target = 0;
    size_t bytes = 0;
  };
  struct Attention {
    std::shared_ptr<CudnnAttention::Plan> plan;
    AttentionPointers pointers;
    CUdeviceptr workspace = 0; ///< cuDNN's workspace (0: it needs none)
    std::string label;
  };
  struct AllReduce {
    int64_t bucket = 0;
    std::vector<Communicator::Item> items;
  };
  /// A GEMM the fused NF4 kernel can run (Nf4Gemm.h's pair, resolved).
  struct Nf4Run {
    CUfunction function = nullptr;
    unsigned gridX = 1, gridY = 1;
    CUdeviceptr a = 0, codes = 0, absmax = 0, absmaxCodes = 0, scale = 0, offset = 0, c = 0;
    int m = 0, n = 0, k = 0;
    float alpha = 1, beta = 0;
    bool doubleQuant = false, fused = false;
    size_t gemm = 0;         ///< gemmList index of the cuBLASLt GEMM it replaces
    size_t launch = 0;       ///< launchList index of the dequantize launch
    size_t gemmAction = 0;   ///< that GEMM's action
    size_t launchAction = 0; ///< the dequantize launch's action
    std::string label, hash, shape;
  };
  enum class Action {
    Launch,
    Gemm,
    Fill,
    Copy,
    Attention,
    AllReduce,
    AllReduceWait,
    Nf4Gemm,    ///< nf4List: the fused kernel instead of a GEMM
    Skipped,    ///< a dequantize launch no reader needs (nothing recorded)
    LoraPair,   ///< pairList: an adapter's dT and dB GEMMs in one pass
    PairedGemm  ///< gemmList: the second GEMM of a LoraPair (nothing recorded)
  };
  /// Two GEMMs run by kernels/LoraGradPair.cuh (ProgramRunnerLoraPair.cpp).
  struct LoraPair {
    CUfunction kernel = nullptr, finish = nullptr;
    unsigned gridX = 1, gridY = 1, shared = 0, finishGrid = 1;
    pair::LaunchArgs args;
    pair::FinishArgs finishArgs;
    std::array<size_t, 2> gemms{}; ///< gemmList indices
    std::string label;
  };

  ProgramRunner(const Device &device, const CublasLt &lt, StepProgram program)
      : device(&device), lt(&lt), program(std::move(program)) {}
  Status fail(const std::string &what) const { return Error{origin + ": " + what}; }
  Status recordAction(std::pair<Action, size_t> action, CUstream stream) const;
  /// The fused LM head's launches and GEMMs at these sizes (LinearCrossEntropyRun.h).
  Status prepareHead(const LinearCrossEntropy &head,
                     const std::vector<std::vector<int64_t>> &shapes, const SharedMemory &memory);
  Status recordResultCopies(CUstream stream) const;
  /// The NF4 pairs at \p sizes and, for each, the fused kernel or the
  /// default (KILN_NF4_GEMM, the database's "nf4" entry, else the fixed
  /// rule: dequantize + cuBLASLt); rewrites the actions.
  Status prepareNf4(const artifact::SymbolBindings &sizes, const SharedMemory &memory);
  Status enqueueNf4(const Nf4Run &run, bool fused, CUstream stream) const;
  Status recordFill(const Fill &fill, CUstream stream) const;
  Status recordCopy(const Copy &copy, CUstream stream) const;
  std::string actionLabel(std::pair<Action, size_t> action) const;
  /// An all_reduce or its wait (ProgramRunnerAllReduce.cpp).
  static Status prepareAllReduce(ProgramRunner &r, const ProgramOp &op);
  Status recordAllReduce(std::pair<Action, size_t> action, CUstream stream) const;
  /// The cuBLASLt descriptors, layouts and algorithm of GEMM \p op at
  /// \p sizes (GemmDescriptors.cpp).
  Expected<Gemm> buildGemm(const ProgramOp &op, const artifact::SymbolBindings &sizes,
                           const std::string &where) const;
  /// The database's algorithm for \p g, when it has one and cuBLASLt still
  /// offers it among its top K (ProgramRunnerTuning.cpp).
  Status applyTunedGemm(Gemm &g, const SharedMemory &memory);
  /// With memory.thinGemm: Kiln's thin-GEMM kernel for \p g where its plan
  /// takes the descriptor (ProgramRunnerThinGemm.cpp); cuBLASLt otherwise.
  Status applyThinGemm(Gemm &g, const SharedMemory &memory);
  Status enqueueThinGemm(const Gemm &g, CUstream stream) const;
  /// With memory.loraPairs: adjacent dT/dB GEMMs LoraGradPairPlan takes
  /// become LoraPair actions; the others stay.
  Status prepareLoraPairs(const SharedMemory &memory);
  Status enqueueLoraPair(const LoraPair &p, CUstream stream) const;
  static pair::Gemm describePair(const Gemm &g);
  /// The launch shapes of \p launch (op \p op at \p items) and the one the
  /// tuning database chose (ProgramRunnerTuning.cpp).
  void applyTunedLaunch(Launch &launch, const ProgramOp &op, int64_t items,
                        const SharedMemory &memory);
  /// The algorithm \p config names for \p g (cublasLtMatmulAlgoInit, the
  /// attributes), if cublasLtMatmulAlgoCheck accepts it for \p g within
  /// the GEMM workspace (GemmSearch.cpp).
  Expected<cublasLtMatmulAlgo_t> buildConfiguredAlgo(const Gemm &g,
                                                     const GemmConfig &config) const;
  /// cublasLtMatmulAlgoCheck accepts \p algo for \p g within the workspace.
  bool checkAlgo(const Gemm &g, const cublasLtMatmulAlgo_t &algo) const;
  /// Who runs this program's attention at \p sizes: memory.cudnn, or null
  /// where the tuning database chose the kernels; sets attentionHash.
  const CudnnAttention *chooseAttention(const std::vector<std::vector<int64_t>> &shapes,
                                        const artifact::SymbolBindings &sizes,
                                        const SharedMemory &memory);

  /// Points each cuDNN attention at its statistics (\p statsPointer, per
  /// \p stats entry) and workspace (\p workspaceOf, per op of
  /// \p workspaceNeeds: op index, bytes): the GEMM workspace where it fits,
  /// else the arena's free space over the ops using it, else buffers of
  /// their own.
  Status placeAttentionScratch(const std::vector<artifact::ScratchRequest> &stats,
                               const std::vector<std::pair<size_t, size_t>> &workspaceNeeds,
                               const ArenaPlan &plan, const SharedMemory &memory,
                               std::vector<CUdeviceptr> &statsPointer,
                               std::map<size_t, CUdeviceptr> &workspaceOf);

  const Device *device;
  const CublasLt *lt;
  cublasLtHandle_t handle = nullptr;
  StepProgram program;
  std::string origin;
  std::vector<CUdeviceptr> pointers;
  std::vector<size_t> bytes;
  std::vector<int64_t> reachable; ///< reachableElements at the program's sizes
  std::vector<DeviceBuffer> owned;
  DeviceBuffer ownArena, ownWorkspace;
  CUdeviceptr arena = 0, workspace = 0;
  CUfunction fillKernel = nullptr, copyKernel = nullptr;
  size_t arenaSize = 0;
  std::vector<std::pair<Action, size_t>> actions;
  std::vector<size_t> opAction; ///< per op: its first action (SIZE_MAX: none)
  std::vector<Nf4Run> nf4List;
  std::vector<LoraPair> pairList;
  std::vector<Launch> launchList;
  std::vector<size_t> tunableLaunches; // launchList indices with variants
  std::vector<Gemm> gemmList;
  std::vector<Fill> fillList;
  std::vector<Copy> copyList, resultCopies;
  std::vector<Attention> attentionList;
  std::vector<AllReduce> allReduceList;
  const CudnnAttention *cudnn = nullptr;
  Communicator *communicator = nullptr;
  DeviceBuffer attentionWorkspace;
  DeviceBuffer thinCounters; ///< the split thin GEMMs' tile counters, zeroed once
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_LIB_PROGRAMRUNNER_H
