//===- InterpreterTest.cpp - Reference interpreter against hand arithmetic ===//
//
// Each test parses a small function, runs it, and compares with values the
// test computes independently (plain loops or closed forms).
//
//===----------------------------------------------------------------------===//

#include "kiln/Interp/Interpreter.h"
#include "absl/strings/string_view.h"
#include "kiln/Dialect/Graph/GraphDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

using namespace kiln;

namespace {

HostTensor f32(std::vector<int64_t> shape, const std::vector<double> &values) {
  HostTensor t(DType::F32, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    t.set(i, values[i]);
  return t;
}

HostTensor i64(std::vector<int64_t> shape, const std::vector<int64_t> &values) {
  HostTensor t(DType::I64, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    t.setInt(i, values[i]);
  return t;
}

/// Deterministic, varied values in [-2, 2).
std::vector<double> ramp(int64_t n, int64_t seed = 0) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i)
    v[i] = ((i * 7 + seed * 13) % 16) / 4.0 - 2.0;
  return v;
}

class FakeWeights : public WeightSource {
public:
  absl::StatusOr<HostTensor> load(llvm::StringRef name) override {
    auto it = tensors.find(name.str());
    if (it == tensors.end())
      return absl::NotFoundError("no such weight");
    return it->second;
  }
  std::map<std::string, HostTensor> tensors;
};

class InterpreterTest : public ::testing::Test {
protected:
  InterpreterTest() { context.loadDialect<GraphDialect, mlir::func::FuncDialect>(); }

  absl::StatusOr<InterpreterResult> run(llvm::StringRef ir, std::vector<HostTensor> inputs) {
    module = mlir::parseSourceString<mlir::ModuleOp>(ir, &context);
    if (!module)
      return absl::InvalidArgumentError("test IR does not parse");
    auto func = *module->getOps<mlir::func::FuncOp>().begin();
    return interpret(func, inputs, weights);
  }

  /// Runs and returns output 0, failing the test on an error.
  HostTensor runOne(llvm::StringRef ir, std::vector<HostTensor> inputs) {
    absl::StatusOr<InterpreterResult> r = run(ir, std::move(inputs));
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok() || r->outputs.empty())
      return HostTensor();
    return r->outputs[0];
  }

  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
  FakeWeights weights;
};

/// gmock's HasSubstr without the gmock dependency.
::testing::AssertionResult hasSubstr(absl::string_view text, absl::string_view part) {
  if (text.find(part) != absl::string_view::npos)
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << text << "\" does not contain \"" << part << "\"";
}

void expectValues(const HostTensor &t, const std::vector<double> &expected,
                  double tolerance = 1e-6) {
  ASSERT_EQ(t.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_NEAR(t.getDouble(i), expected[i], tolerance * std::max(1.0, std::fabs(expected[i])))
        << "element " << i;
}

TEST_F(InterpreterTest, BroadcastAddBindsSymbolsFromInputs) {
  const char *ir = R"MLIR(
    func.func @f(%a: tensor<?x1x4xf32, #kiln.dims<[batch]>>,
                 %b: tensor<?x4xf32, #kiln.dims<[seq]>>)
        -> tensor<?x?x4xf32, #kiln.dims<[batch, seq]>> {
      %0 = kiln.add %a, %b : (tensor<?x1x4xf32, #kiln.dims<[batch]>>,
          tensor<?x4xf32, #kiln.dims<[seq]>>)
          -> tensor<?x?x4xf32, #kiln.dims<[batch, seq]>>
      return %0 : tensor<?x?x4xf32, #kiln.dims<[batch, seq]>>
    })MLIR";
  std::vector<double> a = ramp(2 * 4), b = ramp(3 * 4, 1);
  absl::StatusOr<InterpreterResult> r = run(ir, {f32({2, 1, 4}, a), f32({3, 4}, b)});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->symbols.at("batch"), 2);
  EXPECT_EQ(r->symbols.at("seq"), 3);
  EXPECT_EQ(r->outputs[0].shape, (std::vector<int64_t>{2, 3, 4}));
  std::vector<double> expected;
  for (int i = 0; i < 2; ++i)
    for (int s = 0; s < 3; ++s)
      for (int k = 0; k < 4; ++k)
        expected.push_back(a[i * 4 + k] + b[s * 4 + k]);
  expectValues(r->outputs[0], expected);
}

