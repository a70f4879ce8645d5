//===- InitProgram.h - The step's init program ------------------*- C++ -*-===//
//
// Parameters the checkpoint does not hold — LoRA adapters, NF4 codes of a
// frozen weight — are computed once, when weights are loaded, by
// `func.func @kiln_init(%seed) -> (...)`: each result is tagged
// `kiln.param = "<name>"` and serves the `kiln.parameter "<name>"` reads of
// the step. It reads checkpoint weights with kiln.parameter like any
// function, so the interpreter and the runtime run it the same way.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_GRAPH_INITPROGRAM_H
#define KILN_DIALECT_GRAPH_INITPROGRAM_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

namespace kiln {

inline constexpr llvm::StringLiteral kInitProgramName = "kiln_init";

/// The module's init program, created empty (taking the seed, returning
/// nothing) on first use.
mlir::func::FuncOp getOrCreateInitProgram(mlir::ModuleOp module);
/// Appends `value` (defined in `init`) as the initial value of parameter
/// `name`.
void addInitResult(mlir::func::FuncOp init, mlir::Value value, llvm::StringRef name);
/// Whether `func` is an init program (compiling passes skip it).
bool isInitProgram(mlir::func::FuncOp func);

} // namespace kiln

#endif // KILN_DIALECT_GRAPH_INITPROGRAM_H
