//===- VJPTest.cpp - VJP models against finite differences ----------------===//
//
// Each test parses a function whose return values are the results of the op
// under test and whose last arguments are one cotangent r per result. The
// harness appends loss = sum(result * r) and the op's VJP for r (built by
// calling DifferentiableOpInterface directly), returns both, runs the
// function in the reference interpreter, and compares every gradient with
// central differences of the loss in f64.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Interp/Interpreter.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/Sequence.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>
#include <string>

using namespace kiln;
using namespace mlir;

namespace {

using Symbols = std::map<std::string, int64_t>;
/// Draws one element of input argument `arg`.
using Sampler = std::function<double(std::mt19937 &, unsigned arg)>;

Sampler uniform(double lo, double hi) {
  return [=](std::mt19937 &rng, unsigned) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
}

/// |v| in [lo, hi] with a random sign: clear of a kink or pole at 0.
Sampler awayFromZero(double lo = 0.2, double hi = 2.0) {
  return [=](std::mt19937 &rng, unsigned) {
    double v = std::uniform_real_distribution<double>(lo, hi)(rng);
    return std::bernoulli_distribution(0.5)(rng) ? v : -v;
  };
}

/// Argument a takes values k/2 + 0.1 + a/4: two arguments never come closer
/// than 0.25, so max/min stay clear of ties.
Sampler interleaved() {
  return [](std::mt19937 &rng, unsigned arg) {
    return std::uniform_int_distribution<int>(-4, 4)(rng) * 0.5 + 0.1 + 0.25 * arg;
  };
}

Sampler perArg(std::vector<Sampler> samplers) {
  return [=](std::mt19937 &rng, unsigned arg) { return samplers[arg](rng, arg); };
}

std::string t(const std::string &shape) { return "tensor<" + shape + "xf64>"; }

/// Replaces $0, $1, ... in `text` (IR is full of braces, so no formatv).
std::string fill(std::string text, const std::vector<std::string> &args) {
  for (size_t i = args.size(); i-- > 0;) {
    std::string key = "$" + std::to_string(i);
    for (size_t at; (at = text.find(key)) != std::string::npos;)
      text.replace(at, key.size(), args[i]);
  }
  return text;
}

/// f(x, y, r) returning `op x, y`.
std::string binary(const std::string &op, const std::string &lhs, const std::string &rhs,
                   const std::string &result) {
  return fill(R"(func.func @f(%x: $1, %y: $2, %r: $3) -> $3 {
      %z = kiln.$0 %x, %y : ($1, $2) -> $3
      return %z : $3
    })",
              {op, lhs, rhs, result});
}

/// f(x, r) returning `op x {attrs}` for ops printed as `op %x : type`.
std::string unary(const std::string &op, const std::string &type, const std::string &attrs = "") {
  return fill(R"(func.func @f(%x: $1, %r: $1) -> $1 {
      %z = kiln.$0 %x $2 : $1
      return %z : $1
    })",
              {op, type, attrs});
}

/// f(x, r) returning `op x {attrs}` for ops printed with a functional type.
std::string unaryFn(const std::string &op, const std::string &in, const std::string &out,
                    const std::string &attrs) {
  return fill(R"(func.func @f(%x: $1, %r: $2) -> $2 {
      %z = kiln.$0 %x $3 : ($1) -> $2
      return %z : $2
    })",
              {op, in, out, attrs});
}

/// f(x, r) returning `op x {attrs}` for ops printed as `in -> out`.
std::string unaryArrow(const std::string &op, const std::string &in, const std::string &out,
                       const std::string &attrs = "") {
  return fill(R"(func.func @f(%x: $1, %r: $2) -> $2 {
      %z = kiln.$0 %x $3 : $1 -> $2
      return %z : $2
    })",
              {op, in, out, attrs});
}

struct Options {
  Sampler sample = uniform(-2.0, 2.0);
  Symbols symbols;
  /// Per operand: differentiate it (default: every argument operand).
  std::vector<bool> want;
  /// Per result: pass a null gradient (it then stays out of the loss).
  std::vector<bool> dropGrad;
  double step = 1e-5, tolerance = 1e-6;
};

