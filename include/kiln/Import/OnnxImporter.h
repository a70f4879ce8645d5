//===- OnnxImporter.h - ONNX models into the graph dialect ------*- C++ -*-===//

#ifndef KILN_IMPORT_ONNXIMPORTER_H
#define KILN_IMPORT_ONNXIMPORTER_H

#include "absl/status/statusor.h"
#include "kiln/Support/HostTensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <map>
#include <string>
#include <vector>

namespace onnx {
class ModelProto;
} // namespace onnx

namespace kiln {

/// An ONNX node the importer kept as `kiln.opaque`.
struct UnsupportedNode {
  std::string nodeName;
  std::string opType;
  std::string reason;
};

struct ImportResult {
  mlir::OwningOpRef<mlir::ModuleOp> module;
  std::vector<UnsupportedNode> unsupported;
};

struct ImportOptions {
  /// Graph inputs replaced by these values: they become compile-time
  /// constants (small integer ones fold into shapes) instead of arguments.
  /// The ONNX node tests feed shapes, axes and pads as inputs this way.
  std::map<std::string, HostTensor> frozenInputs;
  /// Run --kiln-raise-composites (RMSNorm, SiLU, attention) after import.
  bool raiseComposites = true;
};

/// Imports `path`: a binary .onnx model, or ONNX textual syntax when the file
/// name ends in .onnxtxt/.txt. Needs only shapes and dtypes of large
/// initializers; their bytes stay in the file (`kiln.parameter` ops name
/// them and the module attribute `kiln.weights` points at the model).
/// Errors are one line: "<path>: node '<name>' (<op>): <what>".
absl::StatusOr<ImportResult> importOnnxFile(mlir::MLIRContext *context, const std::string &path,
                                            const ImportOptions &options = {});

/// Reads a binary or (.onnxtxt/.txt) textual model; errors are one line
/// starting with `path`.
absl::Status loadOnnxModel(const std::string &path, onnx::ModelProto &model);

/// The graph inputs of a model (initializers excluded), in order: what
/// `kiln interp` maps input_K.pb files to.
absl::StatusOr<std::vector<std::string>> listOnnxInputs(const std::string &path);

/// The ONNX op types the importer maps to the graph dialect (the list the
/// conformance suite runs and docs/onnx-ops.md lists).
std::vector<std::string> getSupportedOnnxOps();

} // namespace kiln

#endif // KILN_IMPORT_ONNXIMPORTER_H
