//===- GraphDialect.h - Kiln graph dialect ----------------------*- C++ -*-===//

#ifndef KILN_DIALECT_GRAPH_GRAPHDIALECT_H
#define KILN_DIALECT_GRAPH_GRAPHDIALECT_H

#include "mlir/IR/Dialect.h"

#include "kiln/Dialect/Graph/GraphDialect.h.inc"

namespace kiln {
/// On a kiln.parameter: the PyTorch parameter the stored tensor was folded
/// from when the exporter renamed it (pre-transposed `val_95` holds
/// `model.layers.0.self_attn.q_proj.weight` transposed).
inline constexpr llvm::StringLiteral kSourceNameAttr = "kiln.source_name";
/// On a 2-D parameter with kiln.source_name: true when it holds the
/// transpose of that weight (a folded Transpose), false when the weight
/// itself; absent when the graph does not say.
inline constexpr llvm::StringLiteral kSourceTransposedAttr = "kiln.source_transposed";
/// On a kiln.parameter: the other PyTorch names of the weight it is read
/// from (tied weights, one tensor under several names; a checkpoint may
/// keep any one of them).
inline constexpr llvm::StringLiteral kSourceAliasesAttr = "kiln.source_aliases";
/// On a kiln.parameter: the exporter's list of the model's parameters
/// (kiln.parameters metadata) does not hold it: a buffer or a constant the
/// exporter made (RoPE's inv_freq), which `--train all` leaves frozen.
inline constexpr llvm::StringLiteral kBufferAttr = "kiln.buffer";
/// On a kiln.parameter: how a parameter the checkpoint lacks is created
/// (LoRA adapters); on a function: the init program's role.
inline constexpr llvm::StringLiteral kInitAttr = "kiln.init";
/// On a function argument: the seed of counter-based random numbers
/// (dropout masks, initializers); a step input, so replays reproduce.
inline constexpr llvm::StringLiteral kRngSeedAttr = "kiln.rng_seed";
/// On a frozen kiln.parameter: a gradient divides by its elements
/// (kiln-norm-grad-from-output), so the runtime and the interpreter refuse
/// weights with a zero element when they load them.
inline constexpr llvm::StringLiteral kNonzeroAttr = "kiln.nonzero";
} // namespace kiln

#endif // KILN_DIALECT_GRAPH_GRAPHDIALECT_H
