//===- CudaPrinter.h - The printer of one kernel ----------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A kernel is a loop over work items (elements, rows, query rows, ...) and
// the tensor ops of its body are computed per element at an index: `value(v,
// idx)` prints the statements that compute element idx of v and returns the
// C expression holding it. Index-mapping ops (broadcasts, transposes,
// slices, gathers, ...) only change the index handed to their operand, so
// nothing inside a kernel is ever materialized. The kind templates (row,
// scan, scatter, attention) decide where the loops and block reductions go.
//
// Internal to KilnCodegen. The printer is one struct whose members live
// by responsibility: CudaEmitter.cpp (lines, scopes, sizes, indices, loads
// and stores), CudaElements.cpp (the element expression of every op),
// one file per kernel template (LoopKernel, RowKernel, AttentionKernel,
// ScanScatterQuantizeKernels) and CudaPrinter.cpp (signature, entry
// points); CudaPrelude.cpp holds the device helpers every source starts
// with.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_CODEGEN_CUDAPRINTER_H
#define KILN_LIB_CODEGEN_CUDAPRINTER_H

#include "kiln/Codegen/Cuda.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Kernel/FusionPolicy.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringSet.h"

#include <map>
#include <optional>

namespace kiln::codegen::detail {

using mlir::ArrayRef;
using mlir::FailureOr;
using mlir::LogicalResult;
using mlir::Operation;
using mlir::RankedTensorType;
using mlir::SmallVector;
using mlir::StringRef;
using mlir::Twine;
using mlir::Type;
using mlir::Value;

using Index = SmallVector<std::string, 4>;

inline RankedTensorType typeOf(Value v) { return mlir::cast<RankedTensorType>(v.getType()); }

inline bool isNarrowFloat(Type t) { return t.isBF16() || t.isF16(); }

/// bf16/f16 values are computed in float but must hold what the graph's type
/// holds, as the interpreter's values do: every bf16/f16 result inside a
/// fused kernel is rounded to its type, so fusion changes where values live,
/// never what they are. Loads are exact already.
/// Whether `expr` is exactly one call `fn(...)` (a load that widens).
bool isSingleCall(StringRef expr, StringRef fn);
std::string roundedToStorage(Type t, const std::string &expr);

/// The C type values are computed in: bf16/f16 widen to float.
std::string computeType(Type t);
/// The C type a buffer of \p t holds.
std::string storageType(Type t);

struct Printer {
  const KernelPlan &plan;
  const NameTable &names;
  std::string body;
  std::string constants; // literal tables at the top of the kernel
  unsigned indent = 1;
  unsigned counter = 0;
  /// Computed elements, one map per open C scope: (value, index) -> name.
  std::vector<std::map<std::pair<void *, std::string>, std::string>> scopes{1};
  llvm::DenseMap<Value, std::string> literalTables;
  LogicalResult status = mlir::success();

  Printer(const KernelPlan &plan, const NameTable &names) : plan(plan), names(names) {}
  /// Print the tiled attention kernel as its kiln_fa90 variant (sm_90a):
  /// the same parameters and mask, kiln_fa90's extra buffers after the
  /// outputs (hopperAttentionKernel in kiln/Codegen/Cuda.h).
  bool hopper = false;

  std::string fresh(StringRef prefix) { return (prefix + Twine(counter++)).str(); }
  void line(const Twine &text);
  /// \p laneUniform: a vector loop's lanes all take this block or none
  /// (a concat branch on an aligned lane index); see laneChunk.
  void open(const Twine &header, bool laneUniform = false);
  void close(StringRef tail = "}");
  std::string key(ArrayRef<std::string> idx) { return llvm::join(idx, ","); }
  std::string valueKey(Value v, ArrayRef<std::string> idx);
  void remember(Value v, ArrayRef<std::string> idx, std::string name);
  const std::string *recall(Value v, ArrayRef<std::string> idx);
  void fail(Operation *op, const Twine &message);

  //===--------------------------------------------------------------------===//
  // Sizes and indices
  //===--------------------------------------------------------------------===//

  std::string dim(Dim d);
  SmallVector<std::string> dims(Value v);
  std::string numel(Value v);
  /// Records that `idx` in a tensor of `sizes` is flat offset `flat`, so
  /// reshapes between shapes of one element count land on the same names
  /// (and on the elements already computed under them).
  void relate(const std::string &flat, ArrayRef<std::string> idx, ArrayRef<std::string> sizes);
  const std::string *related(StringRef kind, const std::string &what, ArrayRef<std::string> sizes);
  /// Row-major offset of idx in a tensor with these dims.
  std::string linear(ArrayRef<std::string> idx, ArrayRef<std::string> sizes);
  /// Splits a flat offset into indices (prints the divisions once).
  Index delinearize(const std::string &flat, ArrayRef<std::string> sizes);
  /// Numpy broadcasting: the index of `operand` when read at `idx` of a
  /// result of rank idx.size().
  Index broadcastIndex(Value operand, ArrayRef<std::string> idx);

