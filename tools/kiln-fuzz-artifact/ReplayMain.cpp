//===- ReplayMain.cpp - Run a fuzz target's inputs without libFuzzer ------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// kiln-replay-artifact / kiln-replay-safetensors: the fuzz targets' entry
// point over the files (or the files in the folders) given, once each, with
// no libFuzzer and no sanitizer. The test suite replays the corpora and the
// crash regressions with them on every build, fuzzer or not. A file named
// ok-* must be accepted and bad-* refused (any-* may be either).
//
//===----------------------------------------------------------------------===//

#include "FuzzSupport.h"

#include <dirent.h>
#include <fstream>
#include <iterator>
#include <sys/stat.h>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/// Only the custom mutators call it, and nothing mutates here.
extern "C" size_t LLVMFuzzerMutate(uint8_t *, size_t size, size_t) { return size; }

static bool runFile(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "kiln-replay: cannot read %s\n", path.c_str());
    return false;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()), bytes.size());
  std::string name = path.substr(path.rfind('/') + 1);
  bool accepted = kiln::fuzz::lastInputAccepted();
  if ((name.compare(0, 3, "ok-") == 0 && !accepted) ||
      (name.compare(0, 4, "bad-") == 0 && accepted)) {
    std::fprintf(stderr, "kiln-replay: %s was %s\n", path.c_str(),
                 accepted ? "accepted" : "refused");
    return false;
  }
  return true;
}

int main(int argc, char **argv) {
  size_t inputs = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat info;
    if (::stat(argv[i], &info) == 0 && S_ISDIR(info.st_mode)) {
      DIR *dir = ::opendir(argv[i]);
      while (dirent *entry = dir ? ::readdir(dir) : nullptr) {
        std::string name = entry->d_name;
        if (name == "." || name == ".." || name[0] == '.')
          continue;
        if (!runFile(std::string(argv[i]) + "/" + name))
          return 1;
        ++inputs;
      }
      if (dir)
        ::closedir(dir);
    } else {
      if (!runFile(argv[i]))
        return 1;
      ++inputs;
    }
  }
  std::printf("replayed %zu inputs\n", inputs);
  return 0;
}
