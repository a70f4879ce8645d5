//===- TokenDataTest.cpp - Tests for token files and windows ----*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/runtime/TokenData.h"

#include <cstdlib>
#include <set>

using namespace kiln::runtime;
using kiln::artifact::FileWriter;
using kiln::artifact::writeFileAtomically;

static std::string tempDir;

static std::string writeTokens(const std::string &name, uint64_t count, int width,
                               size_t extraBytes = 0) {
  std::string bytes;
  for (uint64_t i = 0; i < count; ++i)
    for (int b = 0; b < width; ++b)
      bytes += static_cast<char>((i * 3 + 70000 * (width == 4)) >> (8 * b));
  bytes.append(extraBytes, '\0');
  std::string path = tempDir + "/" + name;
  Status status =
      writeFileAtomically(path, [&](FileWriter &writer) { return writer.write(bytes); });
  CHECK(status);
  return path;
}

static void testReadAndSample() {
  std::string path = writeTokens("u16.bin", 5000, 2);
  Expected<TokenFile> tokens = TokenFile::open(path, TokenDType::U16);
  CHECK(tokens && tokens->getTokenCount() == 5000);
  if (!tokens)
    return;
  CHECK(tokens->getToken(0) == 0 && tokens->getToken(4999) == (4999 * 3 & 0xFFFF));

  std::vector<uint32_t> first, again, other, nextStep;
  CHECK(tokens->sampleBatch(7, 0, 4, 16, first));
  CHECK(tokens->sampleBatch(7, 0, 4, 16, again));
  CHECK(tokens->sampleBatch(8, 0, 4, 16, other));
  CHECK(tokens->sampleBatch(7, 1, 4, 16, nextStep));
  CHECK(first.size() == 4 * 17);
  CHECK(first == again);    // same seed and step: same windows
  CHECK(first != other);    // another seed
  CHECK(first != nextStep); // another step
  // Each row is a contiguous window of the file.
  for (int row = 0; row < 4; ++row) {
    uint64_t start = tokens->windowStart(7, 0, row, 16);
    for (int i = 0; i <= 16; ++i)
      CHECK(first[row * 17 + i] == tokens->getToken(start + i));
  }
  // Pinned values: the sampler is part of the reproducibility contract
  // (changing it changes every run's data order).
  CHECK(tokens->windowStart(1, 2, 3, 16) == 4058);

  // Starts cover the valid range, including both ends, roughly uniformly.
  std::string small = writeTokens("small.bin", 20, 2);
  Expected<TokenFile> few = TokenFile::open(small, TokenDType::U16);
  std::vector<int> histogram(4, 0);
  for (uint64_t step = 0; step < 4000; ++step) {
    uint64_t start = few->windowStart(3, step, 0, 16);
    CHECK(start <= 3);
    if (start <= 3)
      ++histogram[start];
  }
  for (int count : histogram)
    CHECK(count > 800 && count < 1200);
  // A file of exactly seq+1 tokens has one window.
  CHECK(few->windowStart(3, 9, 0, 19) == 0);
}

static void testU32AndVocab() {
  std::string path = writeTokens("u32.bin", 100, 4);
  Expected<TokenFile> tokens = TokenFile::open(path, TokenDType::U32);
  CHECK(tokens && tokens->getToken(1) == 70003);
  std::vector<uint32_t> windows;
  Status status = tokens->sampleBatch(1, 0, 1, 8, windows, 32000);
  CHECK(!status);
  CHECK(status.getError().find(": token 7") != std::string::npos &&
        status.getError().find("is outside the vocabulary (32000 ids)") != std::string::npos);
  CHECK(tokens->sampleBatch(1, 0, 1, 8, windows, 80000));
}

static void testErrors() {
  std::string odd = writeTokens("odd.bin", 10, 2, 1);
  CHECK_EQ(TokenFile::open(odd, TokenDType::U16).getError(),
           odd + ": 21 bytes is not a whole number of uint16 tokens "
                 "(truncated, or the wrong --token-dtype?)");
  std::string empty = writeTokens("empty.bin", 0, 2);
  CHECK_EQ(TokenFile::open(empty, TokenDType::U32).getError(), empty + ": empty token file");
  std::string shortFile = writeTokens("short.bin", 100, 2);
  Expected<TokenFile> tokens = TokenFile::open(shortFile, TokenDType::U16);
  std::vector<uint32_t> windows;
  CHECK_EQ(tokens->sampleBatch(0, 0, 2, 1024, windows).getError(),
           shortFile + ": 100 tokens, but one training window needs seq+1 = "
                       "1025");
  CHECK_EQ(tokens->sampleBatch(0, 0, 0, 8, windows).getError(), "--batch must be at least 1");
  CHECK_EQ(TokenFile::open(tempDir + "/none.bin", TokenDType::U16).getError(),
           tempDir + "/none.bin: No such file or directory");
  CHECK(parseTokenDType("uint16") == TokenDType::U16);
  CHECK(parseTokenDType("u32") == TokenDType::U32);
  CHECK(!parseTokenDType("int8"));
}

int main() {
  char dir[] = "/tmp/kiln-tokens-test-XXXXXX";
  if (!::mkdtemp(dir))
    return 1;
  tempDir = dir;
  testReadAndSample();
  testU32AndVocab();
  testErrors();
  std::string cleanup = "rm -rf " + tempDir;
  if (std::system(cleanup.c_str()) != 0)
    std::fprintf(stderr, "could not remove %s\n", dir);
  return finishChecks();
}
