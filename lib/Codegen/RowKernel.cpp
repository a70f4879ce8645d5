//===- RowKernel.cpp - Row kernels: softmax, norms, cross entropy ---------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// One block per row: block reductions over the columns, then the row's
// outputs.
//
//===----------------------------------------------------------------------===//

#include "CudaPrinter.h"
#include "llvm/ADT/TypeSwitch.h"

#include <type_traits>

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace kiln::codegen::detail {

void Printer::forCols(const Index &lead, ArrayRef<std::string> trail,
                      llvm::function_ref<void(const Index &)> each) {
  if (rowVec.width == 1) {
    open("for (int64_t col = threadIdx.x; col < cols; col += blockDim.x)");
    Index idx(lead.begin(), lead.end());
    Index t = delinearize("col", trail);
    idx.append(t.begin(), t.end());
    each(idx);
    close();
    return;
  }
  // The thread's chunks of the row, from the registers loaded before the
  // first pass; unrolled, so the arrays' indices are constants (registers).
  std::string w = std::to_string(rowVec.width);
  line("#pragma unroll");
  open("for (int c = 0; c < " + std::to_string(rowVec.chunks) + "; ++c)");
  line("const int64_t chunk = c * " + std::to_string(rowVec.threadsPerRow) + " + tr;");
  if (rowVec.ragged)
    open("if (chunk < " + std::to_string(rowVec.cols / rowVec.width) + ")");
  // The lanes first: they tell which outputs this pass stores.
  std::string outer = std::move(body);
  body.clear();
  rowStored.clear();
  line("#pragma unroll");
  open("for (int lane = 0; lane < " + w + "; ++lane)");
  line("const int64_t col = chunk * " + w + " + lane;");
  line("const int64_t flat = row * cols + col;");
  Index idx(lead.begin(), lead.end());
  Index t = delinearize("col", trail);
  idx.append(t.begin(), t.end());
  relate("flat", idx, dims(plan.anchor->getOperand(0)));
  rowLanes = true;
  each(idx);
  rowLanes = false;
  close();
  std::string lanes = std::move(body);
  body = std::move(outer);
  SmallVector<unsigned> stored(rowStored.begin(), rowStored.end());
  for (unsigned i : stored)
    line("__align__(16) " + storageType(elementOf(plan.outputs[i])) + " " + outName(i) + "_v[" + w +
         "];");
  body += lanes;
  for (unsigned i : stored) {
    std::string type = vectorType(elementOf(plan.outputs[i]), rowVec.width);
    // A block-of-columns output (width and row stride multiples of the
    // vector width, kiln-lower-to-step): the chunk's first element's place.
    std::string at = outRowStride(i)
                         ? " + " + rowChunkAt(typeOf(plan.outputs[i]), outRowStride(i)) + ")[0]"
                         : ")[row * " + std::to_string(rowVec.cols / rowVec.width) + " + chunk]";
    line("reinterpret_cast<" + type + " *>(" + outName(i) + at + " = *reinterpret_cast<const " +
         type + " *>(" + outName(i) + "_v);");
  }
  if (rowVec.ragged)
    close();
  close();
}

std::string Printer::rowChunkAt(RankedTensorType type, int64_t stride) {
  std::string w = std::to_string(rowVec.width);
  // A row that is the whole last dim starts `stride` elements after the
  // previous one; otherwise the chunk's flat offset is mapped (its width
  // and the stride are multiples of the vector width: one row).
  if (type.getShape().back() == rowVec.cols)
    return "row * " + std::to_string(stride) + " + chunk * " + w;
  std::string flat = "(unsigned)(row * cols + chunk * " + w + ")",
              width = std::to_string(type.getShape().back()) + "u";
  return "((int64_t)(" + flat + " / " + width + ") * " + std::to_string(stride) + " + " + flat +
         " % " + width + ")";
}

std::string Printer::rowReduce(const std::string &v, bool isMax) {
  std::string flag = isMax ? "true" : "false";
  if (rowVec.width > 1 && rowVec.threadsPerRow == 32)
    return "kiln_warp_reduce(" + v + ", " + flag + ")";
  return "kiln_block_reduce(" + v + ", red, " + flag + ")";
}

std::string Printer::vectorType(Type element, int64_t width) {
  unsigned bits = element.getIntOrFloatBitWidth();
  int64_t bytes = (bits < 8 ? 1 : bits / 8) * width;
  return bytes == 16  ? "uint4"
         : bytes == 8 ? "uint2"
         : bytes == 4 ? "unsigned int"
                      : "unsigned short";
}

std::string Printer::rowLoads(bool weights) {
  const llvm::SetVector<Value> &inputs = weights ? rowColInputs : rowFlatInputs;
  if (inputs.empty())
    return "";
  std::string outer = std::move(body);
  body.clear();
  std::string w = std::to_string(rowVec.width), chunks = std::to_string(rowVec.chunks);
  std::string vectors = std::to_string(rowVec.cols / rowVec.width);
  std::string suffix = weights ? "_w" : "_v";
  line(weights ? "// The weights' chunks of this thread, for every row."
               : "// The row's chunks of this thread: every load in flight at once, one read.");
  for (Value arg : inputs)
    line("__align__(16) " + storageType(typeOf(arg).getElementType()) + " " +
         names.params.lookup(arg) + suffix + "[" + chunks + "][" + w + "];");
  line("#pragma unroll");
  open("for (int c = 0; c < " + chunks + "; ++c)");
  line("const int64_t chunk = c * " + std::to_string(rowVec.threadsPerRow) + " + tr;");
  if (rowVec.ragged)
    open("if (chunk < " + vectors + ")");
  for (Value arg : inputs) {
    std::string name = names.params.lookup(arg);
    std::string type = vectorType(typeOf(arg).getElementType(), rowVec.width);
    // A block-of-columns input (kiln-lower-to-step): the chunk's first
    // element's place, as for such an output.
    std::string at = weights          ? ")[chunk]"
                     : inRowStride(arg) ? " + " + rowChunkAt(typeOf(arg), inRowStride(arg)) + ")[0]"
                                        : ")[row * " + vectors + " + chunk]";
    line("*reinterpret_cast<" + type + " *>(" + name + suffix + "[c]) = reinterpret_cast<const " +
         type + " *>(" + name + at + ";");
  }
  if (rowVec.ragged)
    close();
  close();
  std::string text = std::move(body);
  body = std::move(outer);
  return text;
}

void Printer::rowKernel() {
  Operation *anchor = plan.anchor;
  Value x = anchor->getOperand(0);
  int64_t axis = rowAxis(anchor);
  SmallVector<std::string> sizes = dims(x);
  ArrayRef<std::string> leadDims = ArrayRef<std::string>(sizes).take_front(axis);
  ArrayRef<std::string> trail = ArrayRef<std::string>(sizes).drop_front(axis);
  DimList all = getDims(typeOf(x));
  MLIRContext *ctx = x.getContext();
  Dim rowsDim = dimProduct(ArrayRef<Dim>(all).take_front(axis), ctx);
  Dim colsDim = dimProduct(ArrayRef<Dim>(all).drop_front(axis), ctx);
  Dim space = dimMul(rowsDim, colsDim);
  rowVec = rowLayout(plan.kernel.getBody().front());
  rowFlatInputs.clear();
  rowColInputs.clear();
  line("__shared__ float red[33];");
  line("const int64_t rows = " + dim(rowsDim) + ";");
  line("const int64_t cols = " + dim(colsDim) + ";");
  if (rowVec.width > 1) {
    std::string t = std::to_string(rowVec.threadsPerRow);
    line("// " + std::to_string(rowVec.width) + "-element vectors, " +
         std::to_string(rowVec.chunks) + " per thread in registers, " +
         (rowVec.threadsPerRow == 32 ? std::string("a warp per row (8 rows per block)")
                                     : std::string("a block per row")));
    line("const int tr = threadIdx.x % " + t + "; // the thread's place in its row");
  }
  // Cross entropy's mean divides by the rows whose label is counted.
  auto ce = dyn_cast<CrossEntropyOp>(anchor);
  CrossEntropyGradOp ceGrad;
  for (Operation &op : plan.kernel.getBody().front())
    if (auto g = dyn_cast<CrossEntropyGradOp>(op))
      ceGrad = g;
  if (!ce && ceGrad)
    anchor = ceGrad;
  if (ce || ceGrad) {
    Value labels = anchor->getOperand(1);
    int64_t ignore = ce ? ce.getIgnoreIndex() : ceGrad.getIgnoreIndex();
    line("float counted = 0.f;");
    open("for (int64_t j = threadIdx.x; j < rows; j += blockDim.x)");
    line("counted += " + value(labels, {"j"}) + " != " + std::to_string(ignore) + " ? 1.f : 0.f;");
    close();
    line("counted = " + blockSum("counted") + ";");
  }
  size_t weightLoadsAt = body.size();
  unsigned weightIndent = indent;
  if (rowVec.width > 1 && rowVec.threadsPerRow == 32)
    open("for (int64_t row = blockIdx.x * 8 + threadIdx.x / 32; row < rows; "
         "row += (int64_t)gridDim.x * 8)");
  else
    open("for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)");
  Index lead = delinearize("row", leadDims);
  size_t rowLoadsAt = body.size();
  unsigned rowIndent = indent;
  auto flatOf = [&]() { return std::string("row * cols + col"); };
  auto finalLoop = [&](Value bound, llvm::function_ref<std::string(const Index &)> compute,
                       llvm::function_ref<bool(unsigned)> skip = nullptr) {
    forCols(lead, trail, [&](const Index &idx) {
      if (rowVec.width == 1) {
        line("const int64_t flat = " + flatOf() + ";");
        relate("flat", idx, sizes);
      }
      bind(bound, idx, compute(idx));
      storeOutputs("flat", x, idx, space, skip);
    });
  };
  auto weightAt = [&](Value w, const Index &idx) {
    return value(w, Index(idx.begin() + axis, idx.end()));
  };
  auto accumulateTo = [&](Value result, const Index &idx, const std::string &v) {
    int i = accumulatorIndex(result);
    if (i < 0)
      return;
    SmallVector<std::string> wd = dims(result);
    line("kiln_atomic_add(&" + outName(i) + "[" + linear(Index(idx.begin() + axis, idx.end()), wd) +
         "], " + v + ");");
  };
  // Mean (and the centred second moment) over the row.
  auto meanOf = [&](llvm::function_ref<std::string(const Index &)> term, StringRef name) {
    line("float " + name.str() + " = 0.f;");
    forCols(lead, trail, [&](const Index &idx) { line(name.str() + " += " + term(idx) + ";"); });
    line(name.str() + " = " + rowReduce(name.str()) + " / (float)cols;");
  };
  llvm::TypeSwitch<Operation *>(anchor)
      .Case<SoftmaxOp, LogSoftmaxOp, CrossEntropyOp, CrossEntropyGradOp>([&](Operation *op) {
        line("float mx = -KILN_INF;");
        forCols(lead, trail, [&](const Index &idx) {
          std::string v = value(x, idx);
          line("mx = fmaxf(mx, " + v + ");");
        });
        line("mx = " + rowReduce("mx", true) + ";");
        line("if (mx == -KILN_INF) mx = 0.f; // a fully masked row");
        line("float se = 0.f;");
        forCols(lead, trail,
                [&](const Index &idx) { line("se += expf(" + value(x, idx) + " - mx);"); });
        line("se = " + rowReduce("se") + ";");
        if (isa<SoftmaxOp>(op))
          return finalLoop(op->getResult(0), [&](const Index &idx) {
            return let(op->getResult(0), idx, "expf(" + value(x, idx) + " - mx) / se");
          });
        if (isa<LogSoftmaxOp>(op))
          return finalLoop(op->getResult(0), [&](const Index &idx) {
            return let(op->getResult(0), idx, value(x, idx) + " - mx - logf(se)");
          });
        crossEntropy(ce, ceGrad, lead, trail, space, x);
      })
      .Case<SoftmaxGradOp, LogSoftmaxGradOp>([&](Operation *op) {
        Value y = op->getOperand(0), dy = op->getOperand(1);
        bool log = isa<LogSoftmaxGradOp>(op);
        line("float s = 0.f;");
        forCols(lead, trail, [&](const Index &idx) {
          line("s += " + (log ? value(dy, idx) : value(dy, idx) + " * " + value(y, idx)) + ";");
        });
        line("s = " + rowReduce("s") + ";");
        finalLoop(op->getResult(0), [&](const Index &idx) {
          std::string yv = value(y, idx), g = value(dy, idx);
          return let(op->getResult(0), idx,
                     log ? g + " - expf(" + yv + ") * s" : yv + " * (" + g + " - s)");
        });
      })
      .Case<LayerNormOp>([&](LayerNormOp ln) {
        meanOf([&](const Index &idx) { return value(x, idx); }, "mean");
        meanOf(
            [&](const Index &idx) {
              std::string v = value(x, idx);
              return "(" + v + " - mean) * (" + v + " - mean)";
            },
            "var");
        line("const float rstd = rsqrtf(var + " +
             literal(ln.getEpsilon().convertToDouble(), Float32Type::get(ctx)) + ");");
        finalLoop(ln.getResult(), [&](const Index &idx) {
          std::string e =
              "(" + value(x, idx) + " - mean) * rstd * " + weightAt(ln.getWeight(), idx);
          if (ln.getBias())
            e += " + " + weightAt(ln.getBias(), idx);
          return let(ln.getResult(), idx, e);
        });
      })
      .Case<RmsNormOp, RmsNormWithRstdOp>([&](auto rn) {
        meanOf(
            [&](const Index &idx) {
              std::string v = value(x, idx);
              return v + " * " + v;
            },
            "ms");
        line("const float rstd = rsqrtf(ms + " +
             literal(rn.getEpsilon().convertToDouble(), Float32Type::get(ctx)) + ");");
        // The row statistic for the gradient from the output: one store per
        // row (the row's buffer is contiguous over the leading dims).
        if constexpr (std::is_same_v<decltype(rn), RmsNormWithRstdOp>) {
          if (int i = accumulatorIndex(rn.getRstd()); i >= 0) {
            open(rowVec.width > 1 ? "if (tr == 0)" : "if (threadIdx.x == 0)");
            line(outName(i) + "[row] = " + store(elementOf(rn.getRstd()), "rstd") + ";");
            close();
          }
        }
        finalLoop(rn.getResult(), [&](const Index &idx) {
          return let(rn.getResult(), idx,
                     value(x, idx) + " * rstd * " + weightAt(rn.getWeight(), idx));
        });
      })
      .Case<RmsNormGradFromOutputOp>([&](RmsNormGradFromOutputOp g) {
        Value w = g.getWeight(), dy = g.getGrad(), divisor = g.getDivisor();
        line("const float rstd = " + value(g.getRstd(), lead) + ";");
        // Times the divisor's reciprocal: one division per column and
        // thread (the weights sit in registers across the rows, so the
        // compiler hoists it), not two per element.
        auto xhatAt = [&](const Index &idx) {
          return "(" + value(x, idx) + " * (1.0f / " + weightAt(divisor, idx) + "))";
        };
        meanOf(
            [&](const Index &idx) {
              return value(dy, idx) + " * " + weightAt(w, idx) + " * " + xhatAt(idx);
            },
            "mgx");
        finalLoop(
            g.getInputGrad(),
            [&](const Index &idx) {
              std::string xhat = fresh("xhat"), d = value(dy, idx);
              line("const float " + xhat + " = " + xhatAt(idx) + ";");
              accumulateTo(g.getWeightGrad(), idx, d + " * " + xhat);
              return let(g.getInputGrad(), idx,
                         "rstd * (" + d + " * " + weightAt(w, idx) + " - " + xhat + " * mgx)");
            },
            [&](unsigned i) { return isAccumulator(i); });
      })
      .Case<LayerNormGradOp>([&](LayerNormGradOp g) {
        Value w = g.getWeight(), dy = g.getGrad();
        meanOf([&](const Index &idx) { return value(x, idx); }, "mean");
        meanOf(
            [&](const Index &idx) {
              std::string v = value(x, idx);
              return "(" + v + " - mean) * (" + v + " - mean)";
            },
            "var");
        line("const float rstd = rsqrtf(var + " +
             literal(g.getEpsilon().convertToDouble(), Float32Type::get(ctx)) + ");");
        meanOf([&](const Index &idx) { return value(dy, idx) + " * " + weightAt(w, idx); }, "mg");
        meanOf(
            [&](const Index &idx) {
              return value(dy, idx) + " * " + weightAt(w, idx) + " * (" + value(x, idx) +
                     " - mean) * rstd";
            },
            "mgx");
        finalLoop(
            g.getInputGrad(),
            [&](const Index &idx) {
              std::string xhat = fresh("xhat");
              line("const float " + xhat + " = (" + value(x, idx) + " - mean) * rstd;");
              std::string d = value(dy, idx);
              accumulateTo(g.getWeightGrad(), idx, d + " * " + xhat);
              accumulateTo(g.getBiasGrad(), idx, d);
              return let(g.getInputGrad(), idx,
                         "rstd * (" + d + " * " + weightAt(w, idx) + " - mg - " + xhat + " * mgx)");
            },
            [&](unsigned i) { return isAccumulator(i); });
      })
      .Case<RmsNormGradOp>([&](RmsNormGradOp g) {
        Value w = g.getWeight(), dy = g.getGrad();
        meanOf(
            [&](const Index &idx) {
              std::string v = value(x, idx);
              return v + " * " + v;
            },
            "ms");
        line("const float rstd = rsqrtf(ms + " +
             literal(g.getEpsilon().convertToDouble(), Float32Type::get(ctx)) + ");");
        meanOf(
            [&](const Index &idx) {
              return value(dy, idx) + " * " + weightAt(w, idx) + " * " + value(x, idx);
            },
            "mgx");
        finalLoop(
            g.getInputGrad(),
            [&](const Index &idx) {
              std::string xv = value(x, idx), d = value(dy, idx);
              accumulateTo(g.getWeightGrad(), idx, d + " * " + xv + " * rstd");
              return let(g.getInputGrad(), idx,
                         "rstd * (" + d + " * " + weightAt(w, idx) + " - " + xv +
                             " * rstd * rstd * mgx)");
            },
            [&](unsigned i) { return isAccumulator(i); });
      });
  if (rowVec.width > 1) {
    // What the passes read at the row's offset, loaded at the row's start;
    // what they read at the column (weights), before the first row.
    auto insertAt = [&](size_t at, unsigned level, bool weights) {
      unsigned saved = indent;
      indent = level;
      std::string text = rowLoads(weights);
      indent = saved;
      body.insert(at, text);
      return text.size();
    };
    insertAt(rowLoadsAt, rowIndent, false);
    insertAt(weightLoadsAt, weightIndent, true);
  }
  close();
  rowVec = kernel::RowLayout();
}

void Printer::crossEntropy(CrossEntropyOp ce, CrossEntropyGradOp ceGrad, const Index &lead,
                           ArrayRef<std::string> trail, Dim space, Value x) {
  Operation *any = ce ? ce.getOperation() : ceGrad.getOperation();
  Value labels = any->getOperand(1);
  Reduction reduction = ce ? ce.getReduction() : ceGrad.getReduction();
  int64_t ignore = ce ? ce.getIgnoreIndex() : ceGrad.getIgnoreIndex();
  line("const int64_t label = " + value(labels, {"row"}) + ";");
  line("const bool counts = label != " + std::to_string(ignore) + ";");
  if (ce && accumulatorIndex(ce.getResult()) >= 0) {
    std::string out = outName(accumulatorIndex(ce.getResult()));
    open(rowVec.width > 1 ? "if (tr == 0)" : "if (threadIdx.x == 0)");
    line("float loss = 0.f;");
    open("if (counts)");
    line("loss = mx + logf(se) - " + value(x, {"row", "label"}) + ";");
    close();
    Type element = elementOf(ce.getResult());
    if (reduction == Reduction::none)
      line(out + "[row] = " + store(element, "loss") + ";");
    else
      line("kiln_atomic_add(" + out + ", " +
           (reduction == Reduction::mean ? std::string("loss / counted") : std::string("loss")) +
           ");");
    close();
  }
  if (!ceGrad)
    return;
  std::string g =
      reduction == Reduction::none ? value(ceGrad.getGrad(), {"row"}) : value(ceGrad.getGrad(), {});
  line("const float scale = counts ? " + g +
       (reduction == Reduction::mean ? std::string(" / counted") : std::string()) + " : 0.f;");
  forCols(lead, trail, [&](const Index &idx) {
    if (rowVec.width == 1) {
      line("const int64_t flat = row * cols + col;");
      relate("flat", idx, dims(x));
    }
    std::string p = "expf(" + value(x, idx) + " - mx) / se";
    bind(ceGrad.getResult(), idx,
         let(ceGrad.getResult(), idx, "(" + p + " - (col == label ? 1.f : 0.f)) * scale"));
    storeOutputs("flat", x, idx, space,
                 [&](unsigned i) { return ce && plan.outputs[i] == ce.getResult(); });
  });
}

} // namespace kiln::codegen::detail
