//===- DataStatsCommand.cpp - kiln-run data-stats ---------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Validates a fine-tuning dataset completely (header, offsets, then every
// token and mask bit against the header's counts) and reports what
// training on it at --batch/--seq costs: documents, tokens, the tokens
// with loss, truncation, and the padding each batching wastes — one
// document per row padded to its bucket, or documents packed into rows
// (docs/data.md). The plans are DocumentSource's own, in file order.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "kiln/runtime/DocumentData.h"

#include "kiln/artifact/FileIO.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

using namespace kiln::run;
using namespace kiln::runtime;
using kiln::artifact::SymbolBindings;

namespace {
constexpr const char *kDataStatsUsage =
    "USAGE: kiln-run data-stats DATA.kdocs --seq S [options]\n"
    "\n"
    "Checks a fine-tuning dataset (scripts/kiln_dataset.py writes one) and\n"
    "reports its documents, tokens, tokens with loss, and the padding waste of\n"
    "padding (a document per row) and of packing (documents filling rows).\n"
    "\n"
    "  --seq S[,S2...]         row length; a list is the shape buckets padding\n"
    "                          picks from (packing uses the largest)\n"
    "  --batch B               rows per micro-batch (default 1)\n"
    "  --labels shifted|unshifted\n"
    "                          labels are the next tokens (default) or the\n"
    "                          inputs, as the model was exported\n"
    "  --vocab-size N          also reject token ids >= N\n"
    "\n"
    "Writing micro-batches (what train would feed, for a reference run):\n"
    "  --dump DIR              write micro-batches 0..N-1 to DIR: K.<input>.bin\n"
    "                          (int64, [batch, seq]) and batches.jsonl (shapes,\n"
    "                          counted labels)\n"
    "  --count N               micro-batches to write (default: one epoch)\n"
    "  --batching pad|pack     as train (default pad)\n"
    "  --inputs NAMES          inputs to write (default input_ids,labels, plus\n"
    "                          position_ids with pack)\n"
    "  --seed S, --shuffle on|off\n"
    "                          the document order, as train (default 0, on)\n";

bool parsePositive(const std::string &text, int64_t &out) {
  char *end = nullptr;
  errno = 0;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end || errno == ERANGE || value < 1)
    return false;
  out = value;
  return true;
}

double percent(uint64_t part, uint64_t whole) {
  return whole ? 100.0 * static_cast<double>(part) / static_cast<double>(whole) : 0.0;
}

void printBatching(const char *name, const BatchingStats &s, const std::string &layout) {
  std::printf("%s: %llu rows (%s) in %llu micro-batches, %llu of %llu slots hold tokens, "
              "waste %.1f%%\n",
              name, static_cast<unsigned long long>(s.rows), layout.c_str(),
              static_cast<unsigned long long>(s.microBatches),
              static_cast<unsigned long long>(s.positions),
              static_cast<unsigned long long>(s.slots), percent(s.slots - s.positions, s.slots));
}
} // namespace

const std::vector<std::string> kiln::run::kDataStatsFlags = {
    "seq",   "batch",    "labels", "vocab-size", "dump",
    "count", "batching", "inputs", "seed",       "shuffle"};

namespace {
/// Writes micro-batches 0..count-1 of \p source to \p dir.
int dumpBatches(BatchSource &source, const std::string &dir, uint64_t count) {
  std::string index;
  for (uint64_t k = 0; k < count; ++k) {
    MicroBatch batch;
    if (Status s = source.next(batch); !s)
      return error(kExitBadInput, s.getError());
    for (const auto &[name, values] : batch.inputs) {
      std::string path = dir + "/" + std::to_string(k) + "." + name + ".bin";
      std::string bytes;
      bytes.reserve(values.size() * 8);
      for (int64_t v : values)
        for (int b = 0; b < 8; ++b)
          bytes += static_cast<char>(static_cast<uint64_t>(v) >> (8 * b));
      if (Status s = kiln::artifact::writeFileAtomically(
              path, [&](kiln::artifact::FileWriter &w) { return w.write(bytes); });
          !s)
        return error(kExitBadInput, s.getError());
    }
    index += "{\"index\": " + std::to_string(k) +
             ", \"batch\": " + std::to_string(batch.sizes.at("batch")) +
             ", \"seq\": " + std::to_string(batch.sizes.at("seq")) +
             ", \"counted\": " + std::to_string(batch.countedTokens) + "}\n";
  }
  if (Status s = kiln::artifact::writeFileAtomically(
          dir + "/batches.jsonl", [&](kiln::artifact::FileWriter &w) { return w.write(index); });
      !s)
    return error(kExitBadInput, s.getError());
  std::printf("wrote %llu micro-batches to %s\n", static_cast<unsigned long long>(count),
              dir.c_str());
  return 0;
}
} // namespace

