//===- BatchSource.h - What the training loop pulls per micro-batch -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The training loop asks a BatchSource for each micro-batch: host elements
// for the step's data inputs by their ONNX names, the shape to run them at,
// and how many label tokens count toward the loss. Sources are
// deterministic functions of their settings and a cursor (the number of
// micro-batches drawn so far), so a checkpoint that saves the cursor
// resumes the data order exactly. Two sources exist: random windows of a
// raw token file (TokenWindowSource, TokenData.h) and the documents of a
// fine-tuning dataset, padded or packed (DocumentData.h).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_BATCHSOURCE_H
#define KILN_RUNTIME_BATCHSOURCE_H

#include "kiln/artifact/Guards.h"
#include "kiln/runtime/Expected.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace kiln::runtime {

/// The label value that carries no loss (PyTorch's ignore_index).
constexpr int64_t kIgnoreLabel = -100;

/// One micro-batch, on the host.
struct MicroBatch {
  /// The shape it runs at: {"batch": B, "seq": S}, one of the shapes the
  /// source was made with.
  artifact::SymbolBindings sizes;
  /// Index of that shape in the source's shape list (the bucket).
  size_t shape = 0;
  /// B*S elements (row-major [batch, seq]) per data input name:
  /// "input_ids", "labels" (kIgnoreLabel where no loss), and where the
  /// source makes them "attention_mask" (1 keep, 0 padding) and
  /// "position_ids" (restarting at 0 per packed document).
  std::map<std::string, std::vector<int64_t>> inputs;
  /// Labels that are not kIgnoreLabel (what the loss averages over).
  int64_t countedTokens = 0;
  /// Positions holding real tokens (the rest is padding).
  int64_t realTokens = 0;
};

class BatchSource {
public:
  virtual ~BatchSource() = default;
  /// The data inputs it fills, e.g. {"input_ids", "labels"}.
  virtual std::vector<std::string> getInputNames() const = 0;
  /// Fills \p out with the micro-batch at the cursor and advances it. An
  /// error (a token outside the vocabulary, say) is one line naming the
  /// file and the position.
  virtual Status next(MicroBatch &out) = 0;
  /// Micro-batches drawn so far: what a checkpoint saves.
  virtual uint64_t getCursor() const = 0;
  /// Continues as if \p cursor micro-batches had been drawn.
  virtual Status seek(uint64_t cursor) = 0;
  /// One line for the log: file, counts, batching.
  virtual std::string describe() const = 0;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_BATCHSOURCE_H
