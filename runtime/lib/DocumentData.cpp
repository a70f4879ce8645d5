//===- DocumentData.cpp - Fine-tuning datasets: documents and loss masks ---===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/DocumentData.h"

#include <algorithm>
#include <cstring>

using namespace kiln::runtime;
using kiln::artifact::SymbolBindings;

namespace {
uint64_t readU64(const unsigned char *p) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i)
    value = value << 8 | p[i];
  return value;
}
uint32_t readU32(const unsigned char *p) {
  return p[0] | p[1] << 8 | p[2] << 16 | static_cast<uint32_t>(p[3]) << 24;
}

/// SplitMix64's finalizer (as the token windows use).
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// A bijection of [0, n) keyed by \p key: a four-round Feistel network on
/// the smallest even number of bits covering n, cycle-walked back into
/// range (at most a few rounds on average). No table: O(1) memory for any
/// number of documents.
uint64_t permute(uint64_t index, uint64_t n, uint64_t key) {
  if (n <= 1)
    return index;
  unsigned bits = 64 - __builtin_clzll(n - 1);
  unsigned half = (bits + 1) / 2;
  uint64_t mask = (uint64_t{1} << half) - 1;
  do {
    uint64_t left = index >> half, right = index & mask;
    for (uint64_t round = 0; round < 4; ++round) {
      uint64_t f = mix(right ^ mix(key + round)) & mask;
      uint64_t next = left ^ f;
      left = right;
      right = next;
    }
    index = left << half | right;
  } while (index >= n);
  return index;
}

bool isLabelInput(const std::string &name) {
  return name == "labels" || name == "targets" || name == "target";
}

std::string dtypeName(TokenDType dtype) { return dtype == TokenDType::U16 ? "uint16" : "uint32"; }
} // namespace

//===----------------------------------------------------------------------===//
// The file
//===----------------------------------------------------------------------===//

bool kiln::runtime::isDocumentFile(const std::string &path) {
  Expected<artifact::MappedFile> mapped = artifact::MappedFile::open(path);
  return mapped && mapped->size() >= 8 &&
         std::memcmp(mapped->data(), DocumentHeader::kMagic, 8) == 0;
}

