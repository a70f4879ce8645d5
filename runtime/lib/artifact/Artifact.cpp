//===- Artifact.cpp - The .kiln artifact container --------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Layout (all integers little-endian; docs/artifact.md has the full table):
//
//   header   magic[8] version:u32 flags:u32 fileSize:u64 sectionCount:u32
//            tableSize:u32 tableCrc:u32 headerCrc:u32      (40 bytes)
//   table    per section: offset:u64 size:u64 crc:u32 nameLength:u16
//            reserved:u16 name[nameLength]
//   payloads each at a multiple of 64, zero padding between
//   trailer  fileCrc:u32 (CRC-32C of every byte before it) "KEND"
//
// The reader checks, in order: size, magic, version, header CRC, recorded
// vs actual size, table CRC and bounds, each section's CRC, the file CRC, so
// the first failure names the most specific damaged part.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/Artifact.h"

#include "kiln/artifact/Crc32c.h"
#include "kiln/artifact/FileIO.h"

#include <algorithm>
#include <cstring>
#include <set>

using namespace kiln::artifact;

namespace {
constexpr size_t kEntryFixedSize = 24;

void putU16(std::string &out, uint16_t value) {
  for (int i = 0; i < 2; ++i)
    out += static_cast<char>(value >> (8 * i));
}
void putU32(std::string &out, uint32_t value) {
  for (int i = 0; i < 4; ++i)
    out += static_cast<char>(value >> (8 * i));
}
void putU64(std::string &out, uint64_t value) {
  for (int i = 0; i < 8; ++i)
    out += static_cast<char>(value >> (8 * i));
}
uint64_t getLE(std::string_view in, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i)
    value = value << 8 | static_cast<unsigned char>(in[at + i]);
  return value;
}

uint64_t alignUp(uint64_t value) {
  return (value + kSectionAlignment - 1) / kSectionAlignment * kSectionAlignment;
}

uint32_t crcOf(std::string_view bytes, size_t offset, size_t size) {
  return crc32c(0, bytes.data() + offset, size);
}
} // namespace

//===----------------------------------------------------------------------===//
// Writer
//===----------------------------------------------------------------------===//

void ArtifactWriter::add(std::string name, std::string contents) {
  pending.emplace_back(std::move(name), std::move(contents));
}

Expected<std::string> ArtifactWriter::serialize() const {
  std::set<std::string_view> names;
  size_t tableSize = 0;
  for (const auto &[name, contents] : pending) {
    if (name.empty())
      return Error{"artifact section with an empty name"};
    if (name.size() > kMaxSectionNameLength)
      return Error{"artifact section name longer than " + std::to_string(kMaxSectionNameLength) +
                   " bytes: " + name.substr(0, 40) + "..."};
    if (name.find('\0') != std::string::npos)
      return Error{"artifact section name contains a NUL byte"};
    if (!names.insert(name).second)
      return Error{"duplicate artifact section '" + name + "'"};
    tableSize += kEntryFixedSize + name.size();
  }

  // Place the payloads.
  std::vector<uint64_t> offsets;
  uint64_t cursor = alignUp(kHeaderSize + tableSize);
  for (const auto &entry : pending) {
    offsets.push_back(cursor);
    cursor = alignUp(cursor + entry.second.size());
  }
  uint64_t fileSize = cursor + kTrailerSize;

  std::string table;
  for (size_t i = 0; i < pending.size(); ++i) {
    const auto &[name, contents] = pending[i];
    putU64(table, offsets[i]);
    putU64(table, contents.size());
    putU32(table, crc32c(0, contents.data(), contents.size()));
    putU16(table, static_cast<uint16_t>(name.size()));
    putU16(table, 0);
    table += name;
  }

  std::string out(kMagic, sizeof(kMagic));
  putU32(out, kFormatVersion);
  putU32(out, 0); // flags
  putU64(out, fileSize);
  putU32(out, static_cast<uint32_t>(pending.size()));
  putU32(out, static_cast<uint32_t>(table.size()));
  putU32(out, crc32c(0, table.data(), table.size()));
  putU32(out, crc32c(0, out.data(), out.size()));
  out += table;
  out.reserve(fileSize);
  for (size_t i = 0; i < pending.size(); ++i) {
    out.resize(offsets[i], '\0');
    out += pending[i].second;
  }
  out.resize(fileSize - kTrailerSize, '\0');
  putU32(out, crc32c(0, out.data(), out.size()));
  out.append(kTrailerMagic, sizeof(kTrailerMagic));
  return out;
}

