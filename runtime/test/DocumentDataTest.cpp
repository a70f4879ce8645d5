//===- DocumentDataTest.cpp - Tests for fine-tuning datasets ----*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The dataset files here come from a writer of docs/data.md's layout of its
// own (not scripts/kiln_dataset.py, which check_kiln_dataset.py tests
// against the same layout), and every micro-batch is checked element by
// element against arrays written out by hand.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/runtime/DocumentData.h"

#include <cstdlib>
#include <set>

using namespace kiln::runtime;
using kiln::artifact::FileWriter;
using kiln::artifact::SymbolBindings;
using kiln::artifact::writeFileAtomically;

static std::string tempDir;

namespace {
struct Doc {
  std::vector<uint32_t> tokens;
  size_t prompt = 0; ///< leading tokens without loss
};

void putU32(std::string &out, uint32_t v) {
  for (int i = 0; i < 4; ++i)
    out += static_cast<char>(v >> (8 * i));
}
void putU64(std::string &out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out += static_cast<char>(v >> (8 * i));
}

/// The bytes of a dataset of \p docs, token width \p width (2 or 4).
std::string datasetBytes(const std::vector<Doc> &docs, int width = 2) {
  std::vector<uint64_t> offsets = {0};
  std::vector<uint32_t> tokens;
  std::vector<bool> counted;
  for (const Doc &d : docs) {
    for (size_t i = 0; i < d.tokens.size(); ++i) {
      tokens.push_back(d.tokens[i]);
      counted.push_back(i >= d.prompt);
    }
    offsets.push_back(tokens.size());
  }
  uint64_t maxToken = 0, nCounted = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    maxToken = std::max<uint64_t>(maxToken, tokens[i]);
    nCounted += counted[i];
  }
  uint64_t T = tokens.size(), D = docs.size();
  uint64_t tokensAt = 80 + 8 * (D + 1), maskAt = tokensAt + (width * T + 7) / 8 * 8;
  std::string out = "KILNDOCS";
  putU32(out, 1);
  putU32(out, width == 2 ? 1 : 2);
  for (uint64_t v : {D, T, nCounted, maxToken, uint64_t{80}, tokensAt, maskAt, uint64_t{0}})
    putU64(out, v);
  for (uint64_t o : offsets)
    putU64(out, o);
  for (uint32_t t : tokens)
    for (int b = 0; b < width; ++b)
      out += static_cast<char>(t >> (8 * b));
  out.resize(maskAt, '\0');
  std::string mask((T + 7) / 8, '\0');
  for (size_t i = 0; i < T; ++i)
    if (counted[i])
      mask[i / 8] = static_cast<char>(mask[i / 8] | 1 << (i % 8));
  return out + mask;
}

std::string writeFile(const std::string &name, const std::string &bytes) {
  std::string path = tempDir + "/" + name;
  CHECK(writeFileAtomically(path, [&](FileWriter &w) { return w.write(bytes); }));
  return path;
}

/// "1 2 3" of a row.
std::string row(const std::vector<int64_t> &values, int64_t r, int64_t seq) {
  std::string text;
  for (int64_t i = 0; i < seq; ++i)
    text += (i ? " " : "") + std::to_string(values[r * seq + i]);
  return text;
}

// Three documents: a 2-token prompt then 4 of completion; a 3-token prompt
// then 2; 4 tokens all with loss.
const std::vector<Doc> kDocs = {
    {{11, 12, 13, 14, 15, 16}, 2}, {{21, 22, 23, 24, 25}, 3}, {{31, 32, 33, 34}, 0}};
} // namespace

static void testOpen() {
  std::string path = writeFile("three.kdocs", datasetBytes(kDocs));
  CHECK(isDocumentFile(path));
  Expected<DocumentFile> file = DocumentFile::open(path);
  CHECK(file);
  if (!file)
    return;
  CHECK(file->getDocumentCount() == 3 && file->getTokenCount() == 15);
  CHECK(file->getHeader().counted == 10 && file->getHeader().maxToken == 34);
  CHECK(file->getDocumentBegin(1) == 6 && file->getDocumentLength(1) == 5);
  CHECK(file->getToken(7) == 22 && file->getToken(14) == 34);
  CHECK(!file->isCounted(1) && file->isCounted(2) && !file->isCounted(8) && file->isCounted(9));
  CHECK_EQ(file->locate(8), "document 1 position 2");
  CHECK(file->checkContents());
  // uint32 tokens, past 65535.
  std::string wide = writeFile("wide.kdocs", datasetBytes({{{70000, 5, 80000}, 1}}, 4));
  Expected<DocumentFile> w = DocumentFile::open(wide);
  CHECK(w && w->getToken(0) == 70000 && w->getToken(2) == 80000 &&
        w->getHeader().dtype == TokenDType::U32);
}

