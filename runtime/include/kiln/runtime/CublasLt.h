//===- CublasLt.h - Load cuBLASLt at run time -------------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The step program's GEMMs run through cuBLASLt. Like the driver, it is
// loaded with dlopen() so kiln-run starts everywhere and reports a missing
// or mismatched library in one line. cuBLASLt's ABI is stable within a major
// version only, so the loaded library's major version must equal the one
// whose headers kiln-run was built with.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUBLASLT_H
#define KILN_RUNTIME_CUBLASLT_H

#include "kiln/runtime/Expected.h"

#include <cublasLt.h>

#include <string>
#include <vector>

namespace kiln::runtime {

class CublasLt {
public:
  /// The major version of the headers kiln-run was built with.
  static constexpr int kBuiltMajor = CUBLAS_VER_MAJOR;

  /// Opens the first of \p candidates that loads (by default
  /// "libcublasLt.so.<kBuiltMajor>", then the same name in the CUDA toolkit
  /// kiln-run was built against), resolves CublasLtSymbols.def and checks the
  /// major version. Needs no GPU.
  static Expected<CublasLt> load(std::vector<std::string> candidates = {});

  /// e.g. 130100 for 13.1.0.
  size_t getVersion() const { return version; }
  /// "13.1.0".
  std::string getVersionString() const;
  /// The library file that was loaded.
  const std::string &getLibrary() const { return library; }
  /// "CUBLAS_STATUS_X (text)".
  std::string describe(cublasStatus_t status) const;

#define KILN_CUBLASLT_SYMBOL(name) decltype(&::name) name = nullptr;
#include "kiln/runtime/CublasLtSymbols.def"

private:
  CublasLt() = default;
  size_t version = 0;
  std::string library;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CUBLASLT_H