Expected<DocumentFile> DocumentFile::open(const std::string &path) {
  Expected<artifact::MappedFile> mapped = artifact::MappedFile::open(path);
  if (!mapped)
    return mapped.takeError();
  DocumentFile data(std::move(*mapped));
  data.path = path;
  auto fail = [&](const std::string &what) { return Error{path + ": " + what}; };
  const unsigned char *p = data.file.data();
  uint64_t size = data.file.size();
  if (size < 8 || std::memcmp(p, DocumentHeader::kMagic, 8) != 0)
    return fail("not a Kiln dataset (no KILNDOCS magic; scripts/kiln_dataset.py writes one)");
  if (size < DocumentHeader::kSize)
    return fail(std::to_string(size) + " bytes, shorter than the " +
                std::to_string(DocumentHeader::kSize) + "-byte header (truncated)");
  DocumentHeader &h = data.header;
  h.version = readU32(p + 8);
  uint32_t dtypeCode = readU32(p + 12);
  h.documents = readU64(p + 16);
  h.tokens = readU64(p + 24);
  h.counted = readU64(p + 32);
  h.maxToken = readU64(p + 40);
  h.offsetsAt = readU64(p + 48);
  h.tokensAt = readU64(p + 56);
  h.maskAt = readU64(p + 64);
  if (h.version != DocumentHeader::kVersion)
    return fail("dataset version " + std::to_string(h.version) + "; this kiln-run reads version " +
                std::to_string(DocumentHeader::kVersion));
  if (dtypeCode != 1 && dtypeCode != 2)
    return fail("token dtype code " + std::to_string(dtypeCode) +
                " is neither uint16 (1) nor uint32 (2)");
  h.dtype = dtypeCode == 1 ? TokenDType::U16 : TokenDType::U32;
  if (readU64(p + 72) != 0)
    return fail("reserved header field is not 0 (written by a newer converter?)");
  if (h.documents == 0)
    return fail("no documents");
  uint64_t width = h.dtype == TokenDType::U16 ? 2 : 4;
  // The layout is fixed by the counts; every bound is checked without
  // overflow (counts near 2^64 from a hostile header).
  constexpr uint64_t kLimit = uint64_t{1} << 56;
  if (h.documents >= kLimit / 8 || h.tokens >= kLimit / 8)
    return fail("header counts (" + std::to_string(h.documents) + " documents, " +
                std::to_string(h.tokens) + " tokens) are implausibly large (corrupt header)");
  uint64_t offsetsAt = DocumentHeader::kSize;
  uint64_t tokensAt = offsetsAt + 8 * (h.documents + 1);
  uint64_t maskAt = tokensAt + (width * h.tokens + 7) / 8 * 8;
  uint64_t end = maskAt + (h.tokens + 7) / 8;
  if (h.offsetsAt != offsetsAt || h.tokensAt != tokensAt || h.maskAt != maskAt)
    return fail("section offsets (offsets " + std::to_string(h.offsetsAt) + ", tokens " +
                std::to_string(h.tokensAt) + ", mask " + std::to_string(h.maskAt) +
                ") do not follow from the counts (expected " + std::to_string(offsetsAt) + ", " +
                std::to_string(tokensAt) + ", " + std::to_string(maskAt) + "; corrupt header)");
  if (size != end)
    return fail(std::to_string(size) + " bytes, but " + std::to_string(h.documents) +
                " documents of " + std::to_string(h.tokens) + " " + dtypeName(h.dtype) +
                " tokens need " + std::to_string(end) +
                (size < end ? " (truncated)" : " (trailing bytes, or the wrong counts)"));
  if (h.counted > h.tokens)
    return fail("header says " + std::to_string(h.counted) + " counted tokens of " +
                std::to_string(h.tokens) + " (corrupt header)");
  if (h.maxToken >= (width == 2 ? uint64_t{1} << 16 : uint64_t{1} << 32))
    return fail("header's largest token id " + std::to_string(h.maxToken) + " does not fit " +
                dtypeName(h.dtype) + " (corrupt header)");
  // Every boundary: starts at 0, never decreasing, ends at the token count.
  uint64_t previous = data.offset(0);
  if (previous != 0)
    return fail("document 0 starts at token " + std::to_string(previous) + ", not 0 (bad offsets)");
  for (uint64_t d = 1; d <= h.documents; ++d) {
    uint64_t at = data.offset(d);
    if (at < previous || at > h.tokens)
      return fail("document " + std::to_string(d - 1) + " ends at token " + std::to_string(at) +
                  (at < previous ? ", before it starts at " + std::to_string(previous)
                                 : ", past the " + std::to_string(h.tokens) + " tokens") +
                  " (bad offsets)");
    previous = at;
  }
  if (previous != h.tokens)
    return fail("the last document ends at token " + std::to_string(previous) + ", not at the " +
                std::to_string(h.tokens) + " tokens (bad offsets)");
  return data;
}

uint64_t DocumentFile::offset(uint64_t doc) const {
  return readU64(file.data() + header.offsetsAt + 8 * doc);
}

uint64_t DocumentFile::getDocumentBegin(uint64_t doc) const { return offset(doc); }

uint64_t DocumentFile::getDocumentLength(uint64_t doc) const {
  return offset(doc + 1) - offset(doc);
}

uint32_t DocumentFile::getToken(uint64_t index) const {
  const unsigned char *p = file.data() + header.tokensAt;
  if (header.dtype == TokenDType::U16)
    return p[2 * index] | p[2 * index + 1] << 8;
  return readU32(p + 4 * index);
}

bool DocumentFile::isCounted(uint64_t index) const {
  return file.data()[header.maskAt + index / 8] >> (index % 8) & 1;
}

