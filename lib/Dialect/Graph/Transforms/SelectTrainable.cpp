//===- SelectTrainable.cpp - Choose the parameters that train -------------===//

#include "kiln/Dialect/Graph/InitProgram.h"
#include "kiln/Dialect/Graph/Passes.h"

#include "llvm/Support/Regex.h"

namespace kiln {
#define GEN_PASS_DEF_SELECTTRAINABLEPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// `all` keeps float parameters of rank >= 1 (the importer's rule for
/// trainable initializers) but for the buffers the exporter's parameter
/// list excludes (kiln.buffer), `none` none (LoRA adapters alone); a regex
/// is searched in the name (and may select a buffer).
bool isTrainable(ParameterOp param, const std::string &train, const llvm::Regex &regex) {
  auto type = param.getType();
  if (!llvm::isa<FloatType>(type.getElementType()))
    return false;
  if (train == "all")
    return type.getRank() >= 1 && !param->hasAttr(kBufferAttr);
  if (train == "none")
    return false;
  return regex.match(param.getName());
}

struct SelectTrainablePass final : kiln::impl::SelectTrainablePassBase<SelectTrainablePass> {
  using SelectTrainablePassBase::SelectTrainablePassBase;

  void runOnOperation() override {
    // The init program's parameters are created by it, not trained.
    if (isInitProgram(getOperation()))
      return;
    llvm::Regex regex(train);
    std::string error;
    if (train != "all" && train != "none" && !regex.isValid(error)) {
      getOperation().emitError("invalid --train regex '") << train << "': " << error;
      return signalPassFailure();
    }
    getOperation().walk(
        [&](ParameterOp param) { param.setTrainable(isTrainable(param, train, regex)); });
  }
};

} // namespace
