//===- TokenData.cpp - Token files and seeded training windows --*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/TokenData.h"

using namespace kiln::runtime;

namespace {
/// SplitMix64's finalizer: a bijection on 64 bits with full avalanche.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
} // namespace

std::optional<TokenDType> kiln::runtime::parseTokenDType(std::string_view text) {
  if (text == "uint16" || text == "u16")
    return TokenDType::U16;
  if (text == "uint32" || text == "u32")
    return TokenDType::U32;
  return std::nullopt;
}

Expected<TokenFile> TokenFile::open(const std::string &path, TokenDType dtype) {
  Expected<artifact::MappedFile> mapped = artifact::MappedFile::open(path);
  if (!mapped)
    return mapped.takeError();
  TokenFile tokens(std::move(*mapped));
  tokens.path = path;
  tokens.dtype = dtype;
  size_t width = dtype == TokenDType::U16 ? 2 : 4;
  const char *name = dtype == TokenDType::U16 ? "uint16" : "uint32";
  if (tokens.file.size() % width)
    return Error{path + ": " + std::to_string(tokens.file.size()) +
                 " bytes is not a whole number of " + name +
                 " tokens (truncated, or the wrong --token-dtype?)"};
  tokens.count = tokens.file.size() / width;
  if (tokens.count == 0)
    return Error{path + ": empty token file"};
  return tokens;
}

uint32_t TokenFile::getToken(uint64_t index) const {
  const unsigned char *p = file.data();
  if (dtype == TokenDType::U16)
    return p[2 * index] | p[2 * index + 1] << 8;
  return p[4 * index] | p[4 * index + 1] << 8 | p[4 * index + 2] << 16 |
         static_cast<uint32_t>(p[4 * index + 3]) << 24;
}

uint64_t TokenFile::windowStart(uint64_t seed, uint64_t step, uint64_t row, uint64_t seq) const {
  uint64_t starts = count - seq; // count - (seq + 1) + 1
  uint64_t hash = mix(mix(mix(seed) ^ step) ^ row);
  // Lemire's multiply-shift: maps the hash onto [0, starts) without a
  // division; the bias is below starts / 2^64.
  return static_cast<uint64_t>((static_cast<unsigned __int128>(hash) * starts) >> 64);
}

Status TokenFile::checkWindow(int64_t seq) const {
  if (seq < 1)
    return Error{"--seq must be at least 1"};
  if (count < static_cast<uint64_t>(seq) + 1)
    return Error{path + ": " + std::to_string(count) +
                 " tokens, but one training window needs seq+1 = " + std::to_string(seq + 1)};
  return Status::success();
}

Status TokenFile::sampleBatch(uint64_t seed, uint64_t step, int64_t batch, int64_t seq,
                              std::vector<uint32_t> &windows, uint32_t vocabSize,
                              uint64_t firstRow) const {
  if (Status status = checkWindow(seq); !status)
    return status;
  if (batch < 1)
    return Error{"--batch must be at least 1"};
  windows.resize(static_cast<size_t>(batch) * (seq + 1));
  for (int64_t row = 0; row < batch; ++row) {
    uint64_t start = windowStart(seed, step, firstRow + static_cast<uint64_t>(row), seq);
    for (int64_t i = 0; i <= seq; ++i) {
      uint32_t token = getToken(start + i);
      if (vocabSize && token >= vocabSize)
        return Error{path + ": token " + std::to_string(token) + " at position " +
                     std::to_string(start + i) + " is outside the vocabulary (" +
                     std::to_string(vocabSize) + " ids)"};
      windows[row * (seq + 1) + i] = token;
    }
  }
  return Status::success();
}

Status TokenWindowSource::next(MicroBatch &out) {
  const artifact::SymbolBindings &sizes = shapes[cursor % shapes.size()];
  int64_t batch = sizes.at("batch"), seq = sizes.at("seq");
  if (Status s = tokens.sampleBatch(seed, cursor, batch, seq, windows, vocabSize,
                                    shard * static_cast<uint64_t>(batch));
      !s)
    return s;
  out.sizes = sizes;
  out.shape = cursor % shapes.size();
  out.inputs.clear();
  size_t elements = static_cast<size_t>(batch * seq);
  for (const std::string &name : inputs) {
    std::vector<int64_t> &values = out.inputs[name];
    values.resize(elements);
    bool labels = name == "labels" || name == "targets" || name == "target";
    for (int64_t b = 0; b < batch; ++b)
      for (int64_t i = 0; i < seq; ++i)
        values[b * seq + i] = name == "attention_mask" ? 1
                              : name == "position_ids" ? i
                                                       : windows[b * (seq + 1) + i + labels];
  }
  out.countedTokens = out.realTokens = batch * seq;
  ++cursor;
  return Status::success();
}

std::string TokenWindowSource::describe() const {
  const artifact::SymbolBindings &first = shapes.front();
  return "data " + tokens.getPath() + ": " + std::to_string(tokens.getTokenCount()) + " tokens, " +
         std::to_string(first.at("batch")) + " windows of " + std::to_string(first.at("seq") + 1) +
         " per step" + (shapes.size() > 1 ? " at the first shape" : "") + " (seed " +
         std::to_string(seed) + ")";
}
