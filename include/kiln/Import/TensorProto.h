//===- TensorProto.h - ONNX TensorProto <-> HostTensor ----------*- C++ -*-===//
//
// Reads and writes the ONNX backend-test layout (input_K.pb, output_K.pb):
// one serialized TensorProto per file. Also decodes initializers, including
// external data stored next to the model.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_IMPORT_TENSORPROTO_H
#define KILN_IMPORT_TENSORPROTO_H

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/Support/HostTensor.h"

#include <string>

namespace onnx {
class TensorProto;
} // namespace onnx

namespace kiln {

/// The dtype of an ONNX TensorProto data type code, or an error naming it.
absl::StatusOr<DType> dtypeFromOnnx(int onnxType);
int dtypeToOnnx(DType dtype);

/// Decodes a tensor; `baseDir` resolves external data locations, which must
/// name a regular file inside it (no absolute path, no `..`, no symlink out).
/// An empty `baseDir` (a tensor attribute) refuses external data.
absl::StatusOr<HostTensor> tensorFromProto(const onnx::TensorProto &proto,
                                           const std::string &baseDir);
/// The folder external data of the model or tensor file `path` lives in
/// ("." for a bare file name).
std::string folderOf(const std::string &path);
void tensorToProto(const HostTensor &tensor, const std::string &name, onnx::TensorProto &proto);

absl::StatusOr<HostTensor> readTensorFile(const std::string &path);
/// Writes atomically (temp file + rename) so a crash never leaves half a file.
absl::Status writeTensorFile(const std::string &path, const HostTensor &tensor,
                             const std::string &name);

} // namespace kiln

#endif // KILN_IMPORT_TENSORPROTO_H
