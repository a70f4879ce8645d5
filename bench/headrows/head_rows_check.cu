// The fused LM head's row kernel (kiln_head_rows_bf16_logits,
// runtime/lib/kernels/CrossEntropyKernels.cuh) at the bench 1b chunk (1024
// rows of vocab 128256, bf16 logits): the default launch, its occupancy
// limited by unused dynamic shared memory (fewer rows in flight for the L2),
// and SplitVariant.cuh's kernel (not kept), each row split over a cluster of
// 2 or 4 CTAs that keep it in shared memory between the two passes. Each run
// starts from a chunk just rewritten by a copy (as the logits GEMM leaves
// it). Prints the median time per variant and how its stats and gradient
// compare with the default launch's (bitwise, or the largest differences).
//   nvcc -O3 -std=c++17 -arch=sm_90 -I runtime/lib/kernels bench/headrows/head_rows_check.cu \
//     -o head_rows_check && ./head_rows_check [ROWS VOCAB REPS]
#include "../common/check_cuda.h"
#include "../common/random_fill.cuh"
#include "CrossEntropyKernels.cuh"
#include "SplitVariant.cuh"

#include <cmath>
#include <cstring>
#include <vector>

int main(int argc, char **argv) {
  int64_t rows = argc > 1 ? std::atoll(argv[1]) : 1024, vocab = argc > 2 ? std::atoll(argv[2]) : 128256;
  int reps = argc > 3 ? std::atoi(argv[3]) : 20;
  size_t bytes = size_t(rows) * vocab * 2;
  __nv_bfloat16 *source, *chunk;
  CHECK_CUDA(cudaMalloc(&source, bytes));
  CHECK_CUDA(cudaMalloc(&chunk, bytes));
  fillUniformBf16<<<2048, 256>>>(source, int64_t(rows) * vocab, 7, 4.f);
  std::vector<int64_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r)
    labels[r] = (r * 7919) % vocab;
  labels[3] = -100; // one ignored row
  int64_t *dLabels;
  float *stats, *grad;
  CHECK_CUDA(cudaMalloc(&dLabels, rows * 8));
  CHECK_CUDA(cudaMalloc(&stats, (rows + 1) * 4));
  CHECK_CUDA(cudaMalloc(&grad, 4));
  CHECK_CUDA(cudaMemcpy(dLabels, labels.data(), rows * 8, cudaMemcpyHostToDevice));
  float one = 1.f;
  CHECK_CUDA(cudaMemcpy(grad, &one, 4, cudaMemcpyHostToDevice));
  kiln_head_count<<<1, 1024>>>(dLabels, stats, rows, vocab, 0, -100);
  CHECK_CUDA(cudaFuncSetAttribute(kiln_head_rows_bf16_logits,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize, 200 * 1024));
  struct Variant {
    unsigned block;
    int shared;
  } variants[] = {{1024, 0}, {1024, 120 * 1024}, {512, 0}, {512, 80 * 1024}, {512, 120 * 1024},
                  {256, 120 * 1024}};
  std::vector<uint16_t> refGrad(size_t(rows) * vocab), got(refGrad.size());
  std::vector<float> refStats(rows + 1), gotStats(rows + 1);
  double capBits = 0;
  int64_t cap;
  std::memcpy(&cap, &capBits, 8);
  int sms;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // The median of `reps` runs, each timed alone right after the chunk is
  // rewritten from `source` (as the logits GEMM leaves it).
  auto medianAfterRewrite = [&](auto run) {
    return medianEventMs(
        reps, [&] { CHECK_CUDA(cudaMemcpyAsync(chunk, source, bytes, cudaMemcpyDeviceToDevice)); },
        run);
  };
  // One run from a fresh chunk, its gradient and stats into got, gotStats.
  auto runOnce = [&](auto run) {
    CHECK_CUDA(cudaMemcpy(chunk, source, bytes, cudaMemcpyDeviceToDevice));
    run();
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaMemcpy(got.data(), chunk, bytes, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(gotStats.data(), stats, (rows + 1) * 4, cudaMemcpyDeviceToHost));
  };
  for (int round = 0; round < 2; ++round)
    for (size_t i = 0; i < sizeof(variants) / sizeof(variants[0]); ++i) {
      const Variant &v = variants[i];
      auto run = [&] {
        kiln_head_rows_bf16_logits<<<unsigned(rows), v.block, v.shared>>>(
            chunk, dLabels, grad, stats, 0, vocab, rows, 0, -100, cap, 1);
      };
      runOnce(run);
      if (i == 0 && round == 0)
        refGrad = got, refStats = gotStats;
      bool same = got == refGrad && gotStats == refStats;
      (void)same;
      const float median = medianAfterRewrite(run);
      int perSm = 0;
      CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, kiln_head_rows_bf16_logits,
                                                               v.block, v.shared));
      double moved = 3.0 * bytes; // two reads and one write of the chunk
      std::printf("block %4u shared %6d: %d per SM (%4d rows in flight, %5.1f MB): %8.1f us, "
                  "%.2f TB/s at 3 passes%s\n",
                  v.block, v.shared, perSm, perSm * sms, perSm * sms * vocab * 2 / 1e6,
                  median * 1000, moved / (median * 1e-3) / 1e12,
                  same ? ", bitwise the default's" : ", DIFFERS from the default");
    }
  // The cluster-split kernel.
  for (int round = 0; round < 2; ++round)
    for (unsigned parts : {2u, 4u}) {
      size_t share = size_t((vocab / 8 + parts - 1) / parts) * 16;
      CHECK_CUDA(cudaFuncSetAttribute(kiln_head_rows_split_bf16_logits,
                                      cudaFuncAttributeMaxDynamicSharedMemorySize, int(share)));
      cudaLaunchConfig_t config = {};
      config.gridDim = dim3(unsigned(rows) * parts);
      config.blockDim = dim3(1024);
      config.dynamicSmemBytes = share;
      cudaLaunchAttribute attribute[1];
      attribute[0].id = cudaLaunchAttributeClusterDimension;
      attribute[0].val.clusterDim.x = parts;
      attribute[0].val.clusterDim.y = 1;
      attribute[0].val.clusterDim.z = 1;
      config.attrs = attribute;
      config.numAttrs = 1;
      int64_t zero = 0, one64 = 1, ignore = -100;
      auto run = [&] {
        CHECK_CUDA(cudaLaunchKernelEx(&config, kiln_head_rows_split_bf16_logits, chunk,
                                      (const void *)dLabels, (const float *)grad, stats, zero,
                                      vocab, rows, zero, ignore, cap, one64));
      };
      runOnce(run);
      double statDiff = 0, num = 0, den = 0;
      size_t differ = 0;
      for (int64_t r = 0; r <= rows; ++r)
        statDiff = std::max(statDiff, (double)std::fabs(gotStats[r] - refStats[r]));
      auto f32 = [](uint16_t b) {
        uint32_t u = uint32_t(b) << 16;
        float f;
        std::memcpy(&f, &u, 4);
        return f;
      };
      for (size_t i = 0; i < got.size(); ++i) {
        double a = f32(got[i]), b = f32(refGrad[i]);
        differ += got[i] != refGrad[i];
        num += (a - b) * (a - b), den += b * b;
      }
      const float median = medianAfterRewrite(run);
      double moved = 2.0 * bytes; // one read and one write of the chunk
      std::printf("split over %u CTAs (%zu KB each): %8.1f us, %.2f TB/s at 2 passes; against the "
                  "default: stats max |diff| %.3g, gradient %zu of %zu elements differ, "
                  "|diff|/|ref| %.3g\n",
                  parts, share / 1024, median * 1000,
                  moved / (median * 1e-3) / 1e12, statDiff, differ, got.size(),
                  std::sqrt(num / den));
    }
  return 0;
}
