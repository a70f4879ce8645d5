//===- FuzzSupport.h - Shared pieces of the artifact fuzz targets -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_FUZZ_SUPPORT_H
#define KILN_FUZZ_SUPPORT_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <random>
#include <string>

/// libFuzzer's own mutator (ReplayMain.cpp stands in outside libFuzzer).
extern "C" size_t LLVMFuzzerMutate(uint8_t *data, size_t size, size_t maxSize);

namespace kiln::fuzz {

/// A seeded choice maker for the custom mutators.
class Rng {
public:
  explicit Rng(unsigned seed) : engine(seed) {}
  /// Uniform in [0, n); 0 for n == 0.
  size_t pick(size_t n) { return n ? std::uniform_int_distribution<size_t>(0, n - 1)(engine) : 0; }

private:
  std::mt19937 engine;
};

/// Whether the last input was accepted (the replay tool checks ok-*/bad-*
/// names against it).
inline bool &lastInputAccepted() {
  static bool accepted = false;
  return accepted;
}

/// A refusal must be one line naming the file: "<origin>: <what>".
/// Anything else is a finding (abort, so libFuzzer keeps the input).
inline void checkMessage(const std::string &message, const std::string &origin) {
  bool named = message.compare(0, origin.size() + 2, origin + ": ") == 0 &&
               message.size() > origin.size() + 2;
  bool oneLine = message.find('\n') == std::string::npos && message.find('\r') == std::string::npos;
  if (named && oneLine)
    return;
  std::fprintf(stderr, "kiln-fuzz: the error is not one line naming %s:\n%s\n", origin.c_str(),
               message.c_str());
  std::abort();
}

/// A JSON-aware edit of \p text: a number or a string literal swapped for
/// one that decoders must handle (limits, negatives, unknown symbols).
inline bool editJsonToken(std::string &text, Rng &rng) {
  static const char *const numbers[] = {"0",
                                        "-1",
                                        "1",
                                        "2",
                                        "255",
                                        "256",
                                        "257",
                                        "4096",
                                        "2147483647",
                                        "2147483648",
                                        "4294967296",
                                        "4611686018427387904",
                                        "9223372036854775807",
                                        "-9223372036854775808",
                                        "1e308",
                                        "0.5",
                                        "true",
                                        "null",
                                        "[]",
                                        "{}"};
  static const char *const strings[] = {"\"\"",
                                        "\"batch\"",
                                        "\"seq\"",
                                        "\"len\"",
                                        "\"F32\"",
                                        "\"BF16\"",
                                        "\"U8\"",
                                        "\"BOOL\"",
                                        "\"param\"",
                                        "\"state\"",
                                        "\"input\"",
                                        "\"rng_seed\"",
                                        "\"alloc\"",
                                        "\"view\"",
                                        "\"launch\"",
                                        "\"gemm\"",
                                        "\"weight\"",
                                        "\"module0\"",
                                        "\"batch*seq + 1\"",
                                        "\"9223372036854775807*batch\"",
                                        "\"-seq\"",
                                        "\"step/main__seq_8\"",
                                        "\"kiln-step\""};
  if (text.empty())
    return false;
  size_t start = rng.pick(text.size());
  for (size_t at = start; at < text.size(); ++at) {
    char c = text[at];
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t end = at;
      while (end < text.size() && std::strchr("+-0123456789.eE", text[end]))
        ++end;
      text.replace(at, end - at, numbers[rng.pick(std::size(numbers))]);
      return true;
    }
    if (c == '"') {
      size_t end = text.find('"', at + 1);
      if (end == std::string::npos)
        return false;
      text.replace(at, end + 1 - at, strings[rng.pick(std::size(strings))]);
      return true;
    }
  }
  return false;
}
} // namespace kiln::fuzz

#endif // KILN_FUZZ_SUPPORT_H
