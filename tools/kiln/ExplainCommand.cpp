//===- ExplainCommand.cpp - kiln explain ----------------------------------===//
//
// Says what Kiln cannot compile in a model and why (graph breaks), the way
// torch._dynamo.explain does for torch.compile: how many graphs, each break
// with a reason code, node, op and location, and a hint when there is one.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "kiln/Analysis/GraphBreaks.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

enum class Format { Text, Json };

cl::opt<std::string> model(cl::Positional, cl::desc("<model.onnx | IR.mlir>"), cl::Required,
                           cl::sub(explainCommand()), cl::cat(category()));
cl::opt<Format> format("format", cl::desc("Output format"),
                       cl::values(clEnumValN(Format::Text, "text", "readable"),
                                  clEnumValN(Format::Json, "json", "JSON")),
                       cl::init(Format::Text), cl::sub(explainCommand()), cl::cat(category()));
cl::opt<std::string> train("train",
                           cl::desc("Trainable parameters, as for compile (the "
                                    "no-gradient check follows them)"),
                           cl::init("all"), cl::sub(explainCommand()), cl::cat(category()));

} // namespace

void printBreakReport(StringRef source, const BreakReport &report, raw_ostream &os) {
  size_t graphs = report.opsPerGraph.size();
  os << source << ": " << graphs << (graphs == 1 ? " graph, " : " graphs, ") << report.breaks.size()
     << (report.breaks.size() == 1 ? " break\n" : " breaks\n");
  for (auto [i, b] : llvm::enumerate(report.breaks)) {
    os << "  break " << i + 1 << ": [" << b.code << "] " << b.opType;
    if (!b.nodeName.empty())
      os << " (node '" << b.nodeName << "')";
    os << ": " << b.reason << "\n    at " << b.location << "\n";
    if (!b.hint.empty())
      os << "    hint: " << b.hint << "\n";
  }
  for (auto [i, ops] : llvm::enumerate(report.opsPerGraph))
    os << "  graph " << i + 1 << ": " << ops << " ops\n";
}

FailureOr<BreakReport> analyzeModel(MLIRContext &context, ModuleOp module, StringRef trainSpec) {
  func::FuncOp func = findMain(module);
  if (!func) {
    fail("no function to analyze");
    return failure();
  }
  PassManager pm(&context, func::FuncOp::getOperationName());
  SelectTrainablePassOptions options;
  options.train = trainSpec.str();
  pm.addPass(createSelectTrainablePass(options));
  if (failed(pm.run(func)))
    return failure();
  BreakReport report = analyzeGraphBreaks(func);
  // No break so far: "0 breaks" must mean the compile goes through.
  if (report.breaks.empty())
    if (std::optional<GraphBreak> late = findCompileFailure(module))
      report.breaks.push_back(*late);
  return report;
}

int runExplain(MLIRContext &context) {
  std::string weightsPath;
  OwningOpRef<ModuleOp> module = loadModule(context, model, {}, weightsPath,
                                            /*quiet=*/true);
  if (!module)
    return 1;
  FailureOr<BreakReport> report = analyzeModel(context, *module, train);
  if (failed(report))
    return 1;
  if (format == Format::Text) {
    printBreakReport(model, *report, outs());
    return 0;
  }
  json::Array breaks;
  for (const GraphBreak &b : report->breaks)
    breaks.push_back(json::Object{{"code", b.code},
                                  {"node", b.nodeName},
                                  {"op_type", b.opType},
                                  {"reason", b.reason},
                                  {"hint", b.hint},
                                  {"location", b.location}});
  json::Array graphs;
  for (int64_t ops : report->opsPerGraph)
    graphs.push_back(json::Object{{"ops", ops}});
  json::Object root{{"model", model},
                    {"graphs", static_cast<int64_t>(report->opsPerGraph.size())},
                    {"breaks", std::move(breaks)},
                    {"partitions", std::move(graphs)}};
  outs() << formatv("{0:2}", json::Value(std::move(root))) << "\n";
  return 0;
}

} // namespace kiln::driver
