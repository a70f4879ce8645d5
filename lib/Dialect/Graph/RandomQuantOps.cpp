//===- RandomQuantOps.cpp - Dropout, random init, NF4 ---------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/ShapeInference.h"

using namespace mlir;
using namespace kiln;

LogicalResult DropoutOp::verify() {
  double p = getP().convertToDouble();
  if (!(p >= 0.0 && p < 1.0))
    return emitOpError("p must be in [0, 1), got ") << p;
  if (getStream() < 0)
    return emitOpError("stream must be >= 0");
  return success();
}

LogicalResult RandomUniformOp::verify() {
  if (!(getLow().convertToDouble() < getHigh().convertToDouble()))
    return emitOpError("needs low < high");
  if (getStream() < 0)
    return emitOpError("stream must be >= 0");
  return success();
}

static int64_t ceilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

LogicalResult Nf4QuantizeOp::inferReturnTypes(MLIRContext *context, std::optional<Location> loc,
                                              Adaptor adaptor, SmallVectorImpl<Type> &results) {
  auto input = llvm::cast<RankedTensorType>(adaptor.getInput().getType());
  int64_t blockSize = adaptor.getBlockSize();
  if (!input.hasStaticShape())
    return emitOptionalError(loc, "nf4_quantize needs a static shape (weights)");
  if (blockSize <= 0 || blockSize % 2)
    return emitOptionalError(loc, "nf4_quantize block_size must be even and > 0");
  int64_t n = input.getNumElements();
  results.push_back(
      RankedTensorType::get({ceilDiv(n, 2)}, IntegerType::get(context, 8, IntegerType::Unsigned)));
  results.push_back(RankedTensorType::get({ceilDiv(n, blockSize)}, Float32Type::get(context)));
  return success();
}

LogicalResult Nf4QuantizeOp::verify() { return success(); }

LogicalResult Nf4DequantizeOp::verify() {
  RankedTensorType result = getResult().getType();
  int64_t blockSize = getBlockSize();
  if (!result.hasStaticShape())
    return emitOpError("needs a static result shape");
  if (blockSize <= 0 || blockSize % 2)
    return emitOpError("block_size must be even and > 0");
  int64_t n = result.getNumElements();
  if (getCodes().getType().getDimSize(0) != ceilDiv(n, 2))
    return emitOpError("expects ") << ceilDiv(n, 2) << " code bytes for " << n << " elements, got "
                                   << getCodes().getType().getDimSize(0);
  if (getAbsmax().getType().getDimSize(0) != ceilDiv(n, blockSize))
    return emitOpError("expects ") << ceilDiv(n, blockSize) << " absmax values (blocks of "
                                   << blockSize << "), got " << getAbsmax().getType().getDimSize(0);
  return success();
}

LogicalResult QuantizeBlockwise8bitOp::inferReturnTypes(MLIRContext *context,
                                                        std::optional<Location> loc,
                                                        Adaptor adaptor,
                                                        SmallVectorImpl<Type> &results) {
  auto input = llvm::cast<RankedTensorType>(adaptor.getInput().getType());
  int64_t blockSize = adaptor.getBlockSize();
  if (!input.hasStaticShape() || blockSize <= 0)
    return emitOptionalError(loc, "quantize_blockwise_8bit needs a static "
                                  "shape and a positive block_size");
  int64_t n = input.getNumElements();
  results.push_back(
      RankedTensorType::get({n}, IntegerType::get(context, 8, IntegerType::Unsigned)));
  results.push_back(RankedTensorType::get({ceilDiv(n, blockSize)}, Float32Type::get(context)));
  return success();
}

LogicalResult DequantizeBlockwise8bitOp::inferReturnTypes(MLIRContext *context,
                                                          std::optional<Location> loc,
                                                          Adaptor adaptor,
                                                          SmallVectorImpl<Type> &results) {
  auto codes = llvm::cast<RankedTensorType>(adaptor.getCodes().getType());
  auto absmax = llvm::cast<RankedTensorType>(adaptor.getAbsmax().getType());
  int64_t blockSize = adaptor.getBlockSize();
  if (!codes.hasStaticShape() || !absmax.hasStaticShape() || blockSize <= 0)
    return emitOptionalError(loc, "dequantize_blockwise_8bit needs static "
                                  "shapes and a positive block_size");
  int64_t n = codes.getDimSize(0);
  if (absmax.getDimSize(0) != ceilDiv(n, blockSize))
    return emitOptionalError(loc, "dequantize_blockwise_8bit expects ", ceilDiv(n, blockSize),
                             " absmax values for ", n, " codes in blocks of ", blockSize, ", got ",
                             absmax.getDimSize(0));
  results.push_back(RankedTensorType::get({n}, Float32Type::get(context)));
  return success();
}