  //===--------------------------------------------------------------------===//
  // Loads, stores, conversions
  //===--------------------------------------------------------------------===//

  /// Set while printing the lane loop of a vectorized loop kernel: loads
  /// at `flat` read the 16-byte chunk loaded before the loop.
  bool vectorLanes = false;
  llvm::SetVector<Value> vectorInputs;
  /// The vector loop's width (0 outside one): its lanes' `flat` is `base +
  /// lane`, base a multiple of it; delinearize splits `base` alone.
  int64_t laneWidth = 0;
  /// Names known to be multiples of laneWidth: `base` and innermost indices
  /// split from one over a size that is a multiple of it.
  llvm::StringSet<> laneAligned;
  /// Per open C scope (parallel to `scopes`): whether it is lane-uniform.
  std::vector<bool> uniformScopes{true};
  /// `scopes.size()` inside the lane loop (0 outside one).
  size_t laneLoopDepth = 0;
  /// A lane-contiguous load: its register (declared before the lane
  /// loop), the address it reads and the line that loads it.
  struct LaneChunk {
    std::string reg;
    Type element;
    std::string address, line;
  };
  SmallVector<LaneChunk> laneChunks;
  /// Where the sides of a lane-uniform concat load alike (the same vector
  /// types in the same order, addresses from names declared before it),
  /// one load per position at the side's address (`c ? a : b`), before
  /// the branches: a warp whose threads take different sides issues one
  /// set of loads, not one per side (RoPE's rotate-half halves).
  /// \p start: where the concat's branches begin in `body`; \p sides: the
  /// laneChunks index where each side's loads begin, then the end.
  void mergeSideLoads(size_t start, ArrayRef<std::string> conds, ArrayRef<size_t> sides);
  /// X when \p i is `(X + lane)` with X a multiple of laneWidth.
  std::optional<std::string> laneBase(const std::string &i);
  /// `(X + lane)` for an aligned X (recorded as aligned).
  std::string laneIndex(const std::string &x);
  /// `(offset + i)` and `(i - offset)`, cancelling one the other.
  std::string plusOffset(const std::string &i, const std::string &offset);
  std::string minusOffset(const std::string &i, const std::string &offset);
  static bool balanced(llvm::StringRef s);
  /// Inside the lane loop, where every block opened in it is lane-uniform,
  /// an input read at idx whose innermost index is `(X + lane)` (X aligned,
  /// the innermost size a constant multiple of the width): the lanes read
  /// one aligned vector, loaded once by lane 0 into registers every lane
  /// reads (`<in>_cN[lane]`). Null where the read stays scalar.
  std::optional<std::string> laneChunk(Value arg, ArrayRef<std::string> idx,
                                       ArrayRef<std::string> sizes);
  /// load() at linear(idx, sizes), through laneChunk where it applies.
  std::string loadAt(Value arg, ArrayRef<std::string> idx, ArrayRef<std::string> sizes);
  /// An element read through `ptr` (an lvalue of the storage type), widened.
  std::string widened(Type element, const std::string &ptr);

  /// A vectorized row kernel (rowLayout: width > 1): while its lanes print,
  /// loads at `flat` / `col` read the registers every thread loaded before
  /// the first pass (`<in>_v[c][lane]`, `<in>_w[c][lane]`), and row-shaped
  /// outputs go to `<out>_v[lane]`, stored as one vector per chunk.
  kernel::RowLayout rowVec;
  bool rowLanes = false;
  llvm::SetVector<Value> rowFlatInputs, rowColInputs;
  llvm::SetVector<unsigned> rowStored;

  std::string load(Value arg, const std::string &offset);
  std::string store(Type element, const std::string &value);
  std::string convert(const std::string &value, Type from, Type to);
  std::string literal(double v, Type element);
  std::string fn(StringRef name, Type element);

  /// Binds `name` as element idx of v (row outputs computed by a template).
  void bind(Value v, ArrayRef<std::string> idx, const std::string &name) { remember(v, idx, name); }

  /// Prints `T name = expr;` and remembers it.
  std::string let(Value v, ArrayRef<std::string> idx, const std::string &expr);

  //===--------------------------------------------------------------------===//
  // Element of a value at an index
  //===--------------------------------------------------------------------===//

  std::string value(Value v, ArrayRef<std::string> idx);
  std::string constant(kiln::ConstantOp k, ArrayRef<std::string> idx);
  std::string wrapIndex(const std::string &i, const std::string &size);
  std::string concat(ConcatOp cat, ArrayRef<std::string> idx);
  std::string pad(PadOp p, ArrayRef<std::string> idx);
  std::string gather(GatherOp g, ArrayRef<std::string> idx);
  std::string gatherNd(GatherNdOp g, ArrayRef<std::string> idx);
  std::string reduce(Operation *r, ArrayRef<std::string> idx);

