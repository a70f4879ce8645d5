//===- HostTensor.h - A tensor in host memory -------------------*- C++ -*-===//
//
// The value type of the reference interpreter and of TensorProto I/O. It is
// deliberately simple: floats live in doubles that are rounded to their
// element type after every op (so f32 storage behaves like f32), integers and
// booleans live in int64.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_SUPPORT_HOSTTENSOR_H
#define KILN_SUPPORT_HOSTTENSOR_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir {
class Type;
class MLIRContext;
} // namespace mlir

namespace kiln {

/// Unsigned integers live in int64 too: u64 values must stay below 2^63.
enum class DType { F16, BF16, F32, F64, Bool, I8, I16, I32, I64, U8, U16, U32, U64 };

bool isFloat(DType dtype);
const char *dtypeName(DType dtype);
/// The MLIR element type of a dtype and back (nullopt for unsupported types).
mlir::Type toMlirType(DType dtype, mlir::MLIRContext *context);
std::optional<DType> fromMlirType(mlir::Type type);
/// Rounds a double to what `dtype` can hold (f32/f16/bf16 round to nearest
/// even; f64 unchanged).
double roundToFloat(DType dtype, double value);
/// Wraps an integer to what `dtype` can hold (two's complement; bool -> 0/1).
int64_t wrapToInt(DType dtype, int64_t value);

struct HostTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<double> floats; // when isFloat(dtype)
  std::vector<int64_t> ints;  // otherwise

  HostTensor() = default;
  HostTensor(DType dtype, std::vector<int64_t> shape);

  int64_t numel() const;
  bool isFloat() const { return kiln::isFloat(dtype); }
  /// Element i as a double / int64, whatever the storage.
  double getDouble(int64_t i) const;
  int64_t getInt(int64_t i) const;
  /// Stores with rounding/wrapping to the dtype.
  void set(int64_t i, double value);
  void setInt(int64_t i, int64_t value);
  std::string shapeString() const;
};

} // namespace kiln

#endif // KILN_SUPPORT_HOSTTENSOR_H
