//===- Diagnostics.h - kiln's error lines -----------------------*- C++ -*-===//
//
// MLIR prints a diagnostic's location in its own syntax
// (`loc("node_slice_11"("model.onnx":0:0))`, `loc(unknown)`); kiln prints
// what a user can look up: `model.onnx: node 'node_slice_11' (Slice): ...`.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_TOOLS_KILN_DIAGNOSTICS_H
#define KILN_TOOLS_KILN_DIAGNOSTICS_H

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"

#include <string>

namespace kiln::driver {

/// `location` as a user names it:
///   - "model.onnx: node 'n' (Slice)" for an imported node (its name, with
///     the ONNX op type the importer records as metadata),
///   - "model.onnx: 'l1.weight'" for another named value,
///   - "model.mlir:12:5" for a position in a text file,
///   - "model.onnx: nodes 'a' (Add), 'b' (Mul)" for ops merged from several,
///   - `input` for a location that says nothing (a module-level error).
std::string describeLocation(mlir::Location location, llvm::StringRef input);

/// The file a diagnostic without a location belongs to (loadModule sets it).
void setDiagnosticInput(llvm::StringRef path);

/// While alive, every diagnostic of `context` prints as one line:
/// `kiln: error: <where>: <message>` (warnings and remarks alike), notes
/// appended after "; ".
class CommandDiagnostics {
public:
  explicit CommandDiagnostics(mlir::MLIRContext &context);

private:
  mlir::ScopedDiagnosticHandler handler;
};

} // namespace kiln::driver

#endif // KILN_TOOLS_KILN_DIAGNOSTICS_H