static void testPadding() {
  Expected<DocumentFile> file = DocumentFile::open(tempDir + "/three.kdocs");
  DocumentBatching batching;
  batching.shuffle = false;
  std::vector<SymbolBindings> shapes = {{{"batch", 2}, {"seq", 4}}, {{"batch", 2}, {"seq", 8}}};
  Expected<std::unique_ptr<DocumentSource>> source = DocumentSource::create(
      *file, shapes, {"input_ids", "attention_mask", "position_ids", "labels"}, batching);
  CHECK(source);
  if (!source)
    return;
  MicroBatch b;
  CHECK((*source)->next(b));
  // Documents 0 (5 positions) and 1 (4): the bucket of 8 holds both.
  CHECK(b.shape == 1 && b.sizes.at("seq") == 8 && b.sizes.at("batch") == 2);
  const auto &in = b.inputs;
  CHECK_EQ(row(in.at("input_ids"), 0, 8), "11 12 13 14 15 0 0 0");
  CHECK_EQ(row(in.at("labels"), 0, 8), "-100 13 14 15 16 -100 -100 -100");
  CHECK_EQ(row(in.at("attention_mask"), 0, 8), "1 1 1 1 1 0 0 0");
  CHECK_EQ(row(in.at("position_ids"), 0, 8), "0 1 2 3 4 5 6 7");
  CHECK_EQ(row(in.at("input_ids"), 1, 8), "21 22 23 24 0 0 0 0");
  CHECK_EQ(row(in.at("labels"), 1, 8), "-100 -100 24 25 -100 -100 -100 -100");
  CHECK(b.countedTokens == 6 && b.realTokens == 9);
  // Document 2 (3 positions) and, the epoch over, document 0 again.
  CHECK((*source)->next(b));
  CHECK(b.shape == 1);
  CHECK_EQ(row(b.inputs.at("labels"), 0, 8), "32 33 34 -100 -100 -100 -100 -100");
  // Then documents 1 and 2: 4 positions at most, the bucket of 4.
  CHECK((*source)->next(b));
  CHECK(b.shape == 0 && b.sizes.at("seq") == 4);
  CHECK_EQ(row(b.inputs.at("input_ids"), 0, 4), "21 22 23 24");
  CHECK_EQ(row(b.inputs.at("labels"), 0, 4), "-100 -100 24 25");
  CHECK_EQ(row(b.inputs.at("input_ids"), 1, 4), "31 32 33 0");
  CHECK_EQ(row(b.inputs.at("attention_mask"), 1, 4), "1 1 1 0");
  CHECK((*source)->getCursor() == 3);

  // Longer than every bucket: truncated to the largest.
  std::vector<SymbolBindings> small = {{{"batch", 1}, {"seq", 3}}};
  Expected<std::unique_ptr<DocumentSource>> cut =
      DocumentSource::create(*file, small, {"input_ids", "labels"}, batching);
  CHECK(cut && (*cut)->next(b));
  CHECK((*cut)->describe().find("; 2 documents longer than 3 positions are cut to it") !=
        std::string::npos);
  CHECK_EQ(row(b.inputs.at("input_ids"), 0, 3), "11 12 13");
  CHECK_EQ(row(b.inputs.at("labels"), 0, 3), "-100 13 14");
}

