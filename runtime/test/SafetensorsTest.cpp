//===- SafetensorsTest.cpp - Tests for the safetensors reader/writer -*- C++
//-*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Round trip, a hand-written file in the reference layout, and damage: every
// truncation and a single-bit flip in every byte of a Kiln-written file is
// either rejected with one line or leaves every tensor (name, dtype, shape,
// bytes) unchanged.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/artifact/Safetensors.h"

#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <unistd.h>

using namespace kiln::artifact;

static std::string tempDir;

static std::string readAll(const std::string &path) {
  Expected<MappedFile> file = MappedFile::open(path);
  return file ? std::string(file->view()) : std::string();
}

/// A plain write: thousands of damaged variants need no fsync.
static void writeAll(const std::string &path, const std::string &bytes) {
  std::FILE *file = std::fopen(path.c_str(), "wb");
  CHECK(file);
  if (!file)
    return;
  CHECK(std::fwrite(bytes.data(), 1, bytes.size(), file) == bytes.size());
  CHECK(std::fclose(file) == 0);
}

struct Sample {
  std::vector<float> a{1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 7.0f};
  std::vector<uint16_t> b{0x3f80, 0x4000, 0xbf80};
  int64_t step = 42;
  std::vector<TensorData> tensors() const {
    return {{"model.layers.0.q_proj.lora_A.weight", DType::F32, {2, 3}, a.data()},
            {"b", DType::BF16, {3}, b.data()},
            {"step", DType::I64, {}, &step}};
  }
};

/// name, type and bytes of every tensor: what must never change silently.
static std::string fingerprint(const SafetensorsFile &file) {
  std::string text;
  for (const TensorInfo &tensor : file.getTensors())
    text += tensor.name + "|" + describeTensorType(tensor.dtype, tensor.shape) + "|" +
            std::string(reinterpret_cast<const char *>(file.data(tensor)), tensor.getByteSize()) +
            "\n";
  return text;
}

static void testRoundTrip() {
  Sample sample;
  std::string path = tempDir + "/ckpt.safetensors";
  CHECK(writeSafetensors(path, sample.tensors(), {{"kiln.step", "42"}}));
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  CHECK(file);
  if (!file)
    return;
  CHECK(file->hasChecksums());
  CHECK(file->getTensors().size() == 3);
  CHECK_EQ(file->getMetadata().at("format"), "pt");
  CHECK_EQ(file->getMetadata().at("kiln.step"), "42");
  const TensorInfo *a = file->find("model.layers.0.q_proj.lora_A.weight");
  CHECK(a && a->dtype == DType::F32 && a->shape == (std::vector<int64_t>{2, 3}));
  if (a)
    CHECK(!std::memcmp(file->data(*a), sample.a.data(), 24));
  const TensorInfo *step = file->find("step");
  CHECK(step && step->shape.empty() && step->getElementCount() == 1);
  if (step)
    CHECK(!std::memcmp(file->data(*step), &sample.step, 8));
  // The data section starts 8-byte aligned.
  std::string bytes = readAll(path);
  uint64_t headerSize = 0;
  std::memcpy(&headerSize, bytes.data(), 8);
  CHECK(headerSize % 8 == 0);
}

static void testForeignFile() {
  // The reference layout, written by hand: no metadata, no checksums.
  std::string header =
      R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]},"v":{"dtype":"U8","shape":[3],"data_offsets":[4,7]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  bytes += header;
  bytes += std::string("\x00\x3c\x00\x40"
                       "abc",
                       7);
  std::string path = tempDir + "/foreign.safetensors";
  writeAll(path, bytes);
  Expected<SafetensorsFile> file = SafetensorsFile::open(path);
  CHECK(file && !file->hasChecksums() && file->getTensors().size() == 2);
  if (file)
    CHECK_EQ(file->getTensors()[1].name, "v");

  auto withHeader = [&](const std::string &text, const std::string &data) {
    std::string out(8, '\0');
    out[0] = static_cast<char>(text.size());
    out[1] = static_cast<char>(text.size() >> 8);
    writeAll(path, out + text + data);
    return SafetensorsFile::open(path).getError();
  };
  CHECK_EQ(withHeader(R"({"w":{"dtype":"F17","shape":[2],"data_offsets":[0,4]}})", "1234"),
           path + ": tensor 'w': unknown dtype 'F17'");
  CHECK_EQ(withHeader(R"({"w":{"dtype":"F16","shape":[3],"data_offsets":[0,4]}})", "1234"),
           path + ": tensor 'w': data_offsets [0, 4) hold 4 bytes, but F16 [3] "
                  "needs 6");
  CHECK_EQ(withHeader(R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", "123"),
           path + ": truncated safetensors file: tensor 'w' needs data bytes [0, "
                  "4), but the file holds only 3");
  CHECK_EQ(withHeader(R"({"w":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", "12345"),
           path + ": 1 bytes after the last tensor belong to no tensor");
  CHECK_EQ(
      withHeader(
          R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"v":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})",
          "123"),
      path + ": tensor 'v' overlaps tensor 'w'");
  CHECK_EQ(withHeader(R"({"w":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}})", "123"),
           path + ": data bytes [0, 1) belong to no tensor");
  CHECK_EQ(withHeader(R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})", ""),
           path + ": tensor 'w': shape entries must be integers >= 0");
  CHECK_EQ(withHeader(R"({"w":{"dtype":"U8","shape":[1]}})", "1"),
           path + ": tensor 'w': \"data_offsets\" is not [begin, end]");
  CHECK_EQ(withHeader(R"({"__metadata__":{"a":1}})", ""),
           path + ": bad safetensors header: __metadata__ value 'a' is not a string");
  CHECK_EQ(withHeader(R"([1,2])", ""), path + ": bad safetensors header: expected a JSON object");
  CHECK_EQ(withHeader(R"({"w":)", ""), path + ": bad safetensors header: invalid JSON at byte 5: "
                                              "unexpected end of input");
}

