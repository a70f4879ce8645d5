//===- ScanScatterQuantizeKernels.cpp - Scan, scatter, NF4 quantize -------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The templates of the remaining kernel kinds: prefix scans, scatters
// (atomic accumulation) and blockwise NF4 quantization.
//
//===----------------------------------------------------------------------===//

#include "CudaPrinter.h"

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace kiln::codegen::detail {

void Printer::scanKernel() {
  auto scan = cast<CumsumOp>(plan.anchor);
  Value input = scan.getInput();
  int64_t rank = typeOf(input).getRank();
  int64_t axis = scan.getAxis() < 0 ? scan.getAxis() + rank : scan.getAxis();
  SmallVector<std::string> sizes = dims(input);
  SmallVector<std::string> outer(sizes);
  outer.erase(outer.begin() + axis);
  int out = outputIndex(scan.getResult());
  if (out < 0 || plan.outputs.size() != 1)
    return fail(scan, "scan kernels write exactly the cumsum");
  Type element = elementOf(scan.getResult());
  DimList outerDims = getDims(typeOf(input));
  outerDims.erase(outerDims.begin() + axis);
  line("const int64_t lines = " + dim(dimProduct(outerDims, input.getContext())) + ";");
  open("for (int64_t line = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; line < lines; "
       "line += (int64_t)gridDim.x * blockDim.x)");
  Index o = delinearize("line", outer);
  line(computeType(element) + " sum = " + literal(0, element) + ";");
  std::string n = sizes[axis];
  open(scan.getReverse() ? "for (int64_t s = " + n + " - 1; s >= 0; --s)"
                         : "for (int64_t s = 0; s < " + n + "; ++s)");
  Index idx(o.begin(), o.end());
  idx.insert(idx.begin() + axis, "s");
  std::string x = value(input, idx);
  std::string at = outName(out) + "[" + linear(idx, sizes) + "]";
  if (scan.getExclusive()) {
    line(at + " = " + store(element, "sum") + ";");
    line("sum += " + x + ";");
  } else {
    line("sum += " + x + ";");
    line(at + " = " + store(element, "sum") + ";");
  }
  close();
  close();
}

void Printer::scatterKernel() {
  auto scatter = cast<ScatterAddOp>(plan.anchor);
  int out = outputIndex(scatter.getResult());
  if (out < 0 || plan.outputs.size() != 1)
    return fail(scatter, "scatter kernels write exactly the scatter-add result");
  Value updates = scatter.getUpdates();
  int64_t rank = typeOf(scatter.getDest()).getRank();
  int64_t axis = scatter.getAxis() < 0 ? scatter.getAxis() + rank : scatter.getAxis();
  int64_t indexRank = typeOf(scatter.getIndices()).getRank();
  line("// The output already holds the destination (kiln_kernel.copy).");
  line("const int64_t n = " + numel(updates) + ";");
  open("for (int64_t flat = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; flat < n; "
       "flat += (int64_t)gridDim.x * blockDim.x)");
  Index u = delinearize("flat", dims(updates));
  SmallVector<std::string> destDims = dims(scatter.getDest());
  std::string j =
      wrapIndex(value(scatter.getIndices(), Index(u.begin() + axis, u.begin() + axis + indexRank)),
                destDims[axis]);
  Index d(u.begin(), u.begin() + axis);
  d.push_back(j);
  d.append(u.begin() + axis + indexRank, u.end());
  line("kiln_atomic_add(&" + outName(out) + "[" + linear(d, destDims) + "], " + value(updates, u) +
       ");");
  close();
}

void Printer::quantizeKernel() {
  Operation *q = plan.anchor;
  Value x = q->getOperand(0);
  int codes = outputIndex(q->getResult(0)), absmax = outputIndex(q->getResult(1));
  if (codes < 0 || absmax < 0 || plan.outputs.size() != 2)
    return fail(q, "quantize kernels write exactly the codes and the absmax");
  std::string bs = std::to_string(q->getAttrOfType<IntegerAttr>("block_size").getInt());
  line("__shared__ float red[33];");
  line("const int64_t n = " + numel(x) + ";");
  line("const int64_t blocks = " + dim(getDim(typeOf(q->getResult(1)), 0)) + ";");
  open("for (int64_t row = blockIdx.x; row < blocks; row += gridDim.x)");
  line("const int64_t begin = row * " + bs + ";");
  line("float amax = 0.f;");
  open("for (int64_t i = begin + threadIdx.x; i < begin + " + bs + " && i < n; i += blockDim.x)");
  line("amax = fmaxf(amax, fabsf((float)" + value(x, delinearize("i", dims(x))) + "));");
  close();
  line("amax = kiln_block_reduce(amax, red, true);");
  line("if (threadIdx.x == 0) " + outName(absmax) + "[row] = amax;");
  line("const float inverse = amax > 0.f ? 1.f / amax : 0.f;");
  if (isa<QuantizeBlockwise8bitOp>(q)) {
    // One 8-bit code per element.
    open("for (int64_t i = begin + threadIdx.x; i < begin + " + bs + " && i < n; i += blockDim.x)");
    line(outName(codes) + "[i] = (unsigned char)kiln_dynamic_map8_encode((float)" +
         value(x, delinearize("i", dims(x))) + " * inverse);");
    close();
    close();
    return;
  }
  open("for (int64_t i = begin + 2 * threadIdx.x; i < begin + " + bs +
       " && i < n; i += 2 * blockDim.x)");
  line("const unsigned int high = kiln_nf4_encode((float)" + value(x, delinearize("i", dims(x))) +
       " * inverse);");
  line("unsigned int low = 0u; // an odd count pads the last low nibble");
  open("if (i + 1 < n)");
  line("const int64_t j = i + 1;");
  line("low = kiln_nf4_encode((float)" + value(x, delinearize("j", dims(x))) + " * inverse);");
  close();
  line(outName(codes) + "[i / 2] = (unsigned char)((high << 4) | low);");
  close();
  close();
}

} // namespace kiln::codegen::detail
