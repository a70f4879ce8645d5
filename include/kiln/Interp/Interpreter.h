//===- Interpreter.h - CPU reference interpreter ----------------*- C++ -*-===//
//
// Executes a graph-dialect function on host tensors. It is the numeric
// reference for every later stage, so it favours obviously-right loops over
// speed: fp32 (or the declared type) storage, fp64 accumulation.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_INTERP_INTERPRETER_H
#define KILN_INTERP_INTERPRETER_H

#include "absl/status/statusor.h"
#include "kiln/Support/HostTensor.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <map>

namespace mlir::func {
class FuncOp;
} // namespace mlir::func

namespace kiln {

/// Supplies the values of `kiln.parameter` ops by name.
class WeightSource {
public:
  virtual ~WeightSource() = default;
  virtual absl::StatusOr<HostTensor> load(llvm::StringRef name) = 0;
};

struct InterpreterResult {
  std::vector<HostTensor> outputs;
  /// Symbol values bound from the input shapes (e.g. batch=2, seq=16).
  std::map<std::string, int64_t> symbols;
};

struct InterpreterOptions {
  /// Bytes the tensors alive at once may hold (the interpreter stores every
  /// element in 8 bytes); 0 means defaultMemoryBudget(). An op whose results
  /// would not fit fails, naming the op and the bytes, before allocating.
  uint64_t memoryBudget = 0;
};

/// Half of the physical memory or of the address-space / data-segment limit
/// (ulimit -v, ulimit -d), whichever is smaller.
uint64_t defaultMemoryBudget();

/// Runs `func` on `inputs` (one per argument, in order). Symbols in the
/// argument types are bound from the input shapes; a conflict, a wrong rank
/// or a wrong dtype is an error naming the argument and the symbol.
absl::StatusOr<InterpreterResult> interpret(mlir::func::FuncOp func,
                                            llvm::ArrayRef<HostTensor> inputs,
                                            WeightSource &weights,
                                            const InterpreterOptions &options = {});

} // namespace kiln

#endif // KILN_INTERP_INTERPRETER_H
