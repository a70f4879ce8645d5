//===- GradOpsTest.cpp - Backward ops against finite differences ----------===//
//
// Each backward op runs in the interpreter on f64 tensors and is compared
// with central finite differences of its forward op, also run by the
// interpreter: for loss = sum(forward(x) * r), d loss / d x must equal the
// backward op given grad = r. The two kernels share no gradient code, so
// agreement checks the backward math itself.
//
//===----------------------------------------------------------------------===//

#include "absl/strings/str_cat.h"
#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Interp/Interpreter.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

using namespace kiln;

namespace {

using Shape = std::vector<int64_t>;

/// "tensor<2x3xf64>"; an empty shape gives "tensor<f64>".
std::string type(const Shape &shape, const char *element = "f64") {
  std::string text = "tensor<";
  for (int64_t d : shape)
    absl::StrAppend(&text, d, "x");
  return absl::StrCat(text, element, ">");
}

class NoWeights : public WeightSource {
public:
  absl::StatusOr<HostTensor> load(llvm::StringRef) override {
    return absl::NotFoundError("no weights");
  }
};

class GradOpsTest : public ::testing::Test {
protected:
  GradOpsTest() { context.loadDialect<GraphDialect, mlir::func::FuncDialect>(); }

  /// Parses `@f`; the module lives as long as the test.
  mlir::func::FuncOp parse(const std::string &ir) {
    modules.push_back(mlir::parseSourceString<mlir::ModuleOp>(ir, &context));
    EXPECT_TRUE(modules.back()) << ir;
    if (!modules.back())
      return nullptr;
    return *modules.back()->getOps<mlir::func::FuncOp>().begin();
  }

  absl::StatusOr<std::vector<HostTensor>> tryRun(mlir::func::FuncOp f, std::vector<HostTensor> in) {
    absl::StatusOr<InterpreterResult> r = interpret(f, in, weights);
    if (!r.ok())
      return r.status();
    return r->outputs;
  }

  std::vector<HostTensor> run(mlir::func::FuncOp f, std::vector<HostTensor> in) {
    absl::StatusOr<std::vector<HostTensor>> r = tryRun(f, std::move(in));
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? *r : std::vector<HostTensor>();
  }

  HostTensor random(Shape shape, double lo = -1, double hi = 1) {
    std::uniform_real_distribution<double> dist(lo, hi);
    HostTensor t(DType::F64, std::move(shape));
    for (double &x : t.floats)
      x = dist(rng);
    return t;
  }

  /// d/d in[which] of sum(forward(in)[0] * r) by central differences. Terms
  /// where r is 0 are skipped, so outputs that are NaN by definition (fully
  /// masked attention rows) can be left out of the loss.
  std::vector<double> numericGrad(mlir::func::FuncOp forward, std::vector<HostTensor> in,
                                  size_t which, const HostTensor &r) {
    auto loss = [&] {
      std::vector<HostTensor> out = run(forward, in);
      double sum = 0;
      for (int64_t i = 0; !out.empty() && i < r.numel(); ++i)
        if (r.floats[i] != 0)
          sum += out[0].floats[i] * r.floats[i];
      return sum;
    };
    const double h = 1e-5;
    std::vector<double> grad;
    for (double &x : in[which].floats) {
      double saved = x;
      x = saved + h;
      double up = loss();
      x = saved - h;
      double down = loss();
      x = saved;
      grad.push_back((up - down) / (2 * h));
    }
    return grad;
  }

