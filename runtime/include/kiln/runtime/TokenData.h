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
  uint32_t getToken(uint64_t index) const;

  /// Where row \p row of step \p step starts: uniform over the valid starts
  /// (0 .. count - (seq+1)). Requires count >= seq + 1.
  uint64_t windowStart(uint64_t seed, uint64_t step, uint64_t row,
                       uint64_t seq) const;

  /// Checks that one window of seq+1 tokens fits in the file.
  Status checkWindow(int64_t seq) const;

  /// Fills \p windows with batch rows of seq+1 tokens for \p step: rows
  /// \p firstRow .. firstRow+batch-1 of the step's order (a data-parallel
  /// rank reads its own slice of the global batch). With \p vocabSize > 0,
  /// a token >= vocabSize is an error naming its position.
  Status sampleBatch(uint64_t seed, uint64_t step, int64_t batch, int64_t seq,
                     std::vector<uint32_t> &windows,
                     uint32_t vocabSize = 0, uint64_t firstRow = 0) const;

private:
  explicit TokenFile(artifact::MappedFile file) : file(std::move(file)) {}
  artifact::MappedFile file;
  std::string path;
  TokenDType dtype = TokenDType::U16;
  uint64_t count = 0;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TOKENDATA_H
