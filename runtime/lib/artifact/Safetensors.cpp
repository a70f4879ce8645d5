//===- Safetensors.cpp - Read and write safetensors files -------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/Safetensors.h"

#include "kiln/artifact/Crc32c.h"
#include "kiln/artifact/Json.h"

#include <algorithm>
#include <cstring>
#include <set>

using namespace kiln::artifact;

namespace {
/// Larger headers are not safetensors files (the reference reader's limit).
constexpr uint64_t kMaxHeaderSize = 100u << 20;
constexpr const char *kMetadataKey = "__metadata__";
constexpr size_t kWriteChunk = 8u << 20;
} // namespace

std::string kiln::artifact::describeTensorType(DType dtype, const std::vector<int64_t> &shape) {
  std::string text = std::string(dtypeName(dtype)) + " [";
  for (size_t i = 0; i < shape.size(); ++i)
    text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

int64_t TensorInfo::getElementCount() const {
  int64_t count = 1;
  for (int64_t dim : shape)
    count *= dim;
  return count;
}

uint32_t kiln::artifact::tensorChecksum(std::string_view name, DType dtype,
                                        const std::vector<int64_t> &shape, const void *data,
                                        size_t size) {
  // A description that changes whenever name, dtype or shape does, then the
  // bytes: a flipped bit anywhere in them changes the checksum.
  std::string description(name);
  description += '\0';
  description += describeTensorType(dtype, shape);
  description += '\0';
  return crc32c(crc32c(0, description.data(), description.size()), data, size);
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

Expected<SafetensorsFile> SafetensorsFile::open(const std::string &path) {
  Expected<MappedFile> mapped = MappedFile::open(path);
  if (!mapped)
    return mapped.takeError();
  SafetensorsFile result(std::move(*mapped));
  result.path = path;
  const unsigned char *bytes = result.file.data();
  uint64_t fileSize = result.file.size();
  auto fail = [&](const std::string &what) { return Error{path + ": " + what}; };

  if (fileSize < 8)
    return fail("truncated safetensors file (" + std::to_string(fileSize) +
                " bytes; the header length alone takes 8)");
  uint64_t headerSize = 0;
  for (int i = 7; i >= 0; --i)
    headerSize = headerSize << 8 | bytes[i];
  if (headerSize > kMaxHeaderSize || headerSize < 2)
    return fail("not a safetensors file (header length " + std::to_string(headerSize) + ")");
  if (headerSize > fileSize - 8)
    return fail("truncated safetensors file (header of " + std::to_string(headerSize) +
                " bytes, but only " + std::to_string(fileSize - 8) + " bytes follow the length)");
  std::string_view headerText(reinterpret_cast<const char *>(bytes) + 8, headerSize);
  result.dataStart = bytes + 8 + headerSize;
  uint64_t dataSize = fileSize - 8 - headerSize;

  // Entry by entry: the header never exists twice (as JSON and as tensors).
  bool semantic = false; // an entry's error, already worded
  auto entryError = [&](const std::string &what) {
    semantic = true;
    return Error{path + ": " + what};
  };
  Status parsed =
      Json::forEachMember(headerText, [&](const std::string &name, Json &entry) -> Status {
        auto fail = entryError;
        if (name == kMetadataKey) {
          if (!entry.isObject())
            return fail("bad safetensors header: __metadata__ is not an object");
          for (const JsonMember &item : entry.getMembers()) {
            if (!item.value.isString())
              return fail("bad safetensors header: __metadata__ value '" + item.key +
                          "' is not a string");
            result.metadata[item.key] = item.value.getString();
          }
          return Status::success();
        }
        auto bad = [&](const std::string &what) { return fail("tensor '" + name + "': " + what); };
        if (!entry.isObject())
          return bad("header entry is not an object");
        const Json *dtypeJson = entry.get("dtype");
        const Json *shapeJson = entry.get("shape");
        const Json *offsetsJson = entry.get("data_offsets");
        if (!dtypeJson || !dtypeJson->isString())
          return bad("missing string \"dtype\"");
        std::optional<DType> dtype = parseDType(dtypeJson->getString());
        if (!dtype)
          return bad("unknown dtype '" + dtypeJson->getString() + "'");
        if (!shapeJson || !shapeJson->isArray())
          return bad("missing array \"shape\"");
        if (!offsetsJson || !offsetsJson->isArray() || offsetsJson->getElements().size() != 2 ||
            !offsetsJson->getElements()[0].isInteger() ||
            !offsetsJson->getElements()[1].isInteger())
          return bad("\"data_offsets\" is not [begin, end]");
        TensorInfo tensor;
        tensor.name = name;
        tensor.dtype = *dtype;
        uint64_t elements = 1;
        for (const Json &dim : shapeJson->getElements()) {
          if (!dim.isInteger() || dim.getInteger() < 0)
            return bad("shape entries must be integers >= 0");
          tensor.shape.push_back(dim.getInteger());
          if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dim.getInteger()), &elements))
            return bad("element count overflows");
        }
        int64_t begin = offsetsJson->getElements()[0].getInteger();
        int64_t end = offsetsJson->getElements()[1].getInteger();
        if (begin < 0 || end < begin)
          return bad("bad data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ")");
        tensor.begin = static_cast<uint64_t>(begin);
        tensor.end = static_cast<uint64_t>(end);
        uint64_t needed;
        if (__builtin_mul_overflow(elements, dtypeSize(*dtype), &needed))
          return bad("byte size overflows");
        if (tensor.getByteSize() != needed)
          return bad("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                     ") hold " + std::to_string(tensor.getByteSize()) + " bytes, but " +
                     describeTensorType(*dtype, tensor.shape) + " needs " + std::to_string(needed));
        if (tensor.end > dataSize)
          return fail("truncated safetensors file: tensor '" + name + "' needs data bytes [" +
                      std::to_string(begin) + ", " + std::to_string(end) +
                      "), but the file holds only " + std::to_string(dataSize));
        result.tensors.push_back(std::move(tensor));
        return Status::success();
      });
  if (!parsed)
    return semantic ? parsed.takeError()
                    : Error{path + ": bad safetensors header: " + parsed.getError()};

  // The data section is exactly the tensors, back to back.
  std::sort(result.tensors.begin(), result.tensors.end(),
            [](const TensorInfo &a, const TensorInfo &b) {
              return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
            });
  uint64_t covered = 0;
  for (size_t i = 0; i < result.tensors.size(); ++i) {
    const TensorInfo &tensor = result.tensors[i];
    if (tensor.begin < covered)
      return fail("tensor '" + tensor.name + "' overlaps tensor '" + result.tensors[i - 1].name +
                  "'");
    if (tensor.begin > covered)
      return fail("data bytes [" + std::to_string(covered) + ", " + std::to_string(tensor.begin) +
                  ") belong to no tensor");
    covered = tensor.end;
  }
  if (covered != dataSize)
    return fail(std::to_string(dataSize - covered) +
                " bytes after the last tensor belong to no tensor");
  // find() searches by name (a header may list 10^5 tensors).
  result.byName.resize(result.tensors.size());
  for (size_t i = 0; i < result.byName.size(); ++i)
    result.byName[i] = static_cast<uint32_t>(i);
  std::sort(result.byName.begin(), result.byName.end(), [&](uint32_t a, uint32_t b) {
    return result.tensors[a].name < result.tensors[b].name;
  });

  // Kiln's checksums: all tensors or none, each key naming a tensor.
  size_t checksums = 0;
  for (const auto &[key, value] : result.metadata) {
    if (key.compare(0, std::strlen(kChecksumKeyPrefix), kChecksumKeyPrefix))
      continue;
    ++checksums;
    std::string name = key.substr(std::strlen(kChecksumKeyPrefix));
    if (!result.find(name))
      return fail("checksum recorded for tensor '" + name +
                  "', which the file does not contain (header corrupt)");
  }
  result.checksummed = checksums > 0;
  if (result.checksummed) {
    for (const TensorInfo &tensor : result.tensors) {
      auto it = result.metadata.find(kChecksumKeyPrefix + tensor.name);
      if (it == result.metadata.end())
        return fail("tensor '" + tensor.name +
                    "' has no checksum, while others do (header corrupt)");
      uint32_t actual = tensorChecksum(tensor.name, tensor.dtype, tensor.shape, result.data(tensor),
                                       tensor.getByteSize());
      if (it->second != formatCrc32c(actual))
        return fail("tensor '" + tensor.name + "' fails its CRC-32C check (file corrupt)");
    }
  }
  return result;
}

