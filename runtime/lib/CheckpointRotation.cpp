//===- CheckpointRotation.cpp - --save-every and --keep-last --------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/CheckpointRotation.h"

#include "kiln/artifact/FileIO.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

using namespace kiln::runtime;

namespace {
/// ("dir/", "ckpt", ".safetensors") of "dir/ckpt.safetensors".
struct PathParts {
  std::string dir, stem, extension;
};

PathParts split(const std::string &path) {
  size_t slash = path.rfind('/');
  PathParts parts;
  parts.dir = slash == std::string::npos ? "" : path.substr(0, slash + 1);
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  size_t dot = name.rfind('.');
  if (dot == std::string::npos || dot == 0)
    dot = name.size();
  parts.stem = name.substr(0, dot);
  parts.extension = name.substr(dot);
  return parts;
}
} // namespace

std::string kiln::runtime::periodicCheckpointPath(const std::string &savePath, int64_t step) {
  PathParts parts = split(savePath);
  return parts.dir + parts.stem + "-step" + std::to_string(step) + parts.extension;
}

Expected<std::vector<std::pair<int64_t, std::string>>>
kiln::runtime::listPeriodicCheckpoints(const std::string &savePath) {
  PathParts parts = split(savePath);
  std::string dir = parts.dir.empty() ? "." : parts.dir;
  DIR *handle = ::opendir(dir.c_str());
  if (!handle)
    return kiln::artifact::errnoError(dir, "cannot list");
  std::vector<std::pair<int64_t, std::string>> found;
  std::string prefix = parts.stem + "-step";
  while (dirent *entry = ::readdir(handle)) {
    std::string name = entry->d_name;
    if (name.size() <= prefix.size() + parts.extension.size() ||
        name.compare(0, prefix.size(), prefix) != 0 ||
        name.compare(name.size() - parts.extension.size(), parts.extension.size(),
                     parts.extension) != 0)
      continue;
    std::string digits =
        name.substr(prefix.size(), name.size() - prefix.size() - parts.extension.size());
    if (digits.empty() || digits.size() > 18 || (digits.size() > 1 && digits[0] == '0') ||
        !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
      continue;
    std::string path = parts.dir + name;
    struct stat info;
    if (::lstat(path.c_str(), &info) != 0 || !S_ISREG(info.st_mode))
      continue; // never a link, a directory or a device
    found.push_back({std::stoll(digits), path});
  }
  ::closedir(handle);
  std::sort(found.begin(), found.end());
  return found;
}

Status kiln::runtime::prunePeriodicCheckpoints(const std::string &savePath, int64_t keep,
                                               std::vector<std::string> &removed) {
  Expected<std::vector<std::pair<int64_t, std::string>>> found = listPeriodicCheckpoints(savePath);
  if (!found)
    return Error{found.getError()};
  if (keep < 1 || static_cast<int64_t>(found->size()) <= keep)
    return Status::success();
  size_t drop = found->size() - static_cast<size_t>(keep);
  for (size_t i = 0; i < drop; ++i) {
    const std::string &path = (*found)[i].second;
    if (::unlink(path.c_str()) != 0)
      return kiln::artifact::errnoError(path, "cannot remove an old checkpoint");
    removed.push_back(path);
  }
  return Status::success();
}
