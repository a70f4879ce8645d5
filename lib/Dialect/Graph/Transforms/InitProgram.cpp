//===- InitProgram.cpp - The step's init program --------------------------===//

#include "kiln/Dialect/Graph/InitProgram.h"

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "mlir/IR/Builders.h"

using namespace mlir;

namespace kiln {

bool isInitProgram(func::FuncOp func) { return func.getSymName() == kInitProgramName; }

func::FuncOp getOrCreateInitProgram(ModuleOp module) {
  if (auto init = module.lookupSymbol<func::FuncOp>(kInitProgramName))
    return init;
  OpBuilder b(module.getContext());
  b.setInsertionPointToEnd(module.getBody());
  Location loc = NameLoc::get(b.getStringAttr(kInitProgramName));
  auto seedType = RankedTensorType::get({}, b.getI64Type());
  auto init = b.create<func::FuncOp>(loc, kInitProgramName, b.getFunctionType({seedType}, {}));
  init.setArgAttrs(
      0, b.getDictionaryAttr({b.getNamedAttr(kRngSeedAttr, b.getUnitAttr()),
                              b.getNamedAttr("kiln.name", b.getStringAttr("init_seed"))}));
  Block *body = init.addEntryBlock();
  b.setInsertionPointToEnd(body);
  b.create<func::ReturnOp>(loc);
  return init;
}

void addInitResult(func::FuncOp init, Value value, StringRef name) {
  auto ret = llvm::cast<func::ReturnOp>(init.getBody().front().getTerminator());
  unsigned index = init.getNumResults();
  ret->insertOperands(ret->getNumOperands(), value);
  init.insertResult(
      index, value.getType(),
      DictionaryAttr::get(init.getContext(),
                          {NamedAttribute(StringAttr::get(init.getContext(), "kiln.param"),
                                          StringAttr::get(init.getContext(), name))}));
}

} // namespace kiln