TEST_F(InterpreterTest, MatmulTransposeBWithBatchBroadcast) {
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<2x2x3xf32>, %w: tensor<4x3xf32>) -> tensor<2x2x4xf32> {
      %0 = kiln.matmul %x, %w {transpose_b}
          : (tensor<2x2x3xf32>, tensor<4x3xf32>) -> tensor<2x2x4xf32>
      return %0 : tensor<2x2x4xf32>
    })MLIR";
  std::vector<double> x = ramp(12), w = ramp(12, 5);
  HostTensor out = runOne(ir, {f32({2, 2, 3}, x), f32({4, 3}, w)});
  std::vector<double> expected;
  for (int b = 0; b < 2; ++b)
    for (int i = 0; i < 2; ++i)
      for (int j = 0; j < 4; ++j) {
        double sum = 0;
        for (int k = 0; k < 3; ++k)
          sum += x[(b * 2 + i) * 3 + k] * w[j * 3 + k];
        expected.push_back(sum);
      }
  expectValues(out, expected);
}

TEST_F(InterpreterTest, SoftmaxRowsSumToOneAndMatchExpFormula) {
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
      %0 = kiln.softmax %x {axis = 1 : i64} : tensor<2x4xf32>
      return %0 : tensor<2x4xf32>
    })MLIR";
  // The second row would overflow exp() without subtracting the maximum.
  std::vector<double> x = {0.5, -1, 2, 0, 1000, 1001, 1002, 1003};
  HostTensor out = runOne(ir, {f32({2, 4}, x)});
  for (int r = 0; r < 2; ++r) {
    double rowSum = 0, denom = 0;
    for (int c = 0; c < 4; ++c)
      denom += std::exp(x[r * 4 + c] - x[r * 4 + 3]);
    for (int c = 0; c < 4; ++c) {
      double p = out.getDouble(r * 4 + c);
      EXPECT_NEAR(p, std::exp(x[r * 4 + c] - x[r * 4 + 3]) / denom, 1e-6);
      rowSum += p;
    }
    EXPECT_NEAR(rowSum, 1.0, 1e-6);
  }
}

TEST_F(InterpreterTest, LayerNormMatchesDirectFormula) {
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<2x5xf32>, %w: tensor<5xf32>, %b: tensor<5xf32>)
        -> tensor<2x5xf32> {
      %0 = kiln.layer_norm %x, %w, %b {axis = 1 : i64, epsilon = 1.0e-05 : f64}
          : (tensor<2x5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<2x5xf32>
      return %0 : tensor<2x5xf32>
    })MLIR";
  std::vector<double> x = ramp(10), w = ramp(5, 2), b = ramp(5, 3);
  HostTensor out = runOne(ir, {f32({2, 5}, x), f32({5}, w), f32({5}, b)});
  std::vector<double> expected;
  for (int r = 0; r < 2; ++r) {
    double mean = 0, var = 0;
    for (int c = 0; c < 5; ++c)
      mean += x[r * 5 + c] / 5;
    for (int c = 0; c < 5; ++c)
      var += (x[r * 5 + c] - mean) * (x[r * 5 + c] - mean) / 5;
    for (int c = 0; c < 5; ++c)
      expected.push_back((x[r * 5 + c] - mean) / std::sqrt(var + 1e-5) * w[c] + b[c]);
  }
  expectValues(out, expected, 1e-5);
}

TEST_F(InterpreterTest, CrossEntropySkipsIgnoredRows) {
  std::vector<double> logits = ramp(12);
  auto rowLoss = [&](int r, int label) {
    double sum = 0;
    for (int c = 0; c < 4; ++c)
      sum += std::exp(logits[r * 4 + c]);
    return std::log(sum) - logits[r * 4 + label];
  };
  double l0 = rowLoss(0, 1), l2 = rowLoss(2, 3);
  auto irFor = [](const char *reduction, const char *resultType) {
    return std::string(R"MLIR(
      func.func @f(%l: tensor<3x4xf32>, %t: tensor<3xi64>) -> )MLIR") +
           resultType + " {\n %0 = kiln.cross_entropy %l, %t {reduction = " + "#kiln.reduction<" +
           reduction + ">} : (tensor<3x4xf32>, " + "tensor<3xi64>) -> " + resultType +
           "\n return %0 : " + resultType + "\n}";
  };
  auto inputs = [&] {
    return std::vector<HostTensor>{f32({3, 4}, logits), i64({3}, {1, -100, 3})};
  };
  // The mean divides by the 2 counted rows, not by 3.
  expectValues(runOne(irFor("mean", "tensor<f32>"), inputs()), {(l0 + l2) / 2});
  expectValues(runOne(irFor("sum", "tensor<f32>"), inputs()), {l0 + l2});
  expectValues(runOne(irFor("none", "tensor<3xf32>"), inputs()), {l0, 0, l2});
}

