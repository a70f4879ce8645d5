//===- ShapeInferenceTest.cpp - Result types of every op family -----------===//
//
// Ops that infer their result are built without a result type and the type
// the builder chose is checked; failing cases call the op's inferReturnTypes
// (the builder would abort) and check the diagnostic. Ops whose result type
// is a choice (reshape, slice, split, expand, cast, iota) are checked through
// their verifiers.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/ShapeInference.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "mlir/AsmParser/AsmParser.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/OwningOpRef.h"
#include "mlir/IR/Verifier.h"

#include <gtest/gtest.h>

using namespace kiln;
using namespace mlir;

namespace {

class ShapeInferenceTest : public ::testing::Test {
protected:
  ShapeInferenceTest() : builder(&context) {
    context.loadDialect<GraphDialect>();
    loc = builder.getUnknownLoc();
    // Collect diagnostics so tests can check them (and stderr stays quiet).
    context.getDiagEngine().registerHandler([this](Diagnostic &diag) {
      diagnostics += diag.str() + "\n";
      return success();
    });
    module = ModuleOp::create(loc);
    builder.setInsertionPointToEnd(module->getBody());
  }

  RankedTensorType type(StringRef text) {
    auto result = llvm::dyn_cast_or_null<RankedTensorType>(parseType(text, &context));
    EXPECT_TRUE(result) << "bad type in test: " << text.str();
    return result;
  }

  /// A value of the given type (a parameter, the simplest source op).
  Value arg(StringRef typeText) {
    return builder.create<ParameterOp>(loc, type(typeText), "p").getResult();
  }

  /// The op's own inference on these operands and attributes, for cases where
  /// building would abort on failure. A detached op holds the operands and
  /// turns the attributes into its properties.
  template <typename OpT>
  FailureOr<Type> infer(ValueRange operands, ArrayRef<NamedAttribute> attributes = {}) {
    OperationState state(loc, OpT::getOperationName());
    state.addOperands(operands);
    state.addAttributes(attributes);
    state.addTypes(NoneType::get(&context)); // Placeholder, never checked.
    Operation *op = Operation::create(state);
    SmallVector<Type> results;
    LogicalResult inferred =
        OpT::inferReturnTypes(&context, loc, op->getOperands(), op->getRawDictionaryAttrs(),
                              op->getPropertiesStorage(), op->getRegions(), results);
    op->destroy();
    if (failed(inferred))
      return failure();
    EXPECT_EQ(results.size(), 1u);
    return results.front();
  }

  NamedAttribute i64(StringRef name, int64_t value) {
    return builder.getNamedAttr(name, builder.getI64IntegerAttr(value));
  }
  NamedAttribute array(StringRef name, ArrayRef<int64_t> values) {
    return builder.getNamedAttr(name, builder.getDenseI64ArrayAttr(values));
  }

  /// Verifies `op` and expects it to fail with `message` among the errors.
  void expectInvalid(Operation *op, StringRef message) {
    diagnostics.clear();
    EXPECT_TRUE(failed(verify(op)));
    EXPECT_NE(diagnostics.find(message.str()), std::string::npos)
        << "diagnostics were: " << diagnostics;
  }
  void expectFailure(FailureOr<Type> result, StringRef message) {
    EXPECT_TRUE(failed(result));
    EXPECT_NE(diagnostics.find(message.str()), std::string::npos)
        << "diagnostics were: " << diagnostics;
  }

