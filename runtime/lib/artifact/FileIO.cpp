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
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace kiln::artifact;

Error kiln::artifact::errnoError(const std::string &path, const char *what) {
  std::string message = path + ": ";
  if (what)
    message += std::string(what) + ": ";
  return Error{message + std::strerror(errno)};
}

Expected<MappedFile> MappedFile::open(const std::string &path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
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
    return Error{path + ": not a regular file"};
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

MappedFile::MappedFile(MappedFile &&other) noexcept
    : bytes(other.bytes), length(other.length) {
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

Status kiln::artifact::writeFileAtomically(
    const std::string &path, const std::function<Status(FileWriter &)> &fill) {
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : path.substr(0, slash);
  if (dir.empty())
    dir = "/";
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  std::string temp =
      (slash == std::string::npos ? "" : path.substr(0, slash + 1)) + "." +
      name + ".tmp-" + std::to_string(::getpid());

  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
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
