//===- GuardsSection.cpp - kiln.guards as the artifact's guards section ---===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/ArtifactEmit/Sections.h"

#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/artifact/Json.h"

using namespace mlir;
using kiln::artifact::Json;

FailureOr<std::string> kiln::emitGuardsSection(func::FuncOp func) {
  Json guards = Json::array();
  auto list = func->getAttrOfType<ArrayAttr>("kiln.guards");
  if (!list)
    return guards.print();
  for (Attribute attr : list) {
    auto guard = llvm::dyn_cast<DictionaryAttr>(attr);
    auto kind = guard ? guard.getAs<StringAttr>("kind") : StringAttr();
    auto expr = guard ? guard.getAs<SymExprAttr>("expr") : SymExprAttr();
    if (!kind || !expr)
      return func.emitError("malformed kiln.guards entry ") << attr;
    Json entry = Json::object();
    entry.set("kind", Json::string(kind.str()));
    // The runtime parses the compiler's own printed form of the polynomial.
    entry.set("expr", Json::string(dimToString(expr)));
    SmallVector<StringRef> bounds;
    if (kind.getValue() == "range")
      bounds = {"min", "max"};
    else if (kind.getValue() == "divisible")
      bounds = {"divisor"};
    else
      return func.emitError("unknown guard kind '") << kind.getValue() << "'";
    for (StringRef name : bounds) {
      auto value = guard.getAs<IntegerAttr>(name);
      if (!value)
        return func.emitError("guard of kind '")
               << kind.getValue() << "' lacks integer '" << name << "'";
      entry.set(name.str(), Json::integer(value.getInt()));
    }
    if (auto origin = guard.getAs<StringAttr>("origin"))
      entry.set("origin", Json::string(origin.str()));
    guards.push(std::move(entry));
  }
  return guards.print();
}
