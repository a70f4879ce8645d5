//===- Safetensors.h - Read and write safetensors files ---------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// safetensors: an 8-byte little-endian header length, a JSON header mapping
// each tensor name to {"dtype", "shape", "data_offsets": [begin, end)} (plus
// an optional "__metadata__" object of strings), then the tensor bytes.
// Weights come in this format (Hugging Face), and kiln-run writes its
// checkpoints and adapters in it.
//
// The reader maps the file and validates the whole header against the file
// before handing out a tensor: every problem is one line naming the file and
// the tensor. The format has no checksum of its own; files Kiln writes carry
// one CRC-32C per tensor in the metadata ("kiln.crc32c.<name>", covering the
// name, dtype, shape and bytes), which the reader verifies, so a flipped bit
// in a Kiln checkpoint is always reported. Other files get structural checks
// only.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_SAFETENSORS_H
#define KILN_ARTIFACT_SAFETENSORS_H

#include "kiln/artifact/DType.h"
#include "kiln/artifact/FileIO.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::artifact {

/// "BF16 [768, 3072]".
std::string describeTensorType(DType dtype, const std::vector<int64_t> &shape);

/// Metadata key prefix of Kiln's per-tensor checksums.
constexpr const char *kChecksumKeyPrefix = "kiln.crc32c.";

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0; ///< Byte range within the data section.

  uint64_t getByteSize() const { return end - begin; }
  int64_t getElementCount() const;
};

/// A validated, memory-mapped safetensors file.
class SafetensorsFile {
public:
  /// Maps and validates \p path; verifies Kiln checksums when present.
  static Expected<SafetensorsFile> open(const std::string &path);

  const std::string &getPath() const { return path; }
  /// In file order (ascending data offsets).
  const std::vector<TensorInfo> &getTensors() const { return tensors; }
  const TensorInfo *find(std::string_view name) const;
  const unsigned char *data(const TensorInfo &tensor) const { return dataStart + tensor.begin; }
  const std::map<std::string, std::string> &getMetadata() const { return metadata; }
  /// Whether Kiln checksums were present (and so verified).
  bool hasChecksums() const { return checksummed; }
  uint64_t getFileSize() const { return file.size(); }

private:
  explicit SafetensorsFile(MappedFile file) : file(std::move(file)) {}
  MappedFile file;
  std::string path;
  const unsigned char *dataStart = nullptr;
  std::vector<TensorInfo> tensors;
  std::vector<uint32_t> byName; ///< Indices into tensors, sorted by name.
  std::map<std::string, std::string> metadata;
  bool checksummed = false;
};

/// One tensor to write; \p data points at getByteSize() bytes of host memory.
struct TensorData {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void *data = nullptr;
};

/// Called as bytes reach the file (written so far, total).
using WriteProgress = std::function<void(uint64_t, uint64_t)>;

/// Writes \p tensors (in this order) with \p metadata plus "format": "pt"
/// and Kiln's per-tensor checksums, atomically (see writeFileAtomically).
Status writeSafetensors(const std::string &path, const std::vector<TensorData> &tensors,
                        const std::map<std::string, std::string> &metadata = {},
                        const WriteProgress &progress = nullptr);

/// CRC-32C of a tensor's name, dtype, shape and bytes: what Kiln stores
/// under "kiln.crc32c.<name>".
uint32_t tensorChecksum(std::string_view name, DType dtype, const std::vector<int64_t> &shape,
                        const void *data, size_t size);

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_SAFETENSORS_H
