//===- TokenData.h - Token files and seeded training windows ----*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Training data for `kiln-run train --data`: a raw file of little-endian
// token ids, uint16 or uint32 (chosen by --token-dtype; no header, the
// layout nanoGPT-style preprocessing writes). Each step reads `batch` random
// windows of seq+1 tokens: inputs are a window's first seq tokens, labels its
// last seq. A window's start depends only on (seed, step, row) through a
// counter-based hash, so a run is reproducible and a resumed run sees the
// same windows it would have seen without stopping.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TOKENDATA_H
#define KILN_RUNTIME_TOKENDATA_H

#include "kiln/artifact/FileIO.h"
#include "kiln/runtime/BatchSource.h"
#include "kiln/runtime/Expected.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::runtime {

enum class TokenDType { U16, U32 };

/// "uint16"/"u16" or "uint32"/"u32".
std::optional<TokenDType> parseTokenDType(std::string_view text);

class TokenFile {
public:
  static Expected<TokenFile> open(const std::string &path, TokenDType dtype);

  uint64_t getTokenCount() const { return count; }
  const std::string &getPath() const { return path; }
  uint32_t getToken(uint64_t index) const;

  /// Where row \p row of step \p step starts: uniform over the valid starts
  /// (0 .. count - (seq+1)). Requires count >= seq + 1.
  uint64_t windowStart(uint64_t seed, uint64_t step, uint64_t row, uint64_t seq) const;

  /// Checks that one window of seq+1 tokens fits in the file.
  Status checkWindow(int64_t seq) const;

  /// Fills \p windows with batch rows of seq+1 tokens for \p step: rows
  /// \p firstRow .. firstRow+batch-1 of the step's order (a data-parallel
  /// rank reads its own slice of the global batch). With \p vocabSize > 0,
  /// a token >= vocabSize is an error naming its position.
  Status sampleBatch(uint64_t seed, uint64_t step, int64_t batch, int64_t seq,
                     std::vector<uint32_t> &windows, uint32_t vocabSize = 0,
                     uint64_t firstRow = 0) const;

private:
  explicit TokenFile(artifact::MappedFile file) : file(std::move(file)) {}
  artifact::MappedFile file;
  std::string path;
  TokenDType dtype = TokenDType::U16;
  uint64_t count = 0;
};

/// The raw token file as a BatchSource: micro-batch m runs shape m mod N of
/// \p shapes and reads the windows sampleBatch gives for (seed, m). Labels
/// ("labels", "targets", "target") are a window's last seq tokens, other
/// token inputs its first seq; "attention_mask" is all 1 and
/// "position_ids" 0..seq-1 (windows have no padding and no boundaries).
class TokenWindowSource : public BatchSource {
public:
  TokenWindowSource(const TokenFile &tokens, std::vector<artifact::SymbolBindings> shapes,
                    std::vector<std::string> inputs, uint64_t seed, uint32_t vocabSize)
      : tokens(tokens), shapes(std::move(shapes)), inputs(std::move(inputs)), seed(seed),
        vocabSize(vocabSize) {}
  std::vector<std::string> getInputNames() const override { return inputs; }
  Status next(MicroBatch &out) override;
  uint64_t getCursor() const override { return cursor; }
  Status seek(uint64_t to) override {
    cursor = to;
    return Status::success();
  }
  std::string describe() const override;
  /// Data parallelism: rank \p rank reads rows rank*batch .. rank*batch+batch-1
  /// of each micro-batch's window order, so the ranks together read what
  /// one source with world*batch rows would.
  void setShard(uint64_t rank) { shard = rank; }

private:
  const TokenFile &tokens;
  std::vector<artifact::SymbolBindings> shapes;
  std::vector<std::string> inputs;
  uint64_t seed;
  uint32_t vocabSize;
  uint64_t cursor = 0;
  uint64_t shard = 0;
  std::vector<uint32_t> windows;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TOKENDATA_H
