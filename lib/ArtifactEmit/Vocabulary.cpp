//===- Vocabulary.cpp - The token vocabulary a step reads -----------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// meta "vocab_size", which kiln-run checks every token of the training data
// against: the rows of the embedding table the token input indexes (a
// gather on axis 0 of a 2-D table whose indices come from a data input),
// else the class dimension of the cross entropy the labels index. Read off
// ops and shapes, as kiln report reads the architecture.
//
//===----------------------------------------------------------------------===//

#include "kiln/ArtifactEmit/Sections.h"

#include "kiln/Dialect/Graph/GraphOps.h"

#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SmallVector.h"

using namespace mlir;

namespace {
/// The data input (an argument named by kiln.name and not the loss) that
/// \p value is computed from, if any; "position_ids" only when no other
/// input feeds it (position embeddings are gathered from those).
std::optional<StringRef> tokenInput(Value value, func::FuncOp step) {
  llvm::SmallVector<Value> work = {value};
  llvm::DenseSet<Value> seen;
  std::optional<StringRef> found;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    if (auto arg = dyn_cast<BlockArgument>(v)) {
      if (arg.getOwner()->getParentOp() != step)
        continue;
      auto name = step.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "kiln.name");
      if (name && name.getValue() != "loss" && (!found || *found == "position_ids"))
        found = name.getValue();
      continue;
    }
    if (Operation *def = v.getDefiningOp())
      for (Value operand : def->getOperands())
        work.push_back(operand);
  }
  return found;
}
} // namespace

std::optional<int64_t> kiln::stepVocabularySize(func::FuncOp step) {
  int64_t embedding = 0, classes = 0;
  step.walk([&](Operation *op) {
    if (auto gather = dyn_cast<GatherOp>(op)) {
      RankedTensorType table = gather.getData().getType();
      if (gather.getAxis() != 0 || table.getRank() != 2 || !table.hasStaticShape())
        return;
      std::optional<StringRef> input = tokenInput(gather.getIndices(), step);
      if (input && *input != "position_ids")
        embedding = std::max(embedding, table.getDimSize(0));
    } else if (auto loss = dyn_cast<CrossEntropyOp>(op)) {
      RankedTensorType logits = loss.getLogits().getType();
      int64_t last = logits.getRank() - 1;
      if (last >= 0 && !logits.isDynamicDim(last) && tokenInput(loss.getLabels(), step))
        classes = std::max(classes, logits.getDimSize(last));
    }
  });
  if (embedding)
    return embedding;
  if (classes)
    return classes;
  return std::nullopt;
}