class NoWeights : public WeightSource {
public:
  absl::StatusOr<HostTensor> load(llvm::StringRef) override {
    return absl::NotFoundError("no weights in VJP tests");
  }
};

class VJPTest : public ::testing::Test {
protected:
  VJPTest() { context.loadDialect<GraphDialect, func::FuncDialect>(); }

  /// Parses `ir` and finds the op under test (the producer of the returned
  /// values) and its cotangents (the last arguments, one per result).
  void parse(const std::string &ir) {
    module = parseSourceString<ModuleOp>(ir, &context);
    ASSERT_TRUE(module) << "test IR does not parse:\n" << ir;
    func = *module->getOps<func::FuncOp>().begin();
    Block &body = func.getBody().front();
    ret = cast<func::ReturnOp>(body.getTerminator());
    op = ret.getOperand(0).getDefiningOp();
    ASSERT_TRUE(op && isa<DifferentiableOpInterface>(op))
        << "the returned value's producer is not differentiable";
    ASSERT_GE(body.getNumArguments(), op->getNumResults());
    numInputs = body.getNumArguments() - op->getNumResults();
    cotangents.assign(body.getArguments().begin() + numInputs, body.getArguments().end());
  }

  /// Calls buildVJP with the ops built into a scratch block, which the caller
  /// clears; checks the interface contract (one value per operand, each null
  /// or of the operand's exact type).
  LogicalResult buildInto(Block &scratch, ArrayRef<Value> grads, ArrayRef<bool> want,
                          SmallVectorImpl<Value> &out) {
    OpBuilder b(&context);
    b.setInsertionPointToEnd(&scratch);
    if (failed(cast<DifferentiableOpInterface>(op).buildVJP(b, grads, want, out)))
      return failure();
    EXPECT_EQ(out.size(), op->getNumOperands());
    for (auto [v, operand] : llvm::zip(out, op->getOperands()))
      if (v)
        EXPECT_EQ(v.getType(), operand.getType());
    return success();
  }

  static void clear(Block &scratch) {
    while (!scratch.empty())
      scratch.back().erase();
  }

