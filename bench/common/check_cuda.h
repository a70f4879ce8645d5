// CHECK_CUDA for the standalone GPU harnesses under bench/: a failed CUDA
// runtime call prints its place and error and exits 2.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CHECK_CUDA(x)                                                                              \
  do {                                                                                             \
    cudaError_t err_ = (x);                                                                        \
    if (err_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(err_));  \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)
