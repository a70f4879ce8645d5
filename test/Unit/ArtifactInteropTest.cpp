//===- ArtifactInteropTest.cpp - Compiler and runtime agree on artifacts --===//
//
// The artifact library is compiled into both the compiler and the runtime.
// These tests pin the contract between them: size expressions as the
// compiler prints them (#kiln.expr) parse in the runtime and evaluate to the
// compiler's values, the guards --kiln-shape-guards records reach the
// runtime's checker intact, an artifact written here reads back intact, and
// shape buckets become step programs of their own listed in meta.

#include "kiln/ArtifactEmit/LaunchVariants.h"
#include "kiln/ArtifactEmit/Sections.h"
#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "kiln/Pipelines/Pipelines.h"
#include "kiln/artifact/Artifact.h"
#include "kiln/artifact/Guards.h"
#include "kiln/artifact/Json.h"
#include "kiln/artifact/StepProgram.h"
#include "mlir/AsmParser/AsmParser.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
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
    auto dim = llvm::dyn_cast_or_null<SymExprAttr>(
        mlir::parseAttribute((std::string("#kiln.expr<") + text + ">").c_str(), &context));
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
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::parseSourceString<mlir::ModuleOp>(ir, &context);
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
  EXPECT_EQ(artifact::checkGuards(*guards, {{"b", 4}, {"seq", 1020}}).getError(),
            "seq=1020 violates seq % 8 == 0 (required by --dynamic "
            "seq=16..4096:8)");
  EXPECT_EQ(artifact::checkGuards(*guards, {{"b", 16384}, {"seq", 4096}}).getError(),
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

namespace {
// A lowered step encodes as the "step" section and the runtime's decoder
// reads back every buffer, binding and op with the compiler's sizes.
TEST(ArtifactInterop, StepProgramDecodesInTheRuntime) {
  mlir::MLIRContext context;
  context.loadDialect<GraphDialect, kernel::KernelDialect, mlir::func::FuncDialect>();
  const char *source = R"mlir(
func.func @main(%x: tensor<?x64xf32, #kiln.dims<[n]>> {kiln.name = "x"},
                %w: tensor<64x32xf32> {kiln.param = "w"},
                %lr: tensor<f32> {kiln.lr}) -> (tensor<?x32xf32, #kiln.dims<[n]>> {kiln.name = "loss"}, tensor<64xf32> {kiln.param = "w2"})
    attributes {kiln.default_lr = 0.5 : f64} {
  %g = kiln.parameter "norm.weight" : tensor<64xf32>
  %n = kiln.rms_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %y = kiln.matmul %n, %w : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %s = kiln.silu %y : tensor<?x32xf32, #kiln.dims<[n]>>
  %dx, %dw = kiln.rms_norm_grad %x, %g, %n {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>, tensor<?x64xf32, #kiln.dims<[n]>>) -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>)
  return %s, %dw : tensor<?x32xf32, #kiln.dims<[n]>>, tensor<64xf32>
}
)mlir";
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  ASSERT_TRUE(module);
  mlir::PassManager pm(&context);
  buildKernelPipeline(pm, PipelineOptions());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  llvm::StringMap<std::string> modules;
  for (auto k : module->getOps<kernel::KernelOp>())
    modules[k.getSymName()] = "module0";
  auto main = module->lookupSymbol<mlir::func::FuncOp>("main");
  mlir::FailureOr<std::string> json = emitStepProgramSection(main, modules);
  ASSERT_TRUE(mlir::succeeded(json));
  auto program = artifact::StepProgram::decode(*json, "step");
  ASSERT_TRUE(program) << program.getError();
  ASSERT_TRUE(program->defaultLr);
  EXPECT_EQ(*program->defaultLr, 0.5);
  ASSERT_EQ(program->args.size(), 3u);
  EXPECT_EQ(program->args[0].role, "input");
  EXPECT_EQ(program->args[0].name, "x");
  EXPECT_EQ(program->args[1].role, "param");
  EXPECT_EQ(program->args[2].role, "lr");
  ASSERT_EQ(program->results.size(), 2u);
  EXPECT_EQ(program->results[0].role, "loss");
  EXPECT_EQ(program->results[1].role, "param");
  EXPECT_EQ(program->results[1].name, "w2");
  unsigned launches = 0, gemms = 0, weights = 0, fills = 0, withVariants = 0, rowWithVariants = 0;
  for (const artifact::ProgramOp &op : program->ops) {
    using Kind = artifact::ProgramOp::Kind;
    if (op.kind == Kind::Launch) {
      ++launches;
      EXPECT_EQ(op.module, "module0");
      EXPECT_TRUE(modules.count(op.name)) << op.name;
      // Launch variants: the loop kernels' (silu) and the row kernels'
      // (the norms: rows per block; the scalar template also threads per
      // row), in the compiler's order, never the default's shape.
      auto kernelOp = module->lookupSymbol<kernel::KernelOp>(op.name);
      ASSERT_TRUE(kernelOp) << op.name;
      std::vector<LaunchVariant> expected = launchVariants(kernelOp, op.per, op.block);
      ASSERT_EQ(op.variants.size(), expected.size()) << op.name;
      for (size_t i = 0; i < expected.size(); ++i) {
        EXPECT_EQ(op.variants[i].per, expected[i].itemsPerBlock);
        EXPECT_EQ(op.variants[i].block, expected[i].block);
        EXPECT_FALSE(op.variants[i].per == op.per && op.variants[i].block == op.block);
      }
      if (kernelOp.getKind() == kernel::FusionKind::loop) {
        EXPECT_EQ(op.variants.size(), 5u) << op.name;
        ++withVariants;
      } else if (kernelOp.getKind() == kernel::FusionKind::row) {
        // 64 f32 columns: 16 vectors of 4, a warp per row, 8 rows a block;
        // threads per row are baked in, so rows per block alone vary.
        kernel::RowLayout layout = kernel::rowLayout(kernelOp.getBody().front());
        EXPECT_EQ(layout.width, 4) << op.name;
        EXPECT_EQ(op.per, 8) << op.name;
        ASSERT_EQ(op.variants.size(), 3u) << op.name;
        EXPECT_EQ(op.variants[0].per, 16);
        EXPECT_EQ(op.variants[2].per, 64);
        for (const auto &v : op.variants)
          EXPECT_EQ(v.block, 256);
        ++rowWithVariants;
      } else {
        EXPECT_TRUE(op.variants.empty()) << op.name;
      }
      auto items = op.items->evaluate({{"n", 5}});
      ASSERT_TRUE(items) << items.getError();
      EXPECT_GT(*items, 0);
    } else if (op.kind == Kind::Gemm) {
      ++gemms;
      EXPECT_EQ(*op.m->evaluate({{"n", 5}}), 5);
      EXPECT_EQ(*op.n->evaluate({{"n", 5}}), 32);
      EXPECT_EQ(*op.k->evaluate({{"n", 5}}), 64);
      EXPECT_EQ(program->buffers[op.c].dtype, artifact::DType::F32);
    } else if (op.kind == Kind::Weight) {
      ++weights;
      EXPECT_EQ(op.name, "norm.weight");
    } else if (op.kind == Kind::Fill) {
      ++fills;
    }
  }
  EXPECT_GE(launches, 2u);
  EXPECT_GE(withVariants, 1u);
  EXPECT_GE(rowWithVariants, 1u);
  EXPECT_EQ(gemms, 1u);
  EXPECT_EQ(weights, 1u);
  EXPECT_EQ(fills, 1u); // The norm weight gradient accumulates atomically.
  // The input's buffer: [n, 64] f32.
  auto count = program->elementCount(program->args[0].buffer, {{"n", 3}});
  ASSERT_TRUE(count);
  EXPECT_EQ(*count, 3 * 64);

  // Damaged encodings fail with one line naming the part.
  auto bad = artifact::StepProgram::decode(
      R"({"format":"kiln-step-program","version":1,"buffers":[],"args":[{"role":"input","buffer":3}],"results":[],"ops":[]})",
      "step");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.getError(), "step: args entry 0: buffer id 3 out of range");
  auto badOp = artifact::StepProgram::decode(
      R"({"format":"kiln-step-program","version":1,"buffers":[{"dtype":"F32","shape":["n*"]}],"args":[],"results":[],"ops":[]})",
      "step");
  ASSERT_FALSE(badOp);
}
} // namespace

namespace {
// An in-place K-concatenation (docs/design/lora-k-concat.md) round trip:
// the compiler's views at an offset and row stride, GEMM leading
// dimensions and a kernel's row strides decode in the runtime as a version
// 3 program whose blocks lie inside their buffers and are touched only at
// their stride.
TEST(ArtifactInterop, ConcatInPlaceDecodesInTheRuntime) {
  mlir::MLIRContext context;
  context.loadDialect<GraphDialect, kernel::KernelDialect, mlir::func::FuncDialect>();
  const char *source = R"mlir(
func.func @main(%x: tensor<?x64xbf16, #kiln.dims<[n]>> {kiln.name = "x"},
                %a: tensor<8x64xbf16> {kiln.param = "a"},
                %w: tensor<72x32xbf16> {kiln.param = "w"}) -> (tensor<?x32xbf16, #kiln.dims<[n]>> {kiln.name = "loss"})
    attributes {kiln.lora_k_concat} {
  %h = kiln.silu %x : tensor<?x64xbf16, #kiln.dims<[n]>>
  %t = kiln.matmul %h, %a {transpose_b} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<8x64xbf16>) -> tensor<?x8xbf16, #kiln.dims<[n]>>
  %c = kiln.concat %h, %t {axis = 1 : i64} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x8xbf16, #kiln.dims<[n]>>) -> tensor<?x72xbf16, #kiln.dims<[n]>>
  %y = kiln.matmul %c, %w : (tensor<?x72xbf16, #kiln.dims<[n]>>, tensor<72x32xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  return %y : tensor<?x32xbf16, #kiln.dims<[n]>>
}
)mlir";
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  ASSERT_TRUE(module);
  mlir::PassManager pm(&context);
  buildKernelPipeline(pm, PipelineOptions());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  llvm::StringMap<std::string> modules;
  for (auto k : module->getOps<kernel::KernelOp>())
    modules[k.getSymName()] = "module0";
  auto main = module->lookupSymbol<mlir::func::FuncOp>("main");
  mlir::FailureOr<std::string> json = emitStepProgramSection(main, modules);
  ASSERT_TRUE(mlir::succeeded(json));
  auto program = artifact::StepProgram::decode(*json, "step");
  ASSERT_TRUE(program) << program.getError();
  artifact::SymbolBindings sizes{{"n", 5}};
  auto elements = artifact::reachableElements(*program, sizes);
  ASSERT_TRUE(elements) << elements.getError();
  artifact::Status views = artifact::checkStridedViews(*program, sizes, *elements);
  EXPECT_TRUE(views) << views.getError();
  using Kind = artifact::ProgramOp::Kind;
  unsigned blocks = 0, launches = 0, gemms = 0;
  int concat = -1;
  for (const artifact::ProgramOp &op : program->ops) {
    if (op.kind == Kind::View && op.rowStride) {
      ++blocks;
      EXPECT_EQ(*op.rowStride->evaluate(sizes), 72);
      int64_t offset = *op.offset->evaluate(sizes);
      EXPECT_TRUE(offset == 0 || offset == 64) << offset;
      EXPECT_TRUE(concat < 0 || concat == op.source);
      concat = op.source;
    } else if (op.kind == Kind::Launch) {
      ++launches; // silu, writing x's columns; nothing copies
      ASSERT_EQ(op.rowStrides.size(), op.args.size());
      EXPECT_EQ(op.rowStrides.back(), 72);
    } else if (op.kind == Kind::Gemm) {
      ++gemms;
      auto matrices = artifact::gemmMatrices(*program, op, sizes, *elements);
      ASSERT_TRUE(matrices) << matrices.getError();
      if (*op.k->evaluate(sizes) == 64) {
        // t = x A^T: x read at row stride 72, t written there.
        ASSERT_EQ(op.lds.size(), 3u);
        EXPECT_EQ((*matrices)[0].ld, 72);
        EXPECT_EQ((*matrices)[2].ld, 72);
        EXPECT_EQ((*matrices)[2].extent(), 4 * 72 + 8);
      } else {
        // [x | t] W: the concat's buffer, packed.
        EXPECT_EQ(op.a, concat);
        EXPECT_TRUE(op.lds.empty());
      }
    }
  }
  EXPECT_EQ(blocks, 2u);
  EXPECT_EQ(launches, 1u);
  EXPECT_EQ(gemms, 2u);
}
} // namespace

namespace {
// The compiler plans the lowered step with the runtime's planner: the
// memory_plan section it writes is the runtime's own plan at those sizes,
// and its chain still holds at others.
TEST(ArtifactInterop, MemoryPlanIsTheRuntimePlan) {
  mlir::MLIRContext context;
  context.loadDialect<GraphDialect, kernel::KernelDialect, mlir::func::FuncDialect>();
  const char *source = R"mlir(
func.func @main(%x: tensor<?x64xf32, #kiln.dims<[n]>> {kiln.name = "x"},
                %w: tensor<64x32xf32> {kiln.param = "w"}) -> (tensor<?x32xf32, #kiln.dims<[n]>> {kiln.name = "loss"}) {
  %y = kiln.matmul %x, %w : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %s = kiln.silu %y : tensor<?x32xf32, #kiln.dims<[n]>>
  %t = kiln.tanh %s : tensor<?x32xf32, #kiln.dims<[n]>>
  %z = kiln.matmul %t, %w {transpose_b} : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %u = kiln.matmul %z, %w : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  return %u : tensor<?x32xf32, #kiln.dims<[n]>>
}
)mlir";
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  ASSERT_TRUE(module);
  mlir::PassManager pm(&context);
  buildKernelPipeline(pm, PipelineOptions());
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  auto main = module->lookupSymbol<mlir::func::FuncOp>("main");
  auto plan = planLoweredStep(main, {{"n", 1000}});
  ASSERT_TRUE(mlir::succeeded(plan));
  EXPECT_EQ(plan->plannedAt.at("n"), 1000);
  EXPECT_EQ(plan->persistentBytes, 1000u * 64 * 4 + 64 * 32 * 4);
  EXPECT_EQ(plan->workspaceBytes, artifact::kGemmWorkspaceBytes);
  ASSERT_FALSE(plan->buffers.empty());
  EXPECT_EQ(plan->buffers[0].base, -1);

  // The runtime's plan of the same encoding, and the section read back.
  llvm::StringMap<std::string> modules;
  for (auto k : module->getOps<kernel::KernelOp>())
    modules[k.getSymName()] = "module0";
  auto program = artifact::StepProgram::decode(*emitStepProgramSection(main, modules), "step");
  ASSERT_TRUE(program) << program.getError();
  auto direct = program->planArena({{"n", 1000}}, artifact::kArenaAlignment);
  ASSERT_TRUE(direct);
  EXPECT_EQ(plan->arenaBytes, direct->size);
  auto section = artifact::decodeMemoryPlan(artifact::encodeMemoryPlan(*plan), "memory_plan");
  ASSERT_TRUE(section) << section.getError();
  for (int64_t n : {1000, 1, 37, 4096}) {
    auto chained = artifact::evaluateMemoryPlan(*section, *program, {{"n", n}});
    ASSERT_TRUE(chained) << chained.getError();
    EXPECT_TRUE(artifact::checkArenaPlan(*program, *chained)) << "n=" << n;
    if (n == 1000)
      EXPECT_EQ(chained->offsets, direct->offsets);
  }
  // An unbound symbol is a diagnostic, not a plan.
  mlir::ScopedDiagnosticHandler quiet(&context, [](mlir::Diagnostic &) { return mlir::success(); });
  EXPECT_TRUE(mlir::failed(planLoweredStep(main, {})));
}
} // namespace

