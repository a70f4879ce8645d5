//===- InitProgram.cpp - Run @kiln_init on the host -----------------------===//

#include "kiln/Interp/InitProgram.h"

#include "absl/strings/str_cat.h"
#include "kiln/Dialect/Graph/InitProgram.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"

using namespace mlir;

namespace kiln {

absl::StatusOr<HostTensor> OverlayWeightSource::load(llvm::StringRef name) {
  auto it = tensors.find(name);
  if (it != tensors.end())
    return it->second;
  return base.load(name);
}

absl::Status runInitProgram(ModuleOp module, uint64_t seed, OverlayWeightSource &weights) {
  auto init = module.lookupSymbol<func::FuncOp>(kInitProgramName);
  if (!init)
    return absl::OkStatus();
  if (init.getNumArguments() != 1)
    return absl::InvalidArgumentError(
        absl::StrCat("@", kInitProgramName.str(), " must take one argument (the seed)"));
  HostTensor seedTensor(DType::I64, {});
  seedTensor.setInt(0, static_cast<int64_t>(seed));
  absl::StatusOr<InterpreterResult> result = interpret(init, {seedTensor}, weights);
  if (!result.ok())
    return absl::Status(result.status().code(),
                        absl::StrCat("init program: ", result.status().message()));
  for (auto [i, tensor] : llvm::enumerate(result->outputs)) {
    auto name = init.getResultAttrOfType<StringAttr>(i, "kiln.param");
    if (!name)
      return absl::InvalidArgumentError(
          absl::StrCat("init program result ", i, " has no kiln.param name"));
    weights.tensors[name.str()] = std::move(tensor);
  }
  return absl::OkStatus();
}

} // namespace kiln
