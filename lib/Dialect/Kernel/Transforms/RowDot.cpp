//===- RowDot.cpp - Thin GEMMs of a loop kernel's rows, in the kernel -----===//
//
// A LoRA adapter's input-side gradient dT = s dy B reads all of dy
// ([tokens, out], 8192 x 8192 for gate/up on the bench 1b) to produce
// [tokens, r]: a GEMM bound by reading dy, which the kernel that computed
// dy had in registers a moment before. When a GEMM's A is an output of a
// vectorized loop kernel launched just before, with the kernel's rows as
// its rows and their whole width as K, and B is a small [K, n] matrix
// (or [n, K] read transposed; n <= 64), the kernel computes the product too: the launch gets B as an
// input and the GEMM's C as an output, the kernel body `kiln.matmul` ops
// of its yielded values in f32 (the interpreter's reference), and the codegen
// the tensor-core template of lib/Codegen/RowDotKernel.cpp. GEMMs that
// accumulate into the same C (beta = 1) after the first join it as terms
// of one sum, when they share its alpha. Passes.td has the IR.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Kernel/OpClassification.h"
#include "kiln/Dialect/Kernel/Passes.h"
#include "mlir/IR/SymbolTable.h"

namespace kiln::kernel {
#define GEN_PASS_DEF_ROWDOTPASS
#include "kiln/Dialect/Kernel/Passes.h.inc"
} // namespace kiln::kernel

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace {

constexpr int64_t kMaxN = 64; // sum of the products' widths, and of the Bs'

RankedTensorType tensorOf(Value buffer) { return cast<BufferType>(buffer.getType()).getTensor(); }

std::optional<int64_t> staticValue(Dim d) {
  return evaluateDim(d, [](StringRef) -> std::optional<int64_t> { return std::nullopt; });
}

/// The buffer a view reads, through every view.
Value rootOf(Value v) {
  while (auto view = v.getDefiningOp<ViewOp>())
    v = view.getSource();
  return v;
}

/// The buffers `op` writes (roots).
SmallVector<Value> writtenBy(Operation *op) {
  SmallVector<Value> out;
  if (auto launch = dyn_cast<LaunchOp>(op))
    for (Value v : launch.getOuts())
      out.push_back(rootOf(v));
  else if (auto gemm = dyn_cast<GemmOp>(op))
    out.push_back(rootOf(gemm.getC()));
  else if (auto copy = dyn_cast<CopyOp>(op))
    out.push_back(rootOf(copy.getTarget()));
  else if (auto fill = dyn_cast<FillOp>(op))
    out.push_back(rootOf(fill.getTarget()));
  else
    for (Value v : op->getOperands())
      if (isa<BufferType>(v.getType()))
        out.push_back(rootOf(v)); // unknown: assume written
  return out;
}

/// A GEMM of the shape the row-dot template computes: C[m, n] (+)= alpha
/// A[m, K] B[K, n], packed B, bf16 throughout, n a multiple of 8.
bool thinRowGemm(GemmOp gemm, Dim rows, int64_t K) {
  if (gemm.getTransA() || gemm.getBias() ||
      gemm.getEpilogue() != Epilogue::none || !gemm.getCompute().isF32())
    return false;
  std::optional<int64_t> batch = staticValue(gemm.getBatch()), k = staticValue(gemm.getK()),
                         n = staticValue(gemm.getN());
  if (batch != 1 || k != K || !n || *n % 8 || *n > kMaxN || gemm.getM() != rows)
    return false;
  RankedTensorType a = tensorOf(gemm.getA()), b = tensorOf(gemm.getB()), c = tensorOf(gemm.getC());
  if (!a.getElementType().isBF16() || !b.getElementType().isBF16() ||
      !c.getElementType().isBF16())
    return false;
  // B packed: [K, n], or [n, K] with trans_b (the forward's x A^T).
  bool t = gemm.getTransB();
  if (b.getRank() != 2 || b.getShape() != (t ? ArrayRef<int64_t>{*n, K} : ArrayRef<int64_t>{K, *n}) ||
      c.getShape().back() != *n)
    return false;
  if (DimsAttr lds = gemm.getLdsAttr()) {
    if (lds.getDims().size() != 3 || staticValue(lds.getDims()[1]) != (t ? K : *n))
      return false;
  }
  // Alpha as an f32 constant of the kernel body (cuBLASLt's is a float too).
  APFloat alpha(gemm.getAlpha() ? gemm.getAlpha()->convertToDouble() : 1.0);
  bool lost = false;
  alpha.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven, &lost);
  return !lost;
}

