//===- DataParallel.cpp - Gradients averaged over data-parallel ranks -----===//
//
// Wraps the gradient results of the differentiated step in kiln.all_reduce
// ops (the mean over ranks), bucketed in the order the backward produces
// them so the runtime can overlap each bucket's exchange with the rest of
// the backward, and the loss in a last bucket for logging.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/InitProgram.h"
#include "kiln/Dialect/Graph/Passes.h"

#include "llvm/ADT/MapVector.h"

#include <cmath>

namespace kiln {
#define GEN_PASS_DEF_DATAPARALLELPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

struct Gradient {
  Value value;
  int64_t position; ///< Index of the producing op in the block; -1: an argument.
  int64_t bytes;
  SmallVector<unsigned> results; ///< Return operands it is.
};

struct DataParallelPass final : kiln::impl::DataParallelPassBase<DataParallelPass> {
  using DataParallelPassBase::DataParallelPassBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (isInitProgram(func) || func.isExternal())
      return;
    if (!(bucketMb > 0) || !std::isfinite(bucketMb)) {
      func.emitError("bucket-mb must be a positive number of MiB, got ") << bucketMb;
      return signalPassFailure();
    }
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    llvm::DenseMap<Operation *, int64_t> position;
    for (Operation &op : body)
      position[&op] = static_cast<int64_t>(position.size());

    // One entry per distinct gradient value (CSE may have merged two).
    llvm::MapVector<Value, Gradient> gradients;
    for (unsigned i = 1; i < ret.getNumOperands(); ++i) {
      if (!func.getResultAttrOfType<StringAttr>(i, "kiln.grad_of")) {
        func.emitError("result ") << i << " is not a gradient; run kiln-autodiff first";
        return signalPassFailure();
      }
      Value v = ret.getOperand(i);
      auto type = cast<RankedTensorType>(v.getType());
      if (!type.hasStaticShape()) {
        func.emitError("the gradient of result ") << i << " has a dynamic shape";
        return signalPassFailure();
      }
      Gradient &g = gradients[v];
      if (!g.value) {
        Operation *def = v.getDefiningOp();
        g = {v,
             def && def->getBlock() == &body ? position.lookup(def) : -1,
             type.getNumElements() * int64_t(type.getElementTypeBitWidth() / 8),
             {}};
      }
      g.results.push_back(i);
    }
    if (gradients.empty()) {
      func.emitError("no gradient results; run kiln-autodiff first");
      return signalPassFailure();
    }

    // Backward order: the gradient produced first goes first.
    SmallVector<Gradient *> order;
    for (auto &entry : gradients)
      order.push_back(&entry.second);
    llvm::stable_sort(
        order, [](const Gradient *a, const Gradient *b) { return a->position < b->position; });
    double cap = bucketMb * 1024 * 1024;
    SmallVector<SmallVector<Gradient *>> buckets;
    double filled = 0;
    for (Gradient *g : order) {
      if (buckets.empty() || filled + double(g->bytes) > cap) {
        buckets.emplace_back();
        filled = 0;
      }
      buckets.back().push_back(g);
      filled += double(g->bytes);
    }

    OpBuilder b(func.getContext());
    for (auto [index, bucket] : llvm::enumerate(buckets)) {
      // Right after the producer of its last gradient (or first, for
      // gradients the block does not compute).
      Gradient *last = bucket.back();
      if (last->position < 0)
        b.setInsertionPointToStart(&body);
      else
        b.setInsertionPointAfter(last->value.getDefiningOp());
      SmallVector<Value> inputs;
      for (Gradient *g : bucket)
        inputs.push_back(g->value);
      auto reduce =
          b.create<AllReduceOp>(last->value.getLoc(), inputs, static_cast<int64_t>(index), false);
      for (auto [g, reduced] : llvm::zip(bucket, reduce.getResults()))
        for (unsigned i : g->results)
          ret.setOperand(i, reduced);
    }
    b.setInsertionPoint(ret);
    Value loss = ret.getOperand(0);
    auto lossReduce = b.create<AllReduceOp>(loss.getLoc(), ValueRange{loss},
                                            static_cast<int64_t>(buckets.size()), true);
    ret.setOperand(0, lossReduce.getResult(0));
    func->setAttr(
        "kiln.data_parallel",
        b.getDictionaryAttr({b.getNamedAttr("bucket_mb", b.getF64FloatAttr(bucketMb)),
                             b.getNamedAttr("buckets", b.getI64IntegerAttr(buckets.size() + 1))}));
  }
};

} // namespace