static void testPacking() {
  Expected<DocumentFile> file = DocumentFile::open(tempDir + "/three.kdocs");
  DocumentBatching batching;
  batching.shuffle = false;
  batching.mode = DocumentBatching::Mode::Pack;
  std::vector<SymbolBindings> shapes = {{{"batch", 1}, {"seq", 8}}};
  Expected<std::unique_ptr<DocumentSource>> source =
      DocumentSource::create(*file, shapes, {"input_ids", "position_ids", "labels"}, batching);
  CHECK(source);
  if (!source)
    return;
  MicroBatch b;
  // Document 0 (5) leaves 3: document 1 (4) does not fit, so it starts the
  // next micro-batch; the padding is a block of positions of its own.
  CHECK((*source)->next(b));
  CHECK_EQ(row(b.inputs.at("input_ids"), 0, 8), "11 12 13 14 15 0 0 0");
  CHECK_EQ(row(b.inputs.at("position_ids"), 0, 8), "0 1 2 3 4 0 1 2");
  CHECK_EQ(row(b.inputs.at("labels"), 0, 8), "-100 13 14 15 16 -100 -100 -100");
  // Documents 1 and 2 together; document 1's last label is its own last
  // token, never document 2's first.
  CHECK((*source)->next(b));
  CHECK_EQ(row(b.inputs.at("input_ids"), 0, 8), "21 22 23 24 31 32 33 0");
  CHECK_EQ(row(b.inputs.at("position_ids"), 0, 8), "0 1 2 3 0 1 2 0");
  CHECK_EQ(row(b.inputs.at("labels"), 0, 8), "-100 -100 24 25 32 33 34 -100");
  CHECK(b.countedTokens == 5 && b.realTokens == 7);

  // Two rows per micro-batch: first fit puts document 2 beside document 0.
  shapes = {{{"batch", 2}, {"seq", 8}}};
  Expected<std::unique_ptr<DocumentSource>> two =
      DocumentSource::create(*file, shapes, {"input_ids", "position_ids", "labels"}, batching);
  CHECK(two && (*two)->next(b));
  CHECK_EQ(row(b.inputs.at("input_ids"), 0, 8), "11 12 13 14 15 31 32 33");
  CHECK_EQ(row(b.inputs.at("position_ids"), 0, 8), "0 1 2 3 4 0 1 2");
  CHECK_EQ(row(b.inputs.at("input_ids"), 1, 8), "21 22 23 24 0 0 0 0");
  CHECK_EQ(row(b.inputs.at("position_ids"), 1, 8), "0 1 2 3 0 1 2 3");

  // Unshifted labels (the model shifts): each document's first is ignored,
  // so the shift never reads the next document's first token.
  batching.shiftedLabels = false;
  // Document 2's first token carries loss in the file, yet not here.
  shapes = {{{"batch", 1}, {"seq", 16}}};
  Expected<std::unique_ptr<DocumentSource>> unshifted =
      DocumentSource::create(*file, shapes, {"input_ids", "position_ids", "labels"}, batching);
  CHECK(unshifted && (*unshifted)->next(b));
  CHECK_EQ(row(b.inputs.at("input_ids"), 0, 16), "11 12 13 14 15 16 21 22 23 24 25 31 32 33 34 0");
  CHECK_EQ(row(b.inputs.at("labels"), 0, 16),
           "-100 -100 13 14 15 16 -100 -100 -100 24 25 -100 32 33 34 -100");
  CHECK_EQ(row(b.inputs.at("position_ids"), 0, 16), "0 1 2 3 4 5 0 1 2 3 4 0 1 2 3 0");
}

static void testOrderAndSeek() {
  std::vector<Doc> docs;
  for (uint32_t d = 0; d < 7; ++d)
    docs.push_back({{100 + d, 200 + d}, 0});
  std::string path = writeFile("seven.kdocs", datasetBytes(docs));
  Expected<DocumentFile> file = DocumentFile::open(path);
  DocumentBatching batching;
  batching.seed = 5;
  std::vector<SymbolBindings> shapes = {{{"batch", 1}, {"seq", 1}}};
  auto order = [&](uint64_t seed, int n) {
    batching.seed = seed;
    Expected<std::unique_ptr<DocumentSource>> s =
        DocumentSource::create(*file, shapes, {"input_ids", "labels"}, batching);
    std::vector<int64_t> firsts;
    MicroBatch b;
    for (int i = 0; i < n; ++i) {
      CHECK((*s)->next(b));
      firsts.push_back(b.inputs.at("input_ids")[0] - 100);
    }
    return firsts;
  };
  std::vector<int64_t> a = order(5, 14), again = order(5, 14), other = order(6, 14);
  CHECK(a == again);
  CHECK(a != other);
  // Every epoch holds each document once, in an order of its own.
  std::set<int64_t> first(a.begin(), a.begin() + 7), second(a.begin() + 7, a.end());
  CHECK(first.size() == 7 && second.size() == 7 && *first.rbegin() == 6);
  CHECK(!std::equal(a.begin(), a.begin() + 7, a.begin() + 7));
  // seek(k) continues exactly where k micro-batches left off.
  batching.seed = 5;
  Expected<std::unique_ptr<DocumentSource>> s =
      DocumentSource::create(*file, shapes, {"input_ids", "labels"}, batching);
  CHECK((*s)->seek(9));
  MicroBatch b;
  CHECK((*s)->next(b) && b.inputs.at("input_ids")[0] - 100 == a[9]);
  CHECK((*s)->getCursor() == 10);
}

