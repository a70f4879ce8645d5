//===- Cuda.h - CUDA C++ from kiln_kernel.kernel bodies ---------*- C++ -*-===//
//
// Emission runs in three small steps (as CIRCT's ExportVerilog does):
// prepareKernel checks the body and collects what the ABI needs,
// legalizeNames picks C identifiers, printKernel writes the source.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_CUDA_H
#define KILN_CODEGEN_CUDA_H

#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <string>

namespace kiln::codegen {

/// What printing one kernel needs, gathered and checked up front.
struct KernelPlan {
  mutable kernel::KernelOp kernel; // op accessors are not const
  kernel::FusionKind kind;
  mlir::Operation *anchor = nullptr;             // row / scan / ... op
  llvm::SmallVector<mlir::BlockArgument> inputs; // kernel params, in order
  llvm::SmallVector<mlir::Value> outputs;        // yielded values
  llvm::SmallVector<std::string> symbols;        // int64 params
};

/// Step 1: checks that every op of the body has an emitter and that the
/// body matches its kind; one error on the op that does not.
mlir::FailureOr<KernelPlan> prepareKernel(kernel::KernelOp kernel);

/// Step 2: C identifiers for the kernel, its parameters and the symbols.
struct NameTable {
  std::string kernel;
  llvm::DenseMap<mlir::Value, std::string> params; // inputs and outputs
  llvm::StringMap<std::string> symbols;            // size symbol -> C name
};
NameTable legalizeNames(const KernelPlan &plan);

/// A printed kernel: the extern "C" __global__ function and what its
/// prelude needs. Kernels compile alone (standalone()) or several to one
/// NVRTC program behind one prelude.
struct CudaSource {
  std::string name;
  std::string comment; // what the kernel computes, its parameters
  std::string body;    // the __global__ function
  bool bf16 = false, f16 = false;
  bool dynamicMap8 = false;    // uses the 8-bit dynamic map (NF4 double quant)
  bool flashAttention = false; // calls kiln_flash (cuda/FlashAttention.cuh)
  std::string standalone() const;
};
/// Device helpers (block reductions, atomics), the fp16/bf16 headers and,
/// when asked, the 8-bit dynamic quantization map and the tiled attention
/// kernels.
std::string cudaPrelude(bool bf16, bool f16, bool dynamicMap8 = false, bool flashAttention = false);
/// The tiled tensor-core attention kernels' device code (kiln_flash).
const char *flashAttentionPrelude();
/// Kiln's sm_90a attention forward (kiln_fa90, cuda/FlashAttention90.cuh):
/// wgmma and setmaxnreg, so it compiles for sm_90a only.
const char *flashAttention90Prelude();
/// Its backward (kiln_fa90::bwd, cuda/FlashAttention90Backward.cuh): goes
/// after flashAttention90Prelude(), sm_90a only.
const char *flashAttention90BackwardPrelude();

/// Step 3: the kernel's CUDA C++.
mlir::FailureOr<CudaSource> printKernel(const KernelPlan &plan, const NameTable &names);

/// All three steps.
mlir::FailureOr<CudaSource> emitCudaKernel(kernel::KernelOp kernel);

/// A tiled bf16 attention kernel with a mask as Kiln's sm_90a kernel
/// (kiln_fa90, docs/codegen.md "Attention on Hopper"): "kiln_fa90_" + the
/// kernel's name, its parameters (inputs, outputs) followed by kiln_fa90's
/// buffers — forward: float *lse; backward: const float *lse, const float
/// *dd, float *dqAcc, T *dK, T *dV — then its symbols; the body calls
/// kiln_fa90::forward / bwd::backward with the kernel's own mask as an
/// elementMask. Launch geometry: kiln/artifact/HopperAttention.h. Compiles
/// after cudaPrelude() and the kiln_fa90 preludes, for sm_90a.
mlir::FailureOr<CudaSource> emitHopperAttentionKernel(kernel::KernelOp kernel);

} // namespace kiln::codegen

#endif // KILN_CODEGEN_CUDA_H