  //===--------------------------------------------------------------------===//
  // Kernel templates
  //===--------------------------------------------------------------------===//

  int outputIndex(Value v);
  /// The output an atomically accumulated value adds into: the value itself,
  /// or its fp32 widening (kiln-lower-to-step accumulates bf16/f16 results
  /// in fp32 and converts afterwards).
  int accumulatorIndex(Value v);
  bool isAccumulator(unsigned i);
  std::string outName(unsigned i) { return "out" + std::to_string(i); }
  /// The row stride output \p i is written at (0: packed): the kernel's
  /// `kiln.out_row_strides`, set by kiln-lower-to-step when the output is a
  /// block of columns of a wider buffer (an in-place concatenation).
  int64_t outRowStride(unsigned i);
  /// Where output \p i holds its element at flat offset \p flat.
  std::string outIndex(unsigned i, const std::string &flat);
  /// The row stride input \p arg is read at (0: packed): the kernel's
  /// `kiln.in_row_strides`, set by kiln-lower-to-step when the input is a
  /// block of columns of a wider buffer (an in-place concatenation's part
  /// that this kernel reads too).
  int64_t inRowStride(Value arg);
  /// Where input \p arg holds its element at flat offset \p flat.
  std::string inIndex(Value arg, const std::string &flat);
  /// A vectorized row kernel's chunk `chunk` of row `row` in a block of
  /// columns of `type` whose rows are `stride` elements apart.
  std::string rowChunkAt(RankedTensorType type, int64_t stride);
  Type elementOf(Value v) { return typeOf(v).getElementType(); }

  /// Stores every output whose element count is `space` at flat offset
  /// `flat` (idx is the index of `shaped` at that offset).
  void storeOutputs(const std::string &flat, Value shaped, ArrayRef<std::string> idx, Dim space,
                    llvm::function_ref<bool(unsigned)> skip = nullptr);

  void loopKernel();

  /// `width` consecutive elements per thread: inputs read at the element's
  /// own offset and all outputs move as one 16-byte (or narrower) access;
  /// the lane loop is unrolled by the compiler.
  void vectorLoopKernel(int64_t width, Dim segment);
  /// One chunk of a vector loop (`chunk` in scope): the lanes and the
  /// stores of every output \p skip does not name. Returns the input loads,
  /// which the caller places before them (at `chunkLoadsAt`, or earlier).
  std::string vectorChunk(int64_t width, Dim segment, llvm::function_ref<bool(unsigned)> skip);
  /// The 16-byte (or narrower) vector of input \p arg at chunk \p chunk.
  std::string vectorInputLoad(Value arg, int64_t width, const std::string &chunk);
  /// Where in `body` vectorChunk's input loads belong.
  size_t chunkLoadsAt = 0;

  /// A loop whose rows also multiply small matrices (RowDotKernel.cpp).
  void rowDotKernel();

  /// Loops over the columns of the current row; `each` prints the body with
  /// the input index of this column.
  void forCols(const Index &lead, ArrayRef<std::string> trail,
               llvm::function_ref<void(const Index &)> each);
  std::string blockSum(const std::string &v) { return "kiln_block_reduce(" + v + ", red, false)"; }
  /// The sum (or max) over the current row's threads: the block, or the
  /// warp of a warp-per-row layout.
  std::string rowReduce(const std::string &v, bool isMax = false);
  /// The C type moving `width` elements of \p element in one access.
  static std::string vectorType(Type element, int64_t width);
  /// The vectorized row template's register loads and stores (RowKernel.cpp).
  std::string rowLoads(bool weights);

  void rowKernel();

  void crossEntropy(CrossEntropyOp ce, CrossEntropyGradOp ceGrad, const Index &lead,
                    ArrayRef<std::string> trail, Dim space, Value x);

  void scanKernel();
  void scatterKernel();

  /// bf16/f16 attention: the tiled tensor-core kernels of cuda/FlashAttention.cuh
  /// read q, k, v (and dout) as dense kernel inputs; the mask (maybe a fused
  /// producer) and the result stores are lambdas.
  void flashAttentionKernel(bool backward);
  void hopperAttentionCall(bool backward, Value mask, const std::string &pointers, bool causal,
                           double scale, int64_t headDim, const std::string &element);

  /// One block per (batch, head, query row); the score row lives in shared
  /// memory, so no S x S tensor exists.
  void attentionKernel(bool backward);

  /// One block per NF4 block: absmax by a block reduction, then two codes
  /// per byte (the first in the high nibble).
  void quantizeKernel();
  std::string signature();
  std::string header();
  FailureOr<CudaSource> print();
};

} // namespace kiln::codegen::detail

#endif // KILN_LIB_CODEGEN_CUDAPRINTER_H
