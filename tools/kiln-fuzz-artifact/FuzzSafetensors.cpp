//===- FuzzSafetensors.cpp - libFuzzer target for safetensors files -------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Each input is written to a file and opened with SafetensorsFile::open, as
// `kiln-run ckpt-info`, `--weights` and `--resume` do. It must be accepted or
// refused with one line starting with the file's path; a crash, a sanitizer
// report or another message is a finding. An accepted file is then read the
// way a run reads one: every tensor found by name and its bytes touched, the
// file checked as the resume checkpoint and as the weights of a small step
// with optimizer state.
//
// The custom mutator edits the JSON header (a number or string swapped for
// an interesting one, or libFuzzer's byte mutations of the header alone) and
// keeps the 8-byte length right; mostly it also recomputes Kiln's per-tensor
// CRC-32Cs, so the structural checks after them are reached.
//
//   kiln-fuzz-safetensors CORPUS_DIR -max_total_time=600 -timeout=10 -rss_limit_mb=2048
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "kiln/artifact/Crc32c.h"
#include "kiln/artifact/Json.h"
#include "kiln/runtime/Checkpoint.h"

#include <unistd.h>

using namespace kiln::artifact;
using namespace kiln::runtime;
using kiln::fuzz::Rng;

namespace {
/// The file every input is written to (one per process, in its own folder).
const std::string &filePath() {
  static const std::string path = [] {
    const char *tmp = std::getenv("TMPDIR");
    std::string dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/kiln-fuzz-st-XXXXXX";
    if (!::mkdtemp(dir.data())) {
      std::perror("kiln-fuzz-safetensors: mkdtemp");
      std::abort();
    }
    return dir + "/fuzz.safetensors";
  }();
  // libFuzzer ends a timed run with exit(): tidy up then. Registered after
  // `path` is built, so it runs before `path` is destroyed.
  static const bool cleanup = std::atexit([] {
                                std::remove(filePath().c_str());
                                ::rmdir(filePath().substr(0, filePath().rfind('/')).c_str());
                              }) == 0;
  (void)cleanup;
  return path;
}

/// A step with one trainable parameter, its AdamW state and a frozen weight.
const StepArtifact &sampleStep() {
  static const StepArtifact step = [] {
    ArtifactWriter writer;
    writer.add("meta", R"({"format":"kiln-step","symbols":["batch","seq"]})");
    writer.add("params", R"([{"name":"w","dtype":"F32","shape":[2,3],"trainable":true},)"
                         R"({"name":"embed","source":"model.embed.weight","dtype":"BF16",)"
                         R"("shape":[4,2],"folded_from":"model.embed.t"}])");
    writer.add("step", R"({"format":"kiln-step-program","version":1,"buffers":[)"
                       R"({"dtype":"F32","shape":["2","3"]},{"dtype":"F32","shape":["2","3"]},)"
                       R"({"dtype":"BF16","shape":["4","2"]}],)"
                       R"("args":[{"role":"param","name":"w","buffer":0},)"
                       R"({"role":"state","name":"w/exp_avg","buffer":1}],"results":[],)"
                       R"("ops":[{"op":"weight","name":"embed","result":2}]})");
    Expected<Artifact> container = Artifact::parse(*writer.serialize(), "sample.kiln");
    Expected<StepArtifact> decoded = StepArtifact::decode(std::move(*container), "sample.kiln");
    if (!decoded) {
      std::fprintf(stderr, "kiln-fuzz-safetensors: %s\n", decoded.getError().c_str());
      std::abort();
    }
    return std::move(*decoded);
  }();
  return step;
}

/// Recomputes the "kiln.crc32c.<name>" entries of a header for the data
/// that follows it; false if the header is not one this can rewrite.
bool resealChecksums(std::string &header, const std::string &data) {
  Expected<Json> parsed = Json::parse(header);
  if (!parsed || !parsed->isObject())
    return false;
  Json metadata = Json::object();
  std::vector<JsonMember> members;
  for (const JsonMember &member : parsed->getMembers()) {
    if (member.key == "__metadata__")
      for (const JsonMember &item : member.value.getMembers())
        if (item.key.compare(0, std::strlen(kChecksumKeyPrefix), kChecksumKeyPrefix) != 0)
          metadata.append(item.key, item.value);
  }
  bool any = false;
  for (const JsonMember &member : parsed->getMembers()) {
    if (member.key == "__metadata__")
      continue;
    const Json *dtype = member.value.get("dtype");
    const Json *shape = member.value.get("shape");
    const Json *offsets = member.value.get("data_offsets");
    if (!dtype || !shape || !offsets || offsets->getElements().size() != 2)
      continue;
    std::optional<DType> type = parseDType(dtype->getString());
    int64_t begin = offsets->getElements()[0].getInteger();
    int64_t end = offsets->getElements()[1].getInteger();
    if (!type || begin < 0 || end < begin || static_cast<uint64_t>(end) > data.size())
      continue;
    std::vector<int64_t> dims;
    for (const Json &d : shape->getElements())
      dims.push_back(d.getInteger());
    metadata.append(
        kChecksumKeyPrefix + member.key,
        Json::string(formatCrc32c(tensorChecksum(member.key, *type, dims, data.data() + begin,
                                                 static_cast<size_t>(end - begin)))));
    any = true;
  }
  if (!any)
    return false;
  members.push_back({"__metadata__", std::move(metadata)});
  for (const JsonMember &member : parsed->getMembers())
    if (member.key != "__metadata__")
      members.push_back(member);
  header = Json::object(std::move(members)).print();
  return true;
}
} // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize,
                                          unsigned int seed) {
  Rng rng(seed);
  uint64_t length = 0;
  for (int i = 7; size >= 8 && i >= 0; --i)
    length = length << 8 | data[i];
  if (size < 8 || length > size - 8 || rng.pick(8) == 0)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::string header(reinterpret_cast<const char *>(data) + 8, length);
  std::string rest(reinterpret_cast<const char *>(data) + 8 + length, size - 8 - length);
  unsigned choice = static_cast<unsigned>(rng.pick(4));
  if (choice <= 1) {
    for (int i = 0, n = 1 + static_cast<int>(rng.pick(3)); i < n; ++i)
      kiln::fuzz::editJsonToken(header, rng);
  } else if (choice == 2) {
    size_t used = header.size() ? header.size() : 1;
    header.resize(std::max<size_t>(used * 2, 64), ' ');
    header.resize(
        LLVMFuzzerMutate(reinterpret_cast<uint8_t *>(header.data()), used, header.size()));
  } else if (!rest.empty()) {
    // The data: a byte changed, or cut short.
    if (rng.pick(2))
      rest[rng.pick(rest.size())] ^= static_cast<char>(1 + rng.pick(255));
    else
      rest.resize(rng.pick(rest.size()));
  }
  if (rng.pick(4) != 0)
    resealChecksums(header, rest);
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<char>(static_cast<uint64_t>(header.size()) >> (8 * i));
  out += header;
  out += rest;
  if (out.size() > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  const std::string &path = filePath();
  {
    std::FILE *file = std::fopen(path.c_str(), "wb");
    if (!file || (size && std::fwrite(data, 1, size, file) != size) || std::fclose(file) != 0) {
      std::perror("kiln-fuzz-safetensors: cannot write the input file");
      std::abort();
    }
  }
  kiln::fuzz::lastInputAccepted() = false;
  Expected<SafetensorsFile> opened = SafetensorsFile::open(path);
  if (!opened) {
    kiln::fuzz::checkMessage(opened.getError(), path);
    return 0;
  }
  kiln::fuzz::lastInputAccepted() = true;
  const SafetensorsFile &file = *opened;
  unsigned sum = 0;
  for (const TensorInfo &tensor : file.getTensors()) {
    const TensorInfo *found = file.find(tensor.name);
    if (found != &tensor) {
      std::fprintf(stderr, "kiln-fuzz-safetensors: find('%s') is not that tensor\n",
                   tensor.name.c_str());
      std::abort();
    }
    if (tensor.getByteSize())
      sum += file.data(tensor)[0] + file.data(tensor)[tensor.getByteSize() - 1];
    (void)tensor.getElementCount();
  }
  (void)sum;
  const StepArtifact &step = sampleStep();
  Expected<int64_t> resumed = checkCheckpoint(step, file);
  if (!resumed)
    kiln::fuzz::checkMessage(resumed.getError(), path);
  if (Status weights = step.checkWeights(file); !weights)
    kiln::fuzz::checkMessage(weights.getError(), path);
  return 0;
}