  mlir::MLIRContext context;
  std::vector<mlir::OwningOpRef<mlir::ModuleOp>> modules;
  NoWeights weights;
  std::mt19937 rng{20240601};
};

/// Central differences with h = 1e-5 in f64 are good to ~1e-10, far inside
/// the 1e-6 relative tolerance; any real error in the formulas is larger.
void expectGrad(const HostTensor &analytic, const std::vector<double> &fd,
                const std::string &what) {
  ASSERT_EQ(analytic.numel(), static_cast<int64_t>(fd.size())) << what;
  for (size_t i = 0; i < fd.size(); ++i)
    EXPECT_NEAR(analytic.floats[i], fd[i], 1e-6 * std::max(1.0, std::fabs(fd[i])))
        << what << " element " << i;
}

TEST_F(GradOpsTest, SoftmaxAndLogSoftmaxOnInnerAxes) {
  Shape shape = {3, 4, 2};
  std::string t = type(shape);
  for (const char *op : {"softmax", "log_softmax"}) {
    for (int axis : {0, 1}) {
      std::string attr = absl::StrCat("{axis = ", axis, " : i64}");
      mlir::func::FuncOp forward =
          parse(absl::StrCat("func.func @f(%x: ", t, ") -> ", t, " {\n %0 = kiln.", op, " %x ",
                             attr, " : ", t, "\n return %0 : ", t, "\n}"));
      mlir::func::FuncOp backward =
          parse(absl::StrCat("func.func @f(%y: ", t, ", %dy: ", t, ") -> ", t, " {\n %0 = kiln.",
                             op, "_grad %y, %dy ", attr, " : ", t, "\n return %0 : ", t, "\n}"));
      ASSERT_TRUE(forward && backward);
      HostTensor x = random(shape, -2, 2), r = random(shape);
      std::vector<HostTensor> y = run(forward, {x});
      ASSERT_EQ(y.size(), 1u);
      std::vector<HostTensor> dx = run(backward, {y[0], r});
      ASSERT_EQ(dx.size(), 1u);
      expectGrad(dx[0], numericGrad(forward, {x}, 0, r), absl::StrCat(op, " axis ", axis));
    }
  }
}

TEST_F(GradOpsTest, LayerNormOverTrailingDims) {
  Shape xs = {2, 3, 4}, ws = {3, 4};
  std::string t = type(xs), w = type(ws);
  const char *attr = "{axis = 1 : i64, epsilon = 1.0e-05 : f64}";
  mlir::func::FuncOp forward =
      parse(absl::StrCat("func.func @f(%x: ", t, ", %w: ", w, ", %b: ", w, ") -> ", t,
                         " {\n %0 = kiln.layer_norm %x, %w, %b ", attr, " : (", t, ", ", w, ", ", w,
                         ") -> ", t, "\n return %0 : ", t, "\n}"));
  mlir::func::FuncOp backward = parse(absl::StrCat(
      "func.func @f(%x: ", t, ", %w: ", w, ", %dy: ", t, ") -> (", t, ", ", w, ", ", w,
      ") {\n %0:3 = kiln.layer_norm_grad %x, %w, %dy ", attr, " : (", t, ", ", w, ", ", t, ") -> (",
      t, ", ", w, ", ", w, ")\n return %0#0, %0#1, %0#2 : ", t, ", ", w, ", ", w, "\n}"));
  ASSERT_TRUE(forward && backward);
  HostTensor x = random(xs, -2, 2), weight = random(ws), bias = random(ws);
  HostTensor r = random(xs);
  std::vector<HostTensor> grads = run(backward, {x, weight, r});
  ASSERT_EQ(grads.size(), 3u);
  const char *names[] = {"dx", "dweight", "dbias"};
  for (size_t i = 0; i < 3; ++i)
    expectGrad(grads[i], numericGrad(forward, {x, weight, bias}, i, r), names[i]);
}

TEST_F(GradOpsTest, RmsNormOverTrailingDims) {
  Shape xs = {3, 2, 4}, ws = {2, 4};
  std::string t = type(xs), w = type(ws);
  const char *attr = "{axis = 1 : i64, epsilon = 1.0e-06 : f64}";
  mlir::func::FuncOp forward = parse(absl::StrCat(
      "func.func @f(%x: ", t, ", %w: ", w, ") -> ", t, " {\n %0 = kiln.rms_norm %x, %w ", attr,
      " : (", t, ", ", w, ") -> ", t, "\n return %0 : ", t, "\n}"));
  mlir::func::FuncOp backward = parse(
      absl::StrCat("func.func @f(%x: ", t, ", %w: ", w, ", %dy: ", t, ") -> (", t, ", ", w,
                   ") {\n %0:2 = kiln.rms_norm_grad %x, %w, %dy ", attr, " : (", t, ", ", w, ", ",
                   t, ") -> (", t, ", ", w, ")\n return %0#0, %0#1 : ", t, ", ", w, "\n}"));
  ASSERT_TRUE(forward && backward);
  HostTensor x = random(xs, -2, 2), weight = random(ws), r = random(xs);
  std::vector<HostTensor> grads = run(backward, {x, weight, r});
  ASSERT_EQ(grads.size(), 2u);
  expectGrad(grads[0], numericGrad(forward, {x, weight}, 0, r), "dx");
  expectGrad(grads[1], numericGrad(forward, {x, weight}, 1, r), "dweight");
}

/// Grouped-query attention: B = 2, Hq = 4 heads read Hkv = 2 kv heads,
/// S = 3 queries, L = 4 keys, D = 2, Dv = 3 (D != Dv catches mixed-up strides).
class GradOpsAttentionTest : public GradOpsTest {
protected:
  const Shape qs = {2, 4, 3, 2}, ks = {2, 2, 4, 2}, vs = {2, 2, 4, 3}, os = {2, 4, 3, 3};

