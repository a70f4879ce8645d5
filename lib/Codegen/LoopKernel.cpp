//===- LoopKernel.cpp - Pointwise loop kernels ----------------------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A grid-stride loop over the elements of each output segment, scalar or
// vectorized (16-byte accesses).
//
//===----------------------------------------------------------------------===//

#include "CudaPrinter.h"

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace kiln::codegen::detail {

void Printer::loopKernel() {
  if (isRowDotKernel(plan.kernel))
    return rowDotKernel();
  SmallVector<Dim> segments = loopSegments(plan.kernel.getBody().front());
  MLIRContext *ctx = plan.kernel.getContext();
  auto firstOf = [&](Dim segment) {
    for (Value out : plan.outputs)
      if (dimProduct(getDims(typeOf(out)), ctx) == segment)
        return out;
    return plan.outputs.front();
  };
  if (int64_t width = loopVectorWidth(plan.kernel.getBody().front()); width > 1)
    return vectorLoopKernel(width, segments.front());
  if (segments.size() == 1) {
    Value first = plan.outputs.front();
    line("const int64_t n = " + dim(segments.front()) + ";");
    open("for (int64_t flat = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; flat < n; "
         "flat += (int64_t)gridDim.x * blockDim.x)");
    Index idx = delinearize("flat", dims(first));
    storeOutputs("flat", first, idx, segments.front());
    close();
    return;
  }
  // Multi-tensor: one launch walks the segments back to back.
  Dim total = dimConst(ctx, 0);
  for (Dim segment : segments)
    total = dimAdd(total, segment);
  line("// " + std::to_string(segments.size()) + " segments, one per distinct element count");
  line("const int64_t n = " + dim(total) + ";");
  open("for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < n; "
       "g += (int64_t)gridDim.x * blockDim.x)");
  Dim start = dimConst(ctx, 0);
  for (auto [i, segment] : llvm::enumerate(segments)) {
    Dim end = dimAdd(start, segment);
    std::string cond = "g < " + dim(end);
    open(i == 0                     ? "if (" + cond + ")"
         : i + 1 == segments.size() ? std::string("else")
                                    : "else if (" + cond + ")");
    std::string offset = dim(start);
    line("const int64_t flat = " + (offset == "0" ? std::string("g") : "g - " + offset) + ";");
    Value first = firstOf(segment);
    Index idx = delinearize("flat", dims(first));
    storeOutputs("flat", first, idx, segment);
    close();
    start = end;
  }
  close();
}

void Printer::vectorLoopKernel(int64_t width, Dim segment) {
  line("// " + std::to_string(width) + " elements per thread, moved with vector accesses");
  line("const int64_t n = " + dim(dimDivExact(segment, width)) + ";");
  open("for (int64_t chunk = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; chunk < n; "
       "chunk += (int64_t)gridDim.x * blockDim.x)");
  std::string loads = vectorChunk(width, segment, nullptr);
  // The loads go before the lanes that read them.
  body.insert(chunkLoadsAt, loads);
  close();
}

std::string Printer::vectorInputLoad(Value arg, int64_t width, const std::string &chunk) {
  std::string name = names.params.lookup(arg);
  std::string type = vectorType(elementOf(arg), width);
  // A block-of-columns input: as a block-of-columns output below.
  return "reinterpret_cast<const " + type + " *>(" + name +
         (inRowStride(arg) ? " + " + inIndex(arg, chunk + " * " + std::to_string(width)) + ")[0]"
                           : ")[" + chunk + "]");
}

std::string Printer::vectorChunk(int64_t width, Dim segment,
                                 llvm::function_ref<bool(unsigned)> skip) {
  Value first = plan.outputs.front();
  std::string w = std::to_string(width);
  // When the innermost dim is a multiple of the width, the lanes share
  // every index but the last: divide once per chunk, not once per lane
  // (64-bit division by a symbolic size costs more than the lane's math).
  SmallVector<std::string> firstDims = dims(first);
  std::optional<Index> chunkIndex;
  line("const int64_t base = chunk * " + w + ";");
  laneWidth = width;
  laneAligned = {};
  laneAligned.insert("base");
  if (firstDims.size() >= 2) {
    int64_t inner = typeOf(first).getShape().back();
    if (!ShapedType::isDynamic(inner) && inner % width == 0)
      chunkIndex = delinearize("base", firstDims);
  }
  chunkLoadsAt = body.size();
  // Print the lane body first: it tells which inputs are read at `flat`.
  std::string outer = std::move(body);
  body.clear();
  vectorLanes = true;
  line("#pragma unroll");
  open("for (int lane = 0; lane < " + w + "; ++lane)");
  laneLoopDepth = scopes.size();
  laneChunks.clear();
  line("const int64_t flat = base + lane;");
  Index idx;
  if (chunkIndex) {
    idx = *chunkIndex;
    idx.back() = "(" + idx.back() + " + lane)";
    relate("flat", idx, firstDims);
  } else {
    idx = delinearize("flat", firstDims);
  }
  storeOutputs("flat", first, idx, segment, skip);
  close();
  vectorLanes = false;
  laneLoopDepth = 0;
  laneWidth = 0;
  laneAligned = {};
  std::string lanes = std::move(body);
  body = std::move(outer);
  std::string loads;
  for (Value arg : vectorInputs) {
    std::string name = names.params.lookup(arg), type = storageType(elementOf(arg));
    loads += std::string(indent * 2, ' ') + "__align__(16) " + type + " " + name + "_v[" + w +
             "];\n";
    loads += std::string(indent * 2, ' ') + "*reinterpret_cast<" +
             vectorType(elementOf(arg), width) + " *>(" + name + "_v) = " +
             vectorInputLoad(arg, width, "chunk") + ";\n";
  }
  for (const LaneChunk &c : laneChunks)
    line("__align__(16) " + storageType(c.element) + " " + c.reg + "[" + w + "];");
  for (auto [i, out] : llvm::enumerate(plan.outputs))
    if (!skip || !skip(i))
      line("__align__(16) " + storageType(elementOf(out)) + " " + outName(i) + "_v[" + w + "];");
  body += lanes;
  // A block-of-columns output: its width and row stride are multiples of
  // the vector width (kiln-lower-to-step), so a chunk stays in one row.
  for (auto [i, out] : llvm::enumerate(plan.outputs)) {
    if (skip && skip(i))
      continue;
    std::string type = vectorType(elementOf(out), width);
    line("reinterpret_cast<" + type + " *>(" + outName(i) +
         (outRowStride(i) ? " + " + outIndex(i, "chunk * " + w) + ")[0]" : ")[chunk]") +
         " = *reinterpret_cast<const " + type + " *>(" + outName(i) + "_v);");
  }
  return loads;
}

} // namespace kiln::codegen::detail
