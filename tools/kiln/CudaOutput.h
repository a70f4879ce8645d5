//===- CudaOutput.h - kiln compile --emit=cuda ------------------*- C++ -*-===//

#ifndef KILN_TOOLS_KILN_CUDAOUTPUT_H
#define KILN_TOOLS_KILN_CUDAOUTPUT_H

#include "kiln/Codegen/Cuda.h"
#include "kiln/Codegen/Nvrtc.h"
#include "kiln/Dialect/Graph/GraphAttrs.h"
#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringMap.h"

#include <optional>
#include <string>
#include <vector>

namespace kiln::driver {

class CompileProgress;

struct CudaOutputOptions {
  std::vector<std::string> archs; // empty: sources only
  std::string cacheDir;
  bool verbose = false;
  CompileProgress *progress = nullptr; // stage and NVRTC module lines
  mlir::TimingScope *timing = nullptr; // --timing: emission, NVRTC, write
};

/// The kernels of a lowered module, emitted and (for options.archs)
/// compiled by NVRTC: modules[i] holds kernels ranges[i] of sources.
struct KernelBuild {
  std::vector<codegen::CudaSource> sources;
  std::vector<kernel::KernelOp> kernelOps;
  std::vector<codegen::KernelSource> modules;
  std::vector<std::pair<size_t, size_t>> ranges;
  std::vector<codegen::CompiledKernel> compiled; // empty without archs
  double seconds = 0;
};
/// Returns the exit code (errors are printed).
int buildKernels(mlir::ModuleOp module, const CudaOutputOptions &options, KernelBuild &build);

/// kernels/kiln_fa90 (HopperAttentionOutput.cpp): Kiln's sm_90a attention
/// forward for the step's replaceable attention forwards, when options.archs
/// names sm_90. Returns the exit code.
int addHopperAttentionSections(mlir::ModuleOp module, const CudaOutputOptions &options,
                               std::vector<std::pair<std::string, std::string>> &sections);

/// -o FILE.kiln for a lowered module: the meta/guards/params sections
/// (computed before lowering), kernel images per NVRTC module, the step
/// program of @main and the init program of @kiln_init. Returns the exit code.
/// Adds "value" (hex of the dtype's little-endian bytes) to the frozen,
/// non-init entries of the params section whose tensor the ONNX model holds
/// and that have at most kInlineValueElements elements: kiln-run's fallback
/// when the weights file lacks them (exporter-folded RoPE tables are not in
/// a PyTorch state_dict) and its value instead of --init random.
inline constexpr int64_t kInlineValueElements = 4096;
int addInlineValues(std::vector<std::pair<std::string, std::string>> &sections,
                    llvm::StringRef model);

int writeArtifact(mlir::ModuleOp module, std::vector<std::pair<std::string, std::string>> sections,
                  llvm::StringRef path, const CudaOutputOptions &options);

/// DIR/<kernel>.cu, DIR/<kernel>.<arch>.cubin, DIR/<kernel>.ptx,
/// DIR/step.mlir and DIR/manifest.json. Returns the exit code.
int writeCuda(mlir::ModuleOp module, llvm::StringRef dir, const CudaOutputOptions &options);

/// Kernels per NVRTC program (module<N>): one prelude and one compiler
/// start-up serve them all. Fixed, so cache keys match across machines.
inline constexpr size_t kKernelsPerModule = 16;

/// DIR/check/<kernel>/: random inputs, reference outputs (the interpreter
/// on the kernel's body) and the launch at these symbol values, for the
/// runtime's kiln-kernel-check. A fresh seed per call unless given.
int writeKernelChecks(mlir::ModuleOp module, llvm::StringRef dir, llvm::StringRef sizes,
                      std::optional<uint64_t> seed);

/// Kernels, GEMMs and bytes the kernels read + write per step.
struct StepCounts {
  unsigned kernels = 0, gemms = 0;
  SymExprAttr bytes;
};
/// One kernel per graph op that is not a GEMM, source or view.
StepCounts countUnfused(mlir::func::FuncOp func);
/// Launches and GEMMs of a lowered step.
StepCounts countLowered(mlir::func::FuncOp func);
void printFusionReport(llvm::StringRef name, const StepCounts &before, const StepCounts &after,
                       const llvm::StringMap<int64_t> &sizes, llvm::raw_ostream &os);

} // namespace kiln::driver

#endif // KILN_TOOLS_KILN_CUDAOUTPUT_H