  /// Checks dq, dk, dv against finite differences; `r` is the output grad.
  void check(const std::string &attrs, const HostTensor *mask, const HostTensor &r) {
    std::string q = type(qs), k = type(ks), v = type(vs), o = type(os);
    std::string m;
    if (mask)
      m = type(mask->shape, mask->isFloat() ? "f64" : "i1");
    std::string maskArg = mask ? ", %m: " + m : "";
    std::string maskType = mask ? ", " + m : "";
    mlir::func::FuncOp forward = parse(
        absl::StrCat("func.func @f(%q: ", q, ", %k: ", k, ", %v: ", v, maskArg, ") -> ", o,
                     " {\n %0 = kiln.attention %q, %k, %v", mask ? ", %m " : " ", attrs, " : (", q,
                     ", ", k, ", ", v, maskType, ") -> ", o, "\n return %0 : ", o, "\n}"));
    mlir::func::FuncOp backward = parse(absl::StrCat(
        "func.func @f(%q: ", q, ", %k: ", k, ", %v: ", v, maskArg, ", %dy: ", o, ") -> (", q, ", ",
        k, ", ", v, ") {\n %0:3 = kiln.attention_grad %q, %k, %v ", mask ? "mask %m " : "",
        "grad %dy ", attrs, " : (", q, ", ", k, ", ", v, maskType, ", ", o, ") -> (", q, ", ", k,
        ", ", v, ")\n return %0#0, %0#1, %0#2 : ", q, ", ", k, ", ", v, "\n}"));
    ASSERT_TRUE(forward && backward);
    std::vector<HostTensor> in = {random(qs, -2, 2), random(ks, -2, 2), random(vs)};
    if (mask)
      in.push_back(*mask);
    std::vector<HostTensor> gradIn = in;
    gradIn.push_back(r);
    std::vector<HostTensor> grads = run(backward, gradIn);
    ASSERT_EQ(grads.size(), 3u);
    const char *names[] = {"dq", "dk", "dv"};
    for (size_t i = 0; i < 3; ++i)
      expectGrad(grads[i], numericGrad(forward, in, i, r), names[i]);
  }
};

TEST_F(GradOpsAttentionTest, CausalDefaultScale) { check("{causal}", nullptr, random(os)); }

TEST_F(GradOpsAttentionTest, FloatMaskBroadcastWithScale) {
  HostTensor mask = random({3, 4}, -2, 2);
  check("{scale = 7.0e-01 : f64}", &mask, random(os));
}

TEST_F(GradOpsAttentionTest, BoolMaskAndCausal) {
  // Per batch, per query: key 0 always kept, so no row is fully masked.
  HostTensor mask(DType::Bool, {2, 1, 3, 4});
  mask.ints = {1, 0, 1, 1, 1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1};
  check("{causal}", &mask, random(os));
}

TEST_F(GradOpsAttentionTest, FullyMaskedRowPassesNoGradient) {
  // Query 1 of batch 0 sees no key in any head. The forward output there is
  // NaN, so the loss leaves it out (r = 0); the backward op gets a nonzero
  // grad there anyway and must ignore it.
  HostTensor mask(DType::Bool, {2, 1, 3, 4});
  mask.ints = {1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 1, 0, 1, 0, 1, 1, 1, 1, 0, 1, 0, 0, 1, 1};
  HostTensor r = random(os);
  HostTensor lossWeights = r;
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t e = 0; e < 3; ++e)
      lossWeights.floats[(h * 3 + 1) * 3 + e] = 0;
  // The same check, but the loss weights differ from the backward grad.
  std::string q = type(qs), k = type(ks), v = type(vs), o = type(os);
  std::string m = type(mask.shape, "i1");
  mlir::func::FuncOp forward =
      parse(absl::StrCat("func.func @f(%q: ", q, ", %k: ", k, ", %v: ", v, ", %m: ", m, ") -> ", o,
                         " {\n %0 = kiln.attention %q, %k, %v, %m : (", q, ", ", k, ", ", v, ", ",
                         m, ") -> ", o, "\n return %0 : ", o, "\n}"));
  mlir::func::FuncOp backward = parse(absl::StrCat(
      "func.func @f(%q: ", q, ", %k: ", k, ", %v: ", v, ", %m: ", m, ", %dy: ", o, ") -> (", q,
      ", ", k, ", ", v, ") {\n %0:3 = kiln.attention_grad %q, %k, %v mask %m grad %dy : (", q, ", ",
      k, ", ", v, ", ", m, ", ", o, ") -> (", q, ", ", k, ", ", v,
      ")\n return %0#0, %0#1, %0#2 : ", q, ", ", k, ", ", v, "\n}"));
  ASSERT_TRUE(forward && backward);
  std::vector<HostTensor> in = {random(qs), random(ks), random(vs), mask};
  std::vector<HostTensor> grads = run(backward, {in[0], in[1], in[2], mask, r});
  ASSERT_EQ(grads.size(), 3u);
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t d = 0; d < 2; ++d)
      EXPECT_EQ(grads[0].floats[(h * 3 + 1) * 2 + d], 0.0);
  const char *names[] = {"dq", "dk", "dv"};
  for (size_t i = 0; i < 3; ++i)
    expectGrad(grads[i], numericGrad(forward, in, i, lossWeights), names[i]);
}

