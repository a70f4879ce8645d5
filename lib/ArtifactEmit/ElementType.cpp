//===- ElementType.cpp - MLIR element types as artifact dtypes -----------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/ArtifactEmit/ElementType.h"

#include "mlir/IR/BuiltinTypes.h"

using namespace mlir;
using kiln::artifact::DType;

std::optional<DType> kiln::artifactDType(Type type) {
  if (type.isF64())
    return DType::F64;
  if (type.isF32())
    return DType::F32;
  if (type.isF16())
    return DType::F16;
  if (type.isBF16())
    return DType::BF16;
  auto integer = llvm::dyn_cast<IntegerType>(type);
  if (!integer)
    return std::nullopt;
  bool isUnsigned = integer.isUnsigned();
  switch (integer.getWidth()) {
  case 1: return DType::BOOL;
  case 8: return isUnsigned ? DType::U8 : DType::I8;
  case 16: return isUnsigned ? DType::U16 : DType::I16;
  case 32: return isUnsigned ? DType::U32 : DType::I32;
  case 64: return isUnsigned ? DType::U64 : DType::I64;
  default: return std::nullopt;
  }
}

const char *kiln::artifactDTypeName(Type type) {
  std::optional<DType> dtype = artifactDType(type);
  return dtype ? artifact::dtypeName(*dtype) : nullptr;
}