const TensorInfo *SafetensorsFile::find(std::string_view name) const {
  auto it = std::lower_bound(
      byName.begin(), byName.end(), name,
      [&](uint32_t index, std::string_view key) { return tensors[index].name < key; });
  return it != byName.end() && tensors[*it].name == name ? &tensors[*it] : nullptr;
}

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

Status kiln::artifact::writeSafetensors(const std::string &path,
                                        const std::vector<TensorData> &tensors,
                                        const std::map<std::string, std::string> &metadata,
                                        const WriteProgress &progress) {
  Json meta = Json::object();
  meta.set("format", Json::string("pt"));
  for (const auto &[key, value] : metadata)
    if (key != "format")
      meta.append(key, Json::string(value));
    else
      meta.set(key, Json::string(value));

  // The metadata first, then the tensors: keys are distinct (checked
  // here), so members are appended, not looked up (linear in the tensors).
  std::vector<JsonMember> document(1); // [0]: "__metadata__", filled last
  std::vector<uint64_t> sizes;
  std::set<std::string_view> names;
  uint64_t offset = 0;
  for (const TensorData &tensor : tensors) {
    if (tensor.name.empty() || tensor.name == kMetadataKey)
      return Error{path + ": bad tensor name '" + tensor.name + "'"};
    if (!names.insert(tensor.name).second)
      return Error{path + ": tensor '" + tensor.name + "' given twice"};
    uint64_t size = dtypeSize(tensor.dtype);
    Json shape = Json::array();
    for (int64_t dim : tensor.shape) {
      if (dim < 0)
        return Error{path + ": tensor '" + tensor.name + "' has a negative dim"};
      size *= static_cast<uint64_t>(dim);
      shape.push(Json::integer(dim));
    }
    Json entry = Json::object();
    entry.set("dtype", Json::string(dtypeName(tensor.dtype)));
    entry.set("shape", std::move(shape));
    entry.set("data_offsets", Json::array({Json::integer(static_cast<int64_t>(offset)),
                                           Json::integer(static_cast<int64_t>(offset + size))}));
    document.push_back({tensor.name, std::move(entry)});
    std::string checksumKey = kChecksumKeyPrefix + tensor.name;
    if (metadata.count(checksumKey))
      return Error{path + ": metadata key '" + checksumKey + "' is Kiln's checksum key"};
    meta.append(std::move(checksumKey),
                Json::string(formatCrc32c(
                    tensorChecksum(tensor.name, tensor.dtype, tensor.shape, tensor.data, size))));
    sizes.push_back(size);
    offset += size;
  }
  document[0] = {kMetadataKey, std::move(meta)};
  std::string text = Json::object(std::move(document)).print();
  // Pad with spaces so the data starts 8-byte aligned, as the reference
  // writer does.
  text.append((8 - text.size() % 8) % 8, ' ');

  uint64_t total = 8 + text.size() + offset;
  return writeFileAtomically(path, [&](FileWriter &writer) -> Status {
    unsigned char length[8];
    for (int i = 0; i < 8; ++i)
      length[i] = static_cast<unsigned char>(uint64_t(text.size()) >> (8 * i));
    if (Status status = writer.write(length, 8); !status)
      return status;
    if (Status status = writer.write(text); !status)
      return status;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const char *bytes = static_cast<const char *>(tensors[i].data);
      for (uint64_t done = 0; done < sizes[i];) {
        size_t chunk = static_cast<size_t>(std::min<uint64_t>(kWriteChunk, sizes[i] - done));
        if (Status status = writer.write(bytes + done, chunk); !status)
          return status;
        done += chunk;
        if (progress)
          progress(writer.bytesWritten(), total);
      }
    }
    return Status::success();
  });
}