  /// The whole check; see the file comment.
  void check(const std::string &ir, Options options = {}) {
    parse(ir);
    if (HasFatalFailure())
      return;
    unsigned numOperands = op->getNumOperands();
    SmallVector<bool> want(numOperands, false);
    for (auto [i, operand] : llvm::enumerate(op->getOperands())) {
      auto arg = dyn_cast<BlockArgument>(operand);
      want[i] = arg && arg.getArgNumber() < numInputs && (options.want.empty() || options.want[i]);
    }
    SmallVector<Value> resultGrads(cotangents.begin(), cotangents.end());
    for (size_t j = 0; j < options.dropGrad.size(); ++j)
      if (options.dropGrad[j])
        resultGrads[j] = Value();

    // Nothing wanted: all null and nothing built.
    {
      Block scratch;
      SmallVector<Value> none;
      SmallVector<bool> noWant(numOperands, false);
      ASSERT_TRUE(succeeded(buildInto(scratch, resultGrads, noWant, none)));
      for (Value v : none)
        EXPECT_FALSE(v) << "a gradient nobody wanted";
      EXPECT_TRUE(scratch.empty()) << "ops built for unwanted gradients";
      clear(scratch);
    }
    // No result gradients: nothing, or zeros of the right type.
    {
      Block scratch;
      SmallVector<Value> zeros;
      SmallVector<Value> noGrads(op->getNumResults(), Value());
      ASSERT_TRUE(succeeded(buildInto(scratch, noGrads, want, zeros)));
      clear(scratch);
    }

    OpBuilder b(ret);
    Location loc = op->getLoc();
    Value loss;
    for (auto [result, r] : llvm::zip(op->getResults(), resultGrads)) {
      if (!r)
        continue;
      Value term = b.create<MulOp>(loc, result, r);
      int64_t rank = cast<RankedTensorType>(term.getType()).getRank();
      if (rank > 0)
        term =
            b.create<ReduceSumOp>(loc, term, llvm::to_vector(llvm::seq<int64_t>(0, rank)), false);
      if (loss)
        term = b.create<AddOp>(loc, loss, term);
      loss = term;
    }
    ASSERT_TRUE(loss) << "every result gradient dropped";
    SmallVector<Value> grads;
    {
      Block scratch;
      ASSERT_TRUE(succeeded(buildInto(scratch, resultGrads, want, grads)));
      // Move the VJP in front of the return.
      while (!scratch.empty())
        scratch.front().moveBefore(ret);
    }
    SmallVector<Value> outputs = {loss};
    SmallVector<unsigned> gradArgs;
    for (unsigned i = 0; i < numOperands; ++i) {
      if (!want[i]) {
        EXPECT_FALSE(grads[i]) << "operand " << i << " got an unwanted gradient";
        continue;
      }
      ASSERT_TRUE(grads[i]) << "operand " << i << " got no gradient";
      outputs.push_back(grads[i]);
      gradArgs.push_back(cast<BlockArgument>(op->getOperand(i)).getArgNumber());
    }
    ret->setOperands(outputs);
    func.setType(
        FunctionType::get(&context, func.getArgumentTypes(), ValueRange(outputs).getTypes()));

    std::vector<HostTensor> inputs = makeInputs(options);
    if (HasFatalFailure())
      return;
    NoWeights weights;
    absl::StatusOr<InterpreterResult> base = interpret(func, inputs, weights);
    ASSERT_TRUE(base.ok()) << base.status() << "\n" << printed();
    auto lossAt = [&](const std::vector<HostTensor> &at) {
      absl::StatusOr<InterpreterResult> r = interpret(func, at, weights);
      EXPECT_TRUE(r.ok()) << r.status();
      return r.ok() ? r->outputs[0].getDouble(0) : NAN;
    };
    for (auto [k, arg] : llvm::enumerate(gradArgs)) {
      const HostTensor &analytic = base->outputs[k + 1];
      ASSERT_EQ(analytic.shape, inputs[arg].shape) << "gradient of argument " << arg;
      for (int64_t e = 0; e < analytic.numel(); ++e) {
        std::vector<HostTensor> at = inputs;
        double x = inputs[arg].getDouble(e);
        at[arg].set(e, x + options.step);
        double plus = lossAt(at);
        at[arg].set(e, x - options.step);
        double minus = lossAt(at);
        double numeric = (plus - minus) / (2 * options.step);
        EXPECT_NEAR(analytic.getDouble(e), numeric,
                    options.tolerance * std::max(1.0, std::fabs(numeric)))
            << "d loss / d argument " << arg << " element " << e;
      }
    }
  }

  /// One random tensor per argument, shaped by its type and the symbols.
  std::vector<HostTensor> makeInputs(const Options &options) {
    std::mt19937 rng(1234);
    std::vector<HostTensor> inputs;
    for (BlockArgument arg : func.getArguments()) {
      auto type = cast<RankedTensorType>(arg.getType());
      std::vector<int64_t> shape;
      for (Dim d : getDims(type)) {
        std::optional<int64_t> size = evaluateDim(d, [&](StringRef name) -> std::optional<int64_t> {
          auto it = options.symbols.find(name.str());
          if (it == options.symbols.end())
            return std::nullopt;
          return it->second;
        });
        EXPECT_TRUE(size) << "unbound dim in " << shapeToString(type);
        shape.push_back(size.value_or(1));
      }
      std::optional<DType> dtype = fromMlirType(type.getElementType());
      EXPECT_TRUE(dtype && isFloat(*dtype)) << "arguments must be floats";
      HostTensor tensor(dtype.value_or(DType::F64), shape);
      bool isCotangent = arg.getArgNumber() >= numInputs;
      for (int64_t e = 0; e < tensor.numel(); ++e)
        tensor.set(e, isCotangent ? uniform(-1.0, 1.0)(rng, 0)
                                  : options.sample(rng, arg.getArgNumber()));
      inputs.push_back(std::move(tensor));
    }
    return inputs;
  }