static void testDamage() {
  Sample sample;
  std::string path = tempDir + "/damaged.safetensors";
  CHECK(writeSafetensors(path, sample.tensors()));
  std::string good = readAll(path);
  std::string expected = fingerprint(*SafetensorsFile::open(path));

  for (size_t size = 0; size < good.size(); ++size) {
    writeAll(path, good.substr(0, size));
    Expected<SafetensorsFile> file = SafetensorsFile::open(path);
    CHECK(!file);
    CHECK(file.getError().find('\n') == std::string::npos);
    CHECK(file.getError().compare(0, path.size() + 2, path + ": ") == 0);
  }
  writeAll(path, good.substr(0, good.size() - 1));
  CHECK_EQ(SafetensorsFile::open(path).getError(),
           path + ": truncated safetensors file: tensor 'step' needs data "
                  "bytes [30, 38), but the file holds only 37");
  writeAll(path, good.substr(0, 5));
  CHECK_EQ(SafetensorsFile::open(path).getError(),
           path + ": truncated safetensors file (5 bytes; the header length "
                  "alone takes 8)");
  writeAll(path, good.substr(0, 100));
  CHECK(SafetensorsFile::open(path).getError().find("truncated safetensors file (header of ") !=
        std::string::npos);

  int silent = 0;
  // One flipped bit in every byte (the bit rotates; opening a file is slow
  // on some file systems, so not all eight).
  for (size_t byte = 0; byte < good.size(); ++byte) {
    std::string damaged = good;
    damaged[byte] ^= static_cast<char>(1 << (byte % 8));
    writeAll(path, damaged);
    Expected<SafetensorsFile> file = SafetensorsFile::open(path);
    if (file) {
      // Accepted only if no tensor changed (a flip in "pt" or padding).
      if (fingerprint(*file) != expected)
        ++silent;
    } else {
      CHECK(file.getError().find('\n') == std::string::npos);
    }
  }
  CHECK(silent == 0);

  // A flip in the data names the tensor.
  std::string damaged = good;
  damaged[good.size() - 3] ^= 1;
  writeAll(path, damaged);
  CHECK_EQ(SafetensorsFile::open(path).getError(),
           path + ": tensor 'step' fails its CRC-32C check (file corrupt)");
  writeAll(path, std::string(64, 'x'));
  CHECK_EQ(SafetensorsFile::open(path).getError(),
           path + ": not a safetensors file (header length 8680820740569200760)");
}

static void testWriterErrors() {
  float x = 0;
  std::string path = tempDir + "/bad.safetensors";
  CHECK_EQ(
      writeSafetensors(path, {{"a", DType::F32, {1}, &x}, {"a", DType::F32, {1}, &x}}).getError(),
      path + ": tensor 'a' given twice");
  CHECK_EQ(writeSafetensors(path, {{"__metadata__", DType::F32, {1}, &x}}).getError(),
           path + ": bad tensor name '__metadata__'");
  CHECK(::access(path.c_str(), F_OK) != 0);
  CHECK_EQ(writeSafetensors(tempDir + "/no/such/dir/x.safetensors", {{"a", DType::F32, {1}, &x}})
               .getError(),
           tempDir + "/no/such/dir: No such file or directory");
}

int main() {
  char dir[] = "/tmp/kiln-safetensors-test-XXXXXX";
  if (!::mkdtemp(dir))
    return 1;
  tempDir = dir;
  testRoundTrip();
  testForeignFile();
  testDamage();
  testWriterErrors();
  std::string cleanup = "rm -rf " + tempDir;
  if (std::system(cleanup.c_str()) != 0)
    std::fprintf(stderr, "could not remove %s\n", dir);
  return finishChecks();
}