/// The row stride C is written at (0: packed).
int64_t outputStride(GemmOp gemm) {
  int64_t n = *staticValue(gemm.getN());
  DimsAttr lds = gemm.getLdsAttr();
  if (!lds)
    return 0;
  std::optional<int64_t> ldc = staticValue(lds.getDims()[2]);
  return ldc && *ldc != n ? *ldc : 0;
}

struct Group {
  Value c;
  double alpha;
  SmallVector<std::pair<GemmOp, unsigned>> products; // and the output each reads
  bool open = true;
};

/// A B written after the launch by launches that depend on nothing the
/// launch or the ops after it write (the stacked adapter Bs of q/k/v's
/// dT): its alloc and those launches move before the launch.
struct HoistedB {
  SmallVector<Operation *> writers;
  bool spoiled = false;
};

struct RowDot {
  ModuleOp module;
  SymbolTable symbols;
  int64_t rewritten = 0, gemms = 0, minK = kRowDotStep, maxInputs = 0;
  bool prefetch = false;

  explicit RowDot(ModuleOp m) : module(m), symbols(m) {}

  /// The launch's candidate kernel: vectorized (16-byte chunks of bf16),
  /// one segment, every output [rows, K] with K a multiple of 256.
  KernelOp candidate(LaunchOp launch, Dim &rows, int64_t &K) {
    auto kernel = symbols.lookup<KernelOp>(launch.getKernel());
    if (!kernel || kernel.getKind() != FusionKind::loop || isRowDotKernel(kernel) ||
        launch.getAttention())
      return nullptr;
    Block &body = kernel.getBody().front();
    if (loopVectorWidth(body) != 8 || kernel->hasAttr("kiln.in_row_strides"))
      return nullptr;
    Value first = body.getTerminator()->getOperand(0);
    auto type = cast<RankedTensorType>(first.getType());
    if (type.getRank() < 2 || type.isDynamicDim(type.getRank() - 1))
      return nullptr;
    K = type.getShape().back();
    if (K % kRowDotStep || K < minK)
      return nullptr;
    for (Type t : body.getTerminator()->getOperandTypes()) {
      auto out = cast<RankedTensorType>(t);
      if (out.getShape() != type.getShape() || getDims(out) != getDims(type) ||
          !out.getElementType().isBF16())
        return nullptr;
    }
    if (maxInputs > 0 && rowInputs(kernel) > maxInputs)
      return nullptr;
    DimList dims = getDims(type);
    rows = dimProduct(ArrayRef<Dim>(dims).drop_back(), kernel.getContext());
    return kernel;
  }

  /// The GEMMs after `launch` in its block that read its outputs as A.
  llvm::DenseMap<Value, HoistedB> hoisted;

