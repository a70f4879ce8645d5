//===- kiln.cpp - The Kiln compiler driver --------------------------------===//
//
// `kiln <command> ...`: import (ONNX -> graph dialect), compile (build the
// training step) and interp (the CPU reference interpreter). Errors are one
// line on stderr and exit code 1; usage errors exit 2.
//
//===----------------------------------------------------------------------===//

#include "Diagnostics.h"
#include "Driver.h"
#include "Progress.h"

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "kiln/InitAll.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace mlir;

namespace kiln::driver {

cl::OptionCategory &category() {
  static cl::OptionCategory category("kiln options");
  return category;
}
cl::SubCommand &importCommand() {
  static cl::SubCommand command("import", "Import an ONNX model (binary, or ONNX "
                                          "text as .onnxtxt) and print graph-dialect IR");
  return command;
}
cl::SubCommand &compileCommand() {
  static cl::SubCommand command(
      "compile", "Compile a model's training step (forward, backward, optimizer; LoRA, NF4, "
                 "bf16) to IR, CUDA C++ or a .kiln artifact for kiln-run");
  return command;
}
cl::SubCommand &explainCommand() {
  static cl::SubCommand command(
      "explain", "List the graph breaks of a model: what Kiln cannot compile and why");
  return command;
}
cl::SubCommand &reportCommand() {
  static cl::SubCommand command(
      "report", "One row per model: architecture, graph breaks, attention path, LoRA/NF4, "
                "planned peak memory (Markdown or JSON)");
  return command;
}
cl::SubCommand &interpCommand() {
  static cl::SubCommand command("interp",
                                "Run a model or graph-dialect IR on the CPU reference interpreter");
  return command;
}
cl::opt<bool>
    raiseComposites("raise-composites",
                    cl::desc("Rebuild RMSNorm, SiLU and attention from their decomposed "
                             "spelling (--kiln-raise-composites); =false keeps the export's ops"),
                    cl::init(true), cl::sub(importCommand()), cl::sub(interpCommand()),
                    cl::sub(compileCommand()), cl::sub(explainCommand()), cl::sub(reportCommand()),
                    cl::cat(category()));

namespace {
cl::opt<bool> listOptions("list-options",
                          cl::desc("Print every subcommand's options (for the help test)"),
                          cl::ReallyHidden);
} // namespace

int printOptionTable(raw_ostream &os) {
  // What the parser accepts: every named option of each subcommand that is
  // in Kiln's category (LLVM's own are hidden from --help).
  for (cl::SubCommand *sub : cl::getRegisteredSubcommands()) {
    if (sub->getName().empty())
      continue;
    for (auto &[name, option] : sub->OptionsMap)
      if (llvm::is_contained(option->Categories, &category()))
        os << sub->getName() << " " << name << "\n";
  }
  return 0;
}

int fail(const Twine &message) {
  // One line, even when names from the model hold line breaks.
  CompileProgress::clearCurrent();
  std::string line;
  for (char c : message.str())
    line += c == '\n' ? "\\n" : c == '\r' ? "\\r" : std::string(1, c);
  errs() << "kiln: error: " << line << "\n";
  return 1;
}

std::unique_ptr<ToolOutputFile> openOutput(StringRef path) {
  std::string error;
  std::unique_ptr<ToolOutputFile> file = mlir::openOutputFile(path, &error);
  if (!file) {
    fail(error);
    return nullptr;
  }
  // A device or FIFO (/dev/null, /dev/full) is written, never removed: not
  // on a failed write, not on a signal.
  if (path != "-" && !sys::fs::is_regular_file(path))
    file->keep();
  return file;
}

int closeOutput(ToolOutputFile &file, StringRef path) {
  raw_fd_ostream &os = file.os();
  os.flush();
  if (std::error_code ec = os.error()) {
    // Reported here, not by raw_fd_ostream's destructor (LLVM ERROR: IO
    // failure on output stream); a partial regular file is removed.
    os.clear_error();
    return fail((path == "-" ? StringRef("<stdout>") : path) + ": write failed: " + ec.message());
  }
  file.keep();
  return 0;
}

void reportUnsupported(const ImportResult &result) {
  CompileProgress::clearCurrent();
  for (const UnsupportedNode &node : result.unsupported)
    errs() << "kiln: warning: unsupported op " << node.opType << " (node '" << node.nodeName
           << "'): " << node.reason << "\n";
}

OwningOpRef<ModuleOp> loadModule(MLIRContext &context, const std::string &path,
                                 ImportOptions options, std::string &weightsPath, bool quiet) {
  setDiagnosticInput(path);
  if (StringRef(path).ends_with(".mlir")) {
    SourceMgr sourceMgr;
    SourceMgrDiagnosticHandler diagnostics(sourceMgr, &context);
    OwningOpRef<ModuleOp> module = parseSourceFile<ModuleOp>(path, sourceMgr, &context);
    if (module)
      if (auto weights = (*module)->getAttrOfType<StringAttr>("kiln.weights"))
        weightsPath = weights.str();
    return module; // On failure the parser printed a located diagnostic.
  }
  options.raiseComposites = raiseComposites;
  absl::StatusOr<ImportResult> result = importOnnxFile(&context, path, options);
  if (!result.ok()) {
    fail(std::string(result.status().message()));
    return nullptr;
  }
  if (!quiet)
    reportUnsupported(*result);
  weightsPath = path;
  return std::move(result->module);
}

func::FuncOp findMain(ModuleOp module) {
  if (auto main = module.lookupSymbol<func::FuncOp>("main"))
    return main;
  func::FuncOp first;
  module.walk([&](func::FuncOp f) {
    if (!first)
      first = f;
  });
  return first;
}

} // namespace kiln::driver