static void testBadFiles() {
  std::string good = datasetBytes(kDocs);
  auto openError = [&](const std::string &name, std::string bytes) {
    return DocumentFile::open(writeFile(name, bytes)).getError();
  };
  std::string p = tempDir + "/";
  CHECK_EQ(openError("cut.kdocs", good.substr(0, good.size() - 3)),
           p + "cut.kdocs: 143 bytes, but 3 documents of 15 uint16 tokens need 146 (truncated)");
  CHECK_EQ(openError("head.kdocs", good.substr(0, 40)),
           p + "head.kdocs: 40 bytes, shorter than the 80-byte header (truncated)");
  CHECK_EQ(openError("extra.kdocs", good + "x"),
           p + "extra.kdocs: 147 bytes, but 3 documents of 15 uint16 tokens need 146 (trailing "
               "bytes, or the wrong counts)");
  std::string bytes = good;
  bytes[12] = 3;
  CHECK_EQ(openError("dtype.kdocs", bytes),
           p + "dtype.kdocs: token dtype code 3 is neither uint16 (1) nor uint32 (2)");
  // A uint32 code over uint16 data: the counts no longer fit the size.
  bytes = good;
  bytes[12] = 2;
  CHECK(openError("dtype2.kdocs", bytes).find("section offsets") != std::string::npos);
  bytes = good;
  bytes[8] = 2;
  CHECK_EQ(openError("version.kdocs", bytes),
           p + "version.kdocs: dataset version 2; this kiln-run reads version 1");
  CHECK_EQ(openError("raw.kdocs", std::string(200, '\x01')),
           p + "raw.kdocs: not a Kiln dataset (no KILNDOCS magic; scripts/kiln_dataset.py writes "
               "one)");
  CHECK(!isDocumentFile(p + "raw.kdocs"));
  // Offsets: document 1 ends (at 2) before it starts (at 6).
  bytes = good;
  bytes[80 + 16] = 2;
  CHECK_EQ(openError("offsets.kdocs", bytes),
           p + "offsets.kdocs: document 1 ends at token 2, before it starts at 6 (bad offsets)");
  bytes = good;
  bytes[80 + 24] = 14;
  CHECK_EQ(openError("last.kdocs", bytes),
           p + "last.kdocs: the last document ends at token 14, not at the 15 tokens (bad "
               "offsets)");
  bytes = good;
  bytes[16] = 0;
  CHECK(openError("none.kdocs", bytes) == p + "none.kdocs: no documents");
  // A header that understates the counted tokens is caught by data-stats.
  bytes = good;
  bytes[32] = 9;
  Expected<DocumentFile> lying = DocumentFile::open(writeFile("lying.kdocs", bytes));
  CHECK(lying);
  CHECK_EQ(lying->checkContents().getError(),
           p + "lying.kdocs: the header says 9 tokens carry loss, the mask has 10 (file "
               "corrupt)");
}

static void testVocabulary() {
  Expected<DocumentFile> file = DocumentFile::open(tempDir + "/three.kdocs");
  DocumentBatching batching;
  batching.vocabSize = 30;
  std::vector<SymbolBindings> shapes = {{{"batch", 1}, {"seq", 8}}};
  Expected<std::unique_ptr<DocumentSource>> source =
      DocumentSource::create(*file, shapes, {"input_ids", "labels"}, batching);
  CHECK_EQ(source.getError(), tempDir + "/three.kdocs: document 2 position 0: token 31 is "
                                        "outside the vocabulary (30 ids)");
  // A header claiming a smaller largest id: the batch itself catches it.
  std::string bytes = datasetBytes(kDocs);
  bytes[40] = 20;
  Expected<DocumentFile> lying = DocumentFile::open(writeFile("small-max.kdocs", bytes));
  batching.shuffle = false;
  Expected<std::unique_ptr<DocumentSource>> late =
      DocumentSource::create(*lying, shapes, {"input_ids", "labels"}, batching);
  CHECK(late);
  MicroBatch b;
  CHECK((*late)->next(b)); // document 0: ids up to 16
  CHECK((*late)->next(b)); // document 1: up to 25
  CHECK_EQ((*late)->next(b).getError(), tempDir + "/small-max.kdocs: document 2 position 0: "
                                                  "token 31 is outside the vocabulary (30 ids)");
}

