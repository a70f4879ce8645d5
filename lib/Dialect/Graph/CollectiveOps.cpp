//===- CollectiveOps.cpp - kiln.all_reduce --------------------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"

using namespace mlir;
using namespace kiln;

LogicalResult AllReduceOp::inferReturnTypes(MLIRContext *, std::optional<Location>,
                                            ValueRange operands, DictionaryAttr, OpaqueProperties,
                                            RegionRange, SmallVectorImpl<Type> &inferred) {
  for (Value v : operands)
    inferred.push_back(v.getType());
  return success();
}

LogicalResult AllReduceOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one operand");
  if (getBucket() < 0)
    return emitOpError("bucket must be non-negative");
  for (Value v : getInputs())
    if (!isa<FloatType>(cast<RankedTensorType>(v.getType()).getElementType()))
      return emitOpError("averages floating-point tensors only, got ") << v.getType();
  return success();
}
