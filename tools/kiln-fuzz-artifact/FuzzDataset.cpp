//===- FuzzDataset.cpp - libFuzzer target for fine-tuning datasets --------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Each input is written to a file and opened with DocumentFile::open, as
// `kiln-run train --data` and `data-stats` do (docs/data.md). It must be
// accepted or refused with one line starting with the file's path; a crash,
// a sanitizer report or another message is a finding. An accepted file is
// then used the way a run uses one: its contents checked against the header
// (data-stats), padded into two buckets and packed, a few micro-batches
// each against a vocabulary of 1000 ids, a cursor restored, and one epoch
// of each batching planned.
//
// The custom mutator mostly edits the header's fields (a count, an offset,
// the dtype or version set to an interesting value) or one document offset,
// and otherwise leaves the bytes to libFuzzer.
//
//   kiln-fuzz-dataset CORPUS_DIR -max_total_time=600 -timeout=10 -rss_limit_mb=2048
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "kiln/runtime/DocumentData.h"

#include <unistd.h>

using namespace kiln::runtime;
using kiln::artifact::SymbolBindings;
using kiln::fuzz::Rng;

namespace {
const std::string &filePath() {
  static const std::string path = [] {
    const char *tmp = std::getenv("TMPDIR");
    std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-fuzz-ds-XXXXXX";
    if (!::mkdtemp(dir.data())) {
      std::perror("kiln-fuzz-dataset: mkdtemp");
      std::abort();
    }
    return dir + "/fuzz.kdocs";
  }();
  static const bool cleanup = std::atexit([] {
                                std::remove(filePath().c_str());
                                ::rmdir(filePath().substr(0, filePath().rfind('/')).c_str());
                              }) == 0;
  (void)cleanup;
  return path;
}

void put64(uint8_t *at, uint64_t value) {
  for (int i = 0; i < 8; ++i)
    at[i] = static_cast<uint8_t>(value >> (8 * i));
}

/// Draws a few micro-batches of one batching; every refusal must name the
/// file.
void drawBatches(const DocumentFile &file, std::vector<SymbolBindings> shapes,
                 std::vector<std::string> inputs, DocumentBatching batching,
                 const std::string &path) {
  Expected<std::unique_ptr<DocumentSource>> source =
      DocumentSource::create(file, shapes, inputs, batching);
  if (!source) {
    kiln::fuzz::checkMessage(source.getError(), path);
    return;
  }
  MicroBatch batch;
  for (int i = 0; i < 4; ++i) {
    if (Status s = (*source)->next(batch); !s) {
      kiln::fuzz::checkMessage(s.getError(), path);
      return;
    }
    int64_t elements = batch.sizes.at("batch") * batch.sizes.at("seq");
    for (const auto &[name, values] : batch.inputs)
      if (static_cast<int64_t>(values.size()) != elements) {
        std::fprintf(stderr, "kiln-fuzz-dataset: input '%s' has %zu elements, not %lld\n",
                     name.c_str(), values.size(), static_cast<long long>(elements));
        std::abort();
      }
    if (batch.countedTokens > batch.realTokens || batch.realTokens > elements) {
      std::fprintf(stderr, "kiln-fuzz-dataset: counted %lld, real %lld of %lld positions\n",
                   static_cast<long long>(batch.countedTokens),
                   static_cast<long long>(batch.realTokens), static_cast<long long>(elements));
      std::abort();
    }
  }
  (void)(*source)->seek(2);
  if (Expected<BatchingStats> stats = measureBatching(file, shapes, batching); !stats)
    kiln::fuzz::checkMessage(stats.getError(), path);
}
} // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize,
                                          unsigned int seed) {
  Rng rng(seed);
  if (size < DocumentHeader::kSize || rng.pick(4) == 0)
    return LLVMFuzzerMutate(data, size, maxSize);
  static const uint64_t values[] = {0,
                                    1,
                                    2,
                                    3,
                                    7,
                                    8,
                                    80,
                                    255,
                                    65535,
                                    65536,
                                    uint64_t{1} << 32,
                                    uint64_t{1} << 53,
                                    uint64_t{1} << 56,
                                    uint64_t{1} << 63,
                                    ~uint64_t{0}};
  uint64_t value = values[rng.pick(std::size(values))];
  switch (rng.pick(4)) {
  case 0: // version or dtype (u32)
    for (int i = 0; i < 4; ++i)
      data[8 + 4 * rng.pick(2) + i] = static_cast<uint8_t>(value >> (8 * i));
    break;
  case 1: // a u64 header field
    put64(data + 16 + 8 * rng.pick(8), value);
    break;
  case 2: { // a document offset, or a small change of one
    size_t offsets = (size - DocumentHeader::kSize) / 8;
    if (!offsets)
      return LLVMFuzzerMutate(data, size, maxSize);
    uint8_t *at = data + DocumentHeader::kSize + 8 * rng.pick(offsets);
    uint64_t old = 0;
    for (int i = 7; i >= 0; --i)
      old = old << 8 | at[i];
    put64(at, rng.pick(2) ? value : old + rng.pick(5) - 2);
    break;
  }
  default: // cut short
    return DocumentHeader::kSize + rng.pick(size - DocumentHeader::kSize);
  }
  return size;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &path = filePath();
  {
    std::FILE *file = std::fopen(path.c_str(), "wb");
    if (!file || (size && std::fwrite(data, 1, size, file) != size) || std::fclose(file) != 0) {
      std::perror("kiln-fuzz-dataset: cannot write the input file");
      std::abort();
    }
  }
  kiln::fuzz::lastInputAccepted() = false;
  Expected<DocumentFile> opened = DocumentFile::open(path);
  if (!opened) {
    kiln::fuzz::checkMessage(opened.getError(), path);
    return 0;
  }
  kiln::fuzz::lastInputAccepted() = true;
  const DocumentFile &file = *opened;
  if (Status s = file.checkContents(); !s)
    kiln::fuzz::checkMessage(s.getError(), path);
  DocumentBatching pad;
  pad.vocabSize = 1000;
  drawBatches(file, {{{"batch", 2}, {"seq", 8}}, {{"batch", 2}, {"seq", 16}}},
              {"input_ids", "attention_mask", "position_ids", "labels"}, pad, path);
  DocumentBatching pack = pad;
  pack.mode = DocumentBatching::Mode::Pack;
  pack.shiftedLabels = false;
  drawBatches(file, {{{"batch", 2}, {"seq", 16}}}, {"input_ids", "position_ids", "labels"}, pack,
              path);
  return 0;
}
