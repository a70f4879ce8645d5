//===- ArtifactInteropTest.cpp - Compiler and runtime agree on artifacts --===//
//
// The artifact library is compiled into both the compiler and the runtime.
// These tests pin the contract between them: size expressions as the
// compiler prints them (#kiln.expr) parse in the runtime and evaluate to the
// compiler's values, the guards --kiln-shape-guards records reach the
// runtime's checker intact, and an artifact written here reads back intact.

#include "kiln/ArtifactEmit/Sections.h"
#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/artifact/Artifact.h"
#include "kiln/artifact/Guards.h"
#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

using namespace kiln;

namespace {

TEST(ArtifactInterop, RuntimeEvaluatesCompilerSizeExpressions) {
  mlir::MLIRContext context;
  context.loadDialect<GraphDialect>();
  const char *texts[] = {"batch*seq", "2*seq + 1",
                         "seq - 1",   "batch - 1*seq",
                         "-3*seq",    "batch*seq*seq + 4*batch - 7",
                         "64",        "32000*batch*seq"};
  for (const char *text : texts) {
    auto dim = llvm::dyn_cast_or_null<SymExprAttr>(mlir::parseAttribute(
        (std::string("#kiln.expr<") + text + ">").c_str(), &context));
    ASSERT_TRUE(dim) << text;
    std::string printed = dimToString(dim);
    auto runtimeExpr = artifact::SizeExpr::parse(printed);
    ASSERT_TRUE(runtimeExpr) << runtimeExpr.getError();
    for (std::pair<int64_t, int64_t> sizes :
         {std::pair<int64_t, int64_t>{1, 1}, {4, 1024}, {64, 8192}, {3, 17}}) {
      int64_t batch = sizes.first, seq = sizes.second;
      std::optional<int64_t> expected =
          evaluateDim(dim, [&](llvm::StringRef name) -> std::optional<int64_t> {
            return name == "batch" ? batch : seq;
          });
      ASSERT_TRUE(expected);
      auto actual = runtimeExpr->evaluate({{"batch", batch}, {"seq", seq}});
      ASSERT_TRUE(actual) << actual.getError();
      EXPECT_EQ(*actual, *expected) << printed;
    }
  }
}

TEST(ArtifactInterop, ShapeGuardsReachTheRuntime) {
  mlir::MLIRContext context;
  context.loadDialect<GraphDialect, mlir::func::FuncDialect>();
  const char *ir = R"MLIR(
    func.func @g(%x: tensor<?x?x64xf32, #kiln.dims<[b, seq]>>) -> tensor<?x?x64xf32, #kiln.dims<[b, seq]>> {
      return %x : tensor<?x?x64xf32, #kiln.dims<[b, seq]>>
    })MLIR";
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(ir, &context);
  ASSERT_TRUE(module);
  mlir::PassManager pm(&context);
  ShapeGuardsPassOptions options;
  options.dynamic = "seq=16..4096:8";
  pm.addNestedPass<mlir::func::FuncOp>(createShapeGuardsPass(options));
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  auto func = *module->getOps<mlir::func::FuncOp>().begin();

  mlir::FailureOr<std::string> section = emitGuardsSection(func);
  ASSERT_TRUE(mlir::succeeded(section));
  auto guards = artifact::parseGuards(*section);
  ASSERT_TRUE(guards) << guards.getError() << "\n" << *section;
  ASSERT_EQ(guards->size(), 4u);
  EXPECT_EQ(artifact::describeGuard((*guards)[0]), "16 <= seq <= 4096");
  EXPECT_EQ((*guards)[3].expr.getText(), "64*b*seq");

  EXPECT_TRUE(artifact::checkGuards(*guards, {{"b", 4}, {"seq", 1024}}));
  EXPECT_EQ(
      artifact::checkGuards(*guards, {{"b", 4}, {"seq", 1020}}).getError(),
      "seq=1020 violates seq % 8 == 0 (required by --dynamic "
      "seq=16..4096:8)");
  EXPECT_EQ(
      artifact::checkGuards(*guards, {{"b", 16384}, {"seq", 4096}}).getError(),
      "64*b*seq=4294967296 violates 0 <= 64*b*seq <= 2147483647 "
      "(required by int32 element indexing in generated kernels)");

  // No guards recorded: an empty list.
  func->removeAttr("kiln.guards");
  EXPECT_EQ(*emitGuardsSection(func), "[]");
}

TEST(ArtifactInterop, WriterFromTheCompilerBuild) {
  artifact::ArtifactWriter writer;
  writer.add("meta", R"({"creator":"KilnUnitTests","targets":["sm_90"]})");
  writer.add("step", std::string(1000, '\x5a'));
  auto bytes = writer.serialize();
  ASSERT_TRUE(bytes) << bytes.getError();
  auto artifact = artifact::Artifact::parse(*bytes, "unit");
  ASSERT_TRUE(artifact) << artifact.getError();
  EXPECT_EQ(artifact->contents("step"), std::string(1000, '\x5a'));
  std::string damaged = *bytes;
  damaged[artifact->find("step")->offset + 10] ^= 4;
  EXPECT_EQ(artifact::Artifact::parse(damaged, "unit").getError(),
            "unit: corrupt Kiln artifact: section 'step' checksum mismatch");
}

} // namespace
