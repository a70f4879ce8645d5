//===- kiln.cpp - The Kiln compiler driver --------------------------------===//
//
// `kiln <command> ...`: import (ONNX -> graph dialect) and interp (the CPU
// reference interpreter). Errors are one line on stderr and exit code 1;
// usage errors exit 2.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Import/OnnxImporter.h"
#include "kiln/Import/OnnxWeightSource.h"
#include "kiln/Import/TensorProto.h"
#include "kiln/Interp/Interpreter.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace mlir;

namespace {

cl::OptionCategory kilnCategory("kiln options");

cl::SubCommand importCommand("import", "Import an ONNX model (binary, or ONNX "
                                       "text as .onnxtxt) and print graph-dialect IR");
cl::opt<std::string> importModel(cl::Positional, cl::desc("<model.onnx>"),
                                 cl::sub(importCommand),
    cl::cat(kilnCategory));
cl::opt<bool> listOps("list-ops",
                      cl::desc("Print the ONNX op types the importer supports"),
                      cl::sub(importCommand),
    cl::cat(kilnCategory));
cl::opt<std::string> importOutput("o", cl::desc("Write the IR here (default: stdout)"),
                                  cl::value_desc("file"), cl::init("-"),
                                  cl::sub(importCommand),
    cl::cat(kilnCategory));

cl::SubCommand interpCommand(
    "interp", "Run a model or graph-dialect IR on the CPU reference interpreter");
cl::opt<std::string> interpInput(cl::Positional, cl::desc("<IR.mlir | model.onnx>"),
                                 cl::Required, cl::sub(interpCommand),
    cl::cat(kilnCategory));
cl::opt<std::string> interpInputs("inputs",
                                  cl::desc("Folder with input_K.pb, one per argument"),
                                  cl::value_desc("dir"), cl::Required,
                                  cl::sub(interpCommand),
    cl::cat(kilnCategory));
cl::opt<std::string> interpOutputs("outputs",
                                   cl::desc("Folder to write output_K.pb into"),
                                   cl::value_desc("dir"), cl::Required,
                                   cl::sub(interpCommand),
    cl::cat(kilnCategory));

cl::opt<bool> constSmallInputs(
    "const-small-inputs",
    cl::desc("With an ONNX model: compile scalar inputs and integer vector "
             "inputs as constants holding the given values (how the ONNX "
             "node tests pass shapes, axes, pads and bounds)"),
    cl::sub(interpCommand),
    cl::cat(kilnCategory));

cl::opt<bool> raiseComposites(
    "raise-composites",
    cl::desc("Rebuild RMSNorm, SiLU and attention from their decomposed "
             "spelling (--kiln-raise-composites); =false keeps the export's ops"),
    cl::init(true), cl::sub(importCommand), cl::sub(interpCommand),
    cl::cat(kilnCategory));

int fail(const Twine &message) {
  // One line, even when names from the model hold line breaks.
  std::string line;
  for (char c : message.str())
    line += c == '\n' ? "\\n" : c == '\r' ? "\\r" : std::string(1, c);
  errs() << "kiln: error: " << line << "\n";
  return 1;
}

/// Reports ops kept as kiln.opaque; import still succeeds.
void reportUnsupported(const kiln::ImportResult &result) {
  for (const kiln::UnsupportedNode &node : result.unsupported)
    errs() << "kiln: warning: unsupported op " << node.opType << " (node '"
           << node.nodeName << "'): " << node.reason << "\n";
}

int runImport(MLIRContext &context) {
  if (listOps) {
    for (const std::string &op : kiln::getSupportedOnnxOps())
      outs() << op << "\n";
    return 0;
  }
  if (importModel.empty())
    return fail("import needs a model (see 'kiln import --help')");
  kiln::ImportOptions options;
  options.raiseComposites = raiseComposites;
  absl::StatusOr<kiln::ImportResult> result =
      kiln::importOnnxFile(&context, importModel, options);
  if (!result.ok())
    return fail(std::string(result.status().message()));
  reportUnsupported(*result);
  std::string error;
  std::unique_ptr<ToolOutputFile> output = openOutputFile(importOutput, &error);
  if (!output)
    return fail(error);
  result->module->print(output->os());
  output->keep();
  return 0;
}

absl::StatusOr<kiln::HostTensor> readInput(unsigned index) {
  SmallString<256> path(interpInputs);
  sys::path::append(path, "input_" + Twine(index) + ".pb");
  return kiln::readTensorFile(path.str().str());
}

/// What --const-small-inputs freezes: integer vectors (shapes, axes, pads)
/// and scalars of any type (bounds, fill values, ratios).
bool isShapeLikeInput(const kiln::HostTensor &t) {
  if (t.shape.empty())
    return true;
  return !t.isFloat() && t.shape.size() == 1 && t.numel() <= 64;
}

int runInterp(MLIRContext &context) {
  OwningOpRef<ModuleOp> module;
  std::string weightsPath;
  std::vector<kiln::HostTensor> inputs;
  if (StringRef(interpInput).ends_with(".mlir")) {
    SourceMgr sourceMgr;
    SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
    module = parseSourceFile<ModuleOp>(interpInput, sourceMgr, &context);
    if (!module)
      return 1; // The parser printed a located diagnostic.
    if (auto weights = (*module)->getAttrOfType<StringAttr>("kiln.weights"))
      weightsPath = weights.str();
  } else {
    kiln::ImportOptions options;
    options.raiseComposites = raiseComposites;
    if (constSmallInputs) {
      absl::StatusOr<std::vector<std::string>> names =
          kiln::listOnnxInputs(interpInput);
      if (!names.ok())
        return fail(std::string(names.status().message()));
      for (auto [i, name] : llvm::enumerate(*names)) {
        absl::StatusOr<kiln::HostTensor> tensor = readInput(i);
        if (!tensor.ok())
          return fail(std::string(tensor.status().message()));
        if (isShapeLikeInput(*tensor))
          options.frozenInputs[name] = *tensor;
        else
          inputs.push_back(std::move(*tensor));
      }
    }
    absl::StatusOr<kiln::ImportResult> result =
        kiln::importOnnxFile(&context, interpInput, options);
    if (!result.ok())
      return fail(std::string(result.status().message()));
    reportUnsupported(*result);
    module = std::move(result->module);
    weightsPath = interpInput;
  }
  func::FuncOp func;
  module->walk([&](func::FuncOp f) {
    if (!func)
      func = f;
  });
  if (!func)
    return fail(interpInput + ": no function to run");

  if (!constSmallInputs) {
    for (unsigned i = 0; i < func.getNumArguments(); ++i) {
      absl::StatusOr<kiln::HostTensor> tensor = readInput(i);
      if (!tensor.ok())
        return fail(std::string(tensor.status().message()));
      inputs.push_back(std::move(*tensor));
    }
  }

  class NoWeights : public kiln::WeightSource {
    absl::StatusOr<kiln::HostTensor> load(StringRef name) override {
      return absl::NotFoundError("parameter '" + name.str() +
                                 "' has no weight source (module lacks kiln.weights)");
    }
  } noWeights;
  std::unique_ptr<kiln::OnnxWeightSource> onnxWeights;
  kiln::WeightSource *weights = &noWeights;
  if (!weightsPath.empty()) {
    auto opened = kiln::OnnxWeightSource::open(weightsPath);
    if (!opened.ok())
      return fail(std::string(opened.status().message()));
    onnxWeights = std::move(*opened);
    weights = onnxWeights.get();
  }

  absl::StatusOr<kiln::InterpreterResult> result =
      kiln::interpret(func, inputs, *weights);
  if (!result.ok())
    return fail(std::string(result.status().message()));
  if (std::error_code ec = sys::fs::create_directories(interpOutputs))
    return fail(interpOutputs + ": " + ec.message());
  for (auto [i, tensor] : llvm::enumerate(result->outputs)) {
    SmallString<256> path(interpOutputs);
    sys::path::append(path, "output_" + Twine(i) + ".pb");
    std::string name = "output_" + std::to_string(i);
    if (auto attr = func.getResultAttrOfType<StringAttr>(i, "kiln.name"))
      name = attr.str();
    absl::Status status = kiln::writeTensorFile(path.str().str(), tensor, name);
    if (!status.ok())
      return fail(std::string(status.message()));
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  InitLLVM init(argc, argv);
  // libLLVM registers hundreds of codegen flags; `kiln --help` shows ours.
  cl::HideUnrelatedOptions(kilnCategory);
  for (cl::SubCommand *sub : {&importCommand, &interpCommand})
    cl::HideUnrelatedOptions(kilnCategory, *sub);
  cl::ParseCommandLineOptions(
      argc, argv,
      "Kiln: an ahead-of-time training compiler for fine-tuning\n\n"
      "  kiln import MODEL.onnx [-o OUT.mlir]\n"
      "  kiln interp IR.mlir|MODEL.onnx --inputs DIR --outputs DIR\n");
  MLIRContext context;
  context.loadDialect<kiln::GraphDialect, func::FuncDialect>();
  if (importCommand)
    return runImport(context);
  if (interpCommand)
    return runInterp(context);
  errs() << "kiln: error: no command given (see 'kiln --help')\n";
  return 2;
}
