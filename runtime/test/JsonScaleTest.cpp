//===- JsonScaleTest.cpp - JSON time and memory on large headers -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Headers come from untrusted files, so parsing must stay linear in time and
// a small multiple of the text in memory: a 200k-key object and a 200k-tensor
// safetensors file (about 17 MB of header; quadratic key checks took minutes)
// parse in well under two seconds of CPU, and a long guards list peaks at a
// few times its text (it was 13x as JSON, 17x as guards). This binary counts
// every allocation (operator new is replaced below) to measure the peak.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/artifact/Guards.h"
#include "kiln/artifact/Json.h"
#include "kiln/artifact/Safetensors.h"

#include <cstdlib>
#include <ctime>
#include <malloc.h>
#include <new>
#include <unistd.h>

using namespace kiln::artifact;

namespace {
size_t liveBytes = 0, peakBytes = 0;

/// Peak bytes allocated while \p run runs, above what was live before.
template <typename F> size_t peakOf(F run) {
  size_t base = liveBytes;
  peakBytes = liveBytes;
  run();
  return peakBytes - base;
}

/// CPU seconds \p run takes (CPU, not wall time: the test may share the
/// machine).
template <typename F> double cpuSeconds(F run) {
  std::clock_t start = std::clock();
  run();
  return static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
}

constexpr int kKeys = 200000;
} // namespace

void *operator new(size_t size) {
  void *p = std::malloc(size ? size : 1);
  if (!p)
    throw std::bad_alloc();
  liveBytes += malloc_usable_size(p);
  peakBytes = std::max(peakBytes, liveBytes);
  return p;
}
void operator delete(void *p) noexcept {
  if (p)
    liveBytes -= malloc_usable_size(p);
  std::free(p);
}
void operator delete(void *p, size_t) noexcept { operator delete(p); }

static void testManyKeys() {
  std::string text = "{";
  for (int i = 0; i < kKeys; ++i)
    text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  text += "}";
  Expected<Json> json = Json(); // assigned below
  double seconds = cpuSeconds([&] { json = Json::parse(text); });
  std::printf("%d keys (%zu bytes): %.3f s\n", kKeys, text.size(), seconds);
  CHECK(json && json->getMembers().size() == static_cast<size_t>(kKeys));
  CHECK(seconds < 2.0);
  // A duplicate at the very end is still found.
  std::string duplicated = text.substr(0, text.size() - 1) + ",\"k0\":1}";
  seconds = cpuSeconds([&] {
    CHECK_EQ(Json::parse(duplicated).getError(),
             "invalid JSON at byte " + std::to_string(text.size()) + ": duplicate key \"k0\"");
  });
  CHECK(seconds < 2.0);
}

static void testManyTensors() {
  char dir[] = "/tmp/kiln-json-scale-XXXXXX";
  CHECK(::mkdtemp(dir));
  std::string path = std::string(dir) + "/many.safetensors";
  std::vector<float> values(kKeys, 0.5f);
  std::vector<TensorData> tensors;
  for (int i = 0; i < kKeys; ++i)
    tensors.push_back(
        {"model.layers." + std::to_string(i) + ".weight", DType::F32, {1}, &values[i]});
  double write = cpuSeconds([&] { CHECK(writeSafetensors(path, tensors)); });
  Expected<SafetensorsFile> file = SafetensorsFile::open(""); // assigned below
  double read = cpuSeconds([&] { file = SafetensorsFile::open(path); });
  std::printf("%d tensors: write %.3f s, open %.3f s\n", kKeys, write, read);
  CHECK(file && file->getTensors().size() == static_cast<size_t>(kKeys) && file->hasChecksums());
  CHECK(file && file->find("model.layers.123456.weight") &&
        !file->find("model.layers.200000.weight"));
  CHECK(write < 2.0 && read < 2.0);
  ::unlink(path.c_str());
  ::rmdir(dir);
}

static void testGuardsMemory() {
  const std::string entry = R"({"kind":"range","expr":"batch*seq + 1","min":1,"max":100000,)"
                            R"("origin":"--dynamic seq=8..1024:8"})";
  std::string text = "[";
  for (int i = 0; i < kKeys; ++i)
    text += (i ? "," : "") + entry;
  text += "]";
  double ratio = 0;
  size_t guards = 0;
  ratio = static_cast<double>(peakOf([&] {
            Expected<std::vector<Guard>> parsed = parseGuards(text);
            guards = parsed ? parsed->size() : 0;
          })) /
          text.size();
  std::printf("guards (%zu bytes): peak %.2fx the text\n", text.size(), ratio);
  CHECK(guards == static_cast<size_t>(kKeys));
  CHECK(ratio < 5.0);
  ratio = static_cast<double>(peakOf([&] { CHECK(Json::parse(text)); })) / text.size();
  std::printf("the same as one JSON value: peak %.2fx the text\n", ratio);
  CHECK(ratio < 7.0);
}

int main() {
  testManyKeys();
  testManyTensors();
  testGuardsMemory();
  return finishChecks();
}
