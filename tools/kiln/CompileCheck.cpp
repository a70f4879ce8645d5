//===- CompileCheck.cpp - Would the rest of the compile go through? -------===//
//
// `kiln explain` and `--fullgraph` promise that "0 breaks" means the model
// compiles. Past import and autodiff, a step can still stop at fusion (an op
// with no kernel) or at CUDA emission (an op no emitter handles inside its
// kernel). This dry run builds the train step of a copy of the model,
// fuses, lowers and prints every kernel's CUDA source (NVRTC is not run),
// and turns the first such failure into a graph break naming the op.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "kiln/Analysis/GraphBreaks.h"
#include "kiln/Codegen/Cuda.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "kiln/Dialect/Kernel/Passes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

/// A break from the first error diagnostic of the dry run.
GraphBreak breakOf(const Diagnostic &diag) {
  GraphBreak b;
  b.reason = diag.str();
  std::string location;
  raw_string_ostream os(location);
  diag.getLocation().print(os);
  b.location = location;
  Location loc = diag.getLocation();
  if (auto fused = dyn_cast<FusedLoc>(loc); fused && !fused.getLocations().empty())
    loc = fused.getLocations().front();
  if (auto name = dyn_cast<NameLoc>(loc))
    b.nodeName = name.getName().str();
  // Op errors read "'kiln.split' op ...": the op names the break.
  StringRef text = b.reason;
  if (text.consume_front("'")) {
    size_t end = text.find('\'');
    if (end != StringRef::npos)
      b.opType = text.take_front(end).str();
  }
  StringRef op = b.opType.empty() ? StringRef("the op") : StringRef(b.opType);
  if (b.reason.find("has no kernel") != std::string::npos) {
    b.code = "no-kernel";
    b.hint = ("Kiln has no CUDA kernel for " + op +
              " in this form (a softmax or norm over a non-innermost axis, "
              "for one): the compile would stop at fusion; export it "
              "differently (move the axis last) or keep it out of the step")
                 .str();
  } else if (b.reason.find("no CUDA element emitter") != std::string::npos) {
    b.code = "no-emitter";
    b.hint = (op + " cannot be computed inside the kernel it was fused into "
                   "(no CUDA element emitter): the compile would stop at code "
                   "generation; report the op with this model")
                 .str();
  } else if (b.reason.find("has no gradient") != std::string::npos ||
             b.reason.find("gradient of") != std::string::npos) {
    b.code = "no-vjp";
    b.hint = "freeze the parameters that feed it (--train) or wrap the input "
             "in a stop-gradient (detach())";
  } else {
    b.code = "codegen";
    b.hint = "the train step does not compile past this point; `kiln compile "
             "--emit=step-mlir` shows where the op sits";
  }
  return b;
}

} // namespace

std::optional<GraphBreak> findCompileFailure(ModuleOp module) {
  MLIRContext *context = module.getContext();
  OwningOpRef<ModuleOp> copy(module.clone());
  std::optional<GraphBreak> failure;
  ScopedDiagnosticHandler handler(context, [&](Diagnostic &diag) {
    if (diag.getSeverity() == DiagnosticSeverity::Error && !failure)
      failure = breakOf(diag);
    return success();
  });
  func::FuncOp main = findMain(*copy);
  bool trains = false;
  if (main)
    main.walk([&](ParameterOp p) { trains |= p.getTrainable(); });
  PassManager pm(context);
  if (trains && main && main.getNumResults() > 0) {
    pm.addNestedPass<func::FuncOp>(createAutodiffPass());
    pm.addNestedPass<func::FuncOp>(createTrainStepPass());
  }
  pm.addPass(createCanonicalizerPass());
  pm.addPass(createCSEPass());
  pm.addNestedPass<func::FuncOp>(createVerifyShapesPass());
  pm.addNestedPass<func::FuncOp>(kernel::createFusePass());
  pm.addPass(kernel::createLowerToStepPass());
  pm.addNestedPass<func::FuncOp>(kernel::createUpdateInPlacePass());
  if (failed(pm.run(*copy))) {
    if (!failure) {
      failure = GraphBreak();
      failure->code = "codegen";
      failure->reason = "the train step does not compile (no diagnostic)";
    }
    return failure;
  }
  for (auto kernel : copy->getOps<kernel::KernelOp>())
    if (failed(codegen::emitCudaKernel(kernel)))
      return failure;
  return std::nullopt;
}

} // namespace kiln::driver
