//===- CompileCommand.cpp - kiln compile ----------------------------------===//
//
// Imports (or parses) a model, selects the trainable parameters and builds
// the training step up to what --emit asks for.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "kiln/Dialect/Graph/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

enum class Emit { ForwardMlir, GradsMlir };

cl::opt<std::string> model(cl::Positional, cl::desc("<model.onnx | IR.mlir>"),
                           cl::Required, cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> train(
    "train",
    cl::desc("Parameters that train: `all` (every float initializer of rank "
             ">= 1) or a regex searched in ONNX initializer names"),
    cl::init("all"), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<Emit> emit(
    "emit", cl::desc("What to produce"),
    cl::values(clEnumValN(Emit::ForwardMlir, "mlir",
                          "the forward graph with the trainable set marked"),
               clEnumValN(Emit::GradsMlir, "grads-mlir",
                          "a function returning the loss and d loss / d p for "
                          "every trainable parameter p")),
    cl::init(Emit::GradsMlir), cl::sub(compileCommand()), cl::cat(category()));
cl::opt<std::string> output("o", cl::desc("Write the result here (default: stdout)"),
                            cl::value_desc("file"), cl::init("-"),
                            cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> printIrAfterAll("print-ir-after-all",
                              cl::desc("Print the IR after every pass (stderr)"),
                              cl::sub(compileCommand()), cl::cat(category()));
cl::opt<bool> timing("timing", cl::desc("Print the time of every pass"),
                     cl::sub(compileCommand()), cl::cat(category()));

} // namespace

int runCompile(MLIRContext &context) {
  std::string weightsPath;
  OwningOpRef<ModuleOp> module = loadModule(context, model, {}, weightsPath);
  if (!module)
    return 1;
  if (!findMain(*module))
    return fail(model + ": no function to compile");

  PassManager pm(&context);
  if (printIrAfterAll) {
    context.disableMultithreading();
    pm.enableIRPrinting(
        /*shouldPrintBeforePass=*/[](Pass *, Operation *) { return false; },
        /*shouldPrintAfterPass=*/[](Pass *, Operation *) { return true; });
  }
  if (timing)
    pm.enableTiming();
  SelectTrainablePassOptions trainOptions;
  trainOptions.train = train;
  pm.addNestedPass<func::FuncOp>(createSelectTrainablePass(trainOptions));
  if (emit == Emit::GradsMlir) {
    pm.addNestedPass<func::FuncOp>(createAutodiffPass());
    pm.addPass(createCanonicalizerPass());
    pm.addPass(createCSEPass());
  }
  // Pass errors are located diagnostics; print them as one line each.
  ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
    std::string location;
    llvm::raw_string_ostream os(location);
    diag.getLocation().print(os);
    fail(os.str() + ": " + diag.str());
    return success();
  });
  if (failed(pm.run(*module)))
    return 1;
  std::string error;
  std::unique_ptr<ToolOutputFile> file = openOutputFile(output, &error);
  if (!file)
    return fail(error);
  module->print(file->os());
  file->keep();
  return 0;
}

} // namespace kiln::driver
