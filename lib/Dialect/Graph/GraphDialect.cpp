//===- GraphDialect.cpp - Kiln graph dialect registration -----------------===//

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/VJP.h"
#include "mlir/IR/Builders.h"

using namespace mlir;
using namespace kiln;

#include "kiln/Dialect/Graph/GraphDialect.cpp.inc"
#include "kiln/Dialect/Graph/GraphInterfaces.cpp.inc"

void GraphDialect::initialize() {
  registerAttributes();
  addOperations<
#define GET_OP_LIST
#include "kiln/Dialect/Graph/GraphOps.cpp.inc"
      >();
  attachVJPModels(*getContext());
}

Operation *GraphDialect::materializeConstant(OpBuilder &builder, Attribute value, Type type,
                                             Location loc) {
  auto elements = llvm::dyn_cast<ElementsAttr>(value);
  if (!elements || elements.getType() != type)
    return nullptr;
  return builder.create<ConstantOp>(loc, elements);
}

#define GET_OP_CLASSES
#include "kiln/Dialect/Graph/GraphOps.cpp.inc"
