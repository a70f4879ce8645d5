//===- AttentionLayout.cpp - seq-major attention operands -----------------===//
//
// kiln.attention and kiln.attention_grad may keep any of their tensors
// [B, S, H, D] (`seq_major`). The reference runs them on [B, H, S, D] copies
// and swaps the marked results back: a copy moves elements without rounding,
// so the values are exactly those of the head-major op.
//
//===----------------------------------------------------------------------===//

#include "Common.h"

#include "kiln/Dialect/Graph/GraphOps.h"

#include <deque>

using namespace mlir;

namespace kiln::interp {

HostTensor swapSeqAndHeads(const HostTensor &in) {
  Shape shape = {in.shape[0], in.shape[2], in.shape[1], in.shape[3]};
  HostTensor out(in.dtype, shape);
  int64_t heads = in.shape[2], seq = in.shape[1], d = in.shape[3];
  // out[b, h, s, :] = in[b, s, h, :]; rows of d are contiguous on both sides.
  for (int64_t b = 0; b < in.shape[0]; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t s = 0; s < seq; ++s)
        for (int64_t e = 0; e < d; ++e)
          copyElement(out, ((b * heads + h) * seq + s) * d + e, in,
                      ((b * seq + s) * heads + h) * d + e);
  return out;
}

absl::StatusOr<Tensors> runHeadMajor(Operation *op, Operands args,
                                     llvm::ArrayRef<int> operandRoles,
                                     llvm::ArrayRef<unsigned> resultRoles,
                                     llvm::function_ref<absl::StatusOr<Tensors>(Operands)> run) {
  std::deque<HostTensor> copies; // stable addresses
  std::vector<const HostTensor *> views(args.begin(), args.end());
  for (size_t i = 0; i < views.size() && i < operandRoles.size(); ++i) {
    if (operandRoles[i] < 0 || !isSeqMajor(op, operandRoles[i]))
      continue;
    if (views[i]->shape.size() != 4)
      return absl::InvalidArgumentError("a seq_major attention operand is not rank 4");
    copies.push_back(swapSeqAndHeads(*views[i]));
    views[i] = &copies.back();
  }
  absl::StatusOr<Tensors> results = run(views);
  if (!results.ok())
    return results.status();
  for (size_t i = 0; i < results->size() && i < resultRoles.size(); ++i)
    if (isSeqMajor(op, resultRoles[i]))
      (*results)[i] = swapSeqAndHeads((*results)[i]);
  return results;
}

} // namespace kiln::interp
