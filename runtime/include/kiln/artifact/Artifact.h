//===- Artifact.h - The .kiln artifact container ----------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A .kiln file is one versioned, checksummed container of named sections
// (docs/artifact.md): a fixed header, a section table, 64-byte aligned
// payloads and a trailer with the whole-file CRC-32C. The compiler writes it
// with ArtifactWriter; kiln-run reads it with Artifact::open, which checks
// every checksum before anything is used and describes any damage in one
// line. This library needs neither MLIR nor CUDA.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_ARTIFACT_H
#define KILN_ARTIFACT_ARTIFACT_H

#include "kiln/artifact/Expected.h"
#include "kiln/artifact/FileIO.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::artifact {

/// The container format this library writes and reads.
constexpr uint32_t kFormatVersion = 1;
/// The first eight bytes of every .kiln file.
constexpr char kMagic[8] = {'K', 'I', 'L', 'N', 'A', 'R', 'T', '\0'};
/// The last four bytes.
constexpr char kTrailerMagic[4] = {'K', 'E', 'N', 'D'};
constexpr size_t kHeaderSize = 40;
constexpr size_t kTrailerSize = 8;
constexpr size_t kSectionAlignment = 64;
/// Longest section name, in bytes.
constexpr size_t kMaxSectionNameLength = 1024;

struct Section {
  std::string name;
  uint64_t offset = 0; ///< From the start of the file.
  uint64_t size = 0;
  uint32_t crc32c = 0;
};

/// A validated artifact held in memory.
class Artifact {
public:
  /// Maps and validates \p path (the mapping is kept: the file is not
  /// copied). Errors are one line starting "<path>: ".
  static Expected<Artifact> open(const std::string &path);
  /// Validates \p bytes; \p origin names the source in errors.
  static Expected<Artifact> parse(std::string bytes, const std::string &origin);

  uint32_t getFormatVersion() const { return formatVersion; }
  uint64_t getFileSize() const { return view().size(); }
  uint32_t getFileCrc32c() const { return fileCrc32c; }
  const std::vector<Section> &getSections() const { return sections; }

  /// The section named \p name, or null.
  const Section *find(std::string_view name) const;
  /// The payload of \p section.
  std::string_view contents(const Section &section) const;
  /// The payload of the section named \p name; empty if absent.
  std::string_view contents(std::string_view name) const;

private:
  Artifact() = default;
  /// Checks \p bytes and fills the table; \p bytes become the artifact's
  /// once the caller stores them.
  static Status validate(std::string_view bytes, const std::string &origin, Artifact &artifact);
  std::string_view view() const { return mapped ? mapped->view() : owned; }
  std::string owned;                  ///< parse(): the bytes given
  std::shared_ptr<MappedFile> mapped; ///< open(): the file's mapping
  uint32_t formatVersion = 0;
  uint32_t fileCrc32c = 0;
  std::vector<Section> sections;
};

/// Recomputes every checksum of \p bytes (each section's as far as the
/// table can be read, the table's, the header's, the file's) in place, so a
/// deliberately damaged artifact reaches the checks after the checksums:
/// for tests and the fuzzer's mutator. Does nothing to bytes too short to
/// hold a header and a trailer.
void resealArtifact(std::string &bytes);

/// Collects sections, then writes them as one artifact.
class ArtifactWriter {
public:
  /// Adds a section; the order of calls is the order in the file. Errors
  /// (duplicate, empty or overlong name) are reported by serialize()/write().
  void add(std::string name, std::string contents);

  /// The complete file contents.
  Expected<std::string> serialize() const;
  /// Writes the artifact to \p path atomically (temp file, fsync, rename).
  Status write(const std::string &path) const;

private:
  std::vector<std::pair<std::string, std::string>> pending;
};

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_ARTIFACT_H
