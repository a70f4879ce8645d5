//===- FileIO.cpp - Whole-file reads, mappings and atomic writes -*- C++
//-*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/FileIO.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

using namespace kiln::artifact;

namespace {
/// "a directory", "a FIFO", ... for a mode that is not a regular file.
const char *describeFileType(mode_t mode) {
  if (S_ISDIR(mode))
    return "a directory";
  if (S_ISCHR(mode))
    return "a character device";
  if (S_ISBLK(mode))
    return "a block device";
  if (S_ISFIFO(mode))
    return "a FIFO";
  if (S_ISSOCK(mode))
    return "a socket";
  if (S_ISLNK(mode))
    return "a symbolic link";
  return "not a file";
}

Error notRegular(const std::string &path, mode_t mode, const char *suffix = "") {
  return Error{path + ": not a regular file (" + describeFileType(mode) + ")" + suffix};
}
} // namespace

std::string kiln::artifact::parentDirectory(const std::string &path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos)
    return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

Status kiln::artifact::checkReplaceableFile(const std::string &path) {
  if (path.empty())
    return Error{"an empty output file name"};
  if (path.back() == '/')
    return Error{path + ": names a directory, not a file"};
  std::string dir = parentDirectory(path);
  struct statfs fs;
  if (::statfs(dir.c_str(), &fs) != 0)
    return errnoError(dir);
  // Pseudo file systems: a "file" there is a kernel interface.
  if (fs.f_type == PROC_SUPER_MAGIC || fs.f_type == SYSFS_MAGIC)
    return Error{path + ": is under " + (fs.f_type == PROC_SUPER_MAGIC ? "/proc" : "/sys") +
                 ", not a regular file system; refusing to write there"};
  struct stat info;
  if (::stat(path.c_str(), &info) == 0) {
    if (!S_ISREG(info.st_mode))
      return notRegular(path, info.st_mode, "; refusing to replace it");
  } else if (errno != ENOENT) {
    return errnoError(path);
  }
  return Status::success();
}

Error kiln::artifact::errnoError(const std::string &path, const char *what) {
  std::string message = path + ": ";
  if (what)
    message += std::string(what) + ": ";
  return Error{message + std::strerror(errno)};
}

Expected<MappedFile> MappedFile::open(const std::string &path) {
  // stat first: opening a FIFO blocks until a writer comes, and opening a
  // device can have effects of its own.
  struct stat before;
  if (::stat(path.c_str(), &before) != 0)
    return errnoError(path);
  if (!S_ISREG(before.st_mode))
    return notRegular(path, before.st_mode);
  // Non-blocking, and checked again on the descriptor: the name may have
  // been replaced (by a FIFO, say) since the stat.
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
  if (fd < 0)
    return errnoError(path);
  struct stat info;
  if (::fstat(fd, &info) != 0) {
    Error error = errnoError(path);
    ::close(fd);
    return error;
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return notRegular(path, info.st_mode);
  }
  MappedFile file;
  file.length = static_cast<size_t>(info.st_size);
  if (file.length) {
    void *map = ::mmap(nullptr, file.length, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      Error error = errnoError(path, "mmap");
      ::close(fd);
      return error;
    }
    file.bytes = static_cast<const unsigned char *>(map);
  }
  // The mapping stays valid after close.
  ::close(fd);
  return file;
}

MappedFile::MappedFile(MappedFile &&other) noexcept : bytes(other.bytes), length(other.length) {
  other.bytes = nullptr;
  other.length = 0;
}

MappedFile &MappedFile::operator=(MappedFile &&other) noexcept {
  if (this != &other) {
    this->~MappedFile();
    bytes = other.bytes;
    length = other.length;
    other.bytes = nullptr;
    other.length = 0;
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (bytes)
    ::munmap(const_cast<unsigned char *>(bytes), length);
}

Status FileWriter::write(const void *data, size_t size) {
  const char *cursor = static_cast<const char *>(data);
  while (size) {
    ssize_t n = ::write(fd, cursor, size);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return errnoError(path, "write");
    }
    cursor += n;
    size -= static_cast<size_t>(n);
    written += static_cast<uint64_t>(n);
  }
  return Status::success();
}

Status kiln::artifact::writeFileAtomically(const std::string &path,
                                           const std::function<Status(FileWriter &)> &fill) {
  if (Status status = checkReplaceableFile(path); !status)
    return status;
  size_t slash = path.rfind('/');
  std::string dir = parentDirectory(path);
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string temp = (slash == std::string::npos ? "" : path.substr(0, slash + 1)) + "." + name +
                     ".tmp-" + std::to_string(::getpid());

  // Exclusively, never through a link: whatever a killed writer with the
  // same pid (or anyone else) left under this name is removed, not opened.
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  int fd = ::open(temp.c_str(), flags, 0644);
  if (fd < 0 && errno == EEXIST && ::unlink(temp.c_str()) == 0)
    fd = ::open(temp.c_str(), flags, 0644);
  if (fd < 0)
    return errnoError(temp, "cannot create");
  auto abandon = [&](Error error) {
    ::close(fd);
    ::unlink(temp.c_str());
    return Status(std::move(error));
  };

  FileWriter writer(fd, temp);
  if (Status status = fill(writer); !status)
    return abandon(status.takeError());
  // The data must be durable before the rename makes it the checkpoint;
  // otherwise a power loss could leave a renamed but empty file.
  if (::fsync(fd) != 0)
    return abandon(errnoError(temp, "fsync"));
  if (::close(fd) != 0) {
    Error error = errnoError(temp, "close");
    ::unlink(temp.c_str());
    return error;
  }
  // The destination may have changed while \p fill ran.
  if (Status status = checkReplaceableFile(path); !status) {
    ::unlink(temp.c_str());
    return status;
  }
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    Error error = errnoError(path, "rename");
    ::unlink(temp.c_str());
    return error;
  }
  // Persist the rename itself.
  int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd < 0)
    return errnoError(dir, "cannot open directory for fsync");
  int synced = ::fsync(dirFd);
  ::close(dirFd);
  if (synced != 0)
    return errnoError(dir, "fsync");
  return Status::success();
}