Status ArtifactWriter::write(const std::string &path) const {
  Expected<std::string> bytes = serialize();
  if (!bytes)
    return Error{path + ": " + bytes.getError()};
  return writeFileAtomically(path, [&](FileWriter &writer) { return writer.write(*bytes); });
}

void kiln::artifact::resealArtifact(std::string &bytes) {
  if (bytes.size() < kHeaderSize + kTrailerSize)
    return;
  auto put32 = [&](size_t at, uint32_t value) {
    for (int i = 0; i < 4; ++i)
      bytes[at + i] = static_cast<char>(value >> (8 * i));
  };
  uint64_t end = bytes.size() - kTrailerSize; // the file CRC's offset
  uint64_t tableSize = getLE(bytes, 28, 4);
  uint64_t tableEnd = std::min<uint64_t>(kHeaderSize + tableSize, end);
  uint32_t count = static_cast<uint32_t>(getLE(bytes, 24, 4));
  size_t cursor = kHeaderSize;
  for (uint32_t i = 0; i < count && tableEnd - cursor >= kEntryFixedSize; ++i) {
    uint64_t offset = getLE(bytes, cursor, 8), size = getLE(bytes, cursor + 8, 8);
    if (offset <= end && size <= end - offset)
      put32(cursor + 16, crc32c(0, bytes.data() + offset, size));
    cursor += kEntryFixedSize + getLE(bytes, cursor + 20, 2);
    if (cursor > tableEnd)
      break;
  }
  put32(32, crc32c(0, bytes.data() + kHeaderSize, tableEnd - kHeaderSize));
  put32(36, crc32c(0, bytes.data(), 36));
  put32(end, crc32c(0, bytes.data(), end));
}

//===----------------------------------------------------------------------===//
// Reader
//===----------------------------------------------------------------------===//

Expected<Artifact> Artifact::open(const std::string &path) {
  Expected<MappedFile> file = MappedFile::open(path);
  if (!file)
    return file.takeError();
  Artifact artifact;
  artifact.mapped = std::make_shared<MappedFile>(std::move(*file));
  if (Status status = validate(artifact.mapped->view(), path, artifact); !status)
    return status.takeError();
  return artifact;
}

Expected<Artifact> Artifact::parse(std::string bytes, const std::string &origin) {
  Artifact artifact;
  if (Status status = validate(bytes, origin, artifact); !status)
    return status.takeError();
  artifact.owned = std::move(bytes);
  return artifact;
}

