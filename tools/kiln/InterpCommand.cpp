//===- InterpCommand.cpp - kiln interp ------------------------------------===//
//
// Runs IR or a model on the reference interpreter with the ONNX backend-test
// layout: input_K.pb in, output_K.pb out; gradients (results tagged
// kiln.grad_of) go to grad/<parameter name>.pb.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "kiln/Import/OnnxWeightSource.h"
#include "kiln/Import/TensorProto.h"
#include "kiln/Interp/Interpreter.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

cl::opt<std::string> input(cl::Positional, cl::desc("<IR.mlir | model.onnx>"),
                           cl::Required, cl::sub(interpCommand()), cl::cat(category()));
cl::opt<std::string> inputsDir("inputs",
                               cl::desc("Folder with input_K.pb, one per argument"),
                               cl::value_desc("dir"), cl::Required,
                               cl::sub(interpCommand()), cl::cat(category()));
cl::opt<std::string> outputsDir("outputs",
                                cl::desc("Folder to write output_K.pb (and "
                                         "grad/<parameter>.pb) into"),
                                cl::value_desc("dir"), cl::Required,
                                cl::sub(interpCommand()), cl::cat(category()));
cl::opt<bool> constSmallInputs(
    "const-small-inputs",
    cl::desc("With an ONNX model: compile scalar inputs and integer vector "
             "inputs as constants holding the given values (how the ONNX "
             "node tests pass shapes, axes, pads and bounds)"),
    cl::sub(interpCommand()), cl::cat(category()));

absl::StatusOr<HostTensor> readInput(unsigned index) {
  SmallString<256> path(inputsDir);
  sys::path::append(path, "input_" + Twine(index) + ".pb");
  return readTensorFile(path.str().str());
}

/// What --const-small-inputs freezes: integer vectors (shapes, axes, pads)
/// and scalars of any type (bounds, fill values, ratios).
bool isShapeLikeInput(const HostTensor &t) {
  if (t.shape.empty())
    return true;
  return !t.isFloat() && t.shape.size() == 1 && t.numel() <= 64;
}

class NoWeights : public WeightSource {
  absl::StatusOr<HostTensor> load(StringRef name) override {
    return absl::NotFoundError("parameter '" + name.str() +
                               "' has no weight source (module lacks kiln.weights)");
  }
};

int writeOutputs(func::FuncOp func, const std::vector<HostTensor> &outputs) {
  if (std::error_code ec = sys::fs::create_directories(outputsDir))
    return fail(outputsDir + ": " + ec.message());
  unsigned plain = 0;
  for (auto [i, tensor] : llvm::enumerate(outputs)) {
    SmallString<256> path(outputsDir);
    std::string name;
    if (auto param = func.getResultAttrOfType<StringAttr>(i, "kiln.grad_of")) {
      sys::path::append(path, "grad");
      if (std::error_code ec = sys::fs::create_directories(path))
        return fail(path + ": " + ec.message());
      sys::path::append(path, param.str() + ".pb");
      name = param.str();
    } else {
      sys::path::append(path, "output_" + Twine(plain++) + ".pb");
      name = "output_" + std::to_string(i);
      if (auto attr = func.getResultAttrOfType<StringAttr>(i, "kiln.name"))
        name = attr.str();
    }
    absl::Status status = writeTensorFile(path.str().str(), tensor, name);
    if (!status.ok())
      return fail(std::string(status.message()));
  }
  return 0;
}

} // namespace

int runInterp(MLIRContext &context) {
  ImportOptions options;
  std::vector<HostTensor> inputs;
  bool freeze = constSmallInputs && !StringRef(input).ends_with(".mlir");
  if (freeze) {
    absl::StatusOr<std::vector<std::string>> names = listOnnxInputs(input);
    if (!names.ok())
      return fail(std::string(names.status().message()));
    for (auto [i, name] : llvm::enumerate(*names)) {
      absl::StatusOr<HostTensor> tensor = readInput(i);
      if (!tensor.ok())
        return fail(std::string(tensor.status().message()));
      if (isShapeLikeInput(*tensor))
        options.frozenInputs[name] = *tensor;
      else
        inputs.push_back(std::move(*tensor));
    }
  }
  std::string weightsPath;
  OwningOpRef<ModuleOp> module = loadModule(context, input, options, weightsPath);
  if (!module)
    return 1;
  func::FuncOp func = findMain(*module);
  if (!func)
    return fail(input + ": no function to run");
  if (!freeze) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      absl::StatusOr<HostTensor> tensor = readInput(i);
      if (!tensor.ok())
        return fail(std::string(tensor.status().message()));
      inputs.push_back(std::move(*tensor));
    }
  }

  NoWeights noWeights;
  std::unique_ptr<OnnxWeightSource> onnxWeights;
  WeightSource *weights = &noWeights;
  if (!weightsPath.empty()) {
    auto opened = OnnxWeightSource::open(weightsPath);
    if (!opened.ok())
      return fail(std::string(opened.status().message()));
    onnxWeights = std::move(*opened);
    weights = onnxWeights.get();
  }
  absl::StatusOr<InterpreterResult> result = interpret(func, inputs, *weights);
  if (!result.ok())
    return fail(std::string(result.status().message()));
  return writeOutputs(func, result->outputs);
}

} // namespace kiln::driver
