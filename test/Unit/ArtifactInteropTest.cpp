//===- ArtifactInteropTest.cpp - Compiler and runtime agree on artifacts --===//
//
// The artifact library is compiled into both the compiler and the runtime.
// These tests pin the contract between them: size expressions as the
// compiler prints them (#kiln.expr) parse in the runtime and evaluate to the
// compiler's values, and an artifact written here reads back intact.

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/artifact/Artifact.h"
#include "kiln/artifact/Guards.h"
#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace kiln;

namespace {

TEST(ArtifactInterop, RuntimeEvaluatesCompilerSizeExpressions) {
  mlir::MLIRContext context;
  context.loadDialect<GraphDialect>();
  const char *texts[] = {"batch*seq", "2*seq + 1", "seq - 1", "batch - 1*seq",
                         "-3*seq", "batch*seq*seq + 4*batch - 7", "64",
                         "32000*batch*seq"};
  for (const char *text : texts) {
    auto dim = llvm::dyn_cast_or_null<SymExprAttr>(
        mlir::parseAttribute((std::string("#kiln.expr<") + text + ">").c_str(),
                             &context));
    ASSERT_TRUE(dim) << text;
    std::string printed = dimToString(dim);
    auto runtimeExpr = artifact::SizeExpr::parse(printed);
    ASSERT_TRUE(runtimeExpr) << runtimeExpr.getError();
    for (auto [batch, seq] : {std::pair<int64_t, int64_t>{1, 1}, {4, 1024},
                              {64, 8192}, {3, 17}}) {
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
