//===- MemoryPlanTest.cpp - Min-cut and memory planner properties ---------===//
//
// The max-flow value against brute-force minimum cuts of small random
// networks, and the planner's arena against its own invariants: buffers
// live at the same time never overlap, and the arena holds the live peak.
//
//===----------------------------------------------------------------------===//

#include "kiln/Analysis/MemoryPlan.h"
#include "kiln/Analysis/MinCut.h"
#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"

#include <gtest/gtest.h>

#include <random>

using namespace kiln;

namespace {

TEST(MinCutTest, TextbookNetwork) {
  // CLRS figure 26.1: maximum flow 23.
  FlowNetwork net;
  for (int i = 0; i < 6; ++i)
    net.addNode();
  net.addEdge(0, 1, 16);
  net.addEdge(0, 2, 13);
  net.addEdge(2, 1, 4);
  net.addEdge(1, 3, 12);
  net.addEdge(3, 2, 9);
  net.addEdge(2, 4, 14);
  net.addEdge(4, 3, 7);
  net.addEdge(3, 5, 20);
  net.addEdge(4, 5, 4);
  EXPECT_EQ(net.maxFlow(0, 5), 23);
  std::vector<bool> side = net.sourceSide(0);
  EXPECT_TRUE(side[0]);
  EXPECT_FALSE(side[5]);
}

TEST(MinCutTest, InfiniteEdgesAreNeverCut) {
  FlowNetwork net;
  unsigned s = net.addNode(), a = net.addNode(), b = net.addNode(), t = net.addNode();
  net.addEdge(s, a, FlowNetwork::kInfinite);
  unsigned ab = net.addEdge(a, b, 5);
  net.addEdge(b, t, FlowNetwork::kInfinite);
  EXPECT_EQ(net.maxFlow(s, t), 5);
  std::vector<bool> side = net.sourceSide(s);
  EXPECT_TRUE(net.isCut(ab, side));
  // Without a finite edge on the way there is no finite cut.
  FlowNetwork open;
  unsigned s2 = open.addNode(), t2 = open.addNode();
  open.addEdge(s2, t2, FlowNetwork::kInfinite);
  EXPECT_EQ(open.maxFlow(s2, t2), FlowNetwork::kInfinite);
}

/// Max-flow equals the cheapest of all 2^(n-2) s-t cuts, and the residual
/// source side is one of the cheapest.
TEST(MinCutTest, MatchesBruteForceOnRandomNetworks) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    unsigned n = 2 + rng() % 7;
    struct E {
      unsigned from, to;
      int64_t capacity;
    };
    std::vector<E> list;
    FlowNetwork net;
    for (unsigned i = 0; i < n; ++i)
      net.addNode();
    unsigned m = rng() % (n * n + 1);
    for (unsigned k = 0; k < m; ++k) {
      E e{static_cast<unsigned>(rng() % n), static_cast<unsigned>(rng() % n),
          static_cast<int64_t>(rng() % 20)};
      if (e.from == e.to)
        continue;
      list.push_back(e);
      net.addEdge(e.from, e.to, e.capacity);
    }
    unsigned s = 0, t = n - 1;
    int64_t best = INT64_MAX;
    for (unsigned mask = 0; mask < (1u << n); ++mask) {
      if (!(mask & (1u << s)) || (mask & (1u << t)))
        continue;
      int64_t cost = 0;
      for (const E &e : list)
        if ((mask >> e.from & 1) && !(mask >> e.to & 1))
          cost += e.capacity;
      best = std::min(best, cost);
    }
    ASSERT_EQ(net.maxFlow(s, t), best) << "trial " << trial;
    std::vector<bool> side = net.sourceSide(s);
    int64_t cut = 0;
    for (const E &e : list)
      if (side[e.from] && !side[e.to])
        cut += e.capacity;
    EXPECT_EQ(cut, best) << "trial " << trial;
    std::vector<bool> sinkSide = net.reachesSink(t);
    int64_t lateCut = 0;
    for (const E &e : list)
      if (!sinkSide[e.from] && sinkSide[e.to])
        lateCut += e.capacity;
    EXPECT_EQ(lateCut, best) << "trial " << trial;
  }
}

