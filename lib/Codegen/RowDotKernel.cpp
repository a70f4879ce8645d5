//===- RowDotKernel.cpp - Elementwise rows times small matrices -----------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A loop kernel of kiln-row-dot: its elementwise outputs are [rows, K] and
// some of them are also multiplied by small matrices B ([K, n], n <= 64)
// in the same pass, D = alpha * sum_j X_j B_j: the products a LoRA
// adapter's gradient makes of the SiLU gradient. The rows never travel
// again through memory for the GEMM that used to read them.
//
// 16 or 32 rows per block (kiln-row-dot's choice, `kiln.row_dot`); the
// block's 8 warps take 32-column slices of each 256-column step, B's part
// for the step in shared memory. Thread (g, t) of a warp (g = lane /
// 4, t = lane % 4) computes rows g + 8h at columns 8t..8t+7 of its slice as one
// vector chunk, as the vector loop does, and keeps the bf16 results as
// the A fragments of m16n8k16 products: the four registers of its chunk
// hold k = 2t, 2t+1, 2t+8, 2t+9 of two k-steps once K is permuted so
// that each thread's eight columns are contiguous (B's rows get the same
// permutation, through the addresses of the transposing ldmatrix that
// reads B's step from shared memory). The warps' partial sums are added
// in a fixed order at the end (deterministic), alpha applied once.
//
//===----------------------------------------------------------------------===//

