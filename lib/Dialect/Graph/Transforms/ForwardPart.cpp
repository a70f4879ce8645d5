//===- ForwardPart.cpp - The forward ops of a joint function --------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/Passes.h"

using namespace mlir;

std::optional<llvm::DenseSet<Operation *>> kiln::forwardPart(func::FuncOp func) {
  if (func.isExternal() || !func.getBody().hasOneBlock())
    return std::nullopt;
  Block &body = func.getBody().front();
  auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
  if (!ret || ret.getNumOperands() == 0)
    return std::nullopt;
  llvm::DenseSet<Operation *> forward;
  SmallVector<Value> work = {ret.getOperand(0)};
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || def->getBlock() != &body || !forward.insert(def).second)
      continue;
    llvm::append_range(work, def->getOperands());
  }
  return forward;
}