  /// Runs the function `ir` with the VJP of its returned op spliced in
  /// (all operands wanted) and returns the gradients only, for exact checks.
  std::vector<HostTensor> runVJP(const std::string &ir, const std::vector<HostTensor> &inputs) {
    parse(ir);
    if (HasFatalFailure())
      return {};
    SmallVector<bool> want;
    for (Value operand : op->getOperands())
      want.push_back(isa<BlockArgument>(operand));
    Block scratch;
    SmallVector<Value> grads;
    EXPECT_TRUE(succeeded(buildInto(scratch, cotangents, want, grads)));
    while (!scratch.empty())
      scratch.front().moveBefore(ret);
    SmallVector<Value> outputs;
    for (Value g : grads)
      if (g)
        outputs.push_back(g);
    ret->setOperands(outputs);
    func.setType(
        FunctionType::get(&context, func.getArgumentTypes(), ValueRange(outputs).getTypes()));
    NoWeights weights;
    absl::StatusOr<InterpreterResult> r = interpret(func, inputs, weights);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->outputs : std::vector<HostTensor>();
  }

  /// Builds the VJP with `want` and returns the gradients (or the first
  /// diagnostic in `error` when building fails).
  SmallVector<Value> gradients(const std::string &ir, ArrayRef<bool> want,
                               std::string *error = nullptr) {
    parse(ir);
    SmallVector<Value> grads;
    if (HasFatalFailure())
      return grads;
    ScopedDiagnosticHandler handler(&context, [&](Diagnostic &diag) {
      if (error && error->empty())
        *error = diag.str();
      return success();
    });
    OpBuilder b(ret);
    if (failed(cast<DifferentiableOpInterface>(op).buildVJP(b, cotangents, want, grads)))
      grads.clear();
    return grads;
  }

  std::string printed() {
    std::string text;
    llvm::raw_string_ostream os(text);
    module->print(os);
    return text;
  }

  MLIRContext context;
  OwningOpRef<ModuleOp> module;
  func::FuncOp func;
  func::ReturnOp ret;
  Operation *op = nullptr;
  unsigned numInputs = 0;
  SmallVector<Value> cotangents;
};

HostTensor f64(std::vector<int64_t> shape, const std::vector<double> &values) {
  HostTensor tensor(DType::F64, std::move(shape));
  for (size_t i = 0; i < values.size(); ++i)
    tensor.set(i, values[i]);
  return tensor;
}

void expectValues(const HostTensor &tensor, const std::vector<double> &expected) {
  ASSERT_EQ(tensor.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_DOUBLE_EQ(tensor.getDouble(i), expected[i]) << "element " << i;
}

constexpr const char *kSymN = "tensor<?x3xf64, #kiln.dims<[n]>>";

//===--- elementwise binary -----------------------------------------------===//

TEST_F(VJPTest, AddBroadcast) { check(binary("add", t("3x4"), t("4"), t("3x4"))); }

TEST_F(VJPTest, AddSymbolic) {
  Options o;
  o.symbols = {{"n", 3}};
  check(binary("add", kSymN, t("1x3"), kSymN), o);
}

TEST_F(VJPTest, MulBroadcastBothSides) { check(binary("mul", t("2x1x4"), t("3x1"), t("2x3x4"))); }

TEST_F(VJPTest, SubBroadcast) {
  check(binary("sub", t("3x1"), t("2x1x4"), t("2x3x4")));
  Options o;
  o.symbols = {{"n", 2}};
  check(binary("sub", t("3"), kSymN, kSymN), o);
}

TEST_F(VJPTest, DivBroadcast) {
  Options o;
  o.sample = awayFromZero(0.5, 2.0);
  check(binary("div", t("2x3"), t("3"), t("2x3")), o);
}

TEST_F(VJPTest, Pow) {
  Options o;
  o.sample = perArg({uniform(0.5, 2.0), uniform(-2.0, 2.0)});
  check(binary("pow", t("2x3"), t("3"), t("2x3")), o);
  o.want = {false, true};
  check(binary("pow", t("2x3"), t("3"), t("2x3")), o);
  o.want = {true, false};
  check(binary("pow", t("2x1"), t("3"), t("2x3")), o);
}

TEST_F(VJPTest, MaxMin) {
  Options o;
  o.sample = interleaved();
  check(binary("max", t("3x4"), t("4"), t("3x4")), o);
  check(binary("min", t("2x1x4"), t("3x1"), t("2x3x4")), o);
  check(binary("max", t("3x1"), t("2x3x4"), t("2x3x4")), o);
}

TEST_F(VJPTest, MaxTiesGoToLhs) {
  std::vector<HostTensor> g =
      runVJP(binary("max", t("3"), t("3"), t("3")),
             {f64({3}, {1, 2, 3}), f64({3}, {1, 5, 3}), f64({3}, {10, 20, 30})});
  ASSERT_EQ(g.size(), 2u);
  expectValues(g[0], {10, 0, 30});
  expectValues(g[1], {0, 20, 0});
}

TEST_F(VJPTest, SelectBroadcast) {
  check(R"(func.func @f(%t: tensor<3x4xf64>, %f: tensor<4xf64>,
                        %r: tensor<3x4xf64>) -> tensor<3x4xf64> {
      %c = kiln.constant dense<[[true], [false], [true]]> : tensor<3x1xi1>
      %z = kiln.select %c, %t, %f : (tensor<3x1xi1>, tensor<3x4xf64>,
          tensor<4xf64>) -> tensor<3x4xf64>
      return %z : tensor<3x4xf64>
    })");
}