std::string DocumentFile::locate(uint64_t index) const {
  // The document holding token `index`: binary search over the offsets.
  uint64_t lo = 0, hi = header.documents;
  while (hi - lo > 1) {
    uint64_t mid = lo + (hi - lo) / 2;
    (offset(mid) <= index ? lo : hi) = mid;
  }
  while (lo + 1 < header.documents && offset(lo + 1) <= index)
    ++lo; // past empty documents
  return "document " + std::to_string(lo) + " position " + std::to_string(index - offset(lo));
}

Status DocumentFile::checkVocabulary(uint32_t vocabSize) const {
  if (!vocabSize || header.maxToken < vocabSize)
    return Status::success();
  // Name the first offending token (a scan only when something is wrong).
  for (uint64_t i = 0; i < header.tokens; ++i)
    if (getToken(i) >= vocabSize)
      return Error{path + ": " + locate(i) + ": token " + std::to_string(getToken(i)) +
                   " is outside the vocabulary (" + std::to_string(vocabSize) + " ids)"};
  return Error{path + ": header's largest token id " + std::to_string(header.maxToken) +
               " is outside the vocabulary (" + std::to_string(vocabSize) +
               " ids), but no token is (corrupt header)"};
}

Status DocumentFile::checkContents() const {
  uint64_t counted = 0, largest = 0;
  for (uint64_t i = 0; i < header.tokens; ++i) {
    counted += isCounted(i);
    largest = std::max<uint64_t>(largest, getToken(i));
  }
  if (counted != header.counted)
    return Error{path + ": the header says " + std::to_string(header.counted) +
                 " tokens carry loss, the mask has " + std::to_string(counted) + " (file corrupt)"};
  if (largest != header.maxToken)
    return Error{path + ": the header's largest token id is " + std::to_string(header.maxToken) +
                 ", the data's " + std::to_string(largest) + " (file corrupt)"};
  return Status::success();
}

//===----------------------------------------------------------------------===//
// Batching
//===----------------------------------------------------------------------===//

Expected<std::unique_ptr<DocumentSource>> DocumentSource::create(const DocumentFile &file,
                                                                 std::vector<SymbolBindings> shapes,
                                                                 std::vector<std::string> inputs,
                                                                 DocumentBatching batching) {
  const std::string &path = file.getPath();
  if (shapes.empty())
    return Error{path + ": no shape to batch into"};
  for (const SymbolBindings &sizes : shapes)
    if (sizes.at("batch") != shapes.front().at("batch"))
      return Error{path + ": a dataset's micro-batches have one --batch (its --seq list gives "
                          "the buckets)"};
  if (batching.mode == DocumentBatching::Mode::Pack && shapes.size() > 1)
    return Error{"--batching pack fills rows of one length: give one --seq"};
  bool hasPositions = false, hasMask = false;
  for (const std::string &name : inputs) {
    if (name != "input_ids" && !isLabelInput(name) && name != "attention_mask" &&
        name != "position_ids")
      return Error{path + ": the step's data input '" + name +
                   "' is not one a dataset fills (input_ids, labels, attention_mask, "
                   "position_ids); feed it with --input"};
    hasPositions |= name == "position_ids";
    hasMask |= name == "attention_mask";
  }
  if (batching.mode == DocumentBatching::Mode::Pack) {
    if (!hasPositions)
      return Error{"--batching pack: the step has no position_ids input, so packed documents would "
                   "attend to each other (export with scripts/export_hf.py --position-ids)"};
    if (hasMask)
      return Error{"--batching pack: the step has an attention_mask input; a Hugging Face export "
                   "restricts attention to each packed document only without one (export "
                   "with --position-ids alone)"};
  }
  if (Status s = file.checkVocabulary(batching.vocabSize); !s)
    return Error{s.getError()};
  std::unique_ptr<DocumentSource> source(
      new DocumentSource(file, std::move(shapes), std::move(inputs), batching));
  for (const SymbolBindings &sizes : source->shapes)
    source->maxSeq = std::max(source->maxSeq, sizes.at("seq"));
  for (uint64_t d = 0; d < file.getDocumentCount(); ++d) {
    uint64_t positions = source->positionsOf(file.getDocumentLength(d));
    source->usable += positions > 0;
    source->cut += positions > static_cast<uint64_t>(source->maxSeq);
  }
  if (!source->usable)
    return Error{path + ": no document has a position to train on (each needs " +
                 std::string(batching.shiftedLabels ? "2 tokens" : "1 token") + " or more)"};
  return source;
}