class GradOpsCrossEntropyTest : public GradOpsTest {
protected:
  /// cross_entropy forward and backward for logits [4, 5] with `reduction`.
  std::pair<mlir::func::FuncOp, mlir::func::FuncOp> parsePair(const std::string &reduction) {
    std::string l = type({4, 5}), t = type({4}, "i64");
    std::string g = type(reduction == "none" ? Shape{4} : Shape{});
    std::string attr = "{reduction = #kiln.reduction<" + reduction + ">}";
    mlir::func::FuncOp forward = parse(absl::StrCat(
        "func.func @f(%l: ", l, ", %t: ", t, ") -> ", g, " {\n %0 = kiln.cross_entropy %l, %t ",
        attr, " : (", l, ", ", t, ") -> ", g, "\n return %0 : ", g, "\n}"));
    mlir::func::FuncOp backward =
        parse(absl::StrCat("func.func @f(%l: ", l, ", %t: ", t, ", %g: ", g, ") -> ", l,
                           " {\n %0 = kiln.cross_entropy_grad %l, %t, %g ", attr, " : (", l, ", ",
                           t, ", ", g, ") -> ", l, "\n return %0 : ", l, "\n}"));
    return {forward, backward};
  }

  static HostTensor labels(std::vector<int64_t> values) {
    HostTensor t(DType::I64, {4});
    t.ints = std::move(values);
    return t;
  }
};

TEST_F(GradOpsCrossEntropyTest, EveryReductionWithAnIgnoredRow) {
  HostTensor t = labels({3, 0, -100, 4}); // row 2 is ignored
  for (const char *reduction : {"mean", "sum", "none"}) {
    auto [forward, backward] = parsePair(reduction);
    ASSERT_TRUE(forward && backward);
    HostTensor logits = random({4, 5}, -3, 3);
    HostTensor g = random(std::string(reduction) == "none" ? Shape{4} : Shape{});
    std::vector<HostTensor> grad = run(backward, {logits, t, g});
    ASSERT_EQ(grad.size(), 1u);
    expectGrad(grad[0], numericGrad(forward, {logits, t}, 0, g), reduction);
    for (int64_t c = 0; c < 5; ++c)
      EXPECT_EQ(grad[0].floats[2 * 5 + c], 0.0) << reduction;
  }
}

TEST_F(GradOpsCrossEntropyTest, MeanOverNoCountedRowsIsZero) {
  auto [forward, backward] = parsePair("mean");
  ASSERT_TRUE(backward);
  std::vector<HostTensor> grad =
      run(backward, {random({4, 5}), labels({-100, -100, -100, -100}), random({})});
  ASSERT_EQ(grad.size(), 1u);
  for (double x : grad[0].floats)
    EXPECT_EQ(x, 0.0);
}

TEST_F(GradOpsCrossEntropyTest, LabelOutOfRangeIsAnError) {
  auto [forward, backward] = parsePair("sum");
  ASSERT_TRUE(backward);
  absl::StatusOr<std::vector<HostTensor>> r =
      tryRun(backward, {random({4, 5}), labels({0, 5, 1, 2}), random({})});
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("label 5 in row 1 is out of range"), std::string::npos)
      << r.status();
}

} // namespace
