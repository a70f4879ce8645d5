//===- PaddedWeights.cpp - Frozen weights with the adapter's blocks -------===//
//
// Recognizes K-concatenation's weight concatenations in the fused step and
// builds the kernel that writes only the adapter's block of one
// (docs/design/lora-k-concat.md, piece 4).
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kernel/PaddedWeights.h"

#include "kiln/Dialect/Kernel/OpClassification.h"
#include "mlir/IR/IRMapping.h"

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

std::optional<WeightConcat> kiln::kernel::weightConcatOf(FusionOp fusion) {
  if (fusion.getKind() != FusionKind::loop || fusion->getNumResults() != 1)
    return std::nullopt;
  Block &body = fusion.getBody().front();
  auto concat = body.getTerminator()->getOperand(0).getDefiningOp<kiln::ConcatOp>();
  if (!concat || concat->getNumOperands() < 2 || !concat->hasOneUse())
    return std::nullopt;
  auto type = cast<RankedTensorType>(concat.getType());
  // 16- and 32-bit floats: a kernel writing them moves at most 8 elements
  // per vector store, which the 8-element alignment below covers.
  Type element = type.getElementType();
  if (type.getRank() != 2 || !type.hasStaticShape() ||
      !(element.isBF16() || element.isF16() || element.isF32()) || concat.getAxis() > 1)
    return std::nullopt;
  // The members: every operand but the last, each a frozen parameter the
  // body reads only here.
  WeightConcat w;
  unsigned last = concat->getNumOperands() - 1;
  // Or one operand, the members side by side across the concat's axis
  // (`[W_1 .. W_n ; X]`: the group's merged forward).
  SmallVector<Value> memberValues(concat->getOperands().drop_back());
  if (auto inner = concat->getOperand(0).getDefiningOp<kiln::ConcatOp>();
      inner && last == 1 && inner->getBlock() == &body && inner->hasOneUse() &&
      inner.getAxis() != concat.getAxis() && inner->getNumOperands() >= 2) {
    memberValues.assign(inner->operand_begin(), inner->operand_end());
    w.inner = inner;
  }
  for (Value member : memberValues) {
    auto arg = dyn_cast<BlockArgument>(member);
    if (!arg || arg.getOwner() != &body || !arg.hasOneUse())
      return std::nullopt;
    auto weight = fusion.getInputs()[arg.getArgNumber()].getDefiningOp<kiln::ParameterOp>();
    if (!weight || weight.getTrainable() || weight.getType() != member.getType() ||
        llvm::is_contained(w.members, weight))
      return std::nullopt;
    w.members.push_back(weight);
    w.memberArgs.push_back(arg.getArgNumber());
  }
  // The adapter's block is computed afresh (a pointwise body), never
  // accumulated into, and is not a weight itself.
  Value adapter = concat->getOperand(last);
  if (outputInit(adapter) != OutputInit::None)
    return std::nullopt;
  if (auto arg = dyn_cast<BlockArgument>(adapter); arg && arg.getOwner() == &body)
    if (fusion.getInputs()[arg.getArgNumber()].getDefiningOp<kiln::ParameterOp>())
      return std::nullopt;
  w.fusion = fusion;
  w.weight = w.members.front();
  w.concat = concat;
  w.weightArg = w.memberArgs.front();
  w.axis = static_cast<int64_t>(concat.getAxis());
  w.memberAxis = w.inner ? static_cast<int64_t>(w.inner.getAxis()) : w.axis;
  return w;
}

Value kiln::kernel::appendAdapterBlock(WeightConcat w, Block &body,
                                      SmallVectorImpl<Value> &inputs) {
  Block &old = w.fusion.getBody().front();
  IRMapping map;
  for (BlockArgument arg : old.getArguments()) {
    if (llvm::is_contained(w.memberArgs, arg.getArgNumber()))
      continue;
    map.map(arg, body.addArgument(arg.getType(), arg.getLoc()));
    inputs.push_back(w.fusion.getInputs()[arg.getArgNumber()]);
  }
  OpBuilder inside = OpBuilder::atBlockEnd(&body);
  for (Operation &op : old.without_terminator())
    if (&op != w.concat.getOperation() && &op != w.inner.getOperation())
      inside.clone(op, map);
  return map.lookup(w.adapter());
}