//===--- elementwise unary ------------------------------------------------===//

TEST_F(VJPTest, Unary) {
  struct Case {
    const char *op;
    Sampler sample;
    const char *attrs = "";
  };
  std::vector<Case> cases = {
      {"neg", uniform(-2, 2)},
      {"abs", awayFromZero()},
      {"exp", uniform(-2, 2)},
      {"log", uniform(0.2, 3)},
      {"sqrt", uniform(0.2, 3)},
      {"rsqrt", uniform(0.2, 3)},
      {"reciprocal", awayFromZero(0.3, 2)},
      {"tanh", uniform(-2, 2)},
      {"sigmoid", uniform(-3, 3)},
      {"silu", uniform(-3, 3)},
      {"relu", awayFromZero()},
      {"erf", uniform(-2, 2)},
      {"sin", uniform(-3, 3)},
      {"cos", uniform(-3, 3)},
      {"gelu", uniform(-3, 3)},
      {"gelu", uniform(-3, 3), "{approximate = #kiln.gelu<tanh>}"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::string(c.op) + " " + c.attrs);
    Options o;
    o.sample = c.sample;
    o.symbols = {{"n", 2}};
    check(unary(c.op, kSymN, c.attrs), o);
  }
}

TEST_F(VJPTest, CastBetweenFloats) {
  // The loss is f32, so the step is larger and the tolerance looser.
  Options o;
  o.step = 0.05;
  o.tolerance = 1e-4;
  check(unaryArrow("cast", t("2x3"), "tensor<2x3xf32>"), o);
}

TEST_F(VJPTest, NoGradientThroughIntegersOrStopGradient) {
  SmallVector<Value> g = gradients(unaryArrow("cast", t("2x3"), "tensor<2x3xi64>"), {true});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_FALSE(g[0]);
  g = gradients(unary("stop_gradient", t("2x3")), {true});
  ASSERT_EQ(g.size(), 1u);
  EXPECT_FALSE(g[0]);
}

//===--- reductions, cumsum, trilu ----------------------------------------===//

TEST_F(VJPTest, ReduceSum) {
  check(unaryFn("reduce_sum", t("2x3x4"), t("2x4"), "{axes = array<i64: 1>}"));
  check(unaryFn("reduce_sum", t("2x3x4"), t("1x3x1"), "{axes = array<i64: 0, 2>, keepdim}"));
  Options o;
  o.symbols = {{"n", 3}};
  check(unaryFn("reduce_sum", kSymN, t("3"), "{axes = array<i64: 0>}"), o);
}

TEST_F(VJPTest, ReduceMean) {
  check(unaryFn("reduce_mean", t("2x3x4"), t("2"), "{axes = array<i64: 1, 2>}"));
  Options o;
  o.symbols = {{"n", 3}};
  // A symbolic count and a static count inside a symbolic shape.
  check(unaryFn("reduce_mean", kSymN, t("3"), "{axes = array<i64: 0>}"), o);
  check(unaryFn("reduce_mean", kSymN, "tensor<?x1xf64, #kiln.dims<[n]>>",
                "{axes = array<i64: 1>, keepdim}"),
        o);
}

TEST_F(VJPTest, ReduceMax) {
  check(unaryFn("reduce_max", t("2x3x4"), t("2x3"), "{axes = array<i64: 2>}"));
  check(unaryFn("reduce_max", t("2x3x4"), t("1x1x4"), "{axes = array<i64: 0, 1>, keepdim}"));
}