namespace {
// --kiln-shape-buckets copies, lowered: each is a step program of its own
// ("step/<function>", sizes pinned) and meta "buckets" lists them in order.
TEST(ArtifactInterop, ShapeBucketSections) {
  mlir::MLIRContext context;
  context.loadDialect<GraphDialect, kernel::KernelDialect, mlir::func::FuncDialect>();
  const char *source = R"mlir(
func.func @main(%x: tensor<?x64xf32, #kiln.dims<[n]>> {kiln.name = "x"},
                %w: tensor<64x32xf32> {kiln.param = "w"}) -> (tensor<?x32xf32, #kiln.dims<[n]>> {kiln.name = "loss"}) {
  %y = kiln.matmul %x, %w : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %s = kiln.silu %y : tensor<?x32xf32, #kiln.dims<[n]>>
  return %s : tensor<?x32xf32, #kiln.dims<[n]>>
}
)mlir";
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  ASSERT_TRUE(module);
  mlir::PassManager buckets(&context);
  ShapeBucketsPassOptions options;
  options.buckets = "n=16,4";
  buckets.addPass(createShapeBucketsPass(options));
  ASSERT_TRUE(mlir::succeeded(buckets.run(*module)));
  auto main = module->lookupSymbol<mlir::func::FuncOp>("main");
  std::vector<std::pair<std::string, std::string>> sections = {
      {"meta", emitMetaSection(main, "m.onnx", {"sm_90"})}};
  mlir::PassManager lower(&context);
  buildKernelPipeline(lower, PipelineOptions());
  ASSERT_TRUE(mlir::succeeded(lower.run(*module)));
  llvm::StringMap<std::string> modules;
  for (auto k : module->getOps<kernel::KernelOp>())
    modules[k.getSymName()] = "module0";
  sections.push_back({"step", *emitStepProgramSection(main, modules)});
  sections.push_back({"init", "{}"});
  ASSERT_TRUE(mlir::succeeded(addBucketSections(main, modules, sections)));

