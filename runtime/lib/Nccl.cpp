//===- Nccl.cpp - Load NCCL at run time -------------------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/Nccl.h"

#include <cstdlib>
#include <dlfcn.h>

using namespace kiln::runtime;

std::optional<nccl::DataType> nccl::dataTypeOf(artifact::DType dtype) {
  switch (dtype) {
  case artifact::DType::F32: return Float32;
  case artifact::DType::F64: return Float64;
  case artifact::DType::F16: return Float16;
  case artifact::DType::BF16: return Bfloat16;
  default: return std::nullopt;
  }
}

Expected<Nccl> Nccl::load(std::vector<std::string> candidates) {
  if (candidates.empty()) {
    if (const char *path = std::getenv("KILN_NCCL_LIBRARY"); path && *path)
      candidates.push_back(path);
    candidates.push_back("libnccl.so.2");
#ifdef KILN_CUDA_LIBRARY_DIR
    candidates.push_back(std::string(KILN_CUDA_LIBRARY_DIR) + "/libnccl.so.2");
#endif
  }
  void *handle = nullptr;
  std::string tried, loaded;
  for (const std::string &candidate : candidates) {
    // Never closed: NCCL keeps threads and state for the process's life.
    handle = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) {
      loaded = candidate;
      break;
    }
    const char *reason = ::dlerror();
    tried +=
        (tried.empty() ? "" : "; ") + std::string(reason ? reason : candidate + ": dlopen failed");
  }
  if (!handle)
    return Error{"NCCL not found (" + tried +
                 "); data-parallel training needs libnccl.so.2: set KILN_NCCL_LIBRARY to "
                 "its path (scripts/nccl-path.sh finds the one PyTorch ships)"};
  Nccl n;
  n.library = loaded;
  bool missing = false;
  std::string symbol;
  auto resolve = [&](auto &fn, const char *name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(::dlsym(handle, name));
    if (!fn && !missing) {
      missing = true;
      symbol = name;
    }
  };
  resolve(n.ncclGetVersion, "ncclGetVersion");
  resolve(n.ncclGetUniqueId, "ncclGetUniqueId");
  resolve(n.ncclCommInitRank, "ncclCommInitRank");
  resolve(n.ncclAllReduce, "ncclAllReduce");
  resolve(n.ncclGroupStart, "ncclGroupStart");
  resolve(n.ncclGroupEnd, "ncclGroupEnd");
  resolve(n.ncclCommDestroy, "ncclCommDestroy");
  resolve(n.ncclCommAbort, "ncclCommAbort");
  resolve(n.ncclCommGetAsyncError, "ncclCommGetAsyncError");
  resolve(n.ncclGetErrorString, "ncclGetErrorString");
  if (missing)
    return Error{loaded + " does not export " + symbol + "; it is not a usable NCCL"};
  if (n.ncclGetVersion(&n.version) != nccl::Success)
    return Error{loaded + ": ncclGetVersion failed"};
  if (n.version < kMinimumVersion)
    return Error{loaded + " is NCCL " + n.getVersionString() +
                 "; kiln-run needs NCCL 2.10 or later (ncclAvg)"};
  return n;
}

std::string Nccl::getVersionString() const {
  // Since 2.9: major*10000 + minor*100 + patch (before: major*1000 + ...).
  int major = version >= 10000 ? version / 10000 : version / 1000;
  int minor = version >= 10000 ? version / 100 % 100 : version / 100 % 10;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(version % 100);
}

std::string Nccl::describe(nccl::Result result) const {
  static const char *names[] = {"ncclSuccess",       "ncclUnhandledCudaError", "ncclSystemError",
                                "ncclInternalError", "ncclInvalidArgument",    "ncclInvalidUsage",
                                "ncclRemoteError",   "ncclInProgress"};
  std::string name =
      result >= 0 && result <= 7 ? names[result] : "ncclResult " + std::to_string(result);
  const char *text = ncclGetErrorString ? ncclGetErrorString(result) : nullptr;
  return text ? name + " (" + text + ")" : name;
}