TEST_F(InterpreterTest, CausalGroupedQueryAttentionMatchesNaiveLoop) {
  const char *ir = R"MLIR(
    func.func @f(%q: tensor<1x4x3x2xf32>, %k: tensor<1x2x3x2xf32>,
                 %v: tensor<1x2x3x2xf32>) -> tensor<1x4x3x2xf32> {
      %0 = kiln.attention %q, %k, %v {causal}
          : (tensor<1x4x3x2xf32>, tensor<1x2x3x2xf32>, tensor<1x2x3x2xf32>)
          -> tensor<1x4x3x2xf32>
      return %0 : tensor<1x4x3x2xf32>
    })MLIR";
  std::vector<double> q = ramp(24), k = ramp(12, 1), v = ramp(12, 2);
  HostTensor out = runOne(ir, {f32({1, 4, 3, 2}, q), f32({1, 2, 3, 2}, k), f32({1, 2, 3, 2}, v)});
  std::vector<double> expected;
  double scale = 1 / std::sqrt(2.0);
  for (int h = 0; h < 4; ++h) {
    int kvh = h / 2; // 4 query heads share 2 key/value heads
    for (int i = 0; i < 3; ++i) {
      std::vector<double> w;
      double sum = 0;
      for (int j = 0; j <= i; ++j) { // causal: keys j <= i only
        double s = 0;
        for (int d = 0; d < 2; ++d)
          s += q[(h * 3 + i) * 2 + d] * k[(kvh * 3 + j) * 2 + d];
        w.push_back(std::exp(s * scale));
        sum += w.back();
      }
      for (int e = 0; e < 2; ++e) {
        double acc = 0;
        for (int j = 0; j <= i; ++j)
          acc += w[j] / sum * v[(kvh * 3 + j) * 2 + e];
        expected.push_back(acc);
      }
    }
  }
  expectValues(out, expected, 1e-5);
}

TEST_F(InterpreterTest, GatherWrapsNegativeIndices) {
  const char *ir = R"MLIR(
    func.func @f(%d: tensor<4x2xf32>, %i: tensor<2xi64>) -> tensor<2x2xf32> {
      %0 = kiln.gather %d, %i {axis = 0 : i64}
          : (tensor<4x2xf32>, tensor<2xi64>) -> tensor<2x2xf32>
      return %0 : tensor<2x2xf32>
    })MLIR";
  std::vector<double> d = {0, 1, 10, 11, 20, 21, 30, 31};
  expectValues(runOne(ir, {f32({4, 2}, d), i64({2}, {-1, 0})}), {30, 31, 0, 1});
  absl::StatusOr<InterpreterResult> bad = run(ir, {f32({4, 2}, d), i64({2}, {4, 0})});
  ASSERT_FALSE(bad.ok());
  EXPECT_TRUE(hasSubstr(bad.status().message(), "kiln.gather"));
  EXPECT_TRUE(hasSubstr(bad.status().message(), "index 4 is out of range"));
}

TEST_F(InterpreterTest, SliceWithNegativeStepAndSymbolicStart) {
  // Rows seq-1, seq-3, ... walking backwards; columns 1 and 2.
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<?x3xf32, #kiln.dims<[seq]>>) -> tensor<3x2xf32> {
      %0 = kiln.slice %x {starts = #kiln.dims<[seq - 1, 1]>,
                          steps = array<i64: -2, 1>}
          : tensor<?x3xf32, #kiln.dims<[seq]>> -> tensor<3x2xf32>
      return %0 : tensor<3x2xf32>
    })MLIR";
  std::vector<double> x(15);
  for (int i = 0; i < 15; ++i)
    x[i] = i;
  // seq = 5: rows 4, 2, 0.
  expectValues(runOne(ir, {f32({5, 3}, x)}), {13, 14, 7, 8, 1, 2});
  // seq = 4: rows 3, 1, -1; the last is out of range, not clamped.
  absl::StatusOr<InterpreterResult> r =
      run(ir, {f32({4, 3}, std::vector<double>(x.begin(), x.begin() + 12))});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(hasSubstr(r.status().message(), "dim 0 reads indices 3 to -1 of a dim of size 4"));
}

