//===- OpClassification.h - How graph ops map onto kernels ------*- C++ -*-===//
//
// Which graph ops are GEMMs, which are computed per element (and so chain
// freely), which need a whole row and which need a kernel shape of their
// own, and what a kernel body implies for its launch: the op classes and
// launch geometry that fusion, lowering and the CUDA emitter agree on. Part
// of the kernel dialect library, so codegen needs no pass library.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_KERNEL_OPCLASSIFICATION_H
#define KILN_DIALECT_KERNEL_OPCLASSIFICATION_H

#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "mlir/IR/Operation.h"

namespace kiln::kernel {

enum class OpClass {
  Gemm,        // kiln.matmul: a cuBLASLt call
  Source,      // kiln.parameter, kiln.constant: buffers, no kernel
  View,        // reshape / squeeze / unsqueeze: row-major views when alone
  Elementwise, // one output element from operand elements at computed indices
  Reduce,      // reduce_sum/mean/max: an inner loop per output element
  Row,         // softmax, norms, their gradients, cross entropy: per row
  Scan,        // cumsum
  Scatter,     // scatter_add
  Attention,   // attention
  AttentionGrad,
  Quantize,    // nf4_quantize: absmax per block, then codes
  Collective,  // kiln.all_reduce: a step-program op of its own (NCCL), no kernel
  ChunkedHead, // linear_cross_entropy(_grad): GEMMs and row kernels the runtime runs per chunk
  Unsupported,
};

OpClass classifyOp(mlir::Operation *op);

/// Row ops reduce over the trailing dims [axis, rank) of their first operand.
/// Returns that axis, or -1 when the op is not a row op the emitter handles.
int64_t rowAxis(mlir::Operation *op);

/// How a kernel output must be initialized before the launch: kernels that
/// accumulate with atomic adds (norm weight gradients, the mean loss,
/// attention dk/dv, scatter-add) need zeros or the scatter destination.
enum class OutputInit { None, Zero, CopyOperand };
/// For a value yielded by a fusion / kernel body. `copyFrom` receives the
/// body value to copy for CopyOperand.
OutputInit outputInit(mlir::Value yielded, mlir::Value *copyFrom = nullptr);

/// A loop kernel's iteration segments: the distinct element counts of its
/// outputs, in order. Outputs of one count are computed at the same flat
/// index; a multi-tensor kernel (the optimizer update) has several.
llvm::SmallVector<SymExprAttr> loopSegments(mlir::Block &body);

/// Elements per thread of a one-segment loop kernel that moves 16 bytes per
/// access: 16 / the widest element of its inputs and outputs, when the
/// element count is a multiple of it for every value of the symbols (buffers
/// start 16-byte aligned). 1 when that does not hold.
int64_t loopVectorWidth(mlir::Block &body);

/// How a row kernel walks its rows. With a static row length that is a
/// multiple of the vector width (16 bytes / the widest element of the
/// body's inputs and outputs), each thread holds `chunks` vectors of
/// `width` elements of every input it reads at the row's own offset (or at
/// the column: weights) in registers, loaded once with 16-byte (or
/// narrower) accesses before the first pass, and the row's outputs leave
/// the same way: a warp per row (8 rows per block of 256) for rows of fewer
/// than 256 vectors, a block of 256 per row for longer ones. `width` 1 is the scalar template
/// (one block per row, each pass re-reading the row), for dynamic or
/// ragged rows and rows too long for registers.
struct RowLayout {
  int64_t width = 1;           ///< elements per vector access; 1: scalar template
  int64_t cols = 0;            ///< the row length (static)
  int64_t threadsPerRow = 256; ///< 32 (a warp) or 256 (the block)
  int64_t chunks = 0;          ///< vectors per thread (the last maybe partial: ragged)
  bool ragged = false;         ///< threadsPerRow * chunks vectors exceed the row
  int64_t rowsPerBlock() const { return 256 / threadsPerRow; }
};
/// At most this many elements of one input per thread stay in registers.
inline constexpr int64_t kRowRegisterElements = 32;
RowLayout rowLayout(mlir::Block &body);

/// The launch geometry of a kernel body (see kiln_kernel.launch).
struct LaunchShape {
  SymExprAttr items;
  int64_t itemsPerBlock = 256;
  int64_t block = 256;
  SymExprAttr shared;
};
LaunchShape launchShape(FusionKind kind, mlir::Block &body);

/// A loop kernel of kiln-row-dot (`kiln.row_dot`): its body also multiplies
/// elementwise outputs [rows, K] by small matrices (`kiln.matmul`), one
/// block per 32 rows (lib/Codegen/RowDotKernel.cpp).
bool isRowDotKernel(KernelOp kernel);
/// Its rows per block, 16 or 32 (`kiln.row_dot`'s value).
int64_t rowDotRowsPerBlock(KernelOp kernel);
/// Whether a row-dot kernel loads each step's inputs during the step
/// before (`kiln.row_dot_prefetch`, kiln-row-dot's `prefetch`).
bool rowDotPrefetches(KernelOp kernel);
constexpr int64_t kRowDotThreads = 256, kRowDotStep = 256;

/// Whether an attention / attention_grad op runs as the tiled tensor-core
/// kernel (lib/Codegen/cuda/FlashAttention.cuh): q, k, v (and the gradient) of
/// one bf16/f16 type and a static head dim, equal for q/k and v, that is a
/// multiple of 16 and at most 128. Blocks of 128 threads own 64 query rows.
bool isFlashAttention(mlir::Operation *op);
/// Shared memory of a flash attention block (forward or backward): the
/// kernels' tile layout, in bytes.
int64_t flashAttentionSharedBytes(int64_t headDim, bool backward);
inline constexpr int64_t kFlashAttentionRows = 64;

/// The anchor op of a non-loop kernel body (row / scan / scatter /
/// attention op); null for loop kernels.
mlir::Operation *anchorOp(FusionKind kind, mlir::Block &body);

} // namespace kiln::kernel

#endif // KILN_DIALECT_KERNEL_OPCLASSIFICATION_H
