//===- CublasLtTest.cpp - Tests for loading cuBLASLt ------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// cuBLASLt loads without a GPU, so on any machine with the CUDA toolkit the
// library must load and report the major version kiln-run was built with.
// The error paths are reached by loading other libraries.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/runtime/CublasLt.h"

using namespace kiln::runtime;

int main() {
  Expected<CublasLt> lt = CublasLt::load();
  CHECK(lt);
  if (lt) {
    std::printf("cuBLASLt %s from %s\n", lt->getVersionString().c_str(), lt->getLibrary().c_str());
    CHECK(static_cast<int>(lt->getVersion() / 10000) == CublasLt::kBuiltMajor);
    CHECK_EQ(lt->describe(CUBLAS_STATUS_NOT_INITIALIZED),
             "CUBLAS_STATUS_NOT_INITIALIZED (the library was not initialized)");
  } else {
    std::printf("%s\n", lt.getError().c_str());
  }

  Expected<CublasLt> missing = CublasLt::load({"libkiln-no-such-blas.so.1"});
  CHECK_EQ(missing.getError(), "cuBLASLt not found (libkiln-no-such-blas.so.1: cannot open shared "
                               "object file: No such file or directory); kiln-run needs the CUDA " +
                                   std::to_string(CublasLt::kBuiltMajor) +
                                   " cuBLAS libraries (or LD_LIBRARY_PATH pointing at them)");
  Expected<CublasLt> notBlas = CublasLt::load({"libc.so.6"});
  CHECK_EQ(notBlas.getError(), "libc.so.6 does not export cublasLtGetVersion; "
                               "it is not a usable cuBLASLt");
  return finishChecks();
}