Status Artifact::validate(std::string_view bytes, const std::string &origin, Artifact &artifact) {
  auto fail = [&](const std::string &what) { return Error{origin + ": " + what}; };
  auto corrupt = [&](const std::string &what) { return fail("corrupt Kiln artifact: " + what); };
  uint64_t actualSize = bytes.size();

  if (actualSize >= sizeof(kMagic) && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0)
    return fail("not a Kiln artifact (bad magic)");
  if (actualSize < kHeaderSize + kTrailerSize)
    return fail("truncated Kiln artifact (" + std::to_string(actualSize) +
                " bytes; the header and trailer alone take " +
                std::to_string(kHeaderSize + kTrailerSize) + ")");

  uint32_t version = static_cast<uint32_t>(getLE(bytes, 8, 4));
  // The version is checked before the header CRC: a future version may lay
  // out the rest of the header differently.
  if (version != kFormatVersion)
    return fail("Kiln artifact format version " + std::to_string(version) +
                "; this build reads version " + std::to_string(kFormatVersion) +
                " (recompile the model with a matching kiln)");
  if (crcOf(bytes, 0, 36) != getLE(bytes, 36, 4))
    return corrupt("header checksum mismatch");
  uint32_t flags = static_cast<uint32_t>(getLE(bytes, 12, 4));
  uint64_t fileSize = getLE(bytes, 16, 8);
  uint32_t sectionCount = static_cast<uint32_t>(getLE(bytes, 24, 4));
  uint32_t tableSize = static_cast<uint32_t>(getLE(bytes, 28, 4));
  uint32_t tableCrc = static_cast<uint32_t>(getLE(bytes, 32, 4));
  if (flags != 0)
    return corrupt("unknown header flags " + std::to_string(flags));
  if (actualSize < fileSize)
    return fail("truncated Kiln artifact (" + std::to_string(actualSize) + " of " +
                std::to_string(fileSize) + " bytes)");
  if (actualSize > fileSize)
    return corrupt(std::to_string(actualSize - fileSize) + " unexpected bytes after the end (" +
                   std::to_string(fileSize) + " bytes recorded)");
  if (std::memcmp(bytes.data() + fileSize - 4, kTrailerMagic, 4) != 0)
    return corrupt("bad trailer");
  if (tableSize > fileSize - kHeaderSize - kTrailerSize)
    return corrupt("section table larger than the file");
  if (crcOf(bytes, kHeaderSize, tableSize) != tableCrc)
    return corrupt("section table checksum mismatch");

  artifact.formatVersion = version;
  std::set<std::string> names;
  size_t cursor = kHeaderSize, tableEnd = kHeaderSize + tableSize;
  uint64_t payloadStart = alignUp(tableEnd), previousEnd = payloadStart;
  for (uint32_t i = 0; i < sectionCount; ++i) {
    if (tableEnd - cursor < kEntryFixedSize)
      return corrupt("section table ends inside entry " + std::to_string(i));
    Section section;
    section.offset = getLE(bytes, cursor, 8);
    section.size = getLE(bytes, cursor + 8, 8);
    section.crc32c = static_cast<uint32_t>(getLE(bytes, cursor + 16, 4));
    size_t nameLength = getLE(bytes, cursor + 20, 2);
    uint64_t reserved = getLE(bytes, cursor + 22, 2);
    cursor += kEntryFixedSize;
    if (nameLength == 0 || nameLength > kMaxSectionNameLength || tableEnd - cursor < nameLength)
      return corrupt("bad name length in section table entry " + std::to_string(i));
    if (reserved != 0)
      return corrupt("section table entry " + std::to_string(i) + ": reserved field is " +
                     std::to_string(reserved) + ", not 0");
    section.name = std::string(bytes.substr(cursor, nameLength));
    cursor += nameLength;
    if (section.name.find('\0') != std::string::npos)
      return corrupt("section table entry " + std::to_string(i) + ": the name contains a NUL byte");
    // Sections are stored in table order without overlap, inside the file,
    // each at a multiple of 64.
    uint64_t payloadEnd = fileSize - kTrailerSize;
    if (section.offset < previousEnd || section.offset > payloadEnd ||
        section.size > payloadEnd - section.offset)
      return corrupt("section '" + section.name + "' lies outside the file");
    if (section.offset % kSectionAlignment != 0)
      return corrupt("section '" + section.name + "' is not at a multiple of " +
                     std::to_string(kSectionAlignment) + " bytes");
    previousEnd = section.offset + section.size;
    if (!names.insert(section.name).second)
      return corrupt("duplicate section '" + section.name + "'");
    artifact.sections.push_back(std::move(section));
  }
  if (cursor != tableEnd)
    return corrupt("section table has trailing bytes");

  for (Section &section : artifact.sections)
    if (crcOf(bytes, section.offset, section.size) != section.crc32c)
      return corrupt("section '" + section.name + "' checksum mismatch");
  artifact.fileCrc32c = crcOf(bytes, 0, fileSize - kTrailerSize);
  if (artifact.fileCrc32c != getLE(bytes, fileSize - kTrailerSize, 4))
    return corrupt("file checksum mismatch");
  // Between the table and the payloads, and between payloads, only zeros.
  auto zeros = [&](uint64_t from, uint64_t to) {
    for (uint64_t at = from; at < to; ++at)
      if (bytes[at] != '\0')
        return false;
    return true;
  };
  uint64_t gap = tableEnd;
  for (const Section &section : artifact.sections) {
    if (!zeros(gap, section.offset))
      return corrupt("non-zero padding before section '" + section.name + "'");
    gap = section.offset + section.size;
  }
  if (!zeros(gap, fileSize - kTrailerSize))
    return corrupt("non-zero padding before the trailer");
  return Status::success();
}

const Section *Artifact::find(std::string_view name) const {
  for (const Section &section : sections)
    if (section.name == name)
      return &section;
  return nullptr;
}

std::string_view Artifact::contents(const Section &section) const {
  return view().substr(section.offset, section.size);
}

std::string_view Artifact::contents(std::string_view name) const {
  const Section *section = find(name);
  return section ? contents(*section) : std::string_view();
}