  MLIRContext context;
  OpBuilder builder;
  Location loc = UnknownLoc::get(&context);
  OwningOpRef<ModuleOp> module;
  std::string diagnostics;
};

//===----------------------------------------------------------------------===//
// Broadcasting
//===----------------------------------------------------------------------===//

TEST_F(ShapeInferenceTest, BroadcastKeepsSymbols) {
  SmallVector<Type> results;
  ASSERT_TRUE(succeeded(inferBroadcastBinary(
      &context, loc, type("tensor<?x1x64xf32, #kiln.dims<[batch]>>"),
      type("tensor<?x64xf32, #kiln.dims<[seq]>>"), BinaryResultKind::SameElement, results)));
  EXPECT_EQ(results[0], type("tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>"));
}

TEST_F(ShapeInferenceTest, BroadcastDimRules) {
  Dim seq = SymExprAttr::getSymbol(&context, "seq");
  Dim batch = SymExprAttr::getSymbol(&context, "batch");
  Dim one = dimConst(&context, 1), four = dimConst(&context, 4);
  EXPECT_EQ(*broadcastDim(loc, one, seq), seq);
  EXPECT_EQ(*broadcastDim(loc, seq, one), seq);
  EXPECT_EQ(*broadcastDim(loc, seq, seq), seq);
  // A symbol against a static size can only be that size (or 1).
  EXPECT_EQ(*broadcastDim(loc, seq, four), four);
  EXPECT_EQ(*broadcastDim(loc, four, seq), four);
  // An unknown dim takes the other side's size.
  EXPECT_EQ(*broadcastDim(loc, Dim(), four), four);
  EXPECT_EQ(*broadcastDim(loc, seq, Dim()), seq);
  // Two different symbols: equal at run time, but which one is unknown.
  EXPECT_FALSE(*broadcastDim(loc, batch, seq));
  EXPECT_TRUE(diagnostics.empty()) << diagnostics;
  EXPECT_TRUE(failed(broadcastDim(loc, dimConst(&context, 3), four)));
  EXPECT_NE(diagnostics.find("dims 3 and 4 do not broadcast"), std::string::npos);
}

TEST_F(ShapeInferenceTest, DimsMayBeEqualOnlyFailsOnConstantDifference) {
  Dim seq = SymExprAttr::getSymbol(&context, "seq");
  Dim batch = SymExprAttr::getSymbol(&context, "batch");
  Dim four = dimConst(&context, 4);
  EXPECT_TRUE(dimsMayBeEqual(four, four));
  EXPECT_FALSE(dimsMayBeEqual(four, dimConst(&context, 8)));
  EXPECT_TRUE(dimsMayBeEqual(seq, four)); // seq may be 4.
  EXPECT_TRUE(dimsMayBeEqual(seq, batch));
  EXPECT_TRUE(dimsMayBeEqual(Dim(), four));
  EXPECT_FALSE(dimsMayBeEqual(seq, dimAdd(seq, dimConst(&context, 1))));
  EXPECT_TRUE(dimsMayBeEqual(dimMul(seq, batch), dimMul(batch, seq)));
  EXPECT_TRUE(succeeded(expectDim(loc, seq, four, "d")));
  EXPECT_TRUE(failed(expectDim(loc, seq, dimSub(seq, four), "d")));
  EXPECT_NE(diagnostics.find("d: expected seq but got seq - 4"), std::string::npos) << diagnostics;
}

TEST_F(ShapeInferenceTest, BroadcastMismatchFails) {
  SmallVector<Type> results;
  EXPECT_TRUE(
      failed(inferBroadcastBinary(&context, loc, type("tensor<?x3xf32, #kiln.dims<[seq]>>"),
                                  type("tensor<4xf32>"), BinaryResultKind::SameElement, results)));
  EXPECT_TRUE(results.empty());
  EXPECT_NE(diagnostics.find("dims 3 and 4 do not broadcast"), std::string::npos);
  // Through the op itself.
  Value a = arg("tensor<2x3xf32>"), b = arg("tensor<4xf32>");
  diagnostics.clear();
  expectFailure(infer<AddOp>({a, b}), "dims 3 and 4 do not broadcast");
}

TEST_F(ShapeInferenceTest, BinaryOpsBroadcastAndPickElementType) {
  Value x = arg("tensor<?x1x64xbf16, #kiln.dims<[batch]>>");
  Value y = arg("tensor<?x64xbf16, #kiln.dims<[seq]>>");
  Value s = arg("tensor<bf16>");
  auto add = builder.create<AddOp>(loc, x, y);
  EXPECT_EQ(add.getType(), type("tensor<?x?x64xbf16, #kiln.dims<[batch, seq]>>"));
  auto mul = builder.create<MulOp>(loc, s, y);
  EXPECT_EQ(mul.getType(), y.getType());
  // Comparisons broadcast too but produce i1.
  auto lt = builder.create<LtOp>(loc, x, y);
  EXPECT_EQ(lt.getType(), type("tensor<?x?x64xi1, #kiln.dims<[batch, seq]>>"));
  auto andOp = builder.create<AndOp>(loc, lt, lt);
  EXPECT_EQ(andOp.getType(), lt.getType());
  EXPECT_TRUE(succeeded(verify(*module))) << diagnostics;

  expectFailure(infer<SubOp>({x, arg("tensor<64xf32>")}), "operand element types differ");
}

TEST_F(ShapeInferenceTest, SelectBroadcastsAllThree) {
  Value cond = arg("tensor<1x1x?x?xi1, #kiln.dims<[seq, seq]>>");
  Value scores = arg("tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>");
  Value fill = arg("tensor<f32>");
  auto select = builder.create<SelectOp>(loc, cond, scores, fill);
  EXPECT_EQ(select.getType(), scores.getType());
  // The condition alone can widen the result.
  auto wide = builder.create<SelectOp>(loc, arg("tensor<3x1xi1>"), arg("tensor<4xf32>"), fill);
  EXPECT_EQ(wide.getType(), type("tensor<3x4xf32>"));

  expectFailure(infer<SelectOp>({arg("tensor<3xi1>"), arg("tensor<4xf32>"), fill}),
                "dims 3 and 4 do not broadcast");
  diagnostics.clear();
  expectFailure(infer<SelectOp>({arg("tensor<4xi1>"), fill, arg("tensor<4xf16>")}),
                "select branches have different element types");
}

//===----------------------------------------------------------------------===//
// Contractions, reductions, normalizations
//===----------------------------------------------------------------------===//

TEST_F(ShapeInferenceTest, MatmulTransposeB) {
  Value x = arg("tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>");
  Value w = arg("tensor<128x64xf32>");
  auto mm = builder.create<MatmulOp>(loc, x, w, /*transpose_a=*/false,
                                     /*transpose_b=*/true);
  EXPECT_EQ(mm.getType(), type("tensor<?x?x128xf32, #kiln.dims<[batch, seq]>>"));
  // transpose_a on a 2-D weight: [64, 128] x [128, 64].
  auto gram = builder.create<MatmulOp>(loc, w, w, true, false);
  EXPECT_EQ(gram.getType(), type("tensor<64x64xf32>"));
  EXPECT_TRUE(succeeded(verify(*module))) << diagnostics;
  // Without the transpose the contraction is 64 against 128.
  expectFailure(infer<MatmulOp>({x, w}), "matmul contraction dim: expected 64 but got 128");
}

TEST_F(ShapeInferenceTest, MatmulBroadcastsBatchDims) {
  Value q = arg("tensor<?x1x?x16xf32, #kiln.dims<[batch, seq]>>");
  Value k = arg("tensor<8x16x?xf32, #kiln.dims<[past]>>");
  auto mm = builder.create<MatmulOp>(loc, q, k);
  EXPECT_EQ(mm.getType(), type("tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, past]>>"));
  expectFailure(infer<MatmulOp>({arg("tensor<2x4x8xf32>"), arg("tensor<3x8x4xf32>")}),
                "dims 2 and 3 do not broadcast");
  diagnostics.clear();
  expectFailure(infer<MatmulOp>({arg("tensor<8xf32>"), arg("tensor<8x4xf32>")}),
                "matmul operands need rank >= 2");
}

TEST_F(ShapeInferenceTest, ReductionsDropOrKeepAxes) {
  Value x = arg("tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>");
  auto sum = builder.create<ReduceSumOp>(loc, x, ArrayRef<int64_t>{2});
  EXPECT_EQ(sum.getType(), type("tensor<?x?xf32, #kiln.dims<[batch, seq]>>"));
  auto mean = builder.create<ReduceMeanOp>(loc, x, ArrayRef<int64_t>{2},
                                           /*keepdim=*/true);
  EXPECT_EQ(mean.getType(), type("tensor<?x?x1xf32, #kiln.dims<[batch, seq]>>"));
  auto max = builder.create<ReduceMaxOp>(loc, x, ArrayRef<int64_t>{0, 1}, true);
  EXPECT_EQ(max.getType(), type("tensor<1x1x64xf32>"));
  auto all = builder.create<ReduceSumOp>(loc, x, ArrayRef<int64_t>{0, 1, 2});
  EXPECT_EQ(all.getType(), type("tensor<f32>"));

  expectFailure(infer<ReduceSumOp>({x}, {array("axes", {3})}),
                "reduction axis 3 is out of range for rank 3");
  diagnostics.clear();
  expectFailure(infer<ReduceMeanOp>({x}, {array("axes", {1, 1})}), "strictly increasing");
  diagnostics.clear();
  expectFailure(infer<ReduceMaxOp>({x}, {array("axes", {})}), "reduction needs at least one axis");
}

TEST_F(ShapeInferenceTest, SoftmaxKeepsTypeAndChecksAxis) {
  Value x = arg("tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>");
  auto softmax = builder.create<SoftmaxOp>(loc, x, 3);
  EXPECT_EQ(softmax.getType(), x.getType());
  auto logSoftmax = builder.create<LogSoftmaxOp>(loc, x, 1);
  EXPECT_EQ(logSoftmax.getType(), x.getType());
  EXPECT_TRUE(succeeded(verify(*module))) << diagnostics;
  auto bad = builder.create<SoftmaxOp>(loc, x, 4);
  expectInvalid(bad, "axis 4 is out of range for rank 4");
}

TEST_F(ShapeInferenceTest, NormsKeepInputType) {
  Value x = arg("tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>");
  Value w = arg("tensor<64xf32>");
  auto ln = builder.create<LayerNormOp>(loc, x, w, w, 2, APFloat(1e-5));
  EXPECT_EQ(ln.getType(), x.getType());
  auto noBias = builder.create<LayerNormOp>(loc, x, w, Value(), 2, APFloat(1e-5));
  EXPECT_EQ(noBias.getType(), x.getType());
  // Over the last two dims the weight is [seq, 64].
  auto wide = builder.create<LayerNormOp>(loc, x, arg("tensor<?x64xf32, #kiln.dims<[seq]>>"),
                                          Value(), 1, APFloat(1e-5));
  EXPECT_EQ(wide.getType(), x.getType());
  auto rms = builder.create<RmsNormOp>(loc, x, w, 2, APFloat(1e-6));
  EXPECT_EQ(rms.getType(), x.getType());

  auto epsilon = builder.getNamedAttr("epsilon", builder.getF64FloatAttr(1e-5));
  expectFailure(infer<RmsNormOp>({x, arg("tensor<32xf32>")}, {i64("axis", 2), epsilon}),
                "weight dim: expected 64 but got 32");
  diagnostics.clear();
  expectFailure(infer<LayerNormOp>({x, arg("tensor<2x64xf32>")}, {i64("axis", 2), epsilon}),
                "weight must have rank 1");
  diagnostics.clear();
  expectFailure(infer<LayerNormOp>({x, w, arg("tensor<64xbf16>")}, {i64("axis", 2), epsilon}),
                "bias element type 'bf16' differs from the input's 'f32'");
}

TEST_F(ShapeInferenceTest, CrossEntropyReductions) {
  Value logits = arg("tensor<?x32000xf32, #kiln.dims<[batch*seq]>>");
  Value labels = arg("tensor<?xi64, #kiln.dims<[batch*seq]>>");
  auto none = builder.create<CrossEntropyOp>(loc, logits, labels, -100, Reduction::none);
  EXPECT_EQ(none.getType(), type("tensor<?xf32, #kiln.dims<[batch*seq]>>"));
  auto mean = builder.create<CrossEntropyOp>(loc, logits, labels);
  EXPECT_EQ(mean.getType(), type("tensor<f32>"));
  auto sum = builder.create<CrossEntropyOp>(loc, logits, labels, 0, Reduction::sum);
  EXPECT_EQ(sum.getType(), type("tensor<f32>"));
  // Rows unknown in the logits come from the labels.
  auto fromLabels =
      builder.create<CrossEntropyOp>(loc, arg("tensor<?x10xbf16>"), labels, -100, Reduction::none);
  EXPECT_EQ(fromLabels.getType(), type("tensor<?xbf16, #kiln.dims<[batch*seq]>>"));

  expectFailure(infer<CrossEntropyOp>({arg("tensor<8x10xf32>"), arg("tensor<4xi64>")}),
                "labels dim 0: expected 8 but got 4");
  diagnostics.clear();
  expectFailure(infer<CrossEntropyOp>({arg("tensor<2x8x10xf32>"), arg("tensor<2xi64>")}),
                "got ranks 3 and 1");
}

TEST_F(ShapeInferenceTest, AttentionOutput) {
  Value q = arg("tensor<?x32x?x128xbf16, #kiln.dims<[batch, seq]>>");
  Value k = arg("tensor<?x8x?x128xbf16, #kiln.dims<[batch, past]>>");
  Value v = arg("tensor<?x8x?x64xbf16, #kiln.dims<[batch, past]>>");
  // Grouped-query heads; the output takes v's head_dim and q's rows.
  auto attn = builder.create<AttentionOp>(loc, q, k, v, Value(), true, FloatAttr(),
                                          DenseBoolArrayAttr());
  EXPECT_EQ(attn.getType(), type("tensor<?x32x?x64xbf16, #kiln.dims<[batch, seq]>>"));
  Value mask = arg("tensor<?x1x1x?xi1, #kiln.dims<[batch, past]>>");
  auto masked =
      builder.create<AttentionOp>(loc, q, k, v, mask, false, builder.getF64FloatAttr(0.125),
                                  DenseBoolArrayAttr());
  EXPECT_EQ(masked.getType(), attn.getType());
  // seq_major: v is [B, L, Hkv, Dv] and the output [B, S, Hq, Dv]; the rules
  // apply to the [B, H, S, D] views.
  Value vSeq = arg("tensor<?x?x8x64xbf16, #kiln.dims<[batch, past]>>");
  auto seqMajor = builder.create<AttentionOp>(
      loc, q, k, vSeq, Value(), true, FloatAttr(),
      builder.getDenseBoolArrayAttr({false, false, true, true}));
  EXPECT_EQ(seqMajor.getType(), type("tensor<?x?x32x64xbf16, #kiln.dims<[batch, seq]>>"));
  EXPECT_TRUE(succeeded(verify(*module))) << diagnostics;

  expectFailure(infer<AttentionOp>({arg("tensor<1x6x4x8xf32>"), arg("tensor<1x4x4x8xf32>"),
                                    arg("tensor<1x4x4x8xf32>")}),
                "query heads 6 are not a multiple of key/value heads 4");
  // The mask broadcasts to the scores [1, 8, 1, 16], never the reverse.
  diagnostics.clear();
  Value step = arg("tensor<1x8x1x64xf32>"), cache = arg("tensor<1x8x16x64xf32>");
  expectFailure(infer<AttentionOp>({step, cache, cache, arg("tensor<1x1x4x16xf32>")}),
                "attention mask dim 2 of size 4 does not broadcast to the scores dim 1");
  diagnostics.clear();
  EXPECT_TRUE(succeeded(infer<AttentionOp>({step, cache, cache, arg("tensor<16xf32>")})));
}

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

TEST_F(ShapeInferenceTest, GatherShapes) {
  Value emb = arg("tensor<32000x768xf32>");
  Value ids = arg("tensor<?x?xi64, #kiln.dims<[batch, seq]>>");
  auto lookup = builder.create<GatherOp>(loc, emb, ids, 0);
  EXPECT_EQ(lookup.getType(), type("tensor<?x?x768xf32, #kiln.dims<[batch, seq]>>"));
  // A scalar index drops the gathered dim.
  auto last = builder.create<GatherOp>(loc, arg("tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>"),
                                       arg("tensor<i32>"), 1);
  EXPECT_EQ(last.getType(), type("tensor<?x64xf32, #kiln.dims<[batch]>>"));
  expectFailure(infer<GatherOp>({emb, ids}, {i64("axis", 2)}),
                "gather axis 2 is out of range for rank 2");
}

TEST_F(ShapeInferenceTest, GatherElementsAndNdShapes) {
  Value data = arg("tensor<?x32000xf32, #kiln.dims<[n]>>");
  auto picked =
      builder.create<GatherElementsOp>(loc, data, arg("tensor<?x1xi64, #kiln.dims<[n]>>"), 1);
  EXPECT_EQ(picked.getType(), type("tensor<?x1xf32, #kiln.dims<[n]>>"));

  Value x = arg("tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>");
  auto nd = builder.create<GatherNdOp>(loc, x, arg("tensor<5x2xi64>"));
  EXPECT_EQ(nd.getType(), type("tensor<5x64xf32>"));
  auto batched =
      builder.create<GatherNdOp>(loc, x, arg("tensor<?x3x1xi32, #kiln.dims<[batch]>>"), 1);
  EXPECT_EQ(batched.getType(), type("tensor<?x3x64xf32, #kiln.dims<[batch]>>"));

  expectFailure(infer<GatherNdOp>({x, arg("tensor<5x4xi64>")}),
                "gather_nd index depth 4 must be in [1, 3]");
  diagnostics.clear();
  expectFailure(infer<GatherElementsOp>({data, arg("tensor<4xi64>")}, {i64("axis", 0)}),
                "equal rank, got 2 and 1");
}

TEST_F(ShapeInferenceTest, ScatterAddReturnsDest) {
  Value dest = arg("tensor<32000x768xf32>");
  Value ids = arg("tensor<?x?xi64, #kiln.dims<[batch, seq]>>");
  Value updates = arg("tensor<?x?x768xf32, #kiln.dims<[batch, seq]>>");
  auto scatter = builder.create<ScatterAddOp>(loc, dest, ids, updates, 0);
  EXPECT_EQ(scatter.getType(), dest.getType());
  expectFailure(
      infer<ScatterAddOp>({dest, ids, arg("tensor<?x?x512xf32, #kiln.dims<[batch, seq]>>")},
                          {i64("axis", 0)}),
      "scatter_add updates dim: expected 768 but got 512");
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

TEST_F(ShapeInferenceTest, ReshapeChecksElementCount) {
  Value x = arg("tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>");
  auto flat = builder.create<ReshapeOp>(loc, type("tensor<?x64xf32, #kiln.dims<[batch*seq]>>"), x);
  auto heads =
      builder.create<ReshapeOp>(loc, type("tensor<?x?x8x8xf32, #kiln.dims<[batch, seq]>>"), flat);
  EXPECT_TRUE(succeeded(verify(flat)));
  EXPECT_TRUE(succeeded(verify(heads)));
  auto bad = builder.create<ReshapeOp>(loc, type("tensor<5x5xf32>"), arg("tensor<2x3x4xf32>"));
  expectInvalid(bad, "changes the element count from 24 to 25");
}

TEST_F(ShapeInferenceTest, TransposePermutesSymbols) {
  Value x = arg("tensor<?x?x8x16xf32, #kiln.dims<[batch, seq]>>");
  auto t = builder.create<TransposeOp>(loc, x, ArrayRef<int64_t>{0, 2, 1, 3});
  EXPECT_EQ(t.getType(), type("tensor<?x8x?x16xf32, #kiln.dims<[batch, seq]>>"));
  auto r = builder.create<TransposeOp>(loc, x, ArrayRef<int64_t>{3, 1, 0, 2});
  EXPECT_EQ(r.getType(), type("tensor<16x?x?x8xf32, #kiln.dims<[seq, batch]>>"));
  expectFailure(infer<TransposeOp>({x}, {array("perm", {0, 1, 1, 3})}),
                "transpose perm is not a permutation of [0, 4)");
}

TEST_F(ShapeInferenceTest, SliceChecksStaticBounds) {
  Value x = arg("tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>");
  Dim seq = SymExprAttr::getSymbol(&context, "seq");
  auto starts = [&](ArrayRef<Dim> dims) { return DimsAttr::get(&context, dims); };
  Dim zero = dimConst(&context, 0), one = dimConst(&context, 1);
  auto shifted = builder.create<SliceOp>(
      loc, type("tensor<?x?x32xf32, #kiln.dims<[batch, seq - 1]>>"), x,
      starts({zero, one, dimConst(&context, 32)}), ArrayRef<int64_t>{1, 1, 1});
  EXPECT_TRUE(succeeded(verify(shifted))) << diagnostics;
  auto tail = builder.create<SliceOp>(loc, type("tensor<?x4x64xf32, #kiln.dims<[batch]>>"), x,
                                      starts({zero, dimSub(seq, dimConst(&context, 4)), zero}),
                                      ArrayRef<int64_t>{1, 1, 1});
  EXPECT_TRUE(succeeded(verify(tail))) << diagnostics;
  // 40 + (32 - 1) * 1 = 71 is past the 64 columns.
  auto past = builder.create<SliceOp>(loc, type("tensor<?x?x32xf32, #kiln.dims<[batch, seq]>>"), x,
                                      starts({zero, zero, dimConst(&context, 40)}),
                                      ArrayRef<int64_t>{1, 1, 1});
  expectInvalid(past, "dim 2 reads indices 40 to 71 of a dim of size 64");
}

TEST_F(ShapeInferenceTest, ConcatAddsSymbolically) {
  Value a = arg("tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>");
  Value b = arg("tensor<?x1x64xf32, #kiln.dims<[batch]>>");
  Value c = arg("tensor<?x?x64xf32, #kiln.dims<[batch, past]>>");
  auto plusOne = builder.create<ConcatOp>(loc, ValueRange{a, b}, 1);
  EXPECT_EQ(plusOne.getType(), type("tensor<?x?x64xf32, #kiln.dims<[batch, seq + 1]>>"));
  auto kv = builder.create<ConcatOp>(loc, ValueRange{c, a, a}, 1);
  EXPECT_EQ(kv.getType(), type("tensor<?x?x64xf32, #kiln.dims<[batch, past + 2*seq]>>"));
  auto features = builder.create<ConcatOp>(loc, ValueRange{a, a}, 2);
  EXPECT_EQ(features.getType(), type("tensor<?x?x128xf32, #kiln.dims<[batch, seq]>>"));
  // An unknown piece makes the sum unknown; an unknown other dim is filled in.
  auto unknown = builder.create<ConcatOp>(loc, ValueRange{arg("tensor<?x?x64xf32>"), a}, 1);
  EXPECT_EQ(unknown.getType(), type("tensor<?x?x64xf32, #kiln.dims<[batch, ?]>>"));
  expectFailure(
      infer<ConcatOp>({a, arg("tensor<?x1x32xf32, #kiln.dims<[batch]>>")}, {i64("axis", 1)}),
      "concat input dim: expected 64 but got 32");
}

TEST_F(ShapeInferenceTest, SplitPiecesMustAddUp) {
  Value x = arg("tensor<?x?xf32, #kiln.dims<[batch, 2*seq]>>");
  Type half = type("tensor<?x?xf32, #kiln.dims<[batch, seq]>>");
  auto split = builder.create<SplitOp>(loc, TypeRange{half, half}, x, 1);
  EXPECT_TRUE(succeeded(verify(split))) << diagnostics;
  auto bad = builder.create<SplitOp>(
      loc, TypeRange{type("tensor<3x4xf32>"), type("tensor<3x6xf32>")}, arg("tensor<3x12xf32>"), 1);
  expectInvalid(bad, "pieces add up to 10 along axis 1, input has 12");
}

TEST_F(ShapeInferenceTest, ExpandFollowsBroadcasting) {
  Value x = arg("tensor<1x?x1xf32, #kiln.dims<[seq]>>");
  auto ok = builder.create<ExpandOp>(loc, type("tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>"), x);
  EXPECT_TRUE(succeeded(verify(ok))) << diagnostics;
  auto bad = builder.create<ExpandOp>(loc, type("tensor<2x4xf32>"), arg("tensor<1x3xf32>"));
  expectInvalid(bad, "cannot broadcast dim 1 of size 3 to 4");
}

TEST_F(ShapeInferenceTest, SqueezeAndUnsqueeze) {
  Value x = arg("tensor<?x1x?x1xf32, #kiln.dims<[batch, seq]>>");
  auto squeezed = builder.create<SqueezeOp>(loc, x, ArrayRef<int64_t>{1, 3});
  EXPECT_EQ(squeezed.getType(), type("tensor<?x?xf32, #kiln.dims<[batch, seq]>>"));
  auto unsqueezed = builder.create<UnsqueezeOp>(loc, squeezed, ArrayRef<int64_t>{0, 3});
  EXPECT_EQ(unsqueezed.getType(), type("tensor<1x?x?x1xf32, #kiln.dims<[batch, seq]>>"));
  // A symbolic dim may be 1 at run time; a static 4 never is.
  EXPECT_TRUE(succeeded(infer<SqueezeOp>({x}, {array("axes", {0})})));
  expectFailure(infer<SqueezeOp>({arg("tensor<2x4xf32>")}, {array("axes", {1})}),
                "squeeze axis 1 has size 4, not 1");
}

TEST_F(ShapeInferenceTest, PadAddsToDims) {
  Value x = arg("tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>");
  auto pad = builder.create<PadOp>(loc, x, ArrayRef<int64_t>{0, 1, 4, 0, 2, 4}, APFloat(0.0));
  EXPECT_EQ(pad.getType(), type("tensor<?x?x72xf32, #kiln.dims<[batch, seq + 3]>>"));
  expectFailure(infer<PadOp>({x}, {array("pads", {0, -1, 0, 0, 0, 0})}),
                "pad amounts must be non-negative");
}

TEST_F(ShapeInferenceTest, CastAndIotaVerifiers) {
  Value x = arg("tensor<?x?xi64, #kiln.dims<[batch, seq]>>");
  auto cast = builder.create<CastOp>(loc, type("tensor<?x?xf32, #kiln.dims<[batch, seq]>>"), x);
  EXPECT_TRUE(succeeded(verify(cast))) << diagnostics;
  auto reshaping =
      builder.create<CastOp>(loc, type("tensor<?x?xf32, #kiln.dims<[seq, batch]>>"), x);
  expectInvalid(reshaping, "changes the shape from [batch, seq] to [seq, batch]");
  auto iota = builder.create<IotaOp>(loc, type("tensor<?x4xi64, #kiln.dims<[seq]>>"), 1);
  EXPECT_TRUE(succeeded(verify(iota))) << diagnostics;
  auto badIota = builder.create<IotaOp>(loc, type("tensor<4xi64>"), 1);
  expectInvalid(badIota, "iota dim 1 is out of range for rank 1");
}

} // namespace
