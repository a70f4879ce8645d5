//===- VerifyShapes.cpp - Every dim is static or symbolic -----------------===//

#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

namespace kiln {
#define GEN_PASS_DEF_VERIFYSHAPESPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

bool fullyKnown(Type type) {
  auto tensor = llvm::dyn_cast<RankedTensorType>(type);
  if (!tensor)
    return llvm::isa<IntegerType, FloatType, IndexType>(type);
  return llvm::all_of(getDims(tensor), [](Dim d) { return static_cast<bool>(d); });
}

struct VerifyShapesPass final : kiln::impl::VerifyShapesPassBase<VerifyShapesPass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    for (auto [i, type] : llvm::enumerate(func.getArgumentTypes()))
      if (!fullyKnown(type)) {
        func.emitError("argument ") << i << " has an unknown dim: " << type;
        return signalPassFailure();
      }
    WalkResult result = func.walk([&](Operation *op) {
      for (Type type : op->getResultTypes())
        if (!fullyKnown(type)) {
          op->emitError("result has an unknown dim: ") << type;
          return WalkResult::interrupt();
        }
      return WalkResult::advance();
    });
    if (result.wasInterrupted())
      signalPassFailure();
  }
};

} // namespace