TEST_F(InterpreterTest, SymbolConflictNamesBothInputs) {
  const char *ir = R"MLIR(
    func.func @f(%ids: tensor<?x?xi64, #kiln.dims<[batch, seq]>> {kiln.name = "input_ids"},
                 %labels: tensor<?x?xi64, #kiln.dims<[batch, seq]>> {kiln.name = "labels"})
        -> tensor<?x?xi64, #kiln.dims<[batch, seq]>> {
      return %ids : tensor<?x?xi64, #kiln.dims<[batch, seq]>>
    })MLIR";
  absl::StatusOr<InterpreterResult> r =
      run(ir, {HostTensor(DType::I64, {2, 16}), HostTensor(DType::I64, {2, 9})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "input 1 (labels): dim 1 is seq=9 but seq=16 from input 0");
}

TEST_F(InterpreterTest, CompoundDimSolvesItsSymbol) {
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<?xf32, #kiln.dims<[2*n + 1]>>)
        -> tensor<?xf32, #kiln.dims<[2*n + 1]>> {
      return %x : tensor<?xf32, #kiln.dims<[2*n + 1]>>
    })MLIR";
  absl::StatusOr<InterpreterResult> r = run(ir, {HostTensor(DType::F32, {7})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->symbols.at("n"), 3);
  r = run(ir, {HostTensor(DType::F32, {6})});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(hasSubstr(r.status().message(), "cannot equal"));
}

TEST_F(InterpreterTest, ParameterComesFromWeightSource) {
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %w = kiln.parameter "l1.weight" trainable : tensor<2x3xf32>
      %0 = kiln.mul %x, %w : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      return %0 : tensor<2x3xf32>
    })MLIR";
  std::vector<double> x = ramp(6), w = ramp(6, 4);
  weights.tensors["l1.weight"] = f32({2, 3}, w);
  std::vector<double> expected;
  for (int i = 0; i < 6; ++i)
    expected.push_back(x[i] * w[i]);
  expectValues(runOne(ir, {f32({2, 3}, x)}), expected);

  weights.tensors["l1.weight"] = f32({3, 2}, w);
  absl::StatusOr<InterpreterResult> r = run(ir, {f32({2, 3}, x)});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(hasSubstr(r.status().message(), "weight \"l1.weight\" is f32 [3, 2] but the IR "
                                              "declares f32 [2, 3]"));

  weights.tensors.clear();
  r = run(ir, {f32({2, 3}, x)});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(hasSubstr(r.status().message(), "loading weight \"l1.weight\""));
}

TEST_F(InterpreterTest, OpaqueOpHasNoReference) {
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = kiln.opaque "NonMaxSuppression"(%x) {domain = "", node_name = "nms_1",
          onnx_attributes = {}} : (tensor<3xf32>) -> tensor<3xf32>
      return %0 : tensor<3xf32>
    })MLIR";
  absl::StatusOr<InterpreterResult> r = run(ir, {HostTensor(DType::F32, {3})});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(hasSubstr(r.status().message(), "no reference implementation for ONNX op "
                                              "NonMaxSuppression (node nms_1)"));
}

TEST_F(InterpreterTest, ResultShapeDisagreeingWithTypeIsInternalError) {
  // [n] + [m] infers `?`, so a declared [n] verifies; with n = 1, m = 3 the
  // kernel's [3] contradicts it.
  const char *ir = R"MLIR(
    func.func @f(%a: tensor<?xf32, #kiln.dims<[n]>>,
                 %b: tensor<?xf32, #kiln.dims<[m]>>)
        -> tensor<?xf32, #kiln.dims<[n]>> {
      %0 = kiln.add %a, %b : (tensor<?xf32, #kiln.dims<[n]>>,
          tensor<?xf32, #kiln.dims<[m]>>) -> tensor<?xf32, #kiln.dims<[n]>>
      return %0 : tensor<?xf32, #kiln.dims<[n]>>
    })MLIR";
  absl::StatusOr<InterpreterResult> r =
      run(ir, {HostTensor(DType::F32, {1}), HostTensor(DType::F32, {3})});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(hasSubstr(r.status().message(), "kiln.add"));
  EXPECT_TRUE(hasSubstr(r.status().message(), "result 0 is f32 [3] but its type [n] evaluates to "
                                              "f32 [1]"));
}