TEST_F(VJPTest, ReduceMaxSplitsTies) {
  std::vector<HostTensor> g =
      runVJP(unaryFn("reduce_max", t("2x3"), t("2"), "{axes = array<i64: 1>}"),
             {f64({2, 3}, {1, 3, 3, 2, 0, 2}), f64({2}, {1, 4})});
  ASSERT_EQ(g.size(), 1u);
  expectValues(g[0], {0, 0.5, 0.5, 2, 0, 2});
}

TEST_F(VJPTest, Cumsum) {
  for (const char *attrs : {"{axis = 1 : i64}", "{axis = 1 : i64, exclusive}",
                            "{axis = 0 : i64, reverse}", "{axis = 0 : i64, exclusive, reverse}"}) {
    SCOPED_TRACE(attrs);
    check(unary("cumsum", t("3x4"), attrs));
  }
}

TEST_F(VJPTest, Trilu) {
  check(unary("trilu", t("3x4"), "{diagonal = 1 : i64, upper}"));
  check(unary("trilu", t("2x3x3"), "{diagonal = -1 : i64}"));
}

//===--- shape and indexing -----------------------------------------------===//

TEST_F(VJPTest, ReshapeTransposeSqueeze) {
  check(unaryArrow("reshape", t("2x3x4"), t("6x4")));
  check(unaryFn("transpose", t("2x3x4"), t("4x2x3"), "{perm = array<i64: 2, 0, 1>}"));
  check(unaryFn("squeeze", t("2x1x3"), t("2x3"), "{axes = array<i64: 1>}"));
  check(unaryFn("unsqueeze", t("2x3"), t("1x2x1x3"), "{axes = array<i64: 0, 2>}"));
}

TEST_F(VJPTest, Expand) {
  check(unaryArrow("expand", t("3x1"), t("2x3x4")));
  Options o;
  o.symbols = {{"n", 2}};
  check(unaryArrow("expand", t("1x3"), kSymN), o);
}

TEST_F(VJPTest, Slice) {
  check(unaryArrow("slice", t("4x5"), t("2x5"),
                   "{starts = #kiln.dims<[1, 0]>, steps = array<i64: 1, 1>}"));
  check(unaryArrow("slice", t("4x5"), t("2x2"),
                   "{starts = #kiln.dims<[0, 3]>, steps = array<i64: 1, 1>}"));
  // A step over a single element is no stride.
  check(unaryArrow("slice", t("4x5"), t("1x3"),
                   "{starts = #kiln.dims<[2, 1]>, steps = array<i64: 2, 1>}"));
  Options o;
  o.symbols = {{"n", 4}};
  check(unaryArrow("slice", "tensor<?x5xf64, #kiln.dims<[n]>>",
                   "tensor<?x3xf64, #kiln.dims<[n - 2]>>",
                   "{starts = #kiln.dims<[1, 1]>, steps = array<i64: 1, 1>}"),
        o);
}

TEST_F(VJPTest, StridedSlice) {
  check(unaryArrow("slice", t("4x5"), t("2x5"),
                   "{starts = #kiln.dims<[0, 0]>, steps = array<i64: 2, 1>}"));
  // Rows 1, 3 and columns 4, 1 (a negative step walks backwards).
  check(unaryArrow("slice", t("4x5"), t("2x2"),
                   "{starts = #kiln.dims<[1, 4]>, steps = array<i64: 2, -3>}"));
}

TEST_F(VJPTest, Pad) {
  check(unaryFn("pad", t("2x3"), t("5x4"), "{pads = array<i64: 1, 0, 2, 1>, value = 1.5 : f64}"));
}

