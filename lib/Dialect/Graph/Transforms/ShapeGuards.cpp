//===- ShapeGuards.cpp - Record the run-time guards of a compiled step ----===//

#include "kiln/Dialect/Graph/InitProgram.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"

namespace kiln {
#define GEN_PASS_DEF_SHAPEGUARDSPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// Generated kernels index with int32.
constexpr int64_t kInt32Max = 2147483647;

struct ShapeGuardsPass final : kiln::impl::ShapeGuardsPassBase<ShapeGuardsPass> {
  using ShapeGuardsPassBase::ShapeGuardsPassBase;

  DictionaryAttr guard(Builder &b, Dim expr, StringRef kind,
                       ArrayRef<std::pair<StringRef, int64_t>> bounds, StringRef origin) {
    SmallVector<NamedAttribute> fields = {b.getNamedAttr("kind", b.getStringAttr(kind)),
                                          b.getNamedAttr("expr", expr),
                                          b.getNamedAttr("origin", b.getStringAttr(origin))};
    for (auto [name, value] : bounds)
      fields.push_back(b.getNamedAttr(name, b.getI64IntegerAttr(value)));
    return b.getDictionaryAttr(fields);
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (isInitProgram(func)) // runs once at load, not in the step
      return;
    Builder b(&getContext());
    SmallVector<Attribute> guards;

    // Every symbol the function's values mention.
    llvm::SetVector<StringRef> symbols;
    Dim largest;
    auto visit = [&](Type type) {
      auto tensor = llvm::dyn_cast<RankedTensorType>(type);
      if (!tensor)
        return;
      DimList dims = getDims(tensor);
      for (Dim d : dims)
        for (StringRef s : dimSymbols(d))
          symbols.insert(s);
      Dim count = dimProduct(dims, &getContext());
      // Compare element counts at a large sample size: for positive symbols
      // the biggest there bounds the others at any size that matters.
      auto sample = [](Dim d) {
        return evaluateDim(d, [](StringRef) -> std::optional<int64_t> { return 1024; }).value_or(0);
      };
      if (count && !count.getConstantValue() && (!largest || sample(count) > sample(largest)))
        largest = count;
    };
    for (Type t : func.getArgumentTypes())
      visit(t);
    func.walk([&](Operation *op) {
      for (Type t : op->getResultTypes())
        visit(t);
    });

    llvm::StringMap<bool> ranged;
    SmallVector<StringRef> specs;
    StringRef(dynamic).split(specs, ',', -1, /*KeepEmpty=*/false);
    for (StringRef spec : specs) {
      spec = spec.trim();
      auto [name, range] = spec.split('=');
      auto [bounds, divisorText] = range.split(':');
      auto [minText, maxText] = bounds.split("..");
      int64_t lo, hi, divisor = 1;
      if (minText.getAsInteger(10, lo) || maxText.getAsInteger(10, hi) || lo < 1 || hi < lo ||
          (!divisorText.empty() && (divisorText.getAsInteger(10, divisor) || divisor < 1))) {
        func.emitError("--dynamic needs symbol=MIN..MAX[:DIVISOR] with "
                       "1 <= MIN <= MAX, got '")
            << spec << "'";
        return signalPassFailure();
      }
      if (!symbols.contains(name)) {
        func.emitError("--dynamic names symbol '") << name << "', which no input uses";
        return signalPassFailure();
      }
      std::string origin = ("--dynamic " + spec).str();
      Dim expr = SymExprAttr::getSymbol(&getContext(), name);
      guards.push_back(guard(b, expr, "range", {{"min", lo}, {"max", hi}}, origin));
      if (divisor > 1)
        guards.push_back(guard(b, expr, "divisible", {{"divisor", divisor}}, origin));
      ranged[name] = true;
    }
    for (StringRef s : symbols)
      if (!ranged.count(s))
        guards.push_back(guard(b, SymExprAttr::getSymbol(&getContext(), s), "range",
                               {{"min", 1}, {"max", kInt32Max}}, "a size is at least 1"));
    if (largest)
      guards.push_back(guard(b, largest, "range", {{"min", 0}, {"max", kInt32Max}},
                             "int32 element indexing in generated kernels"));
    func->setAttr("kiln.guards", b.getArrayAttr(guards));
  }
};

} // namespace
