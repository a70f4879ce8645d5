//===- GradAccum.cpp - Gradients averaged over micro-batches --------------===//
//
// Clones the differentiated body once per micro-batch with its own data
// arguments; parameters are shared (CSE merges the parameter reads), and
// the loss and every gradient are averaged.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/InitProgram.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/VJP.h"

#include "mlir/IR/IRMapping.h"

namespace kiln {
#define GEN_PASS_DEF_GRADACCUMPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

struct GradAccumPass final : kiln::impl::GradAccumPassBase<GradAccumPass> {
  using GradAccumPassBase::GradAccumPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (isInitProgram(func)) // runs once at load, not in the step
      return;
    if (microBatches < 1) {
      func.emitError("micro-batches must be at least 1");
      return signalPassFailure();
    }
    if (microBatches == 1 || func.isExternal())
      return;
    Block &body = func.getBody().front();
    auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
    unsigned numData = func.getNumArguments();
    SmallVector<Type> argTypes(func.getArgumentTypes());
    SmallVector<DictionaryAttr> argAttrs;
    for (unsigned i = 0; i < numData; ++i)
      argAttrs.push_back(func.getArgAttrDict(i));

    // Micro-batch 0 keeps the original arguments; the others get copies.
    OpBuilder b(ret);
    auto tagged = [&](DictionaryAttr attrs, int64_t index) {
      NamedAttrList list(attrs);
      list.set("kiln.micro_batch", b.getI64IntegerAttr(index));
      return list.getDictionary(&getContext());
    };
    for (unsigned i = 0; i < numData; ++i)
      func.setArgAttrs(i, tagged(argAttrs[i], 0));
    SmallVector<Value> sums(ret.getOperands());
    SmallVector<Operation *> original;
    for (Operation &op : body.without_terminator())
      original.push_back(&op);
    for (int64_t m = 1; m < microBatches; ++m) {
      IRMapping mapping;
      for (unsigned i = 0; i < numData; ++i) {
        unsigned index = func.getNumArguments();
        func.insertArgument(index, argTypes[i], tagged(argAttrs[i], m),
                            func.getArgument(i).getLoc());
        mapping.map(func.getArgument(i), func.getArgument(index));
      }
      b.setInsertionPoint(ret);
      for (Operation *op : original)
        b.clone(*op, mapping);
      for (auto [k, v] : llvm::enumerate(ret.getOperands()))
        sums[k] = b.create<AddOp>(ret.getLoc(), sums[k], mapping.lookup(v));
    }
    for (auto [k, sum] : llvm::enumerate(sums)) {
      auto type = tensorOf(sum);
      Value count =
          scalarConstant(b, ret.getLoc(), static_cast<double>(microBatches), type.getElementType());
      ret.setOperand(k, b.create<DivOp>(ret.getLoc(), sum, count));
    }
  }
};

} // namespace