TEST_F(VJPTest, Concat) {
  const char *ir = R"(func.func @f(%a: tensor<2x3xf64>, %b: tensor<2x1xf64>,
                        %c: tensor<2x2xf64>, %r: tensor<2x6xf64>) -> tensor<2x6xf64> {
      %z = kiln.concat %a, %b, %c {axis = 1 : i64} : (tensor<2x3xf64>,
          tensor<2x1xf64>, tensor<2x2xf64>) -> tensor<2x6xf64>
      return %z : tensor<2x6xf64>
    })";
  check(ir);
  Options o;
  o.want = {false, true, true};
  check(ir, o);
  o = Options();
  o.symbols = {{"n", 2}, {"m", 3}};
  check(R"(func.func @f(%a: tensor<?x3xf64, #kiln.dims<[n]>>,
                        %b: tensor<?x3xf64, #kiln.dims<[m]>>,
                        %r: tensor<?x3xf64, #kiln.dims<[m + n]>>)
                        -> tensor<?x3xf64, #kiln.dims<[m + n]>> {
      %z = kiln.concat %a, %b {axis = 0 : i64} : (tensor<?x3xf64, #kiln.dims<[n]>>,
          tensor<?x3xf64, #kiln.dims<[m]>>) -> tensor<?x3xf64, #kiln.dims<[m + n]>>
      return %z : tensor<?x3xf64, #kiln.dims<[m + n]>>
    })",
        o);
}

TEST_F(VJPTest, Split) {
  const char *ir = R"(func.func @f(%x: tensor<5x3xf64>, %r0: tensor<2x3xf64>,
                        %r1: tensor<3x3xf64>) -> (tensor<2x3xf64>, tensor<3x3xf64>) {
      %z:2 = kiln.split %x {axis = 0 : i64} : (tensor<5x3xf64>)
          -> (tensor<2x3xf64>, tensor<3x3xf64>)
      return %z#0, %z#1 : tensor<2x3xf64>, tensor<3x3xf64>
    })";
  check(ir);
  Options o;
  o.dropGrad = {true, false};
  check(ir, o);
}

TEST_F(VJPTest, Gather) {
  check(R"(func.func @f(%x: tensor<5x3xf64>, %r: tensor<4x3xf64>) -> tensor<4x3xf64> {
      %i = kiln.constant dense<[0, 3, 3, -1]> : tensor<4xi64>
      %z = kiln.gather %x, %i {axis = 0 : i64} : (tensor<5x3xf64>, tensor<4xi64>)
          -> tensor<4x3xf64>
      return %z : tensor<4x3xf64>
    })");
  check(R"(func.func @f(%x: tensor<2x3xf64>, %r: tensor<2x2x2xf64>)
                        -> tensor<2x2x2xf64> {
      %i = kiln.constant dense<[[2, 0], [1, 1]]> : tensor<2x2xi64>
      %z = kiln.gather %x, %i {axis = 1 : i64} : (tensor<2x3xf64>, tensor<2x2xi64>)
          -> tensor<2x2x2xf64>
      return %z : tensor<2x2x2xf64>
    })");
}

TEST_F(VJPTest, ScatterAdd) {
  check(R"(func.func @f(%d: tensor<5x3xf64>, %u: tensor<3x3xf64>,
                        %r: tensor<5x3xf64>) -> tensor<5x3xf64> {
      %i = kiln.constant dense<[1, 1, 4]> : tensor<3xi64>
      %z = kiln.scatter_add %d, %i, %u {axis = 0 : i64} : (tensor<5x3xf64>,
          tensor<3xi64>, tensor<3x3xf64>) -> tensor<5x3xf64>
      return %z : tensor<5x3xf64>
    })");
}

TEST_F(VJPTest, GatherElementsHasNoDataGradient) {
  std::string ir = R"(func.func @f(%x: tensor<2x3xf64>, %r: tensor<2x2xf64>)
                        -> tensor<2x2xf64> {
      %i = kiln.constant dense<[[2, 0], [1, 1]]> : tensor<2x2xi64>
      %z = kiln.gather_elements %x, %i {axis = 1 : i64} : (tensor<2x3xf64>,
          tensor<2x2xi64>) -> tensor<2x2xf64>
      return %z : tensor<2x2xf64>
    })";
  SmallVector<Value> g = gradients(ir, {false, false});
  ASSERT_EQ(g.size(), 2u);
  EXPECT_FALSE(g[0]);
  EXPECT_FALSE(g[1]);
  std::string error;
  g = gradients(ir, {true, false}, &error);
  EXPECT_TRUE(g.empty());
  EXPECT_NE(error.find("has no gradient for its data operand yet"), std::string::npos) << error;
}

} // namespace