  // Right after "step", in kiln.buckets order.
  ASSERT_EQ(sections.size(), 5u);
  EXPECT_EQ(sections[2].first, "step/main__n_16");
  EXPECT_EQ(sections[3].first, "step/main__n_4");
  EXPECT_EQ(sections[4].first, "init");
  auto meta = artifact::Json::parse(sections[0].second);
  ASSERT_TRUE(meta) << meta.getError();
  const artifact::Json *list = meta->get("buckets");
  ASSERT_TRUE(list && list->isArray());
  EXPECT_EQ(list->print(),
            R"([{"function":"main__n_16","section":"step/main__n_16","values":{"n":16}},)"
            R"({"function":"main__n_4","section":"step/main__n_4","values":{"n":4}}])");
  auto program = artifact::StepProgram::decode(sections[3].second, sections[3].first);
  ASSERT_TRUE(program) << program.getError();
  // Pinned: the input's buffer is [4, 64] whatever n is.
  auto count = program->elementCount(program->args[0].buffer, {});
  ASSERT_TRUE(count) << count.getError();
  EXPECT_EQ(*count, 4 * 64);

  // No kiln.buckets: nothing added. A bucket without kiln.bucket: a
  // diagnostic naming it.
  std::vector<std::pair<std::string, std::string>> plain = {{"meta", "{}"}};
  auto bucket = module->lookupSymbol<mlir::func::FuncOp>("main__n_4");
  ASSERT_TRUE(mlir::succeeded(addBucketSections(bucket, modules, plain)));
  EXPECT_EQ(plain.size(), 1u);
  bucket->removeAttr("kiln.bucket");
  std::string message;
  mlir::ScopedDiagnosticHandler capture(&context, [&](mlir::Diagnostic &diag) {
    message = diag.str();
    return mlir::success();
  });
  std::vector<std::pair<std::string, std::string>> again = {{"meta", R"({"symbols":["n"]})"}};
  EXPECT_TRUE(mlir::failed(addBucketSections(main, modules, again)));
  EXPECT_EQ(message, "shape bucket @main__n_4 has no kiln.bucket attribute "
                     "(its pinned symbol values)");
}
} // namespace