int kiln::run::runDataStats(int argc, char **argv) {
  if (isHelp(argc, argv)) {
    std::fputs(kDataStatsUsage, stdout);
    return 0;
  }
  std::string message;
  std::optional<Arguments> args = Arguments::parse(argc, argv, kDataStatsFlags, message);
  if (!args)
    return error(kExitUsage, message + " (see 'kiln-run data-stats --help')");
  if (args->positional.size() != 1)
    return error(kExitUsage,
                 "'data-stats' takes one dataset file (see 'kiln-run data-stats --help')");
  if (!args->get("seq"))
    return error(kExitUsage, "missing --seq (see 'kiln-run data-stats --help')");
  int64_t batch = 1, vocab = 0;
  if (std::optional<std::string> text = args->get("batch"); text && !parsePositive(*text, batch))
    return error(kExitUsage, "--batch needs an integer >= 1, got '" + *text + "'");
  if (std::optional<std::string> text = args->get("vocab-size");
      text && (!parsePositive(*text, vocab) || vocab > (int64_t{1} << 32)))
    return error(kExitUsage, "--vocab-size needs an integer from 1 to 2^32, got '" + *text + "'");
  std::vector<SymbolBindings> shapes;
  std::string seqText = *args->get("seq");
  for (size_t start = 0;;) {
    size_t comma = seqText.find(',', start);
    int64_t seq;
    if (!parsePositive(seqText.substr(start, comma - start), seq))
      return error(kExitUsage,
                   "--seq needs positive integers (comma-separated), got '" + seqText + "'");
    shapes.push_back({{"batch", batch}, {"seq", seq}});
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  DocumentBatching batching;
  std::string labels = args->get("labels").value_or("shifted");
  if (labels != "shifted" && labels != "unshifted")
    return error(kExitUsage, "--labels must be shifted or unshifted, got '" + labels + "'");
  batching.shiftedLabels = labels == "shifted";

  const std::string &path = args->positional[0];
  Expected<DocumentFile> file = DocumentFile::open(path);
  if (!file)
    return error(kExitBadInput, file.getError());
  if (Status s = file->checkContents(); !s)
    return error(kExitBadInput, s.getError());
  if (Status s = file->checkVocabulary(static_cast<uint32_t>(vocab)); !s)
    return error(kExitBadInput, s.getError());
  const DocumentHeader &h = file->getHeader();
  std::printf("data %s: %llu documents, %llu tokens (%llu with loss, %.1f%%), %s, largest id "
              "%llu\n",
              path.c_str(), static_cast<unsigned long long>(h.documents),
              static_cast<unsigned long long>(h.tokens), static_cast<unsigned long long>(h.counted),
              percent(h.counted, h.tokens), h.dtype == TokenDType::U16 ? "uint16" : "uint32",
              static_cast<unsigned long long>(h.maxToken));

  Expected<BatchingStats> padded = measureBatching(*file, shapes, batching);
  if (!padded)
    return error(kExitBadInput, padded.getError());
  SymbolBindings longest = shapes.front();
  for (const SymbolBindings &sizes : shapes)
    if (sizes.at("seq") > longest.at("seq"))
      longest = sizes;
  batching.mode = DocumentBatching::Mode::Pack;
  Expected<BatchingStats> packed = measureBatching(*file, {longest}, batching);
  if (!packed)
    return error(kExitBadInput, packed.getError());
  std::printf("at seq %s, batch %lld, labels %s: %llu positions from %llu documents (%llu "
              "truncated, %llu positions cut)\n",
              seqText.c_str(), static_cast<long long>(batch), labels.c_str(),
              static_cast<unsigned long long>(padded->positions),
              static_cast<unsigned long long>(padded->documents),
              static_cast<unsigned long long>(padded->truncatedDocuments),
              static_cast<unsigned long long>(padded->truncatedPositions));
  printBatching("padding", *padded,
                shapes.size() > 1 ? "each micro-batch at the smallest bucket of " + seqText +
                                        " holding its longest"
                                  : "of " + seqText);
  printBatching("packing", *packed,
                "of " + std::to_string(longest.at("seq")) + ", " +
                    std::to_string(packed->documents) + " documents");

  std::optional<std::string> dump = args->get("dump");
  if (!dump) {
    for (const char *flag : {"count", "batching", "inputs", "seed", "shuffle"})
      if (args->get(flag))
        return error(kExitUsage, std::string("--") + flag + " is for --dump DIR");
    return 0;
  }
  std::string mode = args->get("batching").value_or("pad");
  std::string shuffle = args->get("shuffle").value_or("on");
  if (mode != "pad" && mode != "pack")
    return error(kExitUsage, "--batching must be pad or pack, got '" + mode + "'");
  if (shuffle != "on" && shuffle != "off")
    return error(kExitUsage, "--shuffle must be on or off, got '" + shuffle + "'");
  int64_t seed = 0, count = 0;
  if (std::optional<std::string> text = args->get("seed");
      text && !(parsePositive(*text, seed) || *text == "0"))
    return error(kExitUsage, "--seed needs an integer >= 0, got '" + *text + "'");
  if (std::optional<std::string> text = args->get("count"); text && !parsePositive(*text, count))
    return error(kExitUsage, "--count needs an integer >= 1, got '" + *text + "'");
  batching.mode = mode == "pack" ? DocumentBatching::Mode::Pack : DocumentBatching::Mode::Pad;
  batching.shuffle = shuffle == "on";
  batching.seed = static_cast<uint64_t>(seed);
  batching.vocabSize = static_cast<uint32_t>(vocab);
  std::vector<std::string> inputs;
  std::string names = args->get("inputs").value_or(mode == "pack" ? "input_ids,position_ids,labels"
                                                                  : "input_ids,labels");
  for (size_t start = 0;;) {
    size_t comma = names.find(',', start);
    inputs.push_back(names.substr(start, comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  Expected<std::unique_ptr<DocumentSource>> source =
      DocumentSource::create(*file, shapes, inputs, batching);
  if (!source)
    return error(kExitBadInput, source.getError());
  struct stat info;
  if (::stat(dump->c_str(), &info) != 0 || !S_ISDIR(info.st_mode))
    return error(kExitUsage, "--dump " + *dump + ": not a directory");
  const BatchingStats &epoch = mode == "pack" ? *packed : *padded;
  return dumpBatches(**source, *dump, count ? static_cast<uint64_t>(count) : epoch.microBatches);
}
