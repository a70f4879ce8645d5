//===- ShapeBuckets.cpp - Specialized copies for chosen symbol values -----===//

#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "mlir/IR/SymbolTable.h"

namespace kiln {
#define GEN_PASS_DEF_SHAPEBUCKETSPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

struct ShapeBucketsPass final : kiln::impl::ShapeBucketsPassBase<ShapeBucketsPass> {
  using ShapeBucketsPassBase::ShapeBucketsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto main = module.lookupSymbol<func::FuncOp>("main");
    if (buckets.empty() || !main)
      return;
    // Parse "seq=16,32;batch=2" into (symbol, values) lists.
    SmallVector<std::pair<std::string, SmallVector<int64_t>>> axes;
    SmallVector<StringRef> specs;
    StringRef(buckets).split(specs, ';', -1, /*KeepEmpty=*/false);
    for (StringRef spec : specs) {
      auto [name, list] = spec.split('=');
      SmallVector<StringRef> items;
      list.split(items, ',', -1, /*KeepEmpty=*/false);
      SmallVector<int64_t> values;
      for (StringRef item : items) {
        int64_t v;
        if (item.trim().getAsInteger(10, v) || v < 1) {
          module.emitError("--buckets needs symbol=V1,V2,... with positive "
                           "values, got '")
              << spec << "'";
          return signalPassFailure();
        }
        values.push_back(v);
      }
      if (values.empty()) {
        module.emitError("--buckets lists no value for '") << name << "'";
        return signalPassFailure();
      }
      axes.push_back({name.trim().str(), values});
    }

    // One clone per combination of values.
    SmallVector<Attribute> clones;
    SmallVector<size_t> index(axes.size(), 0);
    OpBuilder b(module.getContext());
    while (true) {
      llvm::StringMap<int64_t> values;
      std::string name = "main";
      SmallVector<NamedAttribute> bucket;
      for (auto [axis, i] : llvm::zip(axes, index)) {
        values[axis.first] = axis.second[i];
        name += "__" + axis.first + "_" + std::to_string(axis.second[i]);
        bucket.push_back(b.getNamedAttr(axis.first, b.getI64IntegerAttr(axis.second[i])));
      }
      auto clone = llvm::cast<func::FuncOp>(main->clone());
      clone.setName(name);
      clone->removeAttr("kiln.buckets");
      clone->setAttr("kiln.bucket", b.getDictionaryAttr(bucket));
      specializeSymbols(clone, values);
      module.push_back(clone);
      clones.push_back(FlatSymbolRefAttr::get(clone));
      // Next combination (odometer order).
      size_t k = 0;
      while (k < axes.size() && ++index[k] == axes[k].second.size())
        index[k++] = 0;
      if (k == axes.size())
        break;
    }
    main->setAttr("kiln.buckets", b.getArrayAttr(clones));
  }
};

} // namespace
