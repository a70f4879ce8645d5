//===- ModelSummary.cpp - A model's architecture, read off its graph ------===//
//
// Everything comes from ops and shapes: attention sites give layers, heads
// and head dim; an embedding gather fed by a model input gives vocabulary
// and hidden size; the loss gives the head. Names are never parsed — an
// exporter's names say nothing reliable about the architecture.
//
//===----------------------------------------------------------------------===//

#include "kiln/Analysis/ModelSummary.h"

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/LinearWeights.h"
#include "kiln/Dialect/Graph/MaskAnalysis.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

using namespace mlir;

namespace kiln {
namespace {

int64_t staticDim(Value v, unsigned index) {
  auto type = cast<RankedTensorType>(v.getType());
  if (index >= type.getRank() || type.isDynamicDim(index))
    return 0;
  return type.getDimSize(index);
}

/// The 4-D matmul an exported softmax's scores come from, through the
/// scale, mask and casts in front of it (q kᵀ · scale + mask); `mask`
/// receives an operand added or selected in on the way.
MatmulOp scoresMatmul(Value scores, Value &mask) {
  for (int depth = 0; depth < 8; ++depth) {
    Operation *def = scores.getDefiningOp();
    if (!def)
      return nullptr;
    if (auto matmul = dyn_cast<MatmulOp>(def))
      return cast<RankedTensorType>(matmul.getLhs().getType()).getRank() == 4 ? matmul : nullptr;
    if (isa<CastOp>(def)) {
      scores = def->getOperand(0);
      continue;
    }
    if (isa<SelectOp>(def)) {
      // where(mask, scores, fill) or where(mask, fill, scores): the fill is
      // a constant or its broadcast. (In the second form the mask keeps
      // where false: its evaluation then reads as a fixed pattern.)
      mask = def->getOperand(0);
      Value a = def->getOperand(1);
      bool aIsFill = a.getType() != scores.getType() ||
                     isa_and_nonnull<ConstantOp, ExpandOp>(a.getDefiningOp());
      scores = aIsFill ? def->getOperand(2) : a;
      continue;
    }
    if (!isa<AddOp, SubOp, MulOp, DivOp>(def))
      return nullptr;
    // The operand of the scores' own rank and shape is the scores; the
    // other is the scale (a scalar) or the mask (added).
    Value lhs = def->getOperand(0), rhs = def->getOperand(1);
    bool lhsFull = lhs.getType() == scores.getType();
    Value other = lhsFull ? rhs : lhs;
    scores = lhsFull ? lhs : rhs;
    if (isa<AddOp, SubOp>(def) && cast<RankedTensorType>(other.getType()).getRank() > 0)
      mask = other;
  }
  return nullptr;
}

} // namespace

std::vector<AttentionSite> findAttention(func::FuncOp func) {
  std::vector<AttentionSite> sites;
  func.walk([&](Operation *op) {
    if (op->hasAttr("kiln.recomputed"))
      return;
    if (auto attention = dyn_cast<AttentionOp>(op)) {
      AttentionSite site;
      site.op = op;
      site.raised = true;
      site.causal = attention.getCausal();
      // Heads are dim 2 of a seq-major ([B, S, H, D]) operand.
      site.heads = staticDim(attention.getQuery(), isSeqMajor(op, kAttnQuery) ? 2 : 1);
      site.kvHeads = staticDim(attention.getKey(), isSeqMajor(op, kAttnKey) ? 2 : 1);
      site.headDim = staticDim(attention.getQuery(), 3);
      site.element = cast<RankedTensorType>(attention.getQuery().getType()).getElementType();
      if (Value mask = attention.getMask()) {
        site.mask = classifyAttentionMask(mask, func);
        site.maskWithinCausal = maskImpliesCausal(mask);
      }
      sites.push_back(site);
      return;
    }
    auto softmax = dyn_cast<SoftmaxOp>(op);
    if (!softmax)
      return;
    auto type = cast<RankedTensorType>(softmax.getType());
    auto axis = static_cast<int64_t>(softmax.getAxis());
    if (type.getRank() != 4 || (axis != 3 && axis != -1))
      return;
    Value mask;
    MatmulOp matmul = scoresMatmul(softmax.getInput(), mask);
    if (!matmul)
      return;
    AttentionSite site;
    site.op = op;
    site.heads = staticDim(matmul.getLhs(), 1);
    site.kvHeads = staticDim(matmul.getRhs(), 1);
    site.headDim = staticDim(matmul.getLhs(), matmul.getTransposeA() ? 2 : 3);
    site.element = cast<RankedTensorType>(matmul.getLhs().getType()).getElementType();
    if (mask) {
      site.mask = classifyAttentionMask(mask, func);
      site.maskWithinCausal = maskImpliesCausal(mask);
    }
    sites.push_back(site);
  });
  return sites;
}

ModelArchitecture summarizeArchitecture(func::FuncOp func) {
  ModelArchitecture arch;
  arch.attention = findAttention(func);

  llvm::StringSet<> counted;
  int64_t firstLinearOut = 0;
  bool rms = false, layerNorm = false, silu = false, gatedSilu = false, gelu = false, relu = false;
  int64_t classes = 0;
  func.walk([&](Operation *op) {
    if (op->hasAttr("kiln.recomputed"))
      return;
    if (auto param = dyn_cast<ParameterOp>(op)) {
      RankedTensorType type = param.getType();
      if (isa<FloatType>(type.getElementType()) && type.hasStaticShape() &&
          counted.insert(param.getName()).second) {
        arch.parameters += type.getNumElements();
        arch.parameterBytes += type.getNumElements() * type.getElementTypeBitWidth() / 8;
      }
    } else if (auto matmul = dyn_cast<MatmulOp>(op)) {
      if (std::optional<LinearWeight> w = matchLinearWeight(matmul)) {
        ++arch.linearLayers;
        if (!firstLinearOut)
          firstLinearOut = w->outFeatures;
      }
    } else if (auto gather = dyn_cast<GatherOp>(op)) {
      auto table = gather.getData().getDefiningOp<ParameterOp>();
      if (table && gather.getAxis() == 0 && table.getType().getRank() == 2 &&
          table.getType().hasStaticShape() && dependsOnArgument(gather.getIndices(), func) &&
          table.getType().getDimSize(0) > arch.vocab) {
        arch.vocab = table.getType().getDimSize(0);
        arch.hidden = table.getType().getDimSize(1);
      }
    } else if (isa<RmsNormOp>(op)) {
      rms = true;
    } else if (isa<LayerNormOp>(op)) {
      layerNorm = true;
    } else if (isa<SiluOp>(op)) {
      silu = true;
      // SwiGLU: silu(x W_gate) * (x W_up).
      for (Operation *user : op->getUsers())
        if (isa<MulOp>(user))
          for (Value operand : user->getOperands())
            if (auto up = operand.getDefiningOp<MatmulOp>(); up && matchLinearWeight(up))
              gatedSilu = true;
    } else if (isa<GeluOp>(op)) {
      gelu = true;
    } else if (isa<ReluOp>(op)) {
      relu = true;
    } else if (auto loss = dyn_cast<CrossEntropyOp>(op)) {
      classes = staticDim(loss.getLogits(),
                          cast<RankedTensorType>(loss.getLogits().getType()).getRank() - 1);
    }
  });
  if (!arch.hidden)
    arch.hidden = firstLinearOut;
  arch.norm = rms && layerNorm ? "RMSNorm + LayerNorm"
              : rms            ? "RMSNorm"
              : layerNorm      ? "LayerNorm"
                               : "";
  arch.activation = gatedSilu ? "SiLU (gated)" : silu ? "SiLU" : gelu ? "GELU" : relu ? "ReLU" : "";
  if (classes)
    arch.head =
        classes == arch.vocab ? "LM" : "classifier (" + std::to_string(classes) + " classes)";

  if (arch.attention.empty()) {
    arch.family = "feed-forward";
    arch.layers = arch.linearLayers;
    return arch;
  }
  bool decoder = llvm::all_of(arch.attention, [](const AttentionSite &s) {
    return s.causal || s.mask == AttentionMask::Causal || s.maskWithinCausal;
  });
  arch.family = decoder ? "decoder" : "encoder";
  arch.layers = arch.attention.size();
  const AttentionSite &first = arch.attention.front();
  arch.heads = first.heads;
  arch.kvHeads = first.kvHeads;
  arch.headDim = first.headDim;
  arch.uniformAttention = llvm::all_of(arch.attention, [&](const AttentionSite &s) {
    return s.heads == first.heads && s.kvHeads == first.kvHeads && s.headDim == first.headDim;
  });
  return arch;
}

} // namespace kiln