TEST_F(InterpreterTest, IntegerArithmeticAndCasts) {
  const char *ir = R"MLIR(
    func.func @f(%a: tensor<4xi32>, %b: tensor<4xi32>, %x: tensor<4xf32>)
        -> (tensor<4xi32>, tensor<4xi32>, tensor<4xi64>, tensor<4xi1>) {
      %0 = kiln.div %a, %b : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
      %1 = kiln.pow %a, %b : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
      %2 = kiln.cast %x : tensor<4xf32> -> tensor<4xi64>
      %3 = kiln.cast %x : tensor<4xf32> -> tensor<4xi1>
      return %0, %1, %2, %3 : tensor<4xi32>, tensor<4xi32>, tensor<4xi64>, tensor<4xi1>
    })MLIR";
  HostTensor a(DType::I32, {4}), b(DType::I32, {4});
  a.ints = {7, -7, 3, -2};
  b.ints = {2, 2, 3, 3};
  absl::StatusOr<InterpreterResult> r = run(ir, {a, b, f32({4}, {2.7, -2.7, 0.0, -0.5})});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->outputs[0].ints, (std::vector<int64_t>{3, -3, 1, 0}));
  EXPECT_EQ(r->outputs[1].ints, (std::vector<int64_t>{49, 49, 27, -8}));
  EXPECT_EQ(r->outputs[2].ints, (std::vector<int64_t>{2, -2, 0, 0}));
  EXPECT_EQ(r->outputs[3].ints, (std::vector<int64_t>{1, 1, 0, 1}));

  b.ints = {1, 0, 1, 1};
  r = run(ir, {a, b, f32({4}, {0, 0, 0, 0})});
  ASSERT_FALSE(r.ok());
  EXPECT_TRUE(hasSubstr(r.status().message(), "kiln.div"));
  EXPECT_TRUE(hasSubstr(r.status().message(), "division by zero"));
}

TEST_F(InterpreterTest, ReductionsCumsumAndSplatConstant) {
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<2x3xf32>)
        -> (tensor<2x1xf32>, tensor<3xf32>, tensor<2x3xf32>, tensor<2x3xf32>) {
      %c = kiln.constant dense<2.0> : tensor<2x3xf32>
      %y = kiln.mul %x, %c : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      %0 = kiln.reduce_max %y {axes = array<i64: 1>, keepdim}
          : (tensor<2x3xf32>) -> tensor<2x1xf32>
      %1 = kiln.reduce_mean %y {axes = array<i64: 0>}
          : (tensor<2x3xf32>) -> tensor<3xf32>
      %2 = kiln.cumsum %y {axis = 1 : i64, exclusive, reverse} : tensor<2x3xf32>
      %3 = kiln.trilu %y {diagonal = 0 : i64} : tensor<2x3xf32>
      return %0, %1, %2, %3 : tensor<2x1xf32>, tensor<3xf32>, tensor<2x3xf32>, tensor<2x3xf32>
    })MLIR";
  absl::StatusOr<InterpreterResult> r = run(ir, {f32({2, 3}, {1, 5, 2, -3, 0, 4})});
  ASSERT_TRUE(r.ok()) << r.status();
  // y = [[2, 10, 4], [-6, 0, 8]]
  expectValues(r->outputs[0], {10, 8});
  expectValues(r->outputs[1], {-2, 5, 6});
  expectValues(r->outputs[2], {14, 4, 0, 8, 8, 0});
  expectValues(r->outputs[3], {2, 0, 0, -6, 0, 0});
}

TEST_F(InterpreterTest, GatherNdAndScatterAdd) {
  const char *ir = R"MLIR(
    func.func @f(%d: tensor<2x3x2xf32>, %i: tensor<2x1x1xi64>,
                 %dest: tensor<3x2xf32>, %j: tensor<3xi64>, %u: tensor<3x2xf32>)
        -> (tensor<2x1x2xf32>, tensor<3x2xf32>) {
      %0 = kiln.gather_nd %d, %i {batch_dims = 1 : i64}
          : (tensor<2x3x2xf32>, tensor<2x1x1xi64>) -> tensor<2x1x2xf32>
      %1 = kiln.scatter_add %dest, %j, %u {axis = 0 : i64}
          : (tensor<3x2xf32>, tensor<3xi64>, tensor<3x2xf32>) -> tensor<3x2xf32>
      return %0, %1 : tensor<2x1x2xf32>, tensor<3x2xf32>
    })MLIR";
  std::vector<double> d(12);
  for (int i = 0; i < 12; ++i)
    d[i] = i;
  absl::StatusOr<InterpreterResult> r =
      run(ir, {f32({2, 3, 2}, d), i64({2, 1, 1}, {2, -3}), f32({3, 2}, {1, 1, 1, 1, 1, 1}),
               i64({3}, {0, 2, 0}), f32({3, 2}, {1, 2, 3, 4, 5, 6})});
  ASSERT_TRUE(r.ok()) << r.status();
  // Batch 0 takes row 2 of d[0]; batch 1 takes row -3 = 0 of d[1].
  expectValues(r->outputs[0], {4, 5, 6, 7});
  // Rows 0 and 2 of updates both land on dest row 0.
  expectValues(r->outputs[1], {1 + 1 + 5, 1 + 2 + 6, 1, 1, 1 + 3, 1 + 4});
}