  SmallVector<Group> groupsAfter(LaunchOp launch, Dim rows, int64_t K) {
    hoisted.clear();
    SmallVector<Group> groups;
    llvm::DenseSet<Value> written, touched;
    llvm::DenseMap<Value, unsigned> outIndex;
    for (auto [i, v] : llvm::enumerate(launch.getOuts()))
      outIndex[v] = i;
    int64_t widths = 0;
    auto groupOf = [&](Value c) -> Group * {
      for (Group &g : groups)
        if (rootOf(g.c) == rootOf(c))
          return &g;
      return nullptr;
    };
    llvm::DenseSet<Value> outRoots;
    for (Value v : launch.getOuts())
      outRoots.insert(rootOf(v));
    // B readable at the launch: written before it, or by writers that can
    // move before it.
    auto bReady = [&](Value b) {
      Value root = rootOf(b);
      if (definedBefore(b, launch))
        return !written.contains(root);
      auto it = hoisted.find(root);
      return it != hoisted.end() && !it->second.spoiled && !it->second.writers.empty() &&
             isa_and_nonnull<AllocOp>(root.getDefiningOp()) && b == root;
    };
    for (Operation *op = launch->getNextNode(); op; op = op->getNextNode()) {
      auto gemm = dyn_cast<GemmOp>(op);
      if (gemm && outIndex.count(gemm.getA()) && thinRowGemm(gemm, rows, K) &&
          !written.contains(rootOf(gemm.getA())) && bReady(gemm.getB()) &&
          !readBothWays(groups, gemm)) {
        double alpha = gemm.getAlpha() ? gemm.getAlpha()->convertToDouble() : 1.0;
        Group *g = groupOf(gemm.getC());
        if (!gemm.getAccumulate() && !g && !touched.contains(rootOf(gemm.getC())) &&
            movableBefore(gemm.getC(), launch) &&
            widths + *staticValue(gemm.getN()) <= kMaxN) {
          widths += *staticValue(gemm.getN());
          groups.push_back({gemm.getC(), alpha, {{gemm, outIndex[gemm.getA()]}}});
          continue;
        }
        if (gemm.getAccumulate() && g && g->open && g->c == gemm.getC() && g->alpha == alpha) {
          g->products.push_back({gemm, outIndex[gemm.getA()]});
          continue;
        }
      }
      // Views and allocs read and write nothing.
      if (isa<ViewOp, AllocOp>(op))
        continue;
      // A launch that fills a fresh buffer from what was there before the
      // launch: a candidate B writer. Anything else touching a buffer
      // allocated after the launch spoils it as a B.
      auto writer = dyn_cast<LaunchOp>(op);
      Value filled = writer && writer.getOuts().size() == 1 ? writer.getOuts()[0] : Value();
      bool hoistable = filled && isa_and_nonnull<AllocOp>(filled.getDefiningOp()) &&
                       !definedBefore(filled, launch) &&
                       llvm::all_of(writer.getIns(), [&](Value in) {
                         return definedBefore(in, launch) && !written.contains(rootOf(in)) &&
                                !outRoots.contains(rootOf(in));
                       });
      if (hoistable)
        hoisted[filled].writers.push_back(op);
      for (Value v : op->getOperands())
        if (isa<BufferType>(v.getType()) && !(hoistable && v == filled))
          if (auto it = hoisted.find(rootOf(v)); it != hoisted.end())
            it->second.spoiled = true;
      // Anything else: what it reads or writes closes the groups it meets.
      for (Value v : op->getOperands())
        if (isa<BufferType>(v.getType())) {
          touched.insert(rootOf(v));
          if (Group *g = groupOf(v))
            g->open = false;
        }
      for (Value v : writtenBy(op))
        written.insert(v);
      if (op->hasTrait<OpTrait::IsTerminator>())
        break;
    }
    // The distinct Bs fit the shared-memory step.
    llvm::SetVector<Value> bs;
    for (Group &g : groups)
      for (auto [gemm, index] : g.products)
        bs.insert(gemm.getB());
    int64_t bWidths = 0;
    for (Value b : bs)
      bWidths += std::min(tensorOf(b).getShape()[0], tensorOf(b).getShape()[1]);
    if (bWidths > kMaxN)
      return {};
    return groups;
  }

  /// Whether `gemm` reads a B that a product already taken reads with the
  /// other transpose (the kernel stages each B in one layout).
  static bool readBothWays(ArrayRef<Group> groups, GemmOp gemm) {
    for (const Group &g : groups)
      for (auto [other, index] : g.products)
        if (other.getB() == gemm.getB() && other.getTransB() != gemm.getTransB())
          return true;
    return false;
  }

