//===- SpecializeSymbols.cpp - Pin size symbols to values -----------------===//

#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "llvm/ADT/StringMap.h"

namespace kiln {
#define GEN_PASS_DEF_SPECIALIZESYMBOLSPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

struct SpecializeSymbolsPass final : kiln::impl::SpecializeSymbolsPassBase<SpecializeSymbolsPass> {
  using SpecializeSymbolsPassBase::SpecializeSymbolsPassBase;

  void runOnOperation() override {
    llvm::StringMap<int64_t> pinned;
    SmallVector<StringRef> pairs;
    StringRef(values).split(pairs, ',', -1, /*KeepEmpty=*/false);
    for (StringRef pair : pairs) {
      auto [name, value] = pair.split('=');
      int64_t number;
      if (value.trim().getAsInteger(10, number) || number < 1) {
        getOperation().emitError("--static needs symbol=positive integer, got '") << pair << "'";
        return signalPassFailure();
      }
      pinned[name.trim()] = number;
    }
    specializeSymbols(getOperation(), pinned);
  }
};

} // namespace