TEST_F(InterpreterTest, ShapeOpsMoveElements) {
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<?x3xf32, #kiln.dims<[n]>>)
        -> (tensor<3x?xf32, #kiln.dims<[n]>>, tensor<?xf32, #kiln.dims<[3*n]>>,
            tensor<?x1xf32, #kiln.dims<[n]>>, tensor<?x2xf32, #kiln.dims<[n]>>,
            tensor<?x5xf32, #kiln.dims<[n + 1]>>) {
      %0 = kiln.transpose %x {perm = array<i64: 1, 0>}
          : (tensor<?x3xf32, #kiln.dims<[n]>>) -> tensor<3x?xf32, #kiln.dims<[n]>>
      %1 = kiln.reshape %x : tensor<?x3xf32, #kiln.dims<[n]>>
          -> tensor<?xf32, #kiln.dims<[3*n]>>
      %2:2 = kiln.split %x {axis = 1 : i64} : (tensor<?x3xf32, #kiln.dims<[n]>>)
          -> (tensor<?x1xf32, #kiln.dims<[n]>>, tensor<?x2xf32, #kiln.dims<[n]>>)
      %3 = kiln.pad %x {pads = array<i64: 1, 1, 0, 1>, value = -1.0 : f64}
          : (tensor<?x3xf32, #kiln.dims<[n]>>) -> tensor<?x5xf32, #kiln.dims<[n + 1]>>
      return %0, %1, %2#0, %2#1, %3 : tensor<3x?xf32, #kiln.dims<[n]>>,
          tensor<?xf32, #kiln.dims<[3*n]>>, tensor<?x1xf32, #kiln.dims<[n]>>,
          tensor<?x2xf32, #kiln.dims<[n]>>, tensor<?x5xf32, #kiln.dims<[n + 1]>>
    })MLIR";
  absl::StatusOr<InterpreterResult> r = run(ir, {f32({2, 3}, {0, 1, 2, 3, 4, 5})});
  ASSERT_TRUE(r.ok()) << r.status();
  expectValues(r->outputs[0], {0, 3, 1, 4, 2, 5});
  EXPECT_EQ(r->outputs[1].shape, (std::vector<int64_t>{6}));
  expectValues(r->outputs[2], {0, 3});
  expectValues(r->outputs[3], {1, 2, 4, 5});
  expectValues(r->outputs[4], {-1, -1, -1, -1, -1, //
                               -1, 0, 1, 2, -1,    //
                               -1, 3, 4, 5, -1});
}

TEST_F(InterpreterTest, ActivationsMatchClosedForms) {
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<5xf32>) -> (tensor<5xf32>, tensor<5xf32>,
        tensor<5xf32>, tensor<5xf32>, tensor<5xf32>) {
      %0 = kiln.gelu %x : tensor<5xf32>
      %1 = kiln.gelu %x {approximate = #kiln.gelu<tanh>} : tensor<5xf32>
      %2 = kiln.silu %x : tensor<5xf32>
      %a = kiln.abs %x : tensor<5xf32>
      %3 = kiln.rsqrt %a : tensor<5xf32>
      %4 = kiln.relu %x : tensor<5xf32>
      return %0, %1, %2, %3, %4 : tensor<5xf32>, tensor<5xf32>, tensor<5xf32>,
          tensor<5xf32>, tensor<5xf32>
    })MLIR";
  std::vector<double> x = {-3, -0.5, 0.25, 1, 4};
  absl::StatusOr<InterpreterResult> r = run(ir, {f32({5}, x)});
  ASSERT_TRUE(r.ok()) << r.status();
  for (int i = 0; i < 5; ++i) {
    double v = x[i], pi = std::acos(-1.0);
    double erfGelu = 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    double tanhGelu = 0.5 * v * (1 + std::tanh(std::sqrt(2 / pi) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(r->outputs[0].getDouble(i), erfGelu, 1e-6);
    EXPECT_NEAR(r->outputs[1].getDouble(i), tanhGelu, 1e-6);
    EXPECT_NEAR(r->outputs[2].getDouble(i), v / (1 + std::exp(-v)), 1e-6);
    EXPECT_NEAR(r->outputs[3].getDouble(i), 1 / std::sqrt(std::fabs(v)), 1e-6);
    EXPECT_EQ(r->outputs[4].getDouble(i), v > 0 ? v : 0);
  }
}

TEST_F(InterpreterTest, CompareLogicalSelectAndIota) {
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<2x3xf32>) -> (tensor<2x3xf32>, tensor<2x3xi1>) {
      %i = kiln.iota {dim = 1 : i64} : tensor<2x3xi64>
      %c = kiln.constant dense<1> : tensor<i64>
      %ge = kiln.ge %i, %c : (tensor<2x3xi64>, tensor<i64>) -> tensor<2x3xi1>
      %z = kiln.constant dense<0.0> : tensor<f32>
      %pos = kiln.gt %x, %z : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xi1>
      %both = kiln.and %ge, %pos : (tensor<2x3xi1>, tensor<2x3xi1>) -> tensor<2x3xi1>
      %0 = kiln.select %both, %x, %z
          : (tensor<2x3xi1>, tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
      %1 = kiln.not %both : tensor<2x3xi1>
      return %0, %1 : tensor<2x3xf32>, tensor<2x3xi1>
    })MLIR";
  absl::StatusOr<InterpreterResult> r = run(ir, {f32({2, 3}, {5, -1, 2, 3, 4, -6})});
  ASSERT_TRUE(r.ok()) << r.status();
  // Kept where column >= 1 and x > 0.
  expectValues(r->outputs[0], {0, 0, 2, 0, 4, 0});
  EXPECT_EQ(r->outputs[1].ints, (std::vector<int64_t>{1, 1, 0, 1, 0, 1}));
}

TEST_F(InterpreterTest, AttentionMasksMatchNaiveLoop) {
  // One head, S = L = 2: a bool mask hides key 1 from query 0; a float mask
  // adds a bias instead.
  auto irFor = [](const char *maskType) {
    return std::string(R"MLIR(
      func.func @f(%q: tensor<1x1x2x2xf32>, %k: tensor<1x1x2x2xf32>,
                   %v: tensor<1x1x2x2xf32>, %m: )MLIR") +
           maskType +
           R"MLIR() -> tensor<1x1x2x2xf32> {
        %0 = kiln.attention %q, %k, %v, %m {scale = 0.5 : f64}
            : (tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>, tensor<1x1x2x2xf32>,
               )MLIR" +
           maskType + R"MLIR() -> tensor<1x1x2x2xf32>
        return %0 : tensor<1x1x2x2xf32>
      })MLIR";
  };
  std::vector<double> q = ramp(4), k = ramp(4, 1), v = ramp(4, 2);
  auto naive = [&](const std::vector<double> &bias) {
    std::vector<double> out;
    for (int i = 0; i < 2; ++i) {
      double w[2], sum = 0;
      for (int j = 0; j < 2; ++j) {
        double s = 0.5 * (q[i * 2] * k[j * 2] + q[i * 2 + 1] * k[j * 2 + 1]);
        w[j] = std::exp(s + bias[i * 2 + j]);
        sum += w[j];
      }
      for (int e = 0; e < 2; ++e)
        out.push_back((w[0] * v[e] + w[1] * v[2 + e]) / sum);
    }
    return out;
  };
  HostTensor keep(DType::Bool, {2, 2});
  keep.ints = {1, 0, 1, 1};
  expectValues(runOne(irFor("tensor<2x2xi1>"),
                      {f32({1, 1, 2, 2}, q), f32({1, 1, 2, 2}, k), f32({1, 1, 2, 2}, v), keep}),
               naive({0, -INFINITY, 0, 0}), 1e-5);
  std::vector<double> bias = {0.5, -1, 0, 2};
  expectValues(runOne(irFor("tensor<2x2xf32>"), {f32({1, 1, 2, 2}, q), f32({1, 1, 2, 2}, k),
                                                 f32({1, 1, 2, 2}, v), f32({2, 2}, bias)}),
               naive(bias), 1e-5);
}

TEST_F(InterpreterTest, RmsNormAndLogSoftmax) {
  const char *ir = R"MLIR(
    func.func @f(%x: tensor<2x3xf32>, %w: tensor<3xf32>)
        -> (tensor<2x3xf32>, tensor<2x3xf32>) {
      %0 = kiln.rms_norm %x, %w {axis = 1 : i64, epsilon = 1.0e-06 : f64}
          : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
      %1 = kiln.log_softmax %x {axis = 0 : i64} : tensor<2x3xf32>
      return %0, %1 : tensor<2x3xf32>, tensor<2x3xf32>
    })MLIR";
  std::vector<double> x = ramp(6), w = ramp(3, 7);
  absl::StatusOr<InterpreterResult> r = run(ir, {f32({2, 3}, x), f32({3}, w)});
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<double> rms, logp(6);
  for (int row = 0; row < 2; ++row) {
    double ms = 0;
    for (int c = 0; c < 3; ++c)
      ms += x[row * 3 + c] * x[row * 3 + c] / 3;
    for (int c = 0; c < 3; ++c)
      rms.push_back(x[row * 3 + c] / std::sqrt(ms + 1e-6) * w[c]);
  }
  for (int c = 0; c < 3; ++c) // log_softmax down each column
    for (int row = 0; row < 2; ++row)
      logp[row * 3 + c] = x[row * 3 + c] - std::log(std::exp(x[c]) + std::exp(x[3 + c]));
  expectValues(r->outputs[0], rms, 1e-5);
  expectValues(r->outputs[1], logp, 1e-5);
}

TEST_F(InterpreterTest, ConcatExpandSqueezeGatherElements) {
  const char *ir = R"MLIR(
    func.func @f(%a: tensor<1x2xf32>, %b: tensor<2x2xf32>, %i: tensor<3x1xi32>)
        -> (tensor<3x2xf32>, tensor<2x3x2xf32>, tensor<2xf32>, tensor<3x1xf32>) {
      %0 = kiln.concat %a, %b {axis = 0 : i64}
          : (tensor<1x2xf32>, tensor<2x2xf32>) -> tensor<3x2xf32>
      %u = kiln.unsqueeze %0 {axes = array<i64: 0>}
          : (tensor<3x2xf32>) -> tensor<1x3x2xf32>
      %1 = kiln.expand %u : tensor<1x3x2xf32> -> tensor<2x3x2xf32>
      %2 = kiln.squeeze %a {axes = array<i64: 0>} : (tensor<1x2xf32>) -> tensor<2xf32>
      %3 = kiln.gather_elements %0, %i {axis = 1 : i64}
          : (tensor<3x2xf32>, tensor<3x1xi32>) -> tensor<3x1xf32>
      return %0, %1, %2, %3 : tensor<3x2xf32>, tensor<2x3x2xf32>, tensor<2xf32>,
          tensor<3x1xf32>
    })MLIR";
  HostTensor idx(DType::I32, {3, 1});
  idx.ints = {1, 0, -1};
  absl::StatusOr<InterpreterResult> r =
      run(ir, {f32({1, 2}, {1, 2}), f32({2, 2}, {3, 4, 5, 6}), idx});
  ASSERT_TRUE(r.ok()) << r.status();
  expectValues(r->outputs[0], {1, 2, 3, 4, 5, 6});
  expectValues(r->outputs[1], {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6});
  expectValues(r->outputs[2], {1, 2});
  expectValues(r->outputs[3], {2, 3, 6});
}