uint64_t DocumentSource::documentAt(uint64_t index) const {
  uint64_t n = file.getDocumentCount();
  uint64_t epoch = index / n, within = index % n;
  if (!batching.shuffle)
    return within;
  return permute(within, n, mix(mix(batching.seed) ^ epoch));
}

size_t DocumentSource::planNext(std::vector<std::vector<DocumentSpan>> &rows, uint64_t end) {
  size_t batch = static_cast<size_t>(shapes.front().at("batch"));
  rows.assign(batch, {});
  auto span = [&](uint64_t index, int64_t limit) {
    DocumentSpan s;
    s.doc = documentAt(index);
    uint64_t p = positionsOf(file.getDocumentLength(s.doc));
    s.positions = std::min<uint64_t>(p, static_cast<uint64_t>(limit));
    s.cut = p - s.positions;
    return s;
  };
  if (batching.mode == DocumentBatching::Mode::Pack) {
    int64_t seq = shapes.front().at("seq");
    std::vector<uint64_t> used(batch, 0);
    while (position < end) {
      DocumentSpan s = span(position, seq);
      if (!s.positions) {
        ++position;
        continue;
      }
      // First fit among the micro-batch's rows; the first document that
      // fits none starts the next micro-batch.
      size_t row = 0;
      while (row < batch && used[row] + s.positions > static_cast<uint64_t>(seq))
        ++row;
      if (row == batch)
        break;
      rows[row].push_back(s);
      used[row] += s.positions;
      ++position;
    }
    return 0;
  }
  // Padding: a document per row, then the smallest shape that holds the
  // longest (the largest shape truncates what none holds).
  uint64_t longest = 0;
  size_t filled = 0;
  while (filled < batch && position < end) {
    DocumentSpan s = span(position++, maxSeq);
    if (!s.positions)
      continue;
    longest = std::max(longest, s.positions);
    rows[filled++].push_back(s);
  }
  size_t best = 0;
  for (size_t i = 0; i < shapes.size(); ++i) {
    uint64_t seq = static_cast<uint64_t>(shapes[i].at("seq"));
    uint64_t bestSeq = static_cast<uint64_t>(shapes[best].at("seq"));
    bool fits = seq >= longest, bestFits = bestSeq >= longest;
    if ((fits && (!bestFits || seq < bestSeq)) || (!fits && !bestFits && seq > bestSeq))
      best = i;
  }
  return best;
}

