//===- FileIO.h - Whole-file reads, mappings and atomic writes --*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Checkpoints and artifacts are replaced, never edited in place: a writer
// fills a temporary file in the destination's directory, fsyncs it, renames
// it over the destination and fsyncs the directory. A crash at any point
// leaves either the old file or the new one, both complete.
//
// Only regular files are read or replaced: a directory, a device, a FIFO or
// a socket is refused with one line before anything is opened for I/O (a
// FIFO would block a reader forever; a device node renamed over would
// vanish), and nothing is written under /proc or /sys.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_FILEIO_H
#define KILN_ARTIFACT_FILEIO_H

#include "kiln/artifact/Expected.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

namespace kiln::artifact {

/// A read-only, private memory mapping of a whole file (or an empty view for
/// an empty file). Move-only; unmaps on destruction.
class MappedFile {
public:
  /// Maps \p path, which must be a regular file: it is stat'ed before the
  /// (non-blocking) open and fstat'ed after it, so a FIFO or a device given
  /// as a file fails at once instead of blocking.
  static Expected<MappedFile> open(const std::string &path);

  MappedFile(MappedFile &&other) noexcept;
  MappedFile &operator=(MappedFile &&other) noexcept;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  ~MappedFile();

  const unsigned char *data() const { return bytes; }
  size_t size() const { return length; }
  std::string_view view() const { return {reinterpret_cast<const char *>(bytes), length}; }

private:
  MappedFile() = default;
  const unsigned char *bytes = nullptr;
  size_t length = 0;
};

/// Sequential output to the temporary file of writeFileAtomically().
class FileWriter {
public:
  /// Writes all \p size bytes (retrying short writes).
  Status write(const void *data, size_t size);
  Status write(std::string_view text) { return write(text.data(), text.size()); }
  uint64_t bytesWritten() const { return written; }

private:
  friend Status writeFileAtomically(const std::string &,
                                    const std::function<Status(FileWriter &)> &);
  FileWriter(int fd, std::string path) : fd(fd), path(std::move(path)) {}
  int fd;
  std::string path;
  uint64_t written = 0;
};

/// Replaces \p path with what \p fill writes, atomically: the data goes to
/// "<dir>/.<name>.tmp-<pid>" (created exclusively, never through a link),
/// which is fsynced, renamed over \p path, and the directory fsynced. If
/// \p fill or any step fails, the temporary file is removed and \p path is
/// untouched. A killed process leaves its temporary file behind (never a
/// partial \p path). checkReplaceableFile(\p path) runs before \p fill and
/// again before the rename.
Status writeFileAtomically(const std::string &path,
                           const std::function<Status(FileWriter &)> &fill);

/// Whether an atomic writer may replace \p path: its directory exists and
/// is not on /proc or /sys, and \p path is absent or (after symlinks) a
/// regular file. Otherwise one line naming it, e.g. "out.kiln: is a
/// directory, not a regular file; refusing to replace it". Writers call it
/// before the work whose result they write (kiln compile before compiling,
/// kiln-run train before training).
Status checkReplaceableFile(const std::string &path);

/// The directory part of \p path ("." for a bare name, "/" for "/x").
std::string parentDirectory(const std::string &path);

/// "<path>: <strerror(errno)>".
Error errnoError(const std::string &path, const char *what = nullptr);

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_FILEIO_H
