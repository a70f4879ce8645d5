//===- ElementType.h - MLIR element types as artifact dtypes ----*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Every section the compiler writes (the parameter layout, the step and
// init programs) names element types through this one map onto the
// artifact's DType (kiln/artifact/DType.h), the enum the runtime reads.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACTEMIT_ELEMENTTYPE_H
#define KILN_ARTIFACTEMIT_ELEMENTTYPE_H

#include "kiln/artifact/DType.h"
#include "mlir/IR/Types.h"

#include <optional>

namespace kiln {

/// The artifact dtype of \p element: f64/f32/f16/bf16, i1 as BOOL, signless
/// and signed integers of 8..64 bits as I*, unsigned ones as U*; none for
/// anything else (f8 included: no kernel computes it).
std::optional<artifact::DType> artifactDType(mlir::Type element);
/// The dtype's spelling in the artifact ("BF16"), or null.
const char *artifactDTypeName(mlir::Type element);

} // namespace kiln

#endif // KILN_ARTIFACTEMIT_ELEMENTTYPE_H