  static bool definedBefore(Value v, Operation *op) {
    if (isa<BlockArgument>(v))
      return cast<BlockArgument>(v).getOwner() == op->getBlock() ||
             cast<BlockArgument>(v).getOwner()->getParentOp()->isProperAncestor(op);
    Operation *def = v.getDefiningOp();
    return def->getBlock() == op->getBlock() ? def->isBeforeInBlock(op)
                                             : def->isProperAncestor(op) ||
                                                   def->getParentRegion()->isProperAncestor(
                                                       op->getParentRegion());
  }

  /// C and the views it is reached through can move before `launch`:
  /// defined before it already, or an alloc and views in its block.
  static bool movableBefore(Value c, Operation *launch) {
    for (Value v = c;;) {
      if (definedBefore(v, launch))
        return true;
      Operation *def = v.getDefiningOp();
      if (!def || def->getBlock() != launch->getBlock())
        return false;
      if (isa<AllocOp>(def))
        return true;
      auto view = dyn_cast<ViewOp>(def);
      if (!view)
        return false;
      v = view.getSource();
    }
  }

  static void moveBefore(Value c, Operation *launch) {
    SmallVector<Operation *> chain;
    for (Value v = c; !definedBefore(v, launch);) {
      Operation *def = v.getDefiningOp();
      chain.push_back(def);
      if (auto view = dyn_cast<ViewOp>(def))
        v = view.getSource();
      else
        break;
    }
    for (Operation *def : llvm::reverse(chain))
      def->moveBefore(launch);
  }

  /// 32 rows per block (two m-tiles per warp, B's slice read by twice the
  /// rows); 16 where three or more full-size inputs are loaded ahead for
  /// all rows of a thread, which would otherwise leave the registers for
  /// one block per SM (the SiLU gradient: 167 registers at 32 rows).
  static int64_t rowsPerBlock(KernelOp kernel) { return rowInputs(kernel) >= 3 ? 16 : 32; }

  /// The inputs read along the rows (the rows' leading dims): each is
  /// loaded ahead for all rows of a thread, so they set the registers (the
  /// SiLU gradient reads gate, up and the output's gradient: 3).
  static int64_t rowInputs(KernelOp kernel) {
    Block &body = kernel.getBody().front();
    auto out = cast<RankedTensorType>(body.getTerminator()->getOperand(0).getType());
    DimList outDims = getDims(out);
    return llvm::count_if(body.getArgumentTypes(), [&](Type t) {
      auto in = cast<RankedTensorType>(t);
      DimList inDims = getDims(in);
      return in.getRank() == out.getRank() &&
             llvm::equal(ArrayRef<Dim>(inDims).drop_back(), ArrayRef<Dim>(outDims).drop_back());
    });
  }

  /// The kernel with its products: B inputs after the old ones, one output
  /// per group after the old outputs.
  KernelOp rowDotKernel(KernelOp old, ArrayRef<Group> groups, ArrayRef<Value> bs) {
    OpBuilder top(old);
    top.setInsertionPointAfter(old);
    auto kernel = cast<KernelOp>(top.clone(*old));
    kernel.setSymName((old.getSymName() + "_dot").str());
    symbols.insert(kernel); // renames it when taken
    kernel->setAttr("kiln.row_dot", IntegerAttr::get(IntegerType::get(kernel.getContext(), 64),
                                                     rowsPerBlock(old)));
    if (prefetch)
      kernel->setAttr("kiln.row_dot_prefetch", UnitAttr::get(kernel.getContext()));
    Block &body = kernel.getBody().front();
    Operation *yield = body.getTerminator();
    SmallVector<Value> results(yield->getOperands());
    SmallVector<Value> bArgs;
    for (Value b : bs)
      bArgs.push_back(body.addArgument(tensorOf(b), kernel.getLoc()));
    OpBuilder b(yield);
    Location loc = kernel.getLoc();
    SmallVector<int64_t> strides;
    if (auto s = kernel->getAttrOfType<DenseI64ArrayAttr>("kiln.out_row_strides"))
      strides.assign(s.asArrayRef().begin(), s.asArrayRef().end());
    strides.resize(results.size(), 0);
    // In f32 until the one rounding to C's type: what the GEMM (fp32
    // accumulators, alpha on the sum) and the kernel compute.
    Type f32 = b.getF32Type();
    auto widened = [&](Value v) {
      auto t = cast<RankedTensorType>(v.getType());
      return b.create<CastOp>(loc, RankedTensorType::get(t.getShape(), f32, t.getEncoding()), v)
          .getResult();
    };
    for (const Group &g : groups) {
      Value sum;
      for (auto [gemm, index] : g.products) {
        Value bArg = bArgs[llvm::find(bs, gemm.getB()) - bs.begin()];
        Value product = b.create<MatmulOp>(loc, widened(results[index]), widened(bArg), false,
                                           gemm.getTransB());
        sum = sum ? b.create<AddOp>(loc, sum, product).getResult() : product;
      }
      if (g.alpha != 1.0) {
        auto scalar = RankedTensorType::get({}, f32);
        Value alpha = b.create<kiln::ConstantOp>(
            loc, DenseElementsAttr::get(scalar, b.getFloatAttr(f32, g.alpha)));
        sum = b.create<MulOp>(loc, sum, alpha);
      }
      results.push_back(b.create<CastOp>(loc, tensorOf(g.c), sum));
      strides.push_back(outputStride(g.products.front().first));
    }
    yield->setOperands(results);
    if (llvm::any_of(strides, [](int64_t s) { return s != 0; }))
      kernel->setAttr("kiln.out_row_strides", DenseI64ArrayAttr::get(kernel.getContext(), strides));
    return kernel;
  }

