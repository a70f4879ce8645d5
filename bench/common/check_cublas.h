// CHECK_CUBLAS for the harnesses that time cuBLAS beside Kiln's kernels: a
// failed call prints its place and status and exits 2.
#pragma once

#include <cublas_v2.h>

#include <cstdio>
#include <cstdlib>

#define CHECK_CUBLAS(x)                                                                            \
  do {                                                                                             \
    cublasStatus_t st_ = (x);                                                                      \
    if (st_ != CUBLAS_STATUS_SUCCESS) {                                                            \
      std::fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #x, (int)st_);           \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)
