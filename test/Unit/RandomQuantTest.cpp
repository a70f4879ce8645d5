//===- RandomQuantTest.cpp - Philox, dropout, NF4 -------------------------===//
//
// Philox against the Random123 known-answer vectors; dropout and the
// uniform initializer against their statistics and the Philox stream;
// NF4 rounding against the table's midpoints.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Interp/Interpreter.h"
#include "kiln/Support/NF4.h"
#include "kiln/Support/Philox.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace kiln;

namespace {

TEST(Philox, MatchesRandom123KnownAnswers) {
  // kat_vectors of Random123 (philox4x32 with 10 rounds).
  EXPECT_EQ(philox4x32({0, 0, 0, 0}, 0),
            (PhiloxBlock{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32({~0u, ~0u, ~0u, ~0u}, ~0ull),
            (PhiloxBlock{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, 0x299f31d0a4093822ull),
            (PhiloxBlock{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, UniformIsInRangeAndStreamsDiffer) {
  double sum = 0;
  int same = 0;
  constexpr int n = 100000;
  for (int i = 0; i < n; ++i) {
    float u = philoxUniform(7, 0, i);
    ASSERT_GE(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    sum += u;
    same += u == philoxUniform(7, 1, i);
  }
  EXPECT_NEAR(sum / n, 0.5, 0.005);
  EXPECT_LT(same, 5);
}

TEST(Nf4, EncodesTableValuesToThemselvesAndRoundsToNearest) {
  for (uint8_t c = 0; c < 16; ++c)
    EXPECT_EQ(nf4Encode(kNf4Values[c]), c);
  for (uint8_t c = 1; c < 16; ++c) {
    float mid = (kNf4Values[c - 1] + kNf4Values[c]) * 0.5f;
    EXPECT_EQ(nf4Encode(mid), c - 1) << "ties go to the lower code";
    EXPECT_EQ(nf4Encode(std::nextafter(mid, 2.0f)), c);
  }
  EXPECT_EQ(nf4Encode(-1.5f), 0);
  EXPECT_EQ(nf4Encode(1.5f), 15);
}

class RandomQuantInterp : public ::testing::Test {
protected:
  RandomQuantInterp() { context.loadDialect<GraphDialect, mlir::func::FuncDialect>(); }

  std::vector<HostTensor> run(llvm::StringRef ir, std::vector<HostTensor> inputs) {
    module = mlir::parseSourceString<mlir::ModuleOp>(ir, &context);
    EXPECT_TRUE(module);
    struct NoWeights : WeightSource {
      absl::StatusOr<HostTensor> load(llvm::StringRef) override {
        return absl::NotFoundError("none");
      }
    } weights;
    auto result = interpret(*module->getOps<mlir::func::FuncOp>().begin(), inputs, weights);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->outputs : std::vector<HostTensor>{};
  }

  static HostTensor seed(int64_t value) {
    HostTensor t(DType::I64, {});
    t.setInt(0, value);
    return t;
  }

  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

TEST_F(RandomQuantInterp, DropoutKeepsOneMinusPScaledAndRedrawsItsMask) {
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<100x100xf32>, %g: tensor<100x100xf32>, %s: tensor<i64>)
        -> (tensor<100x100xf32>, tensor<100x100xf32>) {
      %0 = kiln.dropout %x, %s {p = 0.25 : f64, stream = 2 : i64} : tensor<100x100xf32>, tensor<i64>
      %1 = kiln.dropout %g, %s {p = 0.25 : f64, stream = 2 : i64} : tensor<100x100xf32>, tensor<i64>
      return %0, %1 : tensor<100x100xf32>, tensor<100x100xf32>
    })MLIR";
  HostTensor x(DType::F32, {100, 100}), g(DType::F32, {100, 100});
  for (int64_t i = 0; i < x.numel(); ++i) {
    x.set(i, 1.0);
    g.set(i, 2.0 + (i % 3));
  }
  std::vector<HostTensor> out = run(ir, {x, g, seed(11)});
  ASSERT_EQ(out.size(), 2u);
  int64_t kept = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    double y = out[0].getDouble(i);
    bool keep = philoxUniform(11, 2, i) >= 0.25f;
    ASSERT_EQ(y, keep ? 1.0f / 0.75f : 0.0f) << "element " << i;
    kept += keep;
    // The same (seed, stream) drops the same elements of another tensor:
    // what the backward pass relies on.
    ASSERT_EQ(out[1].getDouble(i) != 0.0, keep);
  }
  EXPECT_NEAR(kept / 10000.0, 0.75, 0.02);
}

TEST_F(RandomQuantInterp, QuantizeThenDequantizeIsWithinHalfAStep) {
  const char *ir = R"MLIR(
    func.func @f(%w: tensor<3x50xf32>) -> (tensor<75xui8>, tensor<3xf32>, tensor<3x50xf32>) {
      %c, %s = kiln.nf4_quantize %w : tensor<3x50xf32> -> tensor<75xui8>, tensor<3xf32>
      %d = kiln.nf4_dequantize %c, %s : tensor<75xui8>, tensor<3xf32> -> tensor<3x50xf32>
      return %c, %s, %d : tensor<75xui8>, tensor<3xf32>, tensor<3x50xf32>
    })MLIR";
  HostTensor w(DType::F32, {3, 50});
  for (int64_t i = 0; i < w.numel(); ++i)
    w.set(i, std::sin(0.37 * i) * (1 + i / 64));
  std::vector<HostTensor> out = run(ir, {w});
  ASSERT_EQ(out.size(), 3u);
  // Blocks of 64 over 150 elements: 64, 64, 22.
  for (int64_t b = 0; b < 3; ++b) {
    double amax = 0;
    for (int64_t i = b * 64; i < std::min<int64_t>(150, (b + 1) * 64); ++i)
      amax = std::max(amax, std::fabs(w.getDouble(i)));
    EXPECT_FLOAT_EQ(out[1].getDouble(b), amax);
  }
  for (int64_t i = 0; i < w.numel(); ++i) {
    double amax = out[1].getDouble(i / 64);
    // The widest gap in the NF4 table is 0.3038 (between -1 and -0.696).
    EXPECT_LE(std::fabs(out[2].getDouble(i) - w.getDouble(i)), 0.152 * amax + 1e-6)
        << "element " << i;
    int64_t byte = out[0].ints[i / 2];
    int code = i % 2 == 0 ? byte >> 4 : byte & 15;
    EXPECT_EQ(code,
              nf4Encode(static_cast<float>(w.getDouble(i)) * (1.0f / static_cast<float>(amax))));
  }
}

TEST_F(RandomQuantInterp, RandomUniformSpansItsBounds) {
  const char *ir = R"MLIR(
    func.func @f(%s: tensor<i64>) -> tensor<64x64xf32> {
      %0 = kiln.random_uniform %s {low = -0.25 : f64, high = 0.25 : f64, stream = 5 : i64} : tensor<i64> -> tensor<64x64xf32>
      return %0 : tensor<64x64xf32>
    })MLIR";
  std::vector<HostTensor> out = run(ir, {seed(3)});
  ASSERT_EQ(out.size(), 1u);
  double lo = 1, hi = -1, sum = 0;
  for (int64_t i = 0; i < out[0].numel(); ++i) {
    double v = out[0].getDouble(i);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    ASSERT_FLOAT_EQ(v, -0.25f + 0.5f * philoxUniform(3, 5, i));
  }
  EXPECT_GE(lo, -0.25);
  EXPECT_LT(hi, 0.25);
  EXPECT_LT(lo, -0.24);
  EXPECT_GT(hi, 0.24);
  EXPECT_NEAR(sum / 4096, 0.0, 0.01);
}

} // namespace
