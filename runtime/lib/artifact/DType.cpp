//===- DType.cpp - Element types of artifacts and safetensors -----------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/DType.h"

using namespace kiln::artifact;

namespace {
struct DTypeEntry {
  DType dtype;
  const char *name;
  size_t size;
};
constexpr DTypeEntry kDTypes[] = {
    {DType::F64, "F64", 8},   {DType::F32, "F32", 4},         {DType::F16, "F16", 2},
    {DType::BF16, "BF16", 2}, {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E5M2, "F8_E5M2", 1},
    {DType::I64, "I64", 8},   {DType::I32, "I32", 4},         {DType::I16, "I16", 2},
    {DType::I8, "I8", 1},     {DType::U64, "U64", 8},         {DType::U32, "U32", 4},
    {DType::U16, "U16", 2},   {DType::U8, "U8", 1},           {DType::BOOL, "BOOL", 1},
};
} // namespace

const char *kiln::artifact::dtypeName(DType dtype) {
  for (const DTypeEntry &entry : kDTypes)
    if (entry.dtype == dtype)
      return entry.name;
  return "?";
}

std::optional<DType> kiln::artifact::parseDType(std::string_view name) {
  for (const DTypeEntry &entry : kDTypes)
    if (name == entry.name)
      return entry.dtype;
  return std::nullopt;
}

size_t kiln::artifact::dtypeSize(DType dtype) {
  for (const DTypeEntry &entry : kDTypes)
    if (entry.dtype == dtype)
      return entry.size;
  return 0;
}
