//===- DocumentData.h - Fine-tuning datasets: documents and loss masks -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A fine-tuning dataset (docs/data.md): documents of token ids with their
// boundaries and a per-token loss mask, in one memory-mapped file checked
// on open (magic, version, dtype, counts, the exact layout, every
// document's offset). DocumentSource turns it into micro-batches, either
// padded into the run's shape buckets (one document per row, the smallest
// bucket holding the batch's longest) or packed (several documents per
// fixed-length row, position ids restarting at each). Positions that are
// padding, prompt (mask 0) or a document's first token never carry a label.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DOCUMENTDATA_H
#define KILN_RUNTIME_DOCUMENTDATA_H

#include "kiln/artifact/FileIO.h"
#include "kiln/runtime/BatchSource.h"
#include "kiln/runtime/TokenData.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime {

/// The file's fixed header, little-endian (docs/data.md, "Layout").
struct DocumentHeader {
  static constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'D', 'O', 'C', 'S'};
  static constexpr uint32_t kVersion = 1;
  static constexpr uint64_t kSize = 80;
  uint32_t version = 0;
  TokenDType dtype = TokenDType::U16;
  uint64_t documents = 0, tokens = 0, counted = 0, maxToken = 0;
  uint64_t offsetsAt = 0, tokensAt = 0, maskAt = 0;
};

/// Whether \p path starts with the dataset magic (kiln-run train --data
/// takes either kind of file).
bool isDocumentFile(const std::string &path);

class DocumentFile {
public:
  /// Maps and validates \p path; an error is one line naming the file and
  /// what is wrong.
  static Expected<DocumentFile> open(const std::string &path);

  const std::string &getPath() const { return path; }
  const DocumentHeader &getHeader() const { return header; }
  uint64_t getDocumentCount() const { return header.documents; }
  uint64_t getTokenCount() const { return header.tokens; }
  /// Where document \p doc starts in the token array, and its length.
  uint64_t getDocumentBegin(uint64_t doc) const;
  uint64_t getDocumentLength(uint64_t doc) const;
  uint32_t getToken(uint64_t index) const;
  /// The loss mask: whether token \p index is a training target.
  bool isCounted(uint64_t index) const;
  /// "document D position P" of token \p index (for error messages).
  std::string locate(uint64_t index) const;
  /// An error unless the header's largest token id is below \p vocabSize.
  Status checkVocabulary(uint32_t vocabSize) const;
  /// Reads every token and mask bit: an error unless the header's counted
  /// tokens and largest id are the data's (kiln-run data-stats).
  Status checkContents() const;

private:
  explicit DocumentFile(artifact::MappedFile file) : file(std::move(file)) {}
  uint64_t offset(uint64_t doc) const;
  artifact::MappedFile file;
  std::string path;
  DocumentHeader header;
};

/// How documents become rows.
struct DocumentBatching {
  /// Pad: one document per row, padded to the smallest shape whose seq
  /// holds the micro-batch's longest. Pack: documents fill the rows of the
  /// one shape, first fit in data order, position ids restarting at each.
  enum class Mode { Pad, Pack } mode = Mode::Pad;
  /// labels[t] is the token after input t (scripts/export_hf.py's default,
  /// `--labels shifted`); otherwise labels are the inputs themselves (the
  /// model shifts them) and each document's first label is ignored, so no
  /// label crosses a boundary.
  bool shiftedLabels = true;
  /// Documents are read in a seeded permutation per epoch (shuffle), or in
  /// file order.
  bool shuffle = true;
  uint64_t seed = 0;
  /// With vocabSize > 0, a token >= vocabSize is an error naming its
  /// document and position.
  uint32_t vocabSize = 0;
};

/// What one document contributes: positions (inputs) it occupies after
/// truncation to at most \p seq.
struct DocumentSpan {
  uint64_t doc = 0;
  uint64_t positions = 0;
  uint64_t cut = 0; ///< positions truncated away
};

class DocumentSource : public BatchSource {
public:
  /// \p shapes: the run's shapes (one batch size; with Pack, one shape);
  /// \p inputs: the data inputs to fill (Pack needs "position_ids").
  static Expected<std::unique_ptr<DocumentSource>>
  create(const DocumentFile &file, std::vector<artifact::SymbolBindings> shapes,
         std::vector<std::string> inputs, DocumentBatching batching);

  std::vector<std::string> getInputNames() const override { return inputs; }
  Status next(MicroBatch &out) override;
  uint64_t getCursor() const override { return cursor; }
  Status seek(uint64_t to) override;
  std::string describe() const override;

  /// The rows of the next micro-batch without reading tokens: returns its
  /// shape index and gives, per row, the spans in order. Advances the read
  /// position; takes no document at or past data-order index \p end.
  size_t planNext(std::vector<std::vector<DocumentSpan>> &rows, uint64_t end = UINT64_MAX);
  /// Documents of the data order consumed so far.
  uint64_t getPosition() const { return position; }
  /// The document at sequence number \p index of the data order (epochs
  /// of a permutation each).
  uint64_t documentAt(uint64_t index) const;
  /// Positions a document of \p length tokens occupies before truncation.
  uint64_t positionsOf(uint64_t length) const {
    return batching.shiftedLabels ? (length ? length - 1 : 0) : length;
  }

private:
  DocumentSource(const DocumentFile &file, std::vector<artifact::SymbolBindings> shapes,
                 std::vector<std::string> inputs, DocumentBatching batching)
      : file(file), shapes(std::move(shapes)), inputs(std::move(inputs)), batching(batching) {}
  const DocumentFile &file;
  std::vector<artifact::SymbolBindings> shapes;
  std::vector<std::string> inputs;
  DocumentBatching batching;
  uint64_t cursor = 0;   ///< micro-batches drawn
  uint64_t position = 0; ///< documents of the data order consumed
  uint64_t usable = 0;   ///< documents with at least one position
  uint64_t cut = 0;      ///< documents longer than the largest seq
  int64_t maxSeq = 0;
};

/// One epoch of a batching, counted without reading tokens (what
/// `kiln-run data-stats` prints).
struct BatchingStats {
  uint64_t microBatches = 0, rows = 0;
  uint64_t slots = 0;     ///< rows times their shape's seq
  uint64_t positions = 0; ///< slots holding a document's token
  uint64_t documents = 0; ///< documents placed (those with a position)
  uint64_t truncatedDocuments = 0, truncatedPositions = 0;
};
/// Plans one epoch of \p file in file order (each document once) with
/// \p shapes and \p batching, as DocumentSource would.
Expected<BatchingStats> measureBatching(const DocumentFile &file,
                                        std::vector<artifact::SymbolBindings> shapes,
                                        DocumentBatching batching);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_DOCUMENTDATA_H