class MemoryPlanTest : public ::testing::Test {
protected:
  MemoryPlanTest() { context.loadDialect<GraphDialect, mlir::func::FuncDialect>(); }
  mlir::func::FuncOp parse(llvm::StringRef text) {
    module = mlir::parseSourceString<mlir::ModuleOp>(text, &context);
    EXPECT_TRUE(module);
    return llvm::cast<mlir::func::FuncOp>(module->getBody()->front());
  }
  /// No two arena buffers live at the same point share a byte.
  static void expectNoOverlap(const MemoryPlan &plan) {
    for (size_t i = 0; i < plan.buffers.size(); ++i) {
      const PlannedBuffer &a = plan.buffers[i];
      if (a.persistent)
        continue;
      EXPECT_GE(a.offset, 0);
      EXPECT_LE(a.offset + a.bytes, plan.arenaBytes);
      for (size_t j = i + 1; j < plan.buffers.size(); ++j) {
        const PlannedBuffer &b = plan.buffers[j];
        if (b.persistent || a.bytes == 0 || b.bytes == 0)
          continue;
        bool sameTime = a.start <= b.end && b.start <= a.end;
        bool sameBytes = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
        EXPECT_FALSE(sameTime && sameBytes) << "buffers " << i << " and " << j;
      }
    }
    EXPECT_GE(plan.arenaBytes, plan.livePeakBytes);
  }
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module;
};

TEST_F(MemoryPlanTest, ElementwiseChainRunsInPlace) {
  mlir::func::FuncOp func = parse(R"MLIR(
    func.func @f(%x: tensor<256xf32>) -> tensor<256xf32> {
      %a = kiln.exp %x : tensor<256xf32>
      %b = kiln.tanh %a : tensor<256xf32>
      %c = kiln.neg %b : tensor<256xf32>
      return %c : tensor<256xf32>
    })MLIR");
  MemoryPlan plan = planMemory(func, {});
  // %x is the caller's (not donated); %a gets a buffer, %b and %c reuse it.
  EXPECT_EQ(plan.inPlaceUpdates, 2u);
  EXPECT_EQ(plan.arenaBytes, 1024);
  EXPECT_EQ(plan.persistentBytes, 1024);
  EXPECT_EQ(plan.peakBytes(), 2048);
  expectNoOverlap(plan);
}

TEST_F(MemoryPlanTest, LiveOperandBlocksInPlace) {
  mlir::func::FuncOp func = parse(R"MLIR(
    func.func @f(%x: tensor<256xf32>) -> (tensor<256xf32>, tensor<256xf32>) {
      %a = kiln.exp %x : tensor<256xf32>
      %b = kiln.tanh %a : tensor<256xf32>
      return %a, %b : tensor<256xf32>, tensor<256xf32>
    })MLIR");
  MemoryPlan plan = planMemory(func, {});
  EXPECT_EQ(plan.inPlaceUpdates, 0u);
  EXPECT_EQ(plan.arenaBytes, 2048);
  expectNoOverlap(plan);
}

TEST_F(MemoryPlanTest, DeadBuffersAreReusedAndViewsShare) {
  // %a dies at %c, so %d (not elementwise: a matmul) can take its place;
  // the reshape is a view of %b and keeps it alive until %e.
  mlir::func::FuncOp func = parse(R"MLIR(
    func.func @f(%x: tensor<16x16xf32>) -> tensor<256xf32> {
      %a = kiln.exp %x : tensor<16x16xf32>
      %b = kiln.tanh %x : tensor<16x16xf32>
      %c = kiln.matmul %a, %b : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
      %r = kiln.reshape %b : tensor<16x16xf32> -> tensor<256xf32>
      %d = kiln.matmul %c, %c : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
      %f = kiln.reshape %d : tensor<16x16xf32> -> tensor<256xf32>
      %e = kiln.add %f, %r : (tensor<256xf32>, tensor<256xf32>) -> tensor<256xf32>
      return %e : tensor<256xf32>
    })MLIR");
  MemoryPlan plan = planMemory(func, {});
  unsigned views = 0;
  for (const PlannedTensor &t : plan.tensors)
    views += t.view;
  EXPECT_EQ(views, 2u);
  // At most three 1 KiB tensors are ever live together (%a %b %c, then
  // %b %c %d): the arena needs exactly that.
  EXPECT_EQ(plan.livePeakBytes, 3072);
  EXPECT_EQ(plan.arenaBytes, 3072);
  expectNoOverlap(plan);
}

