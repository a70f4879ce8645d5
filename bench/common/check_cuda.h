// CHECK_CUDA and a median timer for the standalone GPU harnesses under
// bench/: a failed CUDA runtime call prints its place and error and exits 2.
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

#include <algorithm>
#include <vector>

/// The median of `reps` timings of `launch()` (CUDA events around each
/// launch, one at a time), `prepare()` enqueued before each, untimed.
template <typename Prepare, typename Launch>
float medianEventMs(int reps, Prepare prepare, Launch launch) {
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  std::vector<float> ms;
  for (int r = 0; r < reps; ++r) {
    prepare();
    CHECK_CUDA(cudaEventRecord(start));
    launch();
    CHECK_CUDA(cudaEventRecord(stop));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float t;
    CHECK_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

/// The median of `reps` timings of `launch()` alone.
template <typename Launch> float medianEventMs(int reps, Launch launch) {
  return medianEventMs(reps, [] {}, launch);
}
