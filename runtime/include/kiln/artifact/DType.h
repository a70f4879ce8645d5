//===- DType.h - Element types of artifacts and safetensors -----*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The one element-type enum of the artifact format: step programs, the
// parameter layout, safetensors weights and checkpoints all name their
// dtypes by the safetensors spelling. The compiler maps MLIR element types
// onto it in one place (kiln/ArtifactEmit/DType.h).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_DTYPE_H
#define KILN_ARTIFACT_DTYPE_H

#include <cstddef>
#include <optional>
#include <string_view>

namespace kiln::artifact {

enum class DType {
  F64,
  F32,
  F16,
  BF16,
  F8_E4M3,
  F8_E5M2,
  I64,
  I32,
  I16,
  I8,
  U64,
  U32,
  U16,
  U8,
  BOOL
};

/// The safetensors spelling ("BF16"); parseDType is its inverse.
const char *dtypeName(DType dtype);
std::optional<DType> parseDType(std::string_view name);
size_t dtypeSize(DType dtype);

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_DTYPE_H
