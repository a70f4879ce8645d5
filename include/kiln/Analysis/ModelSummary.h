//===- ModelSummary.h - A model's architecture, read off its graph -*- C++ -*-===//
//
// What `kiln report` says about a model before compiling it: layers,
// hidden size, attention heads, head dim, vocabulary, parameter count —
// inferred from the ops and their shapes (attention, embedding gathers,
// linear layers, the loss), never from file or tensor names.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ANALYSIS_MODELSUMMARY_H
#define KILN_ANALYSIS_MODELSUMMARY_H

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <string>
#include <vector>

namespace kiln {

/// What an attention's mask is. A mask built from sizes and constants
/// alone is evaluated at a small size (AttentionMask.cpp), so a causal
/// pattern the raising left as a mask is told from an all-keep one.
enum class AttentionMask {
  None,
  Causal,  // keeps exactly key <= query: a causal mask not raised to `causal`
  AllKeep, // keeps everything (an exporter's mask for "no padding")
  Pattern, // another fixed pattern (a window, a bias), or not evaluable
  Input,   // depends on a function argument (a padding mask)
};
llvm::StringRef attentionMaskName(AttentionMask mask);
/// Whether `value` is computed from an argument of `func` (through any op).
bool dependsOnArgument(mlir::Value value, mlir::func::FuncOp func);
/// Classifies `mask`, an operand of attention (or added to its scores) in
/// `func`.
AttentionMask classifyAttentionMask(mlir::Value mask, mlir::func::FuncOp func);

/// One forward attention: a kiln.attention op (raised), or the exporter's
/// softmax(q kᵀ) whose scores come from a 4-D matmul (not raised).
struct AttentionSite {
  mlir::Operation *op = nullptr; // kiln.attention, or the kiln.softmax
  bool raised = false;
  bool causal = false;
  AttentionMask mask = AttentionMask::None;
  /// The mask keeps no key after its query, though maybe fewer (a sliding
  /// window; causal and the same packed document): a decoder's attention.
  bool maskWithinCausal = false;
  /// Static sizes; 0 when symbolic. kvHeads is what the scores matmul reads
  /// when not raised (the heads after any grouped-query repeat).
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  mlir::Type element;
};

/// The forward attention sites of `func`, in program order (attention
/// gradients and recomputed clones are not sites).
std::vector<AttentionSite> findAttention(mlir::func::FuncOp func);

struct ModelArchitecture {
  /// "decoder" (every attention causal, by attribute or by its mask, or
  /// a mask within causal: windows, packed documents),
  /// "encoder" (other attention) or "feed-forward".
  std::string family;
  /// "LM" (the loss is over the vocabulary), "classifier (N classes)", ...
  std::string head;
  /// "RMSNorm", "LayerNorm" or "" (neither).
  std::string norm;
  /// "SiLU (gated)", "SiLU", "GELU", "ReLU", ... or "".
  std::string activation;
  /// Attention sites; without attention, linear layers.
  int64_t layers = 0;
  /// Embedding width, else the first linear layer's output width.
  int64_t hidden = 0;
  /// Of the first attention site; `uniform` says whether all agree.
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  bool uniformAttention = true;
  /// Rows of the largest embedding table gathered by a model input.
  int64_t vocab = 0;
  int64_t linearLayers = 0;
  /// Float parameters (elements and bytes), each name once.
  int64_t parameters = 0, parameterBytes = 0;
  std::vector<AttentionSite> attention;
};

/// The architecture of an imported model's function.
ModelArchitecture summarizeArchitecture(mlir::func::FuncOp func);

} // namespace kiln

#endif // KILN_ANALYSIS_MODELSUMMARY_H
