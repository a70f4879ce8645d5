//===- Sources.cpp - constant, parameter and iota -------------------------===//
//
// Ops without tensor operands: their values come from attributes, the weight
// source, or the result type.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "absl/strings/str_cat.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "mlir/IR/DialectResourceBlobManager.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cstring>

using namespace mlir;

namespace kiln::interp {
namespace {

double toDouble(APFloat value) {
  bool losesInfo = false;
  value.convert(APFloat::IEEEdouble(), APFloat::rmNearestTiesToEven, &losesInfo);
  return value.convertToDouble();
}

/// Reads element `i` of a little-endian blob (the layout MLIR writes for
/// dense_resource; the host is assumed little-endian like the blob).
template <typename T> T readBlob(ArrayRef<char> data, int64_t i) {
  T value;
  std::memcpy(&value, data.data() + i * sizeof(T), sizeof(T));
  return value;
}

absl::Status decodeResource(DenseResourceElementsAttr attr, HostTensor &t) {
  AsmResourceBlob *blob = attr.getRawHandle().getBlob();
  if (!blob)
    return absl::InvalidArgumentError(absl::StrCat("dense_resource blob '",
                                                   attr.getRawHandle().getKey().str(),
                                                   "' has no data (elided or not loaded)"));
  ArrayRef<char> data = blob->getData();
  Type element = attr.getType().getElementType();
  // i1 is stored one byte per element.
  unsigned width = std::max(8u, element.getIntOrFloatBitWidth());
  if (static_cast<int64_t>(data.size()) != t.numel() * (width / 8))
    return absl::InvalidArgumentError(absl::StrCat("dense_resource blob has ", data.size(),
                                                   " bytes, expected ", t.numel() * (width / 8)));
  for (int64_t i = 0; i < t.numel(); ++i) {
    switch (t.dtype) {
    case DType::F32: t.set(i, readBlob<float>(data, i)); break;
    case DType::F64: t.set(i, readBlob<double>(data, i)); break;
    case DType::F16:
    case DType::BF16: {
      const llvm::fltSemantics &semantics =
          t.dtype == DType::F16 ? APFloat::IEEEhalf() : APFloat::BFloat();
      APInt bits(16, readBlob<uint16_t>(data, i));
      t.set(i, toDouble(APFloat(semantics, bits)));
      break;
    }
    case DType::Bool: t.setInt(i, readBlob<uint8_t>(data, i) != 0); break;
    case DType::U8: t.setInt(i, readBlob<uint8_t>(data, i)); break;
    case DType::U16: t.setInt(i, readBlob<uint16_t>(data, i)); break;
    case DType::U32: t.setInt(i, readBlob<uint32_t>(data, i)); break;
    case DType::U64: t.setInt(i, static_cast<int64_t>(readBlob<uint64_t>(data, i))); break;
    case DType::I8: t.setInt(i, readBlob<int8_t>(data, i)); break;
    case DType::I16: t.setInt(i, readBlob<int16_t>(data, i)); break;
    case DType::I32: t.setInt(i, readBlob<int32_t>(data, i)); break;
    case DType::I64: t.setInt(i, readBlob<int64_t>(data, i)); break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<Tensors> runConstant(ConstantOp op) {
  ElementsAttr attr = op.getValue();
  auto type = llvm::cast<ShapedType>(attr.getType());
  if (!type.hasStaticShape())
    return absl::InvalidArgumentError("constant has a dynamic shape");
  absl::StatusOr<HostTensor> t = makeResult(op.getResult(), Shape(type.getShape()));
  if (!t.ok())
    return t.status();
  if (auto dense = llvm::dyn_cast<DenseElementsAttr>(attr)) {
    // getValues repeats a splat's single value, so splats need no case.
    int64_t i = 0;
    if (t->isFloat()) {
      for (APFloat v : dense.getValues<APFloat>())
        t->set(i++, toDouble(v));
    } else {
      // i1 and unsigned values must not be sign-extended (true is 1).
      bool zeroExtend =
          type.getElementType().isUnsignedInteger() || type.getElementType().isInteger(1);
      for (APInt v : dense.getValues<APInt>())
        t->setInt(i++, zeroExtend ? static_cast<int64_t>(v.getZExtValue()) : v.getSExtValue());
    }
  } else if (auto resource = llvm::dyn_cast<DenseResourceElementsAttr>(attr)) {
    if (absl::Status s = decodeResource(resource, *t); !s.ok())
      return s;
  } else {
    return absl::InvalidArgumentError("constant value is neither dense nor dense_resource");
  }
  return Tensors{std::move(*t)};
}

absl::StatusOr<Tensors> runParameter(ParameterOp op, const Env &env, WeightSource &weights) {
  std::string name = op.getName().str();
  absl::StatusOr<HostTensor> loaded = weights.load(name);
  if (!loaded.ok())
    return absl::Status(loaded.status().code(),
                        absl::StrCat("loading weight \"", name, "\": ", loaded.status().message()));
  if (absl::Status s = checkStorage(*loaded); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat("weight \"", name, "\": ", s.message()));
  absl::StatusOr<DType> dtype = dtypeOf(op.getType());
  if (!dtype.ok())
    return dtype.status();
  RankedTensorType type = op.getType();
  std::vector<std::optional<int64_t>> dims = env.evaluate(type);
  bool shapeOk = dims.size() == loaded->shape.size();
  for (size_t i = 0; shapeOk && i < dims.size(); ++i)
    shapeOk = !dims[i] || *dims[i] == loaded->shape[i];
  // A checkpoint in one float precision loads into a parameter declared in
  // another (bf16 storage of frozen weights), rounding like the runtime.
  if (*dtype != loaded->dtype && isFloat(*dtype) && loaded->isFloat() && shapeOk) {
    HostTensor converted(*dtype, loaded->shape);
    for (int64_t i = 0, n = loaded->numel(); i < n; ++i)
      converted.set(i, loaded->floats[i]);
    loaded = std::move(converted);
  }
  if (*dtype != loaded->dtype || !shapeOk)
    return absl::InvalidArgumentError(absl::StrCat(
        "weight \"", name, "\" is ", dtypeName(loaded->dtype), " ", loaded->shapeString(),
        " but the IR declares ", dtypeName(*dtype), " ", shapeToString(type)));
  return Tensors{roundedToDType(std::move(*loaded))};
}

absl::StatusOr<Tensors> runIota(IotaOp op, const Env &env) {
  absl::StatusOr<Shape> shape = env.concreteShape(op.getResult());
  if (!shape.ok())
    return shape.status();
  absl::StatusOr<HostTensor> t = makeResult(op.getResult(), *shape);
  if (!t.ok())
    return t.status();
  AxisSplit split(*shape, op.getDim());
  for (int64_t o = 0; o < split.outer; ++o)
    for (int64_t k = 0; k < split.len; ++k)
      for (int64_t i = 0; i < split.inner; ++i)
        t->setInt(split.at(o, k, i), k);
  return Tensors{std::move(*t)};
}

} // namespace

MaybeResults runSource(Operation *op, const Env &env, WeightSource &weights) {
  return llvm::TypeSwitch<Operation *, MaybeResults>(op)
      .Case([](ConstantOp c) { return runConstant(c); })
      .Case([&](ParameterOp p) { return runParameter(p, env, weights); })
      .Case([&](IotaOp i) { return runIota(i, env); })
      .Default([](Operation *) { return std::nullopt; });
}

} // namespace kiln::interp
