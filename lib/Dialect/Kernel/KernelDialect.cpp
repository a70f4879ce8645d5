//===- KernelDialect.cpp - Kiln kernel dialect ----------------------------===//

#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

#include "kiln/Dialect/Kernel/KernelDialect.cpp.inc"
#include "kiln/Dialect/Kernel/KernelEnums.cpp.inc"
#define GET_ATTRDEF_CLASSES
#include "kiln/Dialect/Kernel/KernelAttrs.cpp.inc"
#define GET_TYPEDEF_CLASSES
#include "kiln/Dialect/Kernel/KernelTypes.cpp.inc"

void KernelDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "kiln/Dialect/Kernel/KernelAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "kiln/Dialect/Kernel/KernelTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "kiln/Dialect/Kernel/KernelOps.cpp.inc"
      >();
}

void FusionOp::build(OpBuilder &builder, OperationState &state, FusionKind kind, ValueRange inputs,
                     TypeRange resultTypes) {
  state.addAttribute(getKindAttrName(state.name), FusionKindAttr::get(builder.getContext(), kind));
  state.addOperands(inputs);
  state.addTypes(resultTypes);
  Region *body = state.addRegion();
  Block *block = new Block();
  body->push_back(block);
  for (Value input : inputs)
    block->addArgument(input.getType(), input.getLoc());
}

LogicalResult FusionOp::verify() {
  Block &block = getBody().front();
  if (block.getNumArguments() != getInputs().size())
    return emitOpError("has ") << getInputs().size() << " inputs but " << block.getNumArguments()
                               << " block arguments";
  for (auto [input, arg] : llvm::zip(getInputs(), block.getArguments()))
    if (input.getType() != arg.getType())
      return emitOpError("block argument type ")
             << arg.getType() << " differs from its input " << input.getType();
  auto yield = cast<YieldOp>(block.getTerminator());
  if (yield.getValues().getTypes() != getResultTypes())
    return emitOpError("yields ") << yield.getValues().getTypes() << " but has results "
                                  << getResultTypes();
  if (getResults().empty())
    return emitOpError("has no results");
  return success();
}

LogicalResult WeightOp::verify() {
  std::optional<ArrayRef<int64_t>> from = getPaddedFrom();
  bool grouped = getMembers() || getMemberSizes() || getMemberAxis();
  if (grouped) {
    if (!from || !getMembers() || !getMemberSizes() || !getMemberAxis())
      return emitOpError("members need padded_from, member_sizes and member_axis");
    ArrayAttr members = *getMembers();
    ArrayRef<int64_t> sizes = *getMemberSizes();
    uint64_t axis = *getMemberAxis();
    if (members.size() < 2 || sizes.size() != members.size() || axis > 1)
      return emitOpError("needs two or more members, a size each, and member_axis 0 or 1");
    if (cast<StringAttr>(members[0]).getValue() != getName())
      return emitOpError("'s first member is not its name");
    int64_t total = 0;
    for (int64_t size : sizes) {
      if (size <= 0)
        return emitOpError("member sizes are positive");
      total += size;
    }
    if (from->size() == 2 && total != (*from)[axis])
      return emitOpError("member sizes add up to ") << total << ", not padded_from's " << (*from)[axis];
  }
  if (!from)
    return success();
  RankedTensorType type = getResult().getType().getTensor();
  if (from->size() != 2 || type.getRank() != 2 || !type.hasStaticShape())
    return emitOpError("padded_from needs a static 2-D buffer and two dims");
  for (int i = 0; i < 2; ++i)
    if ((*from)[i] <= 0 || (*from)[i] > type.getDimSize(i))
      return emitOpError("padded_from dim ") << i << " (" << (*from)[i]
                                             << ") is outside the buffer's " << type.getDimSize(i);
  return success();
}