int main(int argc, char **argv) {
  using namespace kiln::driver;
  InitLLVM init(argc, argv);
  // The pass registry names the passes --dump-ir-after may ask for.
  kiln::registerAllPasses();
  // libLLVM registers hundreds of codegen flags; `kiln --help` shows ours.
  cl::HideUnrelatedOptions(category());
  for (cl::SubCommand *sub : cl::getRegisteredSubcommands())
    cl::HideUnrelatedOptions(category(), *sub);
  cl::SetVersionPrinter(printVersion);
  cl::ParseCommandLineOptions(
      argc, argv,
      "Kiln: an ahead-of-time training compiler for fine-tuning. It compiles a\n"
      "model's whole training step (forward, backward, optimizer, LoRA/NF4) into\n"
      "CUDA kernels in a .kiln artifact that kiln-run trains on the GPU.\n\n"
      "  kiln compile MODEL.onnx --lora r=16,alpha=32,targets=q_proj,v_proj "
      "--precision=bf16\n"
      "      --emit=artifact -o STEP.kiln     (then: kiln-run train STEP.kiln ...)\n"
      "  kiln compile MODEL.onnx|IR.mlir --emit=mlir|grads-mlir|step-mlir|kernel-mlir "
      "[-o OUT.mlir]\n"
      "  kiln compile MODEL.onnx --emit=cuda -o DIR\n"
      "  kiln import MODEL.onnx [-o OUT.mlir]\n"
      "  kiln explain MODEL.onnx [--format=json]\n"
      "  kiln interp IR.mlir|MODEL.onnx --inputs DIR --outputs DIR\n"
      "  kiln report MODEL... [--batch B --seq S] [--format=md|json]\n\n"
      "'kiln <command> --help' lists a command's options.\n");
  if (listOptions)
    return printOptionTable(outs());
  MLIRContext context;
  context.loadDialect<kiln::GraphDialect, kiln::kernel::KernelDialect, func::FuncDialect>();
  CommandDiagnostics diagnostics(context);
  if (importCommand())
    return runImport(context);
  if (compileCommand())
    return runCompile(context);
  if (explainCommand())
    return runExplain(context);
  if (interpCommand())
    return runInterp(context);
  if (reportCommand())
    return runReport(context);
  errs() << "kiln: error: no command given (see 'kiln --help')\n";
  return 2;
}
