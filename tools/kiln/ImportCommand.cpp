//===- ImportCommand.cpp - kiln import ------------------------------------===//

#include "Driver.h"

#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

cl::opt<std::string> model(cl::Positional, cl::desc("<model.onnx>"), cl::sub(importCommand()),
                           cl::cat(category()));
cl::opt<bool> listOps("list-ops", cl::desc("Print the ONNX op types the importer supports"),
                      cl::sub(importCommand()), cl::cat(category()));
cl::opt<std::string> output("o", cl::desc("Write the IR here (default: stdout)"),
                            cl::value_desc("file"), cl::init("-"), cl::sub(importCommand()),
                            cl::cat(category()));

} // namespace

int runImport(MLIRContext &context) {
  if (listOps) {
    for (const std::string &op : getSupportedOnnxOps())
      outs() << op << "\n";
    return 0;
  }
  if (model.empty())
    return fail("import needs a model (see 'kiln import --help')");
  ImportOptions options;
  options.raiseComposites = raiseComposites;
  absl::StatusOr<ImportResult> result = importOnnxFile(&context, model, options);
  if (!result.ok())
    return fail(std::string(result.status().message()));
  reportUnsupported(*result);
  std::unique_ptr<ToolOutputFile> file = openOutput(output);
  if (!file)
    return 1;
  result->module->print(file->os());
  return closeOutput(*file, output);
}

} // namespace kiln::driver