LogicalResult ViewOp::verify() {
  RankedTensorType from = getSource().getType().getTensor();
  RankedTensorType to = getResult().getType().getTensor();
  if (from.getElementType() != to.getElementType())
    return emitOpError("changes the element type");
  MLIRContext *context = getContext();
  if (!getOffsetAttr() && !getRowStrideAttr()) {
    if (dimProduct(getDims(from), context) != dimProduct(getDims(to), context))
      return emitOpError("changes the element count: ")
             << shapeToString(from) << " -> " << shapeToString(to);
    return success();
  }
  // A block of rows at a row stride: it must lie inside the source.
  if (to.getRank() < 1 || ShapedType::isDynamic(to.getShape().back()))
    return emitOpError("with an offset or row stride needs a static last dim");
  DimList dims = getDims(to);
  Dim width = dims.back();
  Dim rows = dimProduct(ArrayRef<Dim>(dims).drop_back(), context);
  Dim stride = getRowStrideAttr() ? getRowStrideAttr() : width;
  Dim offset = getOffsetAttr() ? getOffsetAttr() : dimConst(context, 0);
  auto none = [](StringRef) -> std::optional<int64_t> { return std::nullopt; };
  if (std::optional<int64_t> gap = evaluateDim(dimSub(stride, width), none); gap && *gap < 0)
    return emitOpError("row stride ") << dimToString(stride) << " is less than the width "
                                      << dimToString(width);
  if (std::optional<int64_t> o = evaluateDim(offset, none); o && *o < 0)
    return emitOpError("has a negative offset");
  // offset + (rows - 1) * stride + width <= the source's element count.
  Dim extent =
      dimAdd(offset, dimAdd(dimMul(dimSub(rows, dimConst(context, 1)), stride), width));
  Dim room = dimSub(dimProduct(getDims(from), context), extent);
  if (std::optional<int64_t> left = evaluateDim(room, none); left && *left < 0)
    return emitOpError("reaches ") << -*left << " elements past the end of its source";
  return success();
}

LogicalResult GemmOp::verify() {
  if (getStrides().getDims().size() != 3)
    return emitOpError("needs three batch strides (a, b, c)");
  for (Value operand : {getA(), getB(), getC()}) {
    Type element = cast<BufferType>(operand.getType()).getTensor().getElementType();
    if (!element.isF32() && !element.isBF16() && !element.isF16())
      return emitOpError("supports f32, bf16 and f16 buffers, not ") << element;
  }
  if (std::optional<APFloat> alpha = getAlpha(); alpha && !alpha->isFinite())
    return emitOpError("needs a finite alpha");
  if (getAccumulate() && getBias())
    return emitOpError("cannot both accumulate into C and add a bias");
  if (DimsAttr lds = getLdsAttr()) {
    if (lds.getDims().size() != 3)
      return emitOpError("needs three leading dimensions (a, b, c)");
    // Each stored matrix's width: a row stride below it overlaps rows.
    Dim widths[3] = {getTransA() ? getM() : getK(), getTransB() ? getK() : getN(), getN()};
    auto none = [](StringRef) -> std::optional<int64_t> { return std::nullopt; };
    for (int i = 0; i < 3; ++i) {
      std::optional<int64_t> ld = evaluateDim(lds.getDims()[i], none);
      std::optional<int64_t> width = evaluateDim(widths[i], none);
      if (ld && width && *ld < *width)
        return emitOpError("leading dimension ")
               << StringRef("abc").substr(i, 1) << " = " << *ld << " is less than the matrix's width " << *width;
    }
  }
  return success();
}

#define GET_OP_CLASSES
#include "kiln/Dialect/Kernel/KernelOps.cpp.inc"

LogicalResult AllReduceOp::verify() {
  if (getIns().empty())
    return emitOpError("needs at least one buffer");
  if (getBucket() < 0)
    return emitOpError("bucket must be non-negative");
  for (auto [in, out] : llvm::zip(getIns(), getOuts()))
    if (in.getType() != out.getType())
      return emitOpError("reduces ") << in.getType() << " into " << out.getType();
  return success();
}