namespace {
// kiln-data-parallel's all-reduces, lowered and encoded by the compiler,
// decode in the runtime: every bucket is waited for, nothing touches an
// in-flight output, and the arena plan keeps the buckets' buffers apart
// while they are exchanged.
TEST(ArtifactInterop, DataParallelStepDecodesInTheRuntime) {
  mlir::MLIRContext context;
  context.loadDialect<GraphDialect, kernel::KernelDialect, mlir::func::FuncDialect>();
  const char *source = R"mlir(
func.func @main(%x: tensor<4x8xf32> {kiln.name = "x"}) -> (tensor<f32> {kiln.name = "loss"}) {
  %w1 = kiln.parameter "w1" trainable : tensor<8x16xf32>
  %b1 = kiln.parameter "b1" trainable : tensor<16xf32>
  %w2 = kiln.parameter "w2" trainable : tensor<16x4xf32>
  %h = kiln.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %hb = kiln.add %h, %b1 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %a = kiln.relu %hb : tensor<4x16xf32>
  %y = kiln.matmul %a, %w2 : (tensor<4x16xf32>, tensor<16x4xf32>) -> tensor<4x4xf32>
  %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
)mlir";
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(source, &context);
  ASSERT_TRUE(module);
  PipelineOptions options;
  options.dataParallel = 0.0004; // 419 bytes: {dw2, db1}, {dw1}, the loss
  options.optimizer = "sgd";
  mlir::PassManager pm(&context);
  buildTrainStepPipeline(pm, options);
  buildKernelPipeline(pm, options);
  ASSERT_TRUE(mlir::succeeded(pm.run(*module)));
  llvm::StringMap<std::string> modules;
  for (auto k : module->getOps<kernel::KernelOp>())
    modules[k.getSymName()] = "module0";
  auto main = module->lookupSymbol<mlir::func::FuncOp>("main");
  mlir::FailureOr<std::string> json = emitStepProgramSection(main, modules);
  ASSERT_TRUE(mlir::succeeded(json));
  auto program = artifact::StepProgram::decode(*json, "step");
  ASSERT_TRUE(program) << program.getError();
  using Kind = artifact::ProgramOp::Kind;
  std::vector<int64_t> started, waited;
  std::vector<size_t> sizes;
  bool lossLast = false;
  for (const artifact::ProgramOp &op : program->ops) {
    if (op.kind == Kind::AllReduce) {
      started.push_back(op.bucket);
      sizes.push_back(op.ins.size());
      lossLast = op.loss;
      for (size_t i = 0; i < op.ins.size(); ++i)
        EXPECT_EQ(op.ins[i], op.outs[i]) << "every gradient here is a GEMM or kernel output";
    } else if (op.kind == Kind::AllReduceWait) {
      waited.push_back(op.bucket);
    }
  }
  EXPECT_EQ(started, std::vector<int64_t>({0, 1, 2}));
  EXPECT_EQ(sizes, std::vector<size_t>({2, 1, 1}));
  EXPECT_TRUE(lossLast);
  EXPECT_EQ(waited, std::vector<int64_t>({0, 1, 2}));
  EXPECT_EQ(program->results[0].role, "loss");
  auto plan = program->planArena({}, 256);
  ASSERT_TRUE(plan) << plan.getError();
}
} // namespace
