//===- Nvrtc.cpp - Offline kernel compilation with NVRTC ------------------===//

#include "kiln/Codegen/Nvrtc.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/SHA256.h"
#include "llvm/Support/ThreadPool.h"
#include "llvm/Support/raw_ostream.h"

#include <atomic>
#include <mutex>
#include <nvrtc.h>

using namespace llvm;

namespace kiln::codegen {
namespace {

/// Options every kernel compiles with; part of the cache key.
std::vector<std::string> baseOptions() {
  return {"--std=c++17", "-default-device", "--include-path=" KILN_CUDA_INCLUDE_DIR};
}

Error nvrtcError(const KernelSource &kernel, StringRef target, StringRef what, nvrtcResult result,
                 StringRef log = "") {
  std::string message = ("NVRTC " + what + " failed for kernel '" + kernel.name + "' (" + target +
                         "): " + nvrtcGetErrorString(result))
                            .str();
  if (!log.empty())
    message += "\n" + log.rtrim().str();
  return createStringError(inconvertibleErrorCode(), message);
}

std::string cacheKey(const KernelSource &kernel, StringRef target,
                     const std::vector<std::string> &options) {
  SHA256 hash;
  hash.update(kernel.source);
  hash.update(StringRef("\0", 1));
  hash.update(target);
  hash.update(StringRef("\0", 1));
  hash.update(nvrtcVersionString());
  for (const std::string &option : options) {
    hash.update(StringRef("\0", 1));
    hash.update(option);
  }
  std::array<uint8_t, 32> digest = hash.final();
  return toHex(digest, /*LowerCase=*/true);
}

/// Write then rename: concurrent compiles never see half a file. A cache
/// that cannot be written only costs time.
void writeCacheFile(const std::string &dir, const std::string &path, StringRef bytes) {
  if (sys::fs::create_directories(dir))
    return;
  static std::atomic<unsigned> counter{0};
  std::string temp = path + ".tmp" + std::to_string(sys::Process::getProcessId()) + "." +
                     std::to_string(counter++);
  std::error_code ec;
  {
    raw_fd_ostream os(temp, ec, sys::fs::OF_None);
    if (!ec)
      os << bytes;
  }
  if (ec || sys::fs::rename(temp, path))
    sys::fs::remove(temp);
}

} // namespace

std::string nvrtcVersionString() {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS)
    return "unknown";
  return std::to_string(major) + "." + std::to_string(minor);
}

std::string defaultKernelCacheDir() {
  if (std::optional<std::string> dir = sys::Process::GetEnv("KILN_CACHE_DIR"))
    return *dir;
  SmallString<128> path;
  if (std::optional<std::string> xdg = sys::Process::GetEnv("XDG_CACHE_HOME"))
    path = *xdg;
  else if (std::optional<std::string> home = sys::Process::GetEnv("HOME"))
    sys::path::append(path, *home, ".cache");
  else
    return "";
  sys::path::append(path, "kiln");
  return std::string(path);
}

Expected<std::vector<std::string>> parseArchList(StringRef list) {
  std::vector<std::string> archs;
  SmallVector<StringRef> parts;
  list.split(parts, ',', -1, /*KeepEmpty=*/false);
  for (StringRef entry : parts) {
    StringRef part = entry.trim();
    unsigned number;
    if (!part.consume_front("sm_") || part.getAsInteger(10, number) || number < 75)
      return createStringError(inconvertibleErrorCode(),
                               "bad --arch entry '" + entry.trim().str() +
                                   "' (expected sm_NN with NN >= 75, e.g. sm_90,sm_80)");
    archs.push_back("sm_" + std::to_string(number));
  }
  if (archs.empty())
    return createStringError(inconvertibleErrorCode(), "--arch lists no architecture");
  return archs;
}