  void rewrite(LaunchOp launch, KernelOp old, ArrayRef<Group> groups) {
    llvm::SetVector<Value> bs;
    for (const Group &g : groups)
      for (auto [gemm, index] : g.products)
        bs.insert(gemm.getB());
    KernelOp kernel = rowDotKernel(old, groups, bs.getArrayRef());
    SmallVector<Value> ins(launch.getIns()), outs(launch.getOuts());
    ins.append(bs.begin(), bs.end());
    for (const Group &g : groups) {
      moveBefore(g.c, launch);
      outs.push_back(g.c);
    }
    for (Value b : bs)
      if (!definedBefore(b, launch)) {
        b.getDefiningOp()->moveBefore(launch);
        for (Operation *w : hoisted.lookup(b).writers)
          w->moveBefore(launch);
      }
    OpBuilder b(launch);
    GemmOp first = groups.front().products.front().first;
    b.create<LaunchOp>(launch.getLoc(), kernel.getSymName(), ins, outs, first.getMAttr(),
                       rowDotRowsPerBlock(kernel), kRowDotThreads,
                       SymExprAttr(dimConst(b.getContext(), 0)));
    for (const Group &g : groups)
      for (auto [gemm, index] : g.products) {
        gemm->erase();
        ++gemms;
      }
    launch->erase();
    ++rewritten;
  }

  void run() {
    SmallVector<LaunchOp> launches;
    module.walk([&](LaunchOp l) { launches.push_back(l); });
    llvm::SetVector<Operation *> oldKernels;
    for (LaunchOp launch : launches) {
      Dim rows;
      int64_t K = 0;
      KernelOp kernel = candidate(launch, rows, K);
      if (!kernel)
        continue;
      SmallVector<Group> groups = groupsAfter(launch, rows, K);
      if (groups.empty())
        continue;
      oldKernels.insert(kernel);
      rewrite(launch, kernel, groups);
    }
    for (Operation *k : oldKernels)
      if (SymbolTable::symbolKnownUseEmpty(k, module))
        symbols.erase(k);
  }
};

} // namespace

namespace kiln::kernel {
namespace {
struct RowDotPass : impl::RowDotPassBase<RowDotPass> {
  using RowDotPassBase::RowDotPassBase;
  void runOnOperation() override {
    RowDot rd(getOperation());
    rd.minK = minK;
    rd.maxInputs = maxInputs;
    rd.prefetch = prefetch;
    rd.run();
    numKernels = rd.rewritten;
    numGemms = rd.gemms;
  }
};
} // namespace
} // namespace kiln::kernel
