//===- Nvrtc.h - Offline kernel compilation with NVRTC ----------*- C++ -*-===//
//
// Every generated kernel is compiled to a cubin per requested arch and once
// to PTX (for JIT on archs not compiled for). Results live in a
// content-addressed cache keyed on the source, the target, the NVRTC version
// and the options, so a warm `kiln compile` compiles nothing.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_CODEGEN_NVRTC_H
#define KILN_CODEGEN_NVRTC_H

#include "llvm/Support/Error.h"

#include <functional>
#include <string>
#include <vector>

namespace kiln::codegen {

struct NvrtcOptions {
  std::vector<std::string> archs{"sm_90"}; // real archs: cubins
  std::string cacheDir;                    // empty: no cache
  unsigned threads = 0;                    // 0: all cores
  /// Called (one call at a time) when a kernel's last target is done:
  /// `done` of `total` kernels, `cached` when every target came from the
  /// cache. kiln compile's progress line.
  std::function<void(size_t done, size_t total, const std::string &name, bool cached)> onKernelDone;
};

struct KernelSource {
  std::string name;
  std::string source;
};

struct CompiledKernel {
  std::string name;
  std::vector<std::pair<std::string, std::string>> cubins; // arch -> bytes
  std::string ptx; // for the lowest requested arch's virtual arch
  unsigned cacheHits = 0, compiles = 0;
};

/// "13.0".
std::string nvrtcVersionString();
/// $KILN_CACHE_DIR, else $XDG_CACHE_HOME/kiln, else ~/.cache/kiln.
std::string defaultKernelCacheDir();
/// Parses "sm_90,sm_80"; errors name the bad entry.
llvm::Expected<std::vector<std::string>> parseArchList(llvm::StringRef list);

/// Compiles one kernel for one target ("sm_90" -> cubin, "compute_90" ->
/// PTX); with `ptx`, a cubin compile also returns the PTX it lowered from.
/// The error carries NVRTC's log.
llvm::Expected<std::string> compileKernel(const KernelSource &kernel, llvm::StringRef target,
                                          const NvrtcOptions &options, bool *cacheHit = nullptr,
                                          std::string *ptx = nullptr);

/// All kernels for all archs (+ PTX), in parallel; one error listing every
/// kernel that failed.
llvm::Expected<std::vector<CompiledKernel>> compileKernels(const std::vector<KernelSource> &kernels,
                                                           const NvrtcOptions &options);

} // namespace kiln::codegen

#endif // KILN_CODEGEN_NVRTC_H
