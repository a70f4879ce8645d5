//===- SymExprTest.cpp - Size expression arithmetic and printing ----------===//

#include "kiln/Dialect/Graph/DimOverflow.h"
#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

#include <limits>

using namespace kiln;

namespace {

class SymExprTest : public ::testing::Test {
protected:
  SymExprTest() { context.loadDialect<GraphDialect>(); }
  Dim sym(llvm::StringRef name) { return SymExprAttr::getSymbol(&context, name); }
  Dim c(int64_t v) { return dimConst(&context, v); }
  Dim parse(llvm::StringRef text) {
    return llvm::dyn_cast_or_null<SymExprAttr>(
        mlir::parseAttribute(("#kiln.expr<" + text + ">").str(), &context));
  }
  mlir::MLIRContext context;
};

TEST_F(SymExprTest, CanonicalFormMakesEqualPolynomialsIdentical) {
  Dim batch = sym("batch"), seq = sym("seq");
  EXPECT_EQ(dimMul(batch, seq), dimMul(seq, batch));
  EXPECT_EQ(dimAdd(dimMul(batch, seq), seq), dimAdd(seq, dimMul(seq, batch)));
  EXPECT_EQ(dimSub(dimAdd(seq, c(3)), c(3)), seq);
  EXPECT_EQ(dimSub(seq, seq), c(0));
  EXPECT_EQ(c(0).getConstantValue(), 0);
  EXPECT_EQ(dimMul(c(4), c(16)).getConstantValue(), 64);
}

TEST_F(SymExprTest, PrintsReadably) {
  Dim batch = sym("batch"), seq = sym("seq");
  EXPECT_EQ(dimToString(dimMul(batch, seq)), "batch*seq");
  EXPECT_EQ(dimToString(dimAdd(dimMul(c(2), seq), c(1))), "2*seq + 1");
  EXPECT_EQ(dimToString(dimSub(seq, c(1))), "seq - 1");
  EXPECT_EQ(dimToString(dimSub(batch, seq)), "batch - 1*seq");
  EXPECT_EQ(dimToString(Dim()), "?");
}

TEST_F(SymExprTest, ParsesWhatItPrints) {
  for (const char *text : {"batch*seq", "2*seq + 1", "seq - 1", "batch - 1*seq", "-3*seq",
                           "batch*seq*seq + 4*batch - 7", "64"}) {
    Dim d = parse(text);
    ASSERT_TRUE(d) << text;
    EXPECT_EQ(dimToString(d), text);
  }
  EXPECT_EQ(parse("seq*batch + 0*seq"), dimMul(sym("batch"), sym("seq")));
}

TEST_F(SymExprTest, EvaluatesWithBindings) {
  Dim d = dimAdd(dimMul(sym("batch"), sym("seq")), c(-1));
  auto lookup = [](llvm::StringRef name) -> std::optional<int64_t> {
    if (name == "batch")
      return 3;
    if (name == "seq")
      return 9;
    return std::nullopt;
  };
  EXPECT_EQ(evaluateDim(d, lookup), 26);
  EXPECT_EQ(evaluateDim(sym("other"), lookup), std::nullopt);
}

TEST_F(SymExprTest, UnknownAndTooComplexStayUnknown) {
  Dim s = sym("s");
  EXPECT_FALSE(dimAdd(s, Dim()));
  Dim s4 = dimMul(dimMul(s, s), dimMul(s, s));
  EXPECT_TRUE(s4);
  EXPECT_FALSE(dimMul(s4, s)); // Degree 5 is past kMaxSymDegree.
  EXPECT_EQ(dimDivExact(dimMul(c(4), s), 2), dimMul(c(2), s));
  EXPECT_FALSE(dimDivExact(dimAdd(s, c(1)), 2));
}

TEST_F(SymExprTest, OverflowIsUnknownAndFlagged) {
  constexpr int64_t big = int64_t(1) << 62;
  Dim s = sym("s");
  (void)takeDimOverflow();
  EXPECT_FALSE(dimMul(c(big), c(4)));
  EXPECT_TRUE(takeDimOverflow());
  EXPECT_FALSE(takeDimOverflow());                            // Taking clears the flag.
  EXPECT_FALSE(dimAdd(dimMul(c(big), s), dimMul(c(big), s))); // 2^63 * s
  EXPECT_TRUE(takeDimOverflow());
  EXPECT_FALSE(dimSub(c(0), c(std::numeric_limits<int64_t>::min())));
  EXPECT_TRUE(takeDimOverflow());
  EXPECT_FALSE(dimDivExact(c(std::numeric_limits<int64_t>::min()), -1));
  EXPECT_TRUE(takeDimOverflow());
  auto lookup = [](llvm::StringRef) -> std::optional<int64_t> { return int64_t(1) << 40; };
  EXPECT_EQ(evaluateDim(dimMul(s, s), lookup), std::nullopt);
  EXPECT_TRUE(takeDimOverflow());
  EXPECT_FALSE(dimSubstitute(dimMul(c(big), s), lookup));
  EXPECT_TRUE(takeDimOverflow());
  // In range: exact, no flag.
  EXPECT_EQ(dimMul(c(big), c(1)).getConstantValue(), big);
  EXPECT_FALSE(takeDimOverflow());
  // A negative static size becomes unknown and is flagged.
  (void)takeNegativeDim();
  mlir::RankedTensorType t = makeTensorType({c(-4)}, mlir::Float32Type::get(&context));
  EXPECT_TRUE(t.isDynamicDim(0));
  EXPECT_TRUE(takeNegativeDim());
  // The parser refuses an expression it cannot hold.
  EXPECT_FALSE(parse("9223372036854775807*s + 9223372036854775807*s"));
}

TEST_F(SymExprTest, TensorTypesUseStaticSizesForConstants) {
  mlir::Type f32 = mlir::Float32Type::get(&context);
  mlir::RankedTensorType t = makeTensorType({sym("b"), c(64)}, f32);
  EXPECT_EQ(t.getDimSize(1), 64);
  EXPECT_TRUE(t.isDynamicDim(0));
  EXPECT_EQ(getDim(t, 0), sym("b"));
  mlir::RankedTensorType unknown = makeTensorType({Dim(), c(2)}, f32);
  EXPECT_FALSE(unknown.getEncoding()); // Canonical: no all-unknown encoding.
  EXPECT_EQ(shapeToString(t), "[b, 64]");
}

} // namespace
