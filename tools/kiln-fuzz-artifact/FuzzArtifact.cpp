//===- FuzzArtifact.cpp - libFuzzer target for .kiln artifacts ------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Each input is a .kiln file, opened as `kiln-run inspect` and `train` open
// one: the container (Artifact::parse), then every section decoded and
// checked against the others (StepArtifact::decode). It must be accepted or
// refused with one line starting "fuzz.kiln: "; a crash, a sanitizer report
// or another message is a finding. An accepted artifact is then used the way
// a run would on the CPU: guards checked, kernel images chosen, every
// program planned at a few sizes, the memory plan evaluated and checked.
//
// Random bytes almost never survive the checksums, so the custom mutator
// edits the decoded sections instead — a section's payload through
// libFuzzer's own mutator, a JSON number or string swapped for an
// interesting one, a section dropped, duplicated or renamed — and re-
// serializes (or flips raw bytes and recomputes every checksum with
// resealArtifact): what is fuzzed is the decoder, not the CRC.
//
//   kiln-fuzz-artifact CORPUS_DIR -max_total_time=600 -timeout=10 -rss_limit_mb=2048
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include "kiln/artifact/Artifact.h"
#include "kiln/runtime/StepArtifact.h"

#include <algorithm>
#include <cstring>
#include <iterator>

using namespace kiln::artifact;
using namespace kiln::runtime;
using kiln::fuzz::Rng;

namespace {
constexpr const char *kOrigin = "fuzz.kiln";

/// Runs what kiln-run does with an accepted artifact before the device.
void exercise(const StepArtifact &step) {
  (void)step.getMeta().print(true);
  std::vector<SymbolBindings> sizes = {{{"batch", 2}, {"seq", 16}}, {{"batch", 1}, {"seq", 8}}};
  for (const BucketSpec &bucket : step.getBuckets()) {
    SymbolBindings pinned = sizes.front();
    for (const auto &[symbol, value] : bucket.values)
      pinned[symbol] = value;
    sizes.push_back(pinned);
  }
  if (const std::optional<StepMemoryPlan> &plan = step.getMemoryPlan())
    sizes.push_back(plan->plannedAt);
  for (const SymbolBindings &at : sizes) {
    (void)checkGuards(step.getGuards(), at);
    (void)step.selectBucket(at);
    for (const char *section : {"step", "init"}) {
      const StepProgram *program = step.getProgram(section);
      if (!program)
        continue;
      std::string note;
      const StepMemoryPlan *plan = std::strcmp(section, "step") == 0 && step.getMemoryPlan()
                                       ? &*step.getMemoryPlan()
                                       : nullptr;
      (void)chooseArenaPlan(*program, plan, at, note);
      (void)persistentBytes(*program, at);
      for (size_t id = 0; id < program->buffers.size(); ++id)
        (void)program->byteCount(static_cast<int>(id), at);
    }
  }
  for (const auto &kernel : step.getKernels())
    for (auto [major, minor] : {std::pair<int, int>{8, 0}, {9, 0}, {12, 1}})
      (void)step.selectImage(kernel.first, major, minor);
}

} // namespace

extern "C" size_t LLVMFuzzerCustomMutator(uint8_t *data, size_t size, size_t maxSize,
                                          unsigned int seed) {
  Rng rng(seed);
  Expected<Artifact> artifact =
      Artifact::parse(std::string(reinterpret_cast<const char *>(data), size), kOrigin);
  unsigned choice = static_cast<unsigned>(rng.pick(10));
  if (!artifact || choice == 0) {
    // Raw bytes, then every checksum made right again (or, rarely, not).
    size = LLVMFuzzerMutate(data, size, maxSize);
    if (rng.pick(8) != 0) {
      std::string bytes(reinterpret_cast<const char *>(data), size);
      resealArtifact(bytes);
      std::memcpy(data, bytes.data(), bytes.size());
    }
    return size;
  }
  std::vector<std::pair<std::string, std::string>> sections;
  for (const Section &section : artifact->getSections())
    sections.emplace_back(section.name, std::string(artifact->contents(section)));
  size_t victim = sections.empty() ? 0 : rng.pick(sections.size());
  if (sections.empty() || choice == 1) {
    static const char *const names[] = {"meta",
                                        "guards",
                                        "params",
                                        "memory_plan",
                                        "step",
                                        "init",
                                        "step/main__seq_8",
                                        "kernels/module0/sm_90.cubin",
                                        "kernels/module0/compute_80.ptx",
                                        "kernels/module0/source"};
    sections.emplace_back(names[rng.pick(std::size(names))], "[]");
  } else if (choice == 2) {
    sections.erase(sections.begin() + static_cast<long>(victim));
  } else if (choice == 3) {
    sections[victim].first = sections[rng.pick(sections.size())].first + (rng.pick(2) ? "" : "x");
  } else if (choice <= 6) {
    for (int i = 0, n = 1 + static_cast<int>(rng.pick(3)); i < n; ++i)
      kiln::fuzz::editJsonToken(sections[victim].second, rng);
  } else {
    // libFuzzer's mutations of one payload.
    std::string &payload = sections[victim].second;
    if (payload.empty())
      payload = "x";
    size_t used = payload.size();
    payload.resize(std::max<size_t>(used * 2, 64));
    payload.resize(
        LLVMFuzzerMutate(reinterpret_cast<uint8_t *>(payload.data()), used, payload.size()));
  }
  ArtifactWriter writer;
  for (auto &[name, contents] : sections)
    writer.add(name, contents);
  Expected<std::string> bytes = writer.serialize();
  if (!bytes || bytes->size() > maxSize)
    return LLVMFuzzerMutate(data, size, maxSize);
  std::memcpy(data, bytes->data(), bytes->size());
  return bytes->size();
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  kiln::fuzz::lastInputAccepted() = false;
  Expected<Artifact> container =
      Artifact::parse(std::string(reinterpret_cast<const char *>(data), size), kOrigin);
  if (!container) {
    kiln::fuzz::checkMessage(container.getError(), kOrigin);
    return 0;
  }
  Expected<StepArtifact> step = StepArtifact::decode(std::move(*container), kOrigin);
  if (!step) {
    kiln::fuzz::checkMessage(step.getError(), kOrigin);
    return 0;
  }
  kiln::fuzz::lastInputAccepted() = true;
  exercise(*step);
  return 0;
}