Expected<std::string> compileKernel(const KernelSource &kernel, StringRef target,
                                    const NvrtcOptions &options, bool *cacheHit, std::string *ptx) {
  std::vector<std::string> flags = baseOptions();
  flags.push_back("--gpu-architecture=" + target.str());
  bool cubin = target.starts_with("sm_");
  SmallString<256> cachePath;
  if (!options.cacheDir.empty()) {
    sys::path::append(cachePath, options.cacheDir,
                      cacheKey(kernel, target, flags) + (cubin ? ".cubin" : ".ptx"));
    ErrorOr<std::unique_ptr<MemoryBuffer>> cached = MemoryBuffer::getFile(cachePath);
    ErrorOr<std::unique_ptr<MemoryBuffer>> cachedPtx =
        ptx ? MemoryBuffer::getFile(cachePath + ".ptx") : nullptr;
    if (cached && (!ptx || cachedPtx)) {
      if (cacheHit)
        *cacheHit = true;
      if (ptx)
        *ptx = (*cachedPtx)->getBuffer().str();
      return (*cached)->getBuffer().str();
    }
  }
  if (cacheHit)
    *cacheHit = false;
  nvrtcProgram program;
  std::string fileName = kernel.name + ".cu";
  if (nvrtcResult r = nvrtcCreateProgram(&program, kernel.source.c_str(), fileName.c_str(), 0,
                                         nullptr, nullptr);
      r != NVRTC_SUCCESS)
    return nvrtcError(kernel, target, "program creation", r);
  std::vector<const char *> argv;
  for (const std::string &flag : flags)
    argv.push_back(flag.c_str());
  nvrtcResult compiled = nvrtcCompileProgram(program, argv.size(), argv.data());
  size_t logSize = 0;
  nvrtcGetProgramLogSize(program, &logSize);
  std::string log(logSize, '\0');
  if (logSize)
    nvrtcGetProgramLog(program, log.data());
  if (compiled != NVRTC_SUCCESS) {
    nvrtcDestroyProgram(&program);
    return nvrtcError(kernel, target, "compilation", compiled, log.c_str());
  }
  size_t size = 0;
  std::string binary;
  nvrtcResult got = cubin ? nvrtcGetCUBINSize(program, &size) : nvrtcGetPTXSize(program, &size);
  if (got == NVRTC_SUCCESS) {
    binary.resize(size);
    got = cubin ? nvrtcGetCUBIN(program, binary.data()) : nvrtcGetPTX(program, binary.data());
  }
  // The PTX of a real-arch compile comes for free (the compute_NN it
  // lowered from): it is what other archs JIT from.
  std::string ptxText;
  if (got == NVRTC_SUCCESS && ptx && cubin) {
    size_t ptxSize = 0;
    got = nvrtcGetPTXSize(program, &ptxSize);
    if (got == NVRTC_SUCCESS) {
      ptxText.resize(ptxSize);
      got = nvrtcGetPTX(program, ptxText.data());
    }
    if (!ptxText.empty() && ptxText.back() == '\0')
      ptxText.pop_back();
  }
  nvrtcDestroyProgram(&program);
  if (got != NVRTC_SUCCESS)
    return nvrtcError(kernel, target, cubin ? "cubin retrieval" : "PTX retrieval", got);
  if (!cubin && !binary.empty() && binary.back() == '\0')
    binary.pop_back();
  if (ptx)
    *ptx = ptxText;
  if (!cachePath.empty() && ptx && cubin)
    writeCacheFile(options.cacheDir, (cachePath + ".ptx").str(), ptxText);
  if (!cachePath.empty())
    writeCacheFile(options.cacheDir, std::string(cachePath), binary);
  return binary;
}

Expected<std::vector<CompiledKernel>> compileKernels(const std::vector<KernelSource> &kernels,
                                                     const NvrtcOptions &options) {
  std::vector<CompiledKernel> results(kernels.size());
  std::vector<std::string> errors;
  std::mutex lock;
  // PTX for the oldest requested arch runs (JIT) on every newer one; it
  // comes out of that arch's cubin compile.
  size_t lowest = 0;
  auto number = [](const std::string &arch) {
    unsigned n = 0;
    StringRef(arch).drop_front(3).getAsInteger(10, n);
    return n;
  };
  for (size_t t = 0; t < options.archs.size(); ++t)
    if (number(options.archs[t]) < number(options.archs[lowest]))
      lowest = t;
  StdThreadPool pool(options.threads ? hardware_concurrency(options.threads)
                                     : hardware_concurrency());
  std::vector<size_t> targetsLeft(kernels.size(), options.archs.size());
  size_t kernelsDone = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    results[i].name = kernels[i].name;
    results[i].cubins.resize(options.archs.size());
    for (size_t t = 0; t < options.archs.size(); ++t)
      pool.async([&, i, t] {
        bool hit = false;
        std::string ptx;
        const std::string &target = options.archs[t];
        Expected<std::string> out =
            compileKernel(kernels[i], target, options, &hit, t == lowest ? &ptx : nullptr);
        std::lock_guard<std::mutex> guard(lock);
        if (!out) {
          errors.push_back(toString(out.takeError()));
          return;
        }
        (hit ? results[i].cacheHits : results[i].compiles) += 1;
        results[i].cubins[t] = {target, std::move(*out)};
        if (t == lowest)
          results[i].ptx = std::move(ptx);
        if (--targetsLeft[i] == 0 && options.onKernelDone)
          options.onKernelDone(++kernelsDone, kernels.size(), kernels[i].name,
                               results[i].compiles == 0);
      });
  }
  pool.wait();
  if (!errors.empty()) {
    llvm::sort(errors);
    return createStringError(inconvertibleErrorCode(), llvm::join(errors, "\n"));
  }
  return results;
}

} // namespace kiln::codegen
