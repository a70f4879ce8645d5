//===- CublasLt.cpp - Load cuBLASLt at run time -----------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/CublasLt.h"

#include <dlfcn.h>

using namespace kiln::runtime;

Expected<CublasLt> CublasLt::load(std::vector<std::string> candidates) {
  if (candidates.empty()) {
    std::string name = "libcublasLt.so." + std::to_string(kBuiltMajor);
    candidates.push_back(name);
#ifdef KILN_CUDA_LIBRARY_DIR
    candidates.push_back(std::string(KILN_CUDA_LIBRARY_DIR) + "/" + name);
#endif
  }
  void *handle = nullptr;
  std::string tried, loaded;
  for (const std::string &candidate : candidates) {
    // Never closed: see CudaDriver::load.
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
    return Error{"cuBLASLt not found (" + tried + "); kiln-run needs the CUDA " +
                 std::to_string(kBuiltMajor) +
                 " cuBLAS libraries (or LD_LIBRARY_PATH pointing at them)"};

  CublasLt lt;
  lt.library = loaded;
#define KILN_CUBLASLT_SYMBOL(name)                                                                 \
  lt.name = reinterpret_cast<decltype(lt.name)>(::dlsym(handle, #name));                           \
  if (!lt.name)                                                                                    \
    return Error{loaded + " does not export " #name "; it is not a usable cuBLASLt"};
#include "kiln/runtime/CublasLtSymbols.def"

  lt.version = lt.cublasLtGetVersion();
  if (static_cast<int>(lt.version / 10000) != kBuiltMajor)
    return Error{loaded + " is cuBLASLt " + lt.getVersionString() +
                 ", but kiln-run was built for major version " + std::to_string(kBuiltMajor)};
  return lt;
}

std::string CublasLt::getVersionString() const {
  return std::to_string(version / 10000) + "." + std::to_string(version / 100 % 100) + "." +
         std::to_string(version % 100);
}

std::string CublasLt::describe(cublasStatus_t status) const {
  const char *name = cublasLtGetStatusName(status);
  const char *text = cublasLtGetStatusString(status);
  std::string result = name ? name : "cublasStatus " + std::to_string(status);
  if (text)
    result += std::string(" (") + text + ")";
  return result;
}
