//===- ElementConversion.h - Host element reads and writes ------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Internal to the runtime library: one element of an artifact dtype read or
// written on the host, for fills, scalar arguments and convertElements.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_ELEMENTCONVERSION_H
#define KILN_RUNTIME_LIB_ELEMENTCONVERSION_H

#include "kiln/artifact/Safetensors.h"

#include <cstdint>
#include <string>

namespace kiln::runtime {

bool isFloat(artifact::DType t);
bool isInteger(artifact::DType t);
/// Stores \p v at \p p as one element of \p t (floats round to nearest even).
void writeFloat(unsigned char *p, artifact::DType t, double v);
/// Stores \p v at \p p as one element of \p t (the low bytes; BOOL: v != 0).
void writeInt(unsigned char *p, artifact::DType t, int64_t v);
/// The bytes of one element of \p dtype holding \p value.
std::string scalarBytes(artifact::DType dtype, double value);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_LIB_ELEMENTCONVERSION_H