TEST_F(InterpreterTest, DenseResourceConstantAndNarrowFloats) {
  // Blob: 4-byte alignment header, then f32 1.5, -2.0 little-endian.
  const char *ir = R"MLIR(
    func.func @f() -> (tensor<2xf32>, tensor<2xbf16>) {
      %0 = kiln.constant dense_resource<blob> : tensor<2xf32>
      %1 = kiln.cast %0 : tensor<2xf32> -> tensor<2xbf16>
      %c = kiln.constant dense<1.0e-03> : tensor<2xbf16>
      %2 = kiln.add %1, %c : (tensor<2xbf16>, tensor<2xbf16>) -> tensor<2xbf16>
      return %0, %2 : tensor<2xf32>, tensor<2xbf16>
    }
    {-#
      dialect_resources: { builtin: { blob: "0x040000000000C03F000000C0" } }
    #-})MLIR";
  absl::StatusOr<InterpreterResult> r = run(ir, {});
  ASSERT_TRUE(r.ok()) << r.status();
  expectValues(r->outputs[0], {1.5, -2.0});
  // bf16 has 8 mantissa bits: adding 0.001 to 1.5 or -2 changes nothing.
  EXPECT_EQ(r->outputs[1].dtype, DType::BF16);
  EXPECT_EQ(r->outputs[1].floats, (std::vector<double>{1.5, -2.0}));
}

} // namespace
