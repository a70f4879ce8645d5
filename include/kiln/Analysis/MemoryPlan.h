//===- MemoryPlan.h - Liveness, arena placement and peak memory -*- C++ -*-===//
//
// Plans the memory of one step function before it runs: every tensor value
// gets a byte size (a symbolic expression, evaluated at given symbol
// values), a live interval in program order and, unless it lives for the
// whole step, an offset in one arena shared by all short-lived tensors.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ANALYSIS_MEMORYPLAN_H
#define KILN_ANALYSIS_MEMORYPLAN_H

#include "kiln/Dialect/Graph/GraphAttrs.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/JSON.h"

#include <array>
#include <string>
#include <vector>

namespace kiln {

using SymbolValues = llvm::StringMap<int64_t>;

/// Persistent categories (parameters, optimizer state, inputs, constants)
/// live for the whole step outside the arena; the others are arena tensors.
enum class MemoryCategory : unsigned {
  Parameter,
  OptimizerState,
  Input,
  Constant,
  Activation, // forward values the backward pass reads
  Gradient,   // gradients the function returns
  Workspace,  // every other intermediate
};
inline constexpr unsigned kNumMemoryCategories = 7;
llvm::StringRef categoryName(MemoryCategory category);
bool isPersistent(MemoryCategory category);

struct PlannedTensor {
  mlir::Value value;
  MemoryCategory category;
  /// Byte size as an expression over the size symbols; null when it has no
  /// polynomial form (then only `bytes` is known).
  SymExprAttr bytesExpr;
  int64_t bytes = 0;
  /// Program points: op k of the body is point k, function arguments are
  /// defined at -1 and returned values live to numPoints.
  int64_t def = 0, lastUse = 0;
  /// Last point it holds its buffer: its last use (or its views'), or the
  /// point before a later tensor overwrites it in place.
  int64_t occupiedUntil = 0;
  /// The buffer that holds it; several tensors share one through views
  /// (reshape, squeeze, unsqueeze) and in-place updates.
  unsigned buffer = 0;
  /// Whether it took over a dying operand's buffer (an in-place update).
  bool inPlace = false;
  /// Whether it is a view: it occupies no bytes of its own.
  bool view = false;
  /// Scratch an op needs while it runs, not a value of the IR (the logits
  /// chunk of kiln.linear_cross_entropy(_grad)): `value` is the op's first
  /// result, `scratchType` the scratch's shape, live at the op only.
  bool scratch = false;
  mlir::RankedTensorType scratchType;
};

struct PlannedBuffer {
  MemoryCategory category; // of the tensor that created it
  SymExprAttr bytesExpr;
  int64_t bytes = 0;
  int64_t start = 0, end = 0; // occupied points, inclusive
  bool persistent = false;
  /// Arena offset (arena buffers only), and the same offset as a sum of
  /// buffer sizes — exact for the symbol values the plan was made at.
  int64_t offset = -1;
  SymExprAttr offsetExpr;
};

struct MemoryPlan {
  std::string function;
  SymbolValues symbols;
  /// Symbols a size needs that `symbols` does not bind (sizes are then 0).
  std::vector<std::string> unboundSymbols;
  std::vector<PlannedTensor> tensors;
  std::vector<PlannedBuffer> buffers;
  int64_t numPoints = 0;

  int64_t persistentBytes = 0;
  int64_t arenaBytes = 0;    // what the placement needs
  int64_t livePeakBytes = 0; // most arena bytes live at one point
  int64_t peakPoint = 0;     // where livePeakBytes happens
  /// Bytes by category at the peak point (persistent ones always).
  std::array<int64_t, kNumMemoryCategories> atPeak{};
  /// Most activation bytes live at one point, and the activations in all.
  int64_t activationPeakBytes = 0;
  int64_t savedActivationBytes = 0;
  unsigned savedActivations = 0;
  unsigned inPlaceUpdates = 0;

  /// Parameters + optimizer state + inputs + constants + the arena.
  int64_t peakBytes() const { return persistentBytes + arenaBytes; }
  /// Tensors occupying memory at `point`, largest first.
  std::vector<unsigned> liveAt(int64_t point) const;
};

/// Whether `func` holds a forward and a backward pass: it returns gradients
/// (`kiln.grad_of`), or it is a train step (parameters in and out as
/// `kiln.param`). Its first result is then the loss.
bool isJointFunction(mlir::func::FuncOp func);

/// Plans `func` (a single-block function) at `symbols`.
MemoryPlan planMemory(mlir::func::FuncOp func, const SymbolValues &symbols);

/// The human-readable report of `kiln compile --memory-report`: peak by
/// category, then the `topK` largest tensors live at the peak.
void printMemoryReport(const MemoryPlan &plan, llvm::raw_ostream &os, unsigned topK = 10);
/// The plan as JSON (buffers with symbolic sizes and offsets, tensors with
/// their intervals): what the runtime consumes.
llvm::json::Value memoryPlanToJSON(const MemoryPlan &plan);

/// Bytes of one element (i1 takes a byte).
int64_t elementBytes(mlir::Type elementType);
/// A tensor type's byte size as an expression (null if it has none).
SymExprAttr tensorBytesExpr(mlir::RankedTensorType type);
/// A tensor type's byte size at `symbols`; nullopt if a symbol is unbound.
std::optional<int64_t> tensorBytes(mlir::RankedTensorType type, const SymbolValues &symbols);
/// "1.50 GiB", "12.0 MiB", "96 B".
std::string formatBytes(int64_t bytes);

} // namespace kiln

#endif // KILN_ANALYSIS_MEMORYPLAN_H
