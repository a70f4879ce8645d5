//===- ShapeInferenceTest.cpp - Result types of every op family -----------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace kiln;
using namespace mlir;

namespace {

class ShapeInferenceTest : public ::testing::Test {
protected:
  ShapeInferenceTest() : builder(&context) {
    context.loadDialect<GraphDialect>();
    loc = builder.getUnknownLoc();
  }
  RankedTensorType type(StringRef text) {
    return llvm::cast<RankedTensorType>(parseType(text, &context));
  }
  MLIRContext context;
  OpBuilder builder;
  Location loc = UnknownLoc::get(&context);
};

TEST_F(ShapeInferenceTest, BroadcastKeepsSymbols) {
  SmallVector<Type> results;
  ASSERT_TRUE(succeeded(inferBroadcastBinary(
      &context, loc, type("tensor<?x1x64xf32, #kiln.dims<[batch]>>"),
      type("tensor<?x64xf32, #kiln.dims<[seq]>>"), BinaryResultKind::SameElement,
      results)));
  EXPECT_EQ(results[0], type("tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>"));
}

} // namespace
