//===- SpecializeSymbols.cpp - Pin size symbols to values -----------------===//

#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "mlir/IR/AttrTypeSubElements.h"
#include "llvm/ADT/StringMap.h"

namespace kiln {
#define GEN_PASS_DEF_SPECIALIZESYMBOLSPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

struct SpecializeSymbolsPass final
    : kiln::impl::SpecializeSymbolsPassBase<SpecializeSymbolsPass> {
  using SpecializeSymbolsPassBase::SpecializeSymbolsPassBase;

  void runOnOperation() override {
    llvm::StringMap<int64_t> pinned;
    SmallVector<StringRef> pairs;
    StringRef(values).split(pairs, ',', -1, /*KeepEmpty=*/false);
    for (StringRef pair : pairs) {
      auto [name, value] = pair.split('=');
      int64_t number;
      if (value.trim().getAsInteger(10, number) || number < 1) {
        getOperation().emitError("--static needs symbol=positive integer, got '")
            << pair << "'";
        return signalPassFailure();
      }
      pinned[name.trim()] = number;
    }
    auto lookup = [&](StringRef name) -> std::optional<int64_t> {
      auto it = pinned.find(name);
      return it == pinned.end() ? std::nullopt : std::optional(it->second);
    };
    AttrTypeReplacer replacer;
    replacer.addReplacement([&](SymExprAttr expr) -> std::pair<Attribute, WalkResult> {
      return {dimSubstitute(expr, lookup), WalkResult::skip()};
    });
    // Rebuild tensor types so new constants become static sizes.
    replacer.addReplacement([&](RankedTensorType type) -> std::pair<Type, WalkResult> {
      DimList dims = getDims(type);
      for (Dim &d : dims)
        d = dimSubstitute(d, lookup);
      return {makeTensorType(dims, type.getElementType()), WalkResult::skip()};
    });
    getOperation()->walk([&](Operation *op) {
      replacer.replaceElementsIn(op, /*replaceAttrs=*/true, /*replaceLocs=*/false,
                                 /*replaceTypes=*/true);
      if (auto func = llvm::dyn_cast<func::FuncOp>(op)) {
        auto type = llvm::cast<FunctionType>(replacer.replace(func.getFunctionType()));
        func.setType(type);
      }
    });
  }
};

} // namespace
