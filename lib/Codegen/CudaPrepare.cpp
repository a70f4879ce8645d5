//===- CudaPrepare.cpp - Check a kernel body and gather its ABI -----------===//

#include "kiln/Codegen/Cuda.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Kernel/OpClassification.h"

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace kiln::codegen {

FailureOr<KernelPlan> prepareKernel(KernelOp kernel) {
  KernelPlan plan;
  plan.kernel = kernel;
  plan.kind = kernel.getKind();
  Block &body = kernel.getBody().front();
  for (BlockArgument arg : body.getArguments())
    plan.inputs.push_back(arg);
  for (Value v : body.getTerminator()->getOperands())
    plan.outputs.push_back(v);
  for (Attribute a : kernel.getSymbols())
    plan.symbols.push_back(cast<StringAttr>(a).str());
  if (plan.outputs.empty())
    return kernel.emitOpError("has no outputs");
  plan.anchor = anchorOp(plan.kind, body);
  if (plan.kind != FusionKind::loop && !plan.anchor)
    return kernel.emitOpError("has no ") << stringifyFusionKind(plan.kind) << " op";
  for (Operation &op : body.without_terminator()) {
    OpClass cls = classifyOp(&op);
    // A row-dot kernel's products of its rows with small matrices.
    if (isa<MatmulOp>(op) && isRowDotKernel(kernel))
      continue;
    if (cls == OpClass::Gemm || cls == OpClass::Unsupported || cls == OpClass::Collective ||
        cls == OpClass::ChunkedHead || isa<ParameterOp>(op))
      return op.emitOpError("cannot be emitted inside a CUDA kernel");
    if (auto constant = dyn_cast<kiln::ConstantOp>(op)) {
      auto type = cast<RankedTensorType>(constant.getType());
      if (!type.hasStaticShape() || type.getNumElements() > 64)
        return op.emitOpError("is too large to inline into a kernel");
    }
    bool special = cls == OpClass::Row || cls == OpClass::Scan || cls == OpClass::Scatter ||
                   cls == OpClass::Attention || cls == OpClass::AttentionGrad ||
                   cls == OpClass::Quantize;
    // Only the row kind holds two special ops: cross entropy and its gradient.
    if (special && &op != plan.anchor &&
        !(plan.kind == FusionKind::row && isa<CrossEntropyGradOp>(op) &&
          isa<CrossEntropyOp>(plan.anchor)))
      return op.emitOpError("must be the only ")
             << stringifyFusionKind(plan.kind) << " op of its kernel";
    for (Type t : op.getResultTypes()) {
      Type element = cast<RankedTensorType>(t).getElementType();
      if (!isa<FloatType, IntegerType>(element) || element.isF80() || element.isF128())
        return op.emitOpError("has an element type the emitter lacks: ") << element;
    }
  }
  return plan;
}

} // namespace kiln::codegen