#include "CudaPrinter.h"

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace kiln::codegen::detail {
namespace {

struct Term {
  unsigned x; // the elementwise output multiplied
  unsigned b; // the index of its matrix among the distinct B inputs
};
struct Dot {
  unsigned out;
  double alpha = 1;
  SmallVector<Term> terms;
  int64_t n = 0;
};

} // namespace

void Printer::rowDotKernel() {
  Block &block = plan.kernel.getBody().front();
  SmallVector<Dot> dots;
  llvm::SetVector<Value> bs, xs;
  SmallVector<bool> bTransposed; // B stored [n, K] (trans_b), per B
  llvm::DenseSet<unsigned> dotOutputs;
  auto outputOf = [&](Value v) -> int {
    for (auto [i, out] : llvm::enumerate(plan.outputs))
      if (out == v)
        return i;
    return -1;
  };
  // D = alpha * (X_1 B_1 + X_2 B_2 + ...), as kiln-row-dot builds it.
  std::function<bool(Value, Dot &)> terms = [&](Value v, Dot &d) {
    Operation *op = v.getDefiningOp();
    if (auto add = dyn_cast_or_null<AddOp>(op))
      return terms(add.getLhs(), d) && terms(add.getRhs(), d);
    if (auto mm = dyn_cast_or_null<MatmulOp>(op)) {
      // Its operands widened to f32 (kiln-row-dot's form).
      auto unwiden = [](Value v) {
        auto cast = v.getDefiningOp<CastOp>();
        return cast ? cast.getOperand() : v;
      };
      Value lhs = unwiden(mm.getLhs()), rhs = unwiden(mm.getRhs());
      int x = outputOf(lhs);
      if (x < 0 || !isa<BlockArgument>(rhs) || mm.getTransposeA() ||
          !elementOf(lhs).isBF16() || !elementOf(rhs).isBF16())
        return false;
      if (bs.insert(rhs))
        bTransposed.push_back(mm.getTransposeB());
      else if (bTransposed[llvm::find(bs, rhs) - bs.begin()] != mm.getTransposeB())
        return false;
      xs.insert(lhs);
      auto b = llvm::find(bs, rhs);
      d.terms.push_back({static_cast<unsigned>(x), static_cast<unsigned>(b - bs.begin())});
      return true;
    }
    return false;
  };
  // An output computed through a matmul is a product; the rest are the
  // elementwise outputs.
  std::function<bool(Value)> throughMatmul = [&](Value v) {
    Operation *op = v.getDefiningOp();
    if (isa_and_nonnull<MatmulOp>(op))
      return true;
    if (isa_and_nonnull<AddOp, MulOp, CastOp>(op))
      return llvm::any_of(op->getOperands(), throughMatmul);
    return false;
  };
  for (auto [i, out] : llvm::enumerate(plan.outputs)) {
    if (!throughMatmul(out))
      continue;
    Operation *op = out.getDefiningOp();
    Dot d;
    d.out = i;
    d.n = typeOf(out).getShape().back();
    Value sum = out;
    if (auto cast = dyn_cast<CastOp>(op)) { // the one rounding to the output's type
      sum = cast.getOperand();
      op = sum.getDefiningOp();
    }
    if (auto mul = dyn_cast_or_null<MulOp>(op)) {
      std::optional<double> s = scalarFactor(mul.getRhs());
      if (!s)
        return fail(out.getDefiningOp(), "row-dot output scaled by something but a scalar constant");
      d.alpha = *s;
      sum = mul.getLhs();
    }
    if (!terms(sum, d))
      return fail(out.getDefiningOp(),
                  "row-dot output is not a sum of kernel outputs times kernel inputs");
    dots.push_back(d);
    dotOutputs.insert(i);
  }
  if (dots.empty())
    return fail(plan.kernel, "row-dot kernel without products");
  Value x0 = plan.outputs[dots.front().terms.front().x];
  RankedTensorType xType = typeOf(x0);
  int64_t K = xType.getShape().back();
  DimList xDims = getDims(xType);
  Dim rows = dimProduct(ArrayRef<Dim>(xDims).drop_back(), plan.kernel.getContext());
  Dim segment = dimProduct(xDims, plan.kernel.getContext());
  int64_t totalN = 0, totalB = 0;
  for (Dot &d : dots)
    totalN += d.n;
  // The block stages each B's part for the step: a [K, n] B as 256 rows
  // of n; an [n, K] one (trans_b) as n rows of 256 columns at a pitch of
  // 264, so that a warp's 8-byte reads of 8 rows fall into distinct banks.
  // The step's barrier also keeps the block's warps on the same 256
  // columns of their rows (measured: warps left to drift apart read DRAM
  // in scattered 64-byte pieces, 20% slower).
  auto bWidth = [&](unsigned j) {
    return typeOf(bs[j]).getShape()[bTransposed[j] ? 0 : 1];
  };
  auto bElements = [&](unsigned j) { return bTransposed[j] ? bWidth(j) * 264 : 256 * bWidth(j); };
  for (unsigned j = 0; j < bs.size(); ++j)
    totalB += bElements(j);
  int64_t rowsPerBlock = rowDotRowsPerBlock(plan.kernel), mtiles = rowsPerBlock / 16;
  std::string R = std::to_string(rowsPerBlock), H = std::to_string(2 * mtiles),
              MT = std::to_string(mtiles);
  std::string k = std::to_string(K);
  auto bName = [&](unsigned j) { return "kiln_dot_b" + std::to_string(j); };
  auto xName = [&](unsigned x) { return "kiln_dot_x" + std::to_string(x); };
  auto accName = [&](unsigned d) { return "kiln_dot_acc" + std::to_string(d); };

  line("// " + R + " rows per block, 8 warps over 256-column steps (RowDotKernel.cpp)");
  line("const int64_t rows = " + dim(rows) + ";");
  line("const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;");
  int64_t smem = std::max<int64_t>(totalB * 2, rowsPerBlock * totalN * 4);
  line("__shared__ __align__(16) unsigned char kiln_dot_smem[" + std::to_string(smem) + "];");
  int64_t offset = 0;
  for (auto [j, b] : llvm::enumerate(bs)) {
    line("__nv_bfloat16 *" + bName(j) + " = reinterpret_cast<__nv_bfloat16 *>(kiln_dot_smem) + " +
         std::to_string(offset) + ";");
    offset += bElements(j);
  }
  line("float *kiln_dot_red = reinterpret_cast<float *>(kiln_dot_smem);");
  open("for (int64_t rb = blockIdx.x; rb * " + R + " < rows; rb += gridDim.x)");
  for (auto [d, dot] : llvm::enumerate(dots))
    line("float " + accName(d) + "[" + MT + "][" + std::to_string(dot.n / 8) + "][4] = {};");
  bool prefetch = rowDotPrefetches(plan.kernel);
  size_t beforeSteps = body.size();
  int stepsIndent = indent;
  open("for (int64_t c0 = 0; c0 < " + k + "; c0 += 256)");
  line("const int64_t col = c0 + warp * 32 + t * 8;");
  line("__syncthreads(); // the last step's reads of the B parts are done");
  // B's rows c0 .. c0 + 255; 16-byte chunk c of row kk at chunk c ^ (kk /
  // 8 % chunks) where chunks is a power of two, so the eight rows one
  // ldmatrix reads fall into distinct banks.
  for (auto [j, b] : llvm::enumerate(bs)) {
    int64_t n = bWidth(j), chunks = n / 8;
    if (bTransposed[j]) {
      open("for (int j = threadIdx.x; j < " + std::to_string(32 * n) + "; j += 256)");
      line("const int r = j / 32, cn = j % 32;");
      line("kiln_cp_async16(" + bName(j) + " + r * 264 + cn * 8, " + names.params.lookup(b) +
           " + r * " + k + " + c0 + cn * 8);");
      close();
      continue;
    }
    std::string mask = std::to_string(llvm::isPowerOf2_64(chunks) ? chunks - 1 : 0);
    open("for (int j = threadIdx.x; j < " + std::to_string(256 * chunks) + "; j += 256)");
    line("const int kk = j / " + std::to_string(chunks) + ", cn = j % " + std::to_string(chunks) +
         ";");
    line("kiln_cp_async16(" + bName(j) + " + kk * " + std::to_string(n) + " + ((cn ^ ((kk >> 3) & " +
         mask + ")) << 3), " + names.params.lookup(b) + " + (c0 + kk) * " +
         std::to_string(n) + " + cn * 8);");
    close();
  }
  for (Value x : xs)
    line("unsigned " + xName(outputOf(x)) + "[" + H + "][4];");
  // The chunk's body, printed once: its input loads go first, for all
  // rows, so that they are in flight together.
  std::string outer = std::move(body);
  body.clear();
  indent += 3;
  open(""); // what the chunk computes is not seen outside it
  auto skip = [&](unsigned i) { return dotOutputs.contains(i); };
  std::string loads = vectorChunk(8, segment, skip);
  for (Value x : xs)
    line("*reinterpret_cast<uint4 *>(" + xName(outputOf(x)) +
         "[h]) = *reinterpret_cast<const uint4 *>(" + outName(outputOf(x)) + "_v);");
  close();
  indent -= 3;
  std::string chunkBody = std::move(body);
  body = std::move(outer);
  SmallVector<Value> inputs(vectorInputs.begin(), vectorInputs.end());
  prefetch = prefetch && !inputs.empty(); // lane-chunk inputs load in the chunk
  auto rowChunk = [&](const std::string &colExpr) {
    line("const int64_t row = rb * " + R + " + g + 8 * h;");
    line("const int64_t chunk = ((row < rows ? row : rows - 1) * " + k + " + " + colExpr +
         ") / 8;");
  };
  auto loadInputs = [&](const std::string &colExpr) {
    line("#pragma unroll");
    open("for (int h = 0; h < " + H + "; ++h)");
    rowChunk(colExpr);
    for (Value arg : inputs)
      line("kiln_dot_in_" + names.params.lookup(arg) + "[h] = " + vectorInputLoad(arg, 8, "chunk") +
           ";");
    close();
  };
  if (prefetch) {
    // The first step's inputs before the steps; each step loads the next
    // one's before its barrier and products, so they are in flight then.
    std::string steps = body.substr(beforeSteps);
    body.resize(beforeSteps);
    int stepsInner = indent;
    indent = stepsIndent;
    for (Value arg : inputs)
      line("uint4 kiln_dot_in_" + names.params.lookup(arg) + "[" + H + "];");
    loadInputs("warp * 32 + t * 8");
    body += steps;
    indent = stepsInner;
  } else {
    for (Value arg : inputs)
      line("uint4 kiln_dot_in_" + names.params.lookup(arg) + "[" + H + "];");
    loadInputs("col");
  }
  line("#pragma unroll");
  open("for (int h = 0; h < " + H + "; ++h)");
  rowChunk("col");
  open("if (row < rows)");
  // vectorChunk's loads, from the registers loaded above.
  for (Value arg : inputs) {
    std::string from = vectorInputLoad(arg, 8, "chunk");
    size_t at = loads.find(from);
    if (at != std::string::npos)
      loads.replace(at, from.size(), "kiln_dot_in_" + names.params.lookup(arg) + "[h]");
  }
  chunkBody.insert(chunkLoadsAt, loads);
  body += chunkBody;
  close();
  open("else");
  for (Value x : xs)
    line(xName(outputOf(x)) + "[h][0] = " + xName(outputOf(x)) + "[h][1] = " + xName(outputOf(x)) +
         "[h][2] = " + xName(outputOf(x)) + "[h][3] = 0u;");
  close();
  close();
  if (prefetch) {
    open("if (c0 + 256 < " + k + ")");
    loadInputs("col + 256");
    close();
  }
  line("kiln_cp_async_wait_all();");
  line("__syncthreads();");
  // The products: per k-step (two in the thread's eight columns), per
  // term, per pair of n-tiles (one ldmatrix.x4) or the last single tile.
  line("#pragma unroll");
  open("for (int ks = 0; ks < 2; ++ks)");
  line("const int mi = lane >> 3, ri = lane & 7;");
  line("const int kk = warp * 32 + 8 * (ri >> 1) + 4 * ks + 2 * (mi & 1) + (ri & 1);");
  for (auto [d, dot] : llvm::enumerate(dots)) {
    for (const Term &term : dot.terms) {
      int64_t n = bWidth(term.b), chunks = n / 8;
      std::string mask = std::to_string(llvm::isPowerOf2_64(chunks) ? chunks - 1 : 0);
      std::string x = xName(term.x);
      open("");
      line("unsigned a[" + MT + "][4];");
      for (int mt = 0; mt < mtiles; ++mt) {
        std::string m = std::to_string(mt);
        line("a[" + m + "][0] = " + x + "[" + std::to_string(2 * mt) + "][2 * ks]; a[" + m +
             "][1] = " + x + "[" + std::to_string(2 * mt + 1) + "][2 * ks];");
        line("a[" + m + "][2] = " + x + "[" + std::to_string(2 * mt) + "][2 * ks + 1]; a[" + m +
             "][3] = " + x + "[" + std::to_string(2 * mt + 1) + "][2 * ks + 1];");
      }
      if (bTransposed[term.b]) {
        // b0, b1: B^T row nt * 8 + g at the thread's own columns of this k-step.
        for (int64_t nt = 0; nt < chunks; ++nt) {
          open("");
          line("const uint2 b = *reinterpret_cast<const uint2 *>(" + bName(term.b) + " + (" +
               std::to_string(nt * 8) + " + g) * 264 + warp * 32 + 8 * t + 4 * ks);");
          for (int mt = 0; mt < mtiles; ++mt)
            line("kiln_mma_bf16_16816(" + accName(d) + "[" + std::to_string(mt) + "][" +
                 std::to_string(nt) + "], a[" + std::to_string(mt) + "], b.x, b.y);");
          close();
        }
        close();
        continue;
      }
      for (int64_t nt = 0; nt < chunks; nt += 2) {
        bool pair = nt + 1 < chunks;
        std::string cn = pair ? std::to_string(nt) + " + (mi >> 1)" : std::to_string(nt);
        open("");
        line("const __nv_bfloat16 *p = " + bName(term.b) + " + kk * " + std::to_string(n) + " + (((" +
             cn + ") ^ ((kk >> 3) & " + mask + ")) << 3);");
        line(std::string("unsigned b[4]; kiln_ldmatrix_") + (pair ? "x4" : "x2") + "_trans(b, p);");
        for (int mt = 0; mt < mtiles; ++mt) {
          std::string acc = accName(d) + "[" + std::to_string(mt) + "]";
          line("kiln_mma_bf16_16816(" + acc + "[" + std::to_string(nt) + "], a[" +
               std::to_string(mt) + "], b[0], b[1]);");
          if (pair)
            line("kiln_mma_bf16_16816(" + acc + "[" + std::to_string(nt + 1) + "], a[" +
                 std::to_string(mt) + "], b[2], b[3]);");
        }
        close();
      }
      close();
    }
  }
  close();
  close(); // c0
  // The warps' sums, added in warp order; the last warp writes D. The
  // block's barriers keep the B slices and the sums apart in shared memory.
  line("#pragma unroll 1");
  open("for (int w = 0; w < 8; ++w)");
  line("__syncthreads();");
  open("if (warp == w)");
  int64_t dotOffset = 0;
  for (auto [d, dot] : llvm::enumerate(dots)) {
    Value out = plan.outputs[dot.out];
    int64_t stride = outRowStride(dot.out) ? outRowStride(dot.out) : dot.n;
    std::string tiles = std::to_string(dot.n / 8);
    line("#pragma unroll");
    open("for (int e = 0; e < " + std::to_string(4 * mtiles) + " * " + tiles + "; ++e)");
    line("const int mt = e / (4 * " + tiles + "), nt = (e >> 2) % " + tiles + ", f = e & 3;");
    line("const int r = mt * 16 + g + 8 * (f >> 1), c = nt * 8 + 2 * t + (f & 1);");
    line("float &slot = kiln_dot_red[r * " + std::to_string(totalN) + " + " +
         std::to_string(dotOffset) + " + c];");
    line("const float v = (w == 0 ? 0.f : slot) + " + accName(d) + "[mt][nt][f];");
    open("if (w < 7)");
    line("slot = v;");
    close();
    open("else if (rb * " + R + " + r < rows)");
    line(outName(dot.out) + "[(rb * " + R + " + r) * " + std::to_string(stride) + " + c] = " +
         store(elementOf(out), literal(dot.alpha, Float32Type::get(plan.kernel.getContext())) +
                                   " * v") +
         ";");
    close();
    close();
    dotOffset += dot.n;
  }
  close();
  close();
  close(); // rb
}

} // namespace kiln::codegen::detail