Status DocumentSource::next(MicroBatch &out) {
  std::vector<std::vector<DocumentSpan>> rows;
  out.shape = planNext(rows);
  out.sizes = shapes[out.shape];
  int64_t batch = out.sizes.at("batch"), seq = out.sizes.at("seq");
  size_t elements = static_cast<size_t>(batch * seq);
  std::vector<int64_t> ids(elements, 0), labels(elements, kIgnoreLabel), mask(elements, 0),
      positions(elements, 0);
  out.countedTokens = out.realTokens = 0;
  bool packed = batching.mode == DocumentBatching::Mode::Pack;
  for (int64_t r = 0; r < batch; ++r) {
    int64_t at = r * seq;
    for (const DocumentSpan &s : rows[r]) {
      uint64_t begin = file.getDocumentBegin(s.doc);
      // Shifted: position j reads token j and labels token j+1; unshifted:
      // it reads and labels token j, and a document's first label is
      // ignored (the model's own shift would read it for the previous
      // document's last position).
      uint64_t tokensRead = s.positions + (batching.shiftedLabels ? 1 : 0);
      for (uint64_t j = 0; j < tokensRead; ++j) {
        uint32_t token = file.getToken(begin + j);
        if (batching.vocabSize && token >= batching.vocabSize)
          return Error{file.getPath() + ": " + file.locate(begin + j) + ": token " +
                       std::to_string(token) + " is outside the vocabulary (" +
                       std::to_string(batching.vocabSize) + " ids)"};
      }
      for (uint64_t j = 0; j < s.positions; ++j, ++at) {
        ids[at] = file.getToken(begin + j);
        uint64_t target = batching.shiftedLabels ? begin + j + 1 : begin + j;
        bool counted = (batching.shiftedLabels || j > 0) && file.isCounted(target);
        labels[at] = counted ? file.getToken(target) : kIgnoreLabel;
        out.countedTokens += counted;
        mask[at] = 1;
        positions[at] = packed ? static_cast<int64_t>(j) : at - r * seq;
      }
      out.realTokens += static_cast<int64_t>(s.positions);
    }
    // The row's padding: no label, no attention to it; packed, its
    // positions restart too, so it is a block of its own.
    for (int64_t start = at; at < (r + 1) * seq; ++at)
      positions[at] = packed ? at - start : at - r * seq;
  }
  out.inputs.clear();
  for (const std::string &name : inputs)
    out.inputs[name] = isLabelInput(name)         ? labels
                       : name == "attention_mask" ? mask
                       : name == "position_ids"   ? positions
                                                  : ids;
  ++cursor;
  return Status::success();
}

Status DocumentSource::seek(uint64_t to) {
  // The order is a function of the cursor alone: replay the plans (counts
  // only, no tokens are read).
  cursor = position = 0;
  std::vector<std::vector<DocumentSpan>> rows;
  for (; cursor < to; ++cursor)
    planNext(rows);
  return Status::success();
}

std::string DocumentSource::describe() const {
  std::string seqs;
  for (const SymbolBindings &sizes : shapes)
    seqs += (seqs.empty() ? "" : ",") + std::to_string(sizes.at("seq"));
  return "data " + file.getPath() + ": " + std::to_string(file.getDocumentCount()) +
         " documents, " + std::to_string(file.getTokenCount()) + " tokens (" +
         std::to_string(file.getHeader().counted) + " with loss), " +
         std::to_string(shapes.front().at("batch")) +
         (batching.mode == DocumentBatching::Mode::Pack
              ? " packed rows of " + seqs
              : " padded rows per micro-batch, seq " +
                    std::string(shapes.size() > 1 ? "buckets " : "") + seqs) +
         (batching.shuffle ? ", shuffled (seed " + std::to_string(batching.seed) + ")"
                           : ", in file order") +
         (cut ? "; " + std::to_string(cut) + " documents longer than " + std::to_string(maxSeq) +
                    " positions are cut to it"
              : "");
}

Expected<BatchingStats> kiln::runtime::measureBatching(const DocumentFile &file,
                                                       std::vector<SymbolBindings> shapes,
                                                       DocumentBatching batching) {
  batching.shuffle = false;
  batching.vocabSize = 0;
  std::vector<std::string> inputs = {"input_ids", "labels", "position_ids"};
  Expected<std::unique_ptr<DocumentSource>> source =
      DocumentSource::create(file, shapes, inputs, batching);
  if (!source)
    return source.takeError();
  BatchingStats stats;
  std::vector<std::vector<DocumentSpan>> rows;
  uint64_t end = file.getDocumentCount();
  while ((*source)->getPosition() < end) {
    size_t shape = (*source)->planNext(rows, end);
    uint64_t seq = static_cast<uint64_t>(shapes[shape].at("seq"));
    ++stats.microBatches;
    for (const std::vector<DocumentSpan> &row : rows) {
      if (row.empty())
        continue; // the epoch's last micro-batch may have fewer rows
      ++stats.rows;
      stats.slots += seq;
      for (const DocumentSpan &s : row) {
        ++stats.documents;
        stats.positions += s.positions;
        stats.truncatedDocuments += s.cut > 0;
        stats.truncatedPositions += s.cut;
      }
    }
  }
  return stats;
}
