//===- HostTensor.cpp - A tensor in host memory ---------------------------===//

#include "kiln/Support/HostTensor.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/APFloat.h"

#include <cassert>
#include <cmath>

namespace kiln {

bool isFloat(DType dtype) {
  return dtype == DType::F16 || dtype == DType::BF16 || dtype == DType::F32 || dtype == DType::F64;
}

const char *dtypeName(DType dtype) {
  switch (dtype) {
  case DType::F16: return "f16";
  case DType::BF16: return "bf16";
  case DType::F32: return "f32";
  case DType::F64: return "f64";
  case DType::Bool: return "i1";
  case DType::I8: return "i8";
  case DType::I16: return "i16";
  case DType::I32: return "i32";
  case DType::I64: return "i64";
  case DType::U8: return "ui8";
  case DType::U16: return "ui16";
  case DType::U32: return "ui32";
  case DType::U64: return "ui64";
  }
  return "?";
}

mlir::Type toMlirType(DType dtype, mlir::MLIRContext *context) {
  switch (dtype) {
  case DType::F16: return mlir::Float16Type::get(context);
  case DType::BF16: return mlir::BFloat16Type::get(context);
  case DType::F32: return mlir::Float32Type::get(context);
  case DType::F64: return mlir::Float64Type::get(context);
  case DType::Bool: return mlir::IntegerType::get(context, 1);
  case DType::I8: return mlir::IntegerType::get(context, 8);
  case DType::I16: return mlir::IntegerType::get(context, 16);
  case DType::I32: return mlir::IntegerType::get(context, 32);
  case DType::I64: return mlir::IntegerType::get(context, 64);
  case DType::U8: return mlir::IntegerType::get(context, 8, mlir::IntegerType::Unsigned);
  case DType::U16: return mlir::IntegerType::get(context, 16, mlir::IntegerType::Unsigned);
  case DType::U32: return mlir::IntegerType::get(context, 32, mlir::IntegerType::Unsigned);
  case DType::U64: return mlir::IntegerType::get(context, 64, mlir::IntegerType::Unsigned);
  }
  return {};
}

std::optional<DType> fromMlirType(mlir::Type type) {
  if (type.isF16())
    return DType::F16;
  if (type.isBF16())
    return DType::BF16;
  if (type.isF32())
    return DType::F32;
  if (type.isF64())
    return DType::F64;
  if (auto integer = llvm::dyn_cast<mlir::IntegerType>(type)) {
    if (integer.isUnsigned()) {
      switch (integer.getWidth()) {
      case 8: return DType::U8;
      case 16: return DType::U16;
      case 32: return DType::U32;
      case 64: return DType::U64;
      default: return std::nullopt;
      }
    }
    switch (integer.getWidth()) {
    case 1: return DType::Bool;
    case 8: return DType::I8;
    case 16: return DType::I16;
    case 32: return DType::I32;
    case 64: return DType::I64;
    default: return std::nullopt;
    }
  }
  return std::nullopt;
}

double roundToFloat(DType dtype, double value) {
  const llvm::fltSemantics *semantics = nullptr;
  switch (dtype) {
  case DType::F32: return static_cast<double>(static_cast<float>(value));
  case DType::F16: semantics = &llvm::APFloat::IEEEhalf(); break;
  case DType::BF16: semantics = &llvm::APFloat::BFloat(); break;
  default: return value;
  }
  llvm::APFloat f(value);
  bool losesInfo = false;
  f.convert(*semantics, llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  f.convert(llvm::APFloat::IEEEdouble(), llvm::APFloat::rmNearestTiesToEven, &losesInfo);
  return f.convertToDouble();
}

int64_t wrapToInt(DType dtype, int64_t value) {
  switch (dtype) {
  case DType::Bool: return value != 0;
  case DType::I8: return static_cast<int8_t>(value);
  case DType::U8: return static_cast<uint8_t>(value);
  case DType::U16: return static_cast<uint16_t>(value);
  case DType::U32: return static_cast<uint32_t>(value);
  case DType::I16: return static_cast<int16_t>(value);
  case DType::I32: return static_cast<int32_t>(value);
  default: return value;
  }
}

HostTensor::HostTensor(DType dtype, std::vector<int64_t> shape)
    : dtype(dtype), shape(std::move(shape)) {
  if (kiln::isFloat(dtype))
    floats.assign(numel(), 0.0);
  else
    ints.assign(numel(), 0);
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

double HostTensor::getDouble(int64_t i) const {
  return isFloat() ? floats[i] : static_cast<double>(ints[i]);
}

int64_t HostTensor::getInt(int64_t i) const {
  return isFloat() ? static_cast<int64_t>(floats[i]) : ints[i];
}

void HostTensor::set(int64_t i, double value) {
  if (isFloat())
    floats[i] = roundToFloat(dtype, value);
  else
    ints[i] = wrapToInt(dtype, static_cast<int64_t>(value));
}

void HostTensor::setInt(int64_t i, int64_t value) {
  if (isFloat())
    floats[i] = roundToFloat(dtype, static_cast<double>(value));
  else
    ints[i] = wrapToInt(dtype, value);
}

std::string HostTensor::shapeString() const {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

} // namespace kiln