static void testCreateErrors() {
  Expected<DocumentFile> file = DocumentFile::open(tempDir + "/three.kdocs");
  DocumentBatching pack;
  pack.mode = DocumentBatching::Mode::Pack;
  std::vector<SymbolBindings> one = {{{"batch", 1}, {"seq", 8}}};
  CHECK(DocumentSource::create(*file, one, {"input_ids", "labels"}, pack)
            .getError()
            .find("--batching pack: the step has no position_ids input") == 0);
  CHECK(DocumentSource::create(*file, one,
                               {"input_ids", "attention_mask", "position_ids", "labels"}, pack)
            .getError()
            .find("--batching pack: the step has an attention_mask input") == 0);
  std::vector<SymbolBindings> two = {{{"batch", 1}, {"seq", 8}}, {{"batch", 1}, {"seq", 16}}};
  CHECK_EQ(
      DocumentSource::create(*file, two, {"input_ids", "position_ids", "labels"}, pack).getError(),
      "--batching pack fills rows of one length: give one --seq");
  std::vector<SymbolBindings> batches = {{{"batch", 1}, {"seq", 8}}, {{"batch", 2}, {"seq", 8}}};
  CHECK(DocumentSource::create(*file, batches, {"input_ids", "labels"}, {})
            .getError()
            .find("one --batch") != std::string::npos);
  CHECK(DocumentSource::create(*file, one, {"input_ids", "pixel_values"}, {})
            .getError()
            .find("data input 'pixel_values' is not one a dataset fills") != std::string::npos);
  std::string single = writeFile("single.kdocs", datasetBytes({{{5}, 0}, {{6}, 0}}));
  Expected<DocumentFile> ones = DocumentFile::open(single);
  CHECK_EQ(DocumentSource::create(*ones, one, {"input_ids", "labels"}, {}).getError(),
           single + ": no document has a position to train on (each needs 2 tokens or more)");
}

static void testStats() {
  Expected<DocumentFile> file = DocumentFile::open(tempDir + "/three.kdocs");
  DocumentBatching batching;
  Expected<BatchingStats> pad =
      measureBatching(*file, {{{"batch", 1}, {"seq", 4}}, {{"batch", 1}, {"seq", 8}}}, batching);
  // Rows of 8, 4 and 4 for 5, 4 and 3 positions.
  CHECK(pad && pad->rows == 3 && pad->slots == 16 && pad->positions == 12 &&
        pad->microBatches == 3 && pad->truncatedDocuments == 0);
  batching.mode = DocumentBatching::Mode::Pack;
  Expected<BatchingStats> pack = measureBatching(*file, {{{"batch", 1}, {"seq", 8}}}, batching);
  CHECK(pack && pack->rows == 2 && pack->slots == 16 && pack->positions == 12);
  Expected<BatchingStats> tight = measureBatching(*file, {{{"batch", 1}, {"seq", 4}}}, batching);
  // 5 positions cut to 4; then 4; then 3.
  CHECK(tight && tight->rows == 3 && tight->positions == 11 && tight->truncatedDocuments == 1 &&
        tight->truncatedPositions == 1);
}

int main() {
  char dir[] = "/tmp/kiln-documents-test-XXXXXX";
  if (!::mkdtemp(dir))
    return 1;
  tempDir = dir;
  testOpen();
  testPadding();
  testPacking();
  testOrderAndSeek();
  testBadFiles();
  testVocabulary();
  testCreateErrors();
  testStats();
  std::string cleanup = "rm -rf " + tempDir;
  if (std::system(cleanup.c_str()) != 0)
    std::fprintf(stderr, "could not remove %s\n", dir);
  return finishChecks();
}
