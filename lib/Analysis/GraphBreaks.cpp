//===- GraphBreaks.cpp - What Kiln cannot compile, and why ----------------===//

#include "kiln/Analysis/GraphBreaks.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/Passes.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace kiln {
namespace {

std::string locationOf(Operation *op) {
  std::string text;
  llvm::raw_string_ostream os(text);
  op->getLoc().print(os);
  return text;
}

/// Classifies an opaque op by its ONNX op type and the importer's reason.
GraphBreak classify(OpaqueOp op) {
  GraphBreak b;
  b.nodeName = op.getNodeName().str();
  b.opType = op.getOpType().str();
  auto reasonAttr = op->getAttrOfType<StringAttr>("reason");
  b.reason = reasonAttr ? reasonAttr.str() : "unsupported";
  b.location = locationOf(op);
  StringRef type = op.getOpType(), reason = b.reason;
  if (type == "If" || type == "Loop" || type == "Scan") {
    b.code = "control-flow";
    b.hint = type == "If" ? "export with a predicate that does not depend on tensor "
                            "values (torch.cond on a Python bool), or compute both "
                            "branches and select"
                          : "export with a static trip count (unroll the loop in "
                            "the model or trace with fixed sizes)";
  } else if (llvm::is_contained({"NonZero", "Unique", "Compress", "TopK"}, type)) {
    b.code = "data-dependent-shape";
    b.hint = "the output size depends on tensor values; keep it outside the "
             "compiled step or use a fixed-size formulation (masks instead of "
             "index lists)";
  } else if (reason.contains("computed from tensor data") ||
             reason.contains("must be a compile-time constant")) {
    b.code = "data-dependent-shape";
    b.hint = "derive the shape from input shapes (x.shape) or constants, not "
             "from tensor values";
  } else if (reason.contains("host-value extraction")) {
    b.code = "host-value";
    b.hint = "avoid .item()/int(tensor) on sizes; use shapes directly";
  } else if (reason.starts_with("op from domain")) {
    b.code = "custom-domain";
    b.hint = "export with standard ONNX ops (disable custom ops in the exporter)";
  } else if (reason == "no importer for this op") {
    b.code = "unsupported-op";
  } else if (reason.contains("unknown rank")) {
    b.code = "after-break";
    b.hint = "follows from an earlier break that left a value without a known "
             "rank";
  } else {
    b.code = "unsupported-variant";
  }
  return b;
}

/// Runs autodiff on a copy to find an op without a VJP on the
/// differentiated path.
std::optional<GraphBreak> findMissingVJP(func::FuncOp func) {
  bool trains = false;
  func.walk([&](ParameterOp p) { trains |= p.getTrainable(); });
  if (!trains || func.getNumResults() == 0)
    return std::nullopt;
  OwningOpRef<func::FuncOp> copy(func.clone());
  std::optional<GraphBreak> missing;
  ScopedDiagnosticHandler handler(func.getContext(), [&](Diagnostic &diag) {
    if (!missing && diag.str().find("has no gradient") != std::string::npos) {
      GraphBreak b;
      b.code = "no-vjp";
      b.reason = diag.str();
      std::string text;
      llvm::raw_string_ostream os(text);
      diag.getLocation().print(os);
      b.location = text;
      if (auto name = llvm::dyn_cast<NameLoc>(diag.getLocation()))
        b.nodeName = name.getName().str();
      b.hint = "freeze the parameters that feed it (--train) or wrap the "
               "input in a stop-gradient (detach())";
      missing = b;
    }
    return success();
  });
  PassManager pm(func.getContext(), func::FuncOp::getOperationName());
  pm.addPass(createAutodiffPass());
  (void)pm.run(*copy);
  return missing;
}

} // namespace

BreakReport analyzeGraphBreaks(func::FuncOp func) {
  BreakReport report;
  int64_t current = 0;
  for (Operation &op : func.getBody().front().without_terminator()) {
    if (auto opaque = llvm::dyn_cast<OpaqueOp>(op)) {
      report.breaks.push_back(classify(opaque));
      report.opsPerGraph.push_back(current);
      current = 0;
      continue;
    }
    ++current;
  }
  report.opsPerGraph.push_back(current);
  if (report.breaks.empty())
    if (std::optional<GraphBreak> missing = findMissingVJP(func))
      report.breaks.push_back(*missing);
  return report;
}

} // namespace kiln