TEST_F(MemoryPlanTest, SymbolicSizesAndOffsetsEvaluateToThePlan) {
  mlir::func::FuncOp func = parse(R"MLIR(
    func.func @f(%x: tensor<?x64xf32, #kiln.dims<[n]>>, %w: tensor<64x64xf32>)
        -> tensor<?x64xf32, #kiln.dims<[n]>> {
      %a = kiln.matmul %x, %w : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
      %b = kiln.matmul %a, %w : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
      %c = kiln.matmul %b, %w : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
      %d = kiln.add %a, %c : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<?x64xf32, #kiln.dims<[n]>>
      return %d : tensor<?x64xf32, #kiln.dims<[n]>>
    })MLIR");
  SymbolValues values;
  values["n"] = 100;
  MemoryPlan plan = planMemory(func, values);
  EXPECT_TRUE(plan.unboundSymbols.empty());
  expectNoOverlap(plan);
  auto lookup = [&](llvm::StringRef name) -> std::optional<int64_t> { return values.lookup(name); };
  for (const PlannedBuffer &b : plan.buffers) {
    ASSERT_TRUE(b.bytesExpr);
    EXPECT_EQ(evaluateDim(b.bytesExpr, lookup), b.bytes);
    if (!b.persistent) {
      ASSERT_TRUE(b.offsetExpr);
      EXPECT_EQ(evaluateDim(b.offsetExpr, lookup), b.offset);
    }
  }
  // %a, %b, %c live together (the add reads %a and %c): 3 * 100*64*4.
  EXPECT_EQ(plan.livePeakBytes, 3 * 25600);

  MemoryPlan unbound = planMemory(func, {});
  EXPECT_EQ(unbound.unboundSymbols, std::vector<std::string>{"n"});
}

TEST_F(MemoryPlanTest, JointGraphCategories) {
  // The loss depends on %h and %a; the "backward" ops read %a, so it is an
  // activation; the returned gradient is a gradient; the step's parameter
  // is donated and its update happens in place.
  mlir::func::FuncOp func = parse(R"MLIR(
    func.func @f(%x: tensor<8x8xf32>, %w: tensor<8x8xf32> {kiln.param = "w"})
        -> (tensor<f32>, tensor<8x8xf32> {kiln.param = "w"}) {
      %h = kiln.matmul %x, %w : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
      %a = kiln.tanh %h : tensor<8x8xf32>
      %l = kiln.reduce_sum %a {axes = array<i64: 0, 1>} : (tensor<8x8xf32>) -> tensor<f32>
      %s = kiln.mul %a, %a : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
      %g = kiln.matmul %x, %s {transpose_a} : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
      %n = kiln.sub %w, %g : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
      return %l, %n : tensor<f32>, tensor<8x8xf32>
    })MLIR");
  MemoryPlan plan = planMemory(func, {});
  auto categoryOf = [&](unsigned resultOfOp) {
    mlir::Operation *op = &*std::next(func.getBody().front().begin(), resultOfOp);
    for (const PlannedTensor &t : plan.tensors)
      if (t.value == op->getResult(0))
        return t.category;
    return MemoryCategory::Input;
  };
  EXPECT_EQ(categoryOf(0), MemoryCategory::Workspace);  // %h: forward only
  EXPECT_EQ(categoryOf(1), MemoryCategory::Activation); // %a
  EXPECT_EQ(categoryOf(5), MemoryCategory::Parameter);  // %n, in place over %w
  EXPECT_EQ(plan.savedActivations, 1u);
  EXPECT_EQ(plan.savedActivationBytes, 256);
  EXPECT_EQ(plan.persistentBytes, 512);
  expectNoOverlap(plan);
}

} // namespace
