//===- Driver.h - Shared pieces of the kiln subcommands ---------*- C++ -*-===//

#ifndef KILN_TOOLS_KILN_DRIVER_H
#define KILN_TOOLS_KILN_DRIVER_H

#include "kiln/Analysis/GraphBreaks.h"
#include "kiln/Analysis/MemoryPlan.h"
#include "kiln/Import/OnnxImporter.h"
#include "kiln/Pipelines/Pipelines.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/ToolOutputFile.h"

#include "kiln/ArtifactEmit/Sections.h"
#include "kiln/artifact/MemoryPlanSection.h"

#include <optional>
#include <string>

namespace kiln::driver {

// Function-local statics: options in other files register with these
// during static initialization, whose order across files is unspecified.
llvm::cl::OptionCategory &category();
llvm::cl::SubCommand &importCommand();
llvm::cl::SubCommand &interpCommand();
llvm::cl::SubCommand &compileCommand();
llvm::cl::SubCommand &explainCommand();
llvm::cl::SubCommand &reportCommand();
/// --raise-composites, shared by every command that imports.
extern llvm::cl::opt<bool> raiseComposites;

/// `kiln --version`: Kiln's version and commit, LLVM/MLIR's and NVRTC's.
void printVersion(llvm::raw_ostream &os);
/// `kiln --list-options` (hidden): "SUBCOMMAND OPTION" per line, every
/// option each subcommand accepts, for the test that --help lists them.
int printOptionTable(llvm::raw_ostream &os);

/// Every name must be the argument of a pass kiln compile's pipelines run
/// (kiln-lora, cse); else `error` names the bad one (and, for a class name
/// like LoraPass, its argument) and lists the valid ones.
mlir::LogicalResult checkPassNames(llvm::ArrayRef<std::string> names, llvm::StringRef flag,
                                   std::string &error);

/// Prints `kiln: error: <message>` as one line and returns exit code 1.
int fail(const llvm::Twine &message);
/// Opens `path` ("-": stdout) for writing; errors are reported (null).
std::unique_ptr<llvm::ToolOutputFile> openOutput(llvm::StringRef path);
/// Flushes and keeps `file`: a failed write (a full disk) is one error line
/// naming `path`, exit code 1.
int closeOutput(llvm::ToolOutputFile &file, llvm::StringRef path);
/// Prints one warning per op the importer kept as kiln.opaque.
void reportUnsupported(const ImportResult &result);

/// A module from graph-dialect IR (.mlir) or an ONNX model (imported with
/// `options`); `weightsPath` receives where parameter values live. Errors
/// are already reported; returns null then.
mlir::OwningOpRef<mlir::ModuleOp> loadModule(mlir::MLIRContext &context, const std::string &path,
                                             ImportOptions options, std::string &weightsPath,
                                             bool quiet = false);
/// The function a command works on: `main`, or the module's first one.
mlir::func::FuncOp findMain(mlir::ModuleOp module);

/// The graph breaks of a module's main function (after selecting `train`).
mlir::FailureOr<BreakReport> analyzeModel(mlir::MLIRContext &context, mlir::ModuleOp module,
                                          llvm::StringRef train);
void printBreakReport(llvm::StringRef source, const BreakReport &report, llvm::raw_ostream &os);
/// A dry run of the rest of the compile (train step, fusion, lowering, CUDA
/// source; CompileCheck.cpp): the first op it stops at, as a graph break.
std::optional<GraphBreak> findCompileFailure(mlir::ModuleOp module);

int runImport(mlir::MLIRContext &context);
int runInterp(mlir::MLIRContext &context);
int runCompile(mlir::MLIRContext &context);
int runExplain(mlir::MLIRContext &context);
int runReport(mlir::MLIRContext &context);

// Memory flags of kiln compile (MemoryOptions.cpp).
/// --remat-budget.
llvm::StringRef rematBudget();
/// Whether --remat-budget was given (else its default, pointwise, applies
/// to compiles with a backward pass).
bool rematBudgetGiven();
/// With a remat budget, the symbol values kiln-remat plans at: the
/// --memory-report values, then the maxima of `dynamicSpec` (--dynamic).
mlir::LogicalResult setRematSymbols(PipelineOptions &options, llvm::StringRef dynamicSpec);
/// --memory-report or --memory-plan was given.
bool memoryReportRequested();
/// Plans `module`'s main function and prints the report / writes the JSON
/// plan; with `stepProgram` (a train step) also the kernel-level plan of
/// the step after fusion and lowering (StepMemory.cpp).
int reportMemory(mlir::ModuleOp module, llvm::StringRef dynamicSpec, bool stepProgram);
/// The values the artifact's memory_plan is planned at: --memory-report's,
/// then the maxima of --dynamic ranges, of `main`'s range guards and of
/// its shape buckets; none when a size symbol of `main` is still unbound.
std::optional<SymbolValues> memoryPlanValues(mlir::func::FuncOp main, llvm::StringRef dynamicSpec);

// The kernel-level plan (StepMemory.cpp).
artifact::SymbolBindings toBindings(const SymbolValues &values);
/// A clone of `module` after the kernel pipeline (with a @main); null on
/// failure, `error` then holding the first diagnostic.
mlir::OwningOpRef<mlir::ModuleOp> lowerStepProgram(mlir::ModuleOp module, std::string &error);
/// A clone of `module` fused and lowered, its @main planned at `values` as
/// the runtime plans it; on failure `error` holds the first diagnostic.
mlir::FailureOr<artifact::StepMemoryPlan> planStepProgram(mlir::ModuleOp module,
                                                          const SymbolValues &values,
                                                          std::string &error,
                                                          StepPeak *peak = nullptr);
/// "step program (after fusion): persistent ..., planned peak ...".
void printStepPlan(const artifact::StepMemoryPlan &plan, llvm::raw_ostream &os,
                   const StepPeak *peak = nullptr);

/// Exit code of `--fullgraph` when the model has graph breaks.
inline constexpr int kGraphBreakExit = 4;

} // namespace kiln::driver

#endif // KILN_TOOLS_KILN_DRIVER_H
