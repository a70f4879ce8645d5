//===- AttentionKernel.cpp - Attention and its gradient -------------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The generic template (a score row in shared memory per query row) and the
// call into the tiled tensor-core kernels (cuda/FlashAttention.cuh).
//
//===----------------------------------------------------------------------===//

#include "CudaPrinter.h"

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace kiln::codegen::detail {

namespace {
/// Which of an attention op's tensors are stored [B, S, H, D]
/// (kiln-attention-layout's seq_major), by role.
struct AttentionLayout {
  bool q = false, k = false, v = false, o = false, dout = false, dq = false, dk = false, dv = false;
  explicit AttentionLayout(Operation *op) {
    if (isa<AttentionOp>(op)) {
      q = isSeqMajor(op, kAttnQuery);
      k = isSeqMajor(op, kAttnKey);
      v = isSeqMajor(op, kAttnValue);
      o = isSeqMajor(op, kAttnResult);
      return;
    }
    q = isSeqMajor(op, kGradQuery);
    k = isSeqMajor(op, kGradKey);
    v = isSeqMajor(op, kGradValue);
    o = isSeqMajor(op, kGradOut);
    dout = isSeqMajor(op, kGradDout);
    dq = isSeqMajor(op, kGradQueryGrad);
    dk = isSeqMajor(op, kGradKeyGrad);
    dv = isSeqMajor(op, kGradValueGrad);
  }
  /// kiln_fa90::Layout's bits (kiln/artifact/HopperAttention.h).
  unsigned bits() const {
    return (q ? 1 : 0) | (k ? 2 : 0) | (v ? 4 : 0) | (o ? 8 : 0) | (dout ? 16 : 0) | (dq ? 32 : 0) |
           (dk ? 64 : 0) | (dv ? 128 : 0);
  }
};

/// An index of the [B, H, S, D] view in the tensor's own dim order.
SmallVector<std::string> stored(bool seqMajor, const std::string &b, const std::string &h,
                                const std::string &i, const std::string &d) {
  if (seqMajor)
    return {b, i, h, d};
  return {b, h, i, d};
}
} // namespace

/// The [B, H, S, D] view's dims of a tensor stored seq-major or not.
static SmallVector<std::string> headMajor(SmallVector<std::string> dims, bool seqMajor) {
  if (seqMajor)
    std::swap(dims[1], dims[2]);
  return dims;
}

void Printer::flashAttentionKernel(bool backward) {
  Operation *op = plan.anchor;
  Value q = op->getOperand(0), k = op->getOperand(1), v = op->getOperand(2);
  Value mask = backward ? cast<AttentionGradOp>(op).getMask() : cast<AttentionOp>(op).getMask();
  bool causal =
      backward ? cast<AttentionGradOp>(op).getCausal() : cast<AttentionOp>(op).getCausal();
  std::optional<APFloat> scaleAttr =
      backward ? cast<AttentionGradOp>(op).getScale() : cast<AttentionOp>(op).getScale();
  AttentionLayout layout(op);
  SmallVector<std::pair<Value, bool>> dense = {{q, layout.q}, {k, layout.k}, {v, layout.v}};
  if (backward)
    dense.push_back({cast<AttentionGradOp>(op).getGrad(), layout.dout});
  // kiln_fa90 takes the pointers alone (its layout is a template argument);
  // kiln_flash each with its (batch, head, seq) strides.
  std::string pointers, strided;
  for (auto [operand, seqMajor] : dense) {
    auto arg = dyn_cast<BlockArgument>(operand);
    if (!arg)
      return fail(op, "tiled attention reads q, k, v and the gradient from kernel inputs");
    DimList d = getDims(typeOf(operand));
    MLIRContext *context = operand.getContext();
    std::string row = dim(d[3]), plane = dim(dimMul(d[2], d[3])),
                batch = dim(dimProduct(ArrayRef<Dim>(d).drop_front(), context));
    pointers += names.params.lookup(arg) + ", ";
    // Stored dims 1 and 2 are (heads, seq), or (seq, heads) when seq-major.
    strided += names.params.lookup(arg) + ", kiln_flash::Strides{" + batch + ", " +
               (seqMajor ? row : plane) + ", " + (seqMajor ? plane : row) + "}, ";
  }
  SmallVector<std::string> qd = headMajor(dims(q), layout.q), kd = headMajor(dims(k), layout.k);
  int64_t headDim = typeOf(q).getDimSize(3);
  double scale = scaleAttr ? scaleAttr->convertToDouble() : 1.0 / std::sqrt((double)headDim);
  std::string element = storageType(elementOf(q));
  if (hopper)
    return hopperAttentionCall(backward, mask, pointers, causal, scale, headDim, element);
  line("extern __shared__ __align__(128) unsigned char kiln_flash_smem[];");
  // The launch gives the block what launchShape computes (kiln-lower-to-step
  // records it): NVRTC refuses the kernel when the template disagrees.
  std::optional<int64_t> shared =
      launchShape(plan.kind, plan.kernel.getBody().front()).shared.getConstantValue();
  if (!shared)
    return fail(op, "tiled attention needs a constant shared memory size");
  line("static_assert(kiln_flash::" + std::string(backward ? "Backward" : "Forward") + "Smem<" +
       element + ", " + std::to_string(headDim) + ">::bytes == " + std::to_string(*shared) +
       ", \"the launch's shared memory is not kiln_flash's layout\");");
  if (!mask) {
    line("auto mask = [&](int64_t, int64_t, int64_t, int64_t) { return 0.f; };");
  } else {
    // value() may print statements: the accessor is a lambda body.
    open("auto mask = [&](int64_t b, int64_t h, int64_t i, int64_t j) -> float");
    std::string m = value(mask, broadcastIndex(mask, {"b", "h", "i", "j"}));
    line("return " +
         (elementOf(mask).isInteger(1) ? "(" + m + ") ? 0.f : -KILN_INF" : "(float)(" + m + ")") +
         ";");
    close("};");
  }
  std::string call = "kiln_flash::" + std::string(backward ? "backward" : "forward") + "<" +
                     element + ", " + std::to_string(headDim) + ">(" + strided + qd[0] + ", " +
                     qd[1] + ", " + kd[1] + ", " + qd[2] + ", " + kd[2] + ", " +
                     literal(scale, Float32Type::get(q.getContext())) + ", " +
                     (causal ? "true" : "false");
  // The stores index each result in its own layout.
  auto at = [&](int index, Value result, bool seqMajor) {
    return outName(index) + "[" + linear(stored(seqMajor, "b", "h", "i", "d"), dims(result)) + "]";
  };
  if (!backward) {
    line("auto storeO = [&](int64_t b, int64_t h, int64_t i, int64_t d, float x) { " +
         at(outputIndex(op->getResult(0)), op->getResult(0), layout.o) + " = " +
         store(elementOf(op->getResult(0)), "x") + "; };");
    line(call + ", mask, storeO, kiln_flash_smem);");
    return;
  }
  int dq = outputIndex(op->getResult(0)), dk = accumulatorIndex(op->getResult(1)),
      dv = accumulatorIndex(op->getResult(2));
  if (dq >= 0)
    line("auto storeDQ = [&](int64_t b, int64_t h, int64_t i, int64_t d, float x) { " +
         at(dq, op->getResult(0), layout.dq) + " = " + store(elementOf(op->getResult(0)), "x") +
         "; };");
  else
    line("auto storeDQ = [&](int64_t, int64_t, int64_t, int64_t, float) {};");
  // dK and dV: four consecutive elements of an fp32 accumulator at once.
  auto adder = [&](const char *name, int index, Value result, bool seqMajor) {
    if (index < 0) {
      line(std::string("auto ") + name + " = [&](int64_t, int64_t, int64_t, int64_t, float4) {};");
      return;
    }
    std::string target = "&" + at(index, result, seqMajor);
    line(std::string("auto ") + name +
         " = [&](int64_t b, int64_t h, int64_t i, int64_t d, float4 x) { " +
         (typeOf(plan.outputs[index]).getElementType().isF32()
              ? "kiln_flash::atomicAdd4(" + target + ", x);"
              : "kiln_atomic_add(" + target + ", x.x); kiln_atomic_add(" + target +
                    " + 1, x.y); kiln_atomic_add(" + target + " + 2, x.z); kiln_atomic_add(" +
                    target + " + 3, x.w);") +
         " };");
  };
  adder("addDK", dk, op->getResult(1), layout.dk);
  adder("addDV", dv, op->getResult(2), layout.dv);
  line(call + ", mask, storeDQ, addDK, addDV, " + (dq >= 0 ? "true" : "false") + ", " +
       (dk >= 0 ? "true" : "false") + ", " + (dv >= 0 ? "true" : "false") + ", kiln_flash_smem);");
}

// The kiln_fa90 variant (Printer::hopper): the same mask lambda, wrapped
// as an elementMask, and the call into kiln_fa90 with its own buffers.
void Printer::hopperAttentionCall(bool backward, Value mask, const std::string &pointers,
                                  bool causal, double scale, int64_t headDim,
                                  const std::string &element) {
  Operation *op = plan.anchor;
  AttentionLayout layout(op);
  SmallVector<std::string> qd = headMajor(dims(op->getOperand(0)), layout.q),
                           kd = headMajor(dims(op->getOperand(1)), layout.k);
  line("extern __shared__ __align__(1024) unsigned char kiln_fa90_smem[];");
  if (!mask) {
    line("auto mask = [&](int64_t, int64_t, int64_t, int64_t) { return 0.f; };");
  } else {
    open("auto mask = [&](int64_t b, int64_t h, int64_t i, int64_t j) -> float");
    std::string m = value(mask, broadcastIndex(mask, {"b", "h", "i", "j"}));
    line("return " +
         (elementOf(mask).isInteger(1) ? "(" + m + ") ? 0.f : -KILN_INF" : "(float)(" + m + ")") +
         ";");
    close("};");
  }
  std::string D = std::to_string(headDim);
  std::string shape =
      qd[0] + ", " + qd[1] + ", " + kd[1] + ", " + qd[2] + ", " + kd[2] + ", " +
      literal(scale, Float32Type::get(op->getContext())) + ", " + (causal ? "true" : "false") +
      ", kiln_fa90_smem, kiln_fa90::elementMask(mask)" +
      (layout.bits() ? ", kiln_fa90::Layout<" + std::to_string(layout.bits()) + ">()"
                     : std::string());
  if (!backward) {
    line("kiln_fa90::forward<" + element + ", " + D + ", kiln_fa90::defaultConsumers<" + D +
         ">()>(" + pointers + outName(outputIndex(op->getResult(0))) + ", kiln_fa90_lse, " + shape +
         ");");
    return;
  }
  line("kiln_fa90::bwd::backward<" + element + ", " + D + ">(" + pointers +
       "kiln_fa90_lse, kiln_fa90_dd, kiln_fa90_dqacc, kiln_fa90_dk, kiln_fa90_dv, " + shape + ");");
}

void Printer::attentionKernel(bool backward) {
  Operation *op = plan.anchor;
  if (isFlashAttention(op))
    return flashAttentionKernel(backward);
  Value q = op->getOperand(0), k = op->getOperand(1), v = op->getOperand(2);
  Value mask, dout;
  bool causal;
  std::optional<double> scaleAttr;
  if (auto a = dyn_cast<AttentionOp>(op)) {
    mask = a.getMask();
    causal = a.getCausal();
    if (a.getScale())
      scaleAttr = a.getScale()->convertToDouble();
  } else {
    auto g = cast<AttentionGradOp>(op);
    mask = g.getMask();
    dout = g.getGrad();
    causal = g.getCausal();
    if (g.getScale())
      scaleAttr = g.getScale()->convertToDouble();
  }
  // Sizes of the [B, H, S, D] views; each tensor is read and written at
  // its own layout's index (stored()).
  AttentionLayout layout(op);
  SmallVector<std::string> qd = headMajor(dims(q), layout.q), kd = headMajor(dims(k), layout.k),
                           vd = headMajor(dims(v), layout.v);
  auto qAt = [&](const char *d) { return stored(layout.q, "b", "h", "i", d); };
  auto kAt = [&](const char *d) { return stored(layout.k, "b", "hk", "j", d); };
  auto vAt = [&](const char *d) { return stored(layout.v, "b", "hk", "j", d); };
  auto doutAt = [&](const char *d) { return stored(layout.dout, "b", "h", "i", d); };
  RankedTensorType qt = typeOf(q);
  double scale = scaleAttr ? *scaleAttr : 1.0 / std::sqrt((double)qt.getDimSize(3));
  line("extern __shared__ float kiln_smem[];");
  line("__shared__ float red[33];");
  line("float *score = kiln_smem; // one row of probabilities");
  if (backward)
    line("float *dscore = kiln_smem + " + kd[2] + ";");
  line("const int64_t rows = " + qd[0] + " * " + qd[1] + " * " + qd[2] + ";");
  line("const int64_t group = " + qd[1] + " / " + kd[1] + "; // query heads per kv head");
  open("for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)");
  line("const int64_t i = row % " + qd[2] + ";");
  line("const int64_t h = (row / " + qd[2] + ") % " + qd[1] + ";");
  line("const int64_t b = row / (" + qd[2] + " * " + qd[1] + ");");
  line("const int64_t hk = h / group;");
  open("for (int64_t j = threadIdx.x; j < " + kd[2] + "; j += blockDim.x)");
  line("float s = 0.f;");
  open("for (int64_t d = 0; d < " + qd[3] + "; ++d)");
  line("s += " + value(q, qAt("d")) + " * " + value(k, kAt("d")) + ";");
  close();
  line("s *= " + literal(scale, Float32Type::get(q.getContext())) + ";");
  if (mask) {
    std::string m = value(mask, broadcastIndex(mask, {"b", "h", "i", "j"}));
    if (elementOf(mask).isInteger(1))
      line("if (!" + m + ") s = -KILN_INF;");
    else
      line("s += " + m + ";");
  }
  if (causal)
    line("if (j > i) s = -KILN_INF;");
  line("score[j] = s;");
  close();
  line("float mx = -KILN_INF;");
  open("for (int64_t j = threadIdx.x; j < " + kd[2] + "; j += blockDim.x)");
  line("mx = fmaxf(mx, score[j]);");
  close();
  line("mx = kiln_block_reduce(mx, red, true);");
  line("if (mx == -KILN_INF) mx = 0.f; // a fully masked row");
  line("float se = 0.f;");
  open("for (int64_t j = threadIdx.x; j < " + kd[2] + "; j += blockDim.x)");
  line("const float p = expf(score[j] - mx);");
  line("score[j] = p;");
  line("se += p;");
  close();
  line("se = " + blockSum("se") + ";");
  line("const float inv = se > 0.f ? 1.f / se : 0.f;");
  if (!backward) {
    int out = outputIndex(op->getResult(0));
    SmallVector<std::string> od = dims(op->getResult(0));
    bool oSeqMajor = layout.o;
    line("__syncthreads();");
    open("for (int64_t e = threadIdx.x; e < " + vd[3] + "; e += blockDim.x)");
    line("float acc = 0.f;");
    open("for (int64_t j = 0; j < " + kd[2] + "; ++j)");
    line("acc += score[j] * " + value(v, vAt("e")) + ";");
    close();
    line(outName(out) + "[" + linear(stored(oSeqMajor, "b", "h", "i", "e"), od) +
         "] = " + store(elementOf(op->getResult(0)), "acc * inv") + ";");
    close();
    line("__syncthreads(); // the next row reuses the score row");
    close();
    return;
  }
  // dP = dO v^T; dS = P * (dP - rowsum(P * dP)).
  line("float pdp = 0.f;");
  open("for (int64_t j = threadIdx.x; j < " + kd[2] + "; j += blockDim.x)");
  line("score[j] *= inv;");
  line("float dp = 0.f;");
  open("for (int64_t e = 0; e < " + vd[3] + "; ++e)");
  line("dp += " + value(dout, doutAt("e")) + " * " + value(v, vAt("e")) + ";");
  close();
  line("dscore[j] = dp;");
  line("pdp += score[j] * dp;");
  close();
  line("pdp = " + blockSum("pdp") + ";");
  open("for (int64_t j = threadIdx.x; j < " + kd[2] + "; j += blockDim.x)");
  line("dscore[j] = score[j] * (dscore[j] - pdp);");
  close();
  line("__syncthreads();");
  std::string sc = literal(scale, Float32Type::get(q.getContext()));
  int dq = outputIndex(op->getResult(0)), dk = accumulatorIndex(op->getResult(1)),
      dv = accumulatorIndex(op->getResult(2));
  if (dq >= 0) {
    open("for (int64_t d = threadIdx.x; d < " + qd[3] + "; d += blockDim.x)");
    line("float acc = 0.f;");
    open("for (int64_t j = 0; j < " + kd[2] + "; ++j)");
    line("acc += dscore[j] * " + value(k, kAt("d")) + ";");
    close();
    line(outName(dq) + "[" + linear(stored(layout.dq, "b", "h", "i", "d"), dims(op->getResult(0))) +
         "] = " + store(elementOf(op->getResult(0)), "acc * " + sc) + ";");
    close();
  }
  // dK and dV sum over query rows and grouped heads: atomic adds.
  if (dk >= 0) {
    open("for (int64_t t = threadIdx.x; t < " + kd[2] + " * " + qd[3] + "; t += blockDim.x)");
    line("const int64_t j = t / " + qd[3] + ", d = t % " + qd[3] + ";");
    line("kiln_atomic_add(&" + outName(dk) + "[" +
         linear(stored(layout.dk, "b", "hk", "j", "d"), dims(op->getResult(1))) +
         "], dscore[j] * " + value(q, qAt("d")) + " * " + sc + ");");
    close();
  }
  if (dv >= 0) {
    open("for (int64_t t = threadIdx.x; t < " + kd[2] + " * " + vd[3] + "; t += blockDim.x)");
    line("const int64_t j = t / " + vd[3] + ", e = t % " + vd[3] + ";");
    line("kiln_atomic_add(&" + outName(dv) + "[" +
         linear(stored(layout.dv, "b", "hk", "j", "e"), dims(op->getResult(2))) + "], score[j] * " +
         value(dout, doutAt("e")) + ");");
    close();
  }
  line("__syncthreads(); // the next row reuses the shared rows");
  close();
}

} // namespace kiln::codegen::detail
