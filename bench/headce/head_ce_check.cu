// The fused LM head's chunk on the GPU, fp32 logits (the old path) against
// bf16 logits (bf16_logits): one chunk of `rows` tokens through the
// runtime's own row kernels (runtime/lib/kernels/CrossEntropyKernels.cuh,
// included here) between cuBLASLt GEMMs set up as the runtime sets them up
// (fp32 accumulation; the logits GEMM writes the chunk's type), on fresh
// random bf16 inputs, against a float64 reference of sampled rows (their
// losses, dlogits and dHidden rows: ‖out − ref‖ / ‖ref‖), and timed.
//
//   head_ce_check [rows V H reps logit_std dump_dir]
//
// With dump_dir the inputs and the reference go there for torch_ref.py
// (PyTorch's bf16 F.cross_entropy on the same inputs). Exit 1 when a path's
// error is past the sanity bounds below (the policy verdict, against
// PyTorch, is torch_ref.py's).

#include "CrossEntropyKernels.cuh"

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "../common/check_cuda.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

#define CHECK_LT(x)                                                                                \
  do {                                                                                             \
    cublasStatus_t s = (x);                                                                        \
    if (s != CUBLAS_STATUS_SUCCESS) {                                                              \
      std::fprintf(stderr, "%s:%d: %s: cuBLASLt status %d\n", __FILE__, __LINE__, #x, int(s));     \
      std::exit(2);                                                                                \
    }                                                                                              \
  } while (0)

uint64_t splitmix(uint64_t &state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double uniform(uint64_t &state) { return (splitmix(state) >> 11) * 0x1.0p-53; }
double normal(uint64_t &state) {
  double u = std::max(uniform(state), 1e-300), v = uniform(state);
  return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
}

uint16_t toBf16(double x) { // round to nearest even
  float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}
double fromBf16(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// Row-major C[m, n] = A[m, k] · Bᵀ (B [n, k], ldb) as the runtime's
/// createHeadGemm builds it (column-major Cᵀ = B · Aᵀ), or C = A · B (B [k,
/// n]) with transB false; A's leading dimension lda.
struct Gemm {
  cublasLtMatmulDesc_t desc{};
  cublasLtMatrixLayout_t first{}, second{}, result{};
  cublasLtMatmulAlgo_t algo{};
};
Gemm makeGemm(cublasLtHandle_t lt, int64_t m, int64_t n, int64_t k, bool transB, int64_t lda,
              int64_t ldb, int64_t ldc, cudaDataType_t ct, size_t workspace) {
  Gemm g;
  CHECK_LT(cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t opFirst = transB ? CUBLAS_OP_T : CUBLAS_OP_N, opSecond = CUBLAS_OP_N;
  CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opFirst,
                                          sizeof(opFirst)));
  CHECK_LT(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opSecond,
                                          sizeof(opSecond)));
  if (transB)
    CHECK_LT(cublasLtMatrixLayoutCreate(&g.first, CUDA_R_16BF, k, n, ldb));
  else
    CHECK_LT(cublasLtMatrixLayoutCreate(&g.first, CUDA_R_16BF, n, k, ldb));
  CHECK_LT(cublasLtMatrixLayoutCreate(&g.second, CUDA_R_16BF, k, m, lda));
  CHECK_LT(cublasLtMatrixLayoutCreate(&g.result, ct, n, m, ldc));
  cublasLtMatmulPreference_t pref;
  CHECK_LT(cublasLtMatmulPreferenceCreate(&pref));
  CHECK_LT(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &workspace, sizeof(workspace)));
  cublasLtMatmulHeuristicResult_t h{};
  int found = 0;
  CHECK_LT(cublasLtMatmulAlgoGetHeuristic(lt, g.desc, g.first, g.second, g.result, g.result, pref,
                                          1, &h, &found));
  cublasLtMatmulPreferenceDestroy(pref);
  if (!found) {
    std::fprintf(stderr, "cuBLASLt: no algorithm for %ldx%ldx%ld\n", long(m), long(n), long(k));
    std::exit(2);
  }
  g.algo = h.algo;
  return g;
}
void runGemm(cublasLtHandle_t lt, const Gemm &g, const void *a, const void *b, void *c,
             void *workspace, size_t workspaceBytes) {
  float alpha = 1.f, beta = 0.f;
  CHECK_LT(cublasLtMatmul(lt, g.desc, &alpha, b, g.first, a, g.second, &beta, c, g.result, c,
                          g.result, &g.algo, workspace, workspaceBytes, 0));
}

double relErr(const std::vector<double> &out, const std::vector<double> &ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    num += (out[i] - ref[i]) * (out[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

template <typename F> void parallelFor(int64_t n, F f) {
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t i = t; i < n; i += threads)
        f(i);
    });
  for (std::thread &th : pool)
    th.join();
}

bool writeFile(const std::string &path, const void *data, size_t bytes) {
  FILE *f = std::fopen(path.c_str(), "wb");
  if (!f)
    return false;
  bool ok = std::fwrite(data, 1, bytes, f) == bytes;
  return std::fclose(f) == 0 && ok;
}

} // namespace

int main(int argc, char **argv) {
  int64_t rows = argc > 1 ? std::atol(argv[1]) : 512;
  int64_t vocab = argc > 2 ? std::atol(argv[2]) : 128256;
  int64_t width = argc > 3 ? std::atol(argv[3]) : 2048;
  int reps = argc > 4 ? std::atoi(argv[4]) : 20;
  double logitStd = argc > 5 ? std::atof(argv[5]) : 2.0;
  std::string dump = argc > 6 ? argv[6] : "";
  const int64_t ignore = -100;

  // Inputs: hidden ~ N(0, 1), W [V, H] ~ N(0, logitStd² / H) (logits of
  // about logitStd), bf16; labels uniform, every 37th row ignored.
  uint64_t seed = 0x6b696c6e;
  std::vector<uint16_t> hidden(rows * width), weight(vocab * width);
  for (auto &x : hidden)
    x = toBf16(normal(seed));
  double wStd = logitStd / std::sqrt(double(width));
  for (auto &x : weight)
    x = toBf16(wStd * normal(seed));
  std::vector<int64_t> labels(rows);
  for (int64_t r = 0; r < rows; ++r)
    labels[r] = r % 37 == 5 ? ignore : int64_t(splitmix(seed) % uint64_t(vocab));
  int64_t counted = 0;
  for (int64_t l : labels)
    counted += l != ignore;

  // The sampled rows: every rows/32-th, and one ignored row.
  std::vector<int64_t> sample;
  for (int64_t r = 0; r < rows; r += std::max<int64_t>(1, rows / 32))
    sample.push_back(r);
  if (rows > 5 && std::find(sample.begin(), sample.end(), 5) == sample.end())
    sample.push_back(5);
  int64_t ns = sample.size();

  // float64 reference of the sampled rows: loss, dlogits, dHidden.
  std::vector<double> refLoss(ns), refDlogits(ns * vocab), refDhidden(ns * width);
  std::vector<double> wd(weight.size());
  for (size_t i = 0; i < weight.size(); ++i)
    wd[i] = fromBf16(weight[i]);
  parallelFor(ns, [&](int64_t s) {
    int64_t r = sample[s];
    std::vector<double> x(width), z(vocab);
    for (int64_t h = 0; h < width; ++h)
      x[h] = fromBf16(hidden[r * width + h]);
    for (int64_t v = 0; v < vocab; ++v) {
      double acc = 0;
      const double *w = wd.data() + v * width;
      for (int64_t h = 0; h < width; ++h)
        acc += x[h] * w[h];
      z[v] = acc;
    }
    double *dz = refDlogits.data() + s * vocab;
    double *dx = refDhidden.data() + s * width;
    if (labels[r] == ignore) {
      refLoss[s] = 0;
      return;
    }
    double max = *std::max_element(z.begin(), z.end()), sum = 0;
    for (double v : z)
      sum += std::exp(v - max);
    double lse = max + std::log(sum);
    refLoss[s] = lse - z[labels[r]];
    for (int64_t v = 0; v < vocab; ++v)
      dz[v] = (std::exp(z[v] - lse) - (v == labels[r] ? 1 : 0)) / double(counted);
    for (int64_t v = 0; v < vocab; ++v) {
      const double *w = wd.data() + v * width;
      for (int64_t h = 0; h < width; ++h)
        dx[h] += dz[v] * w[h];
    }
  });

  // Device buffers: one chunk big enough for the fp32 path.
  void *dHidden, *dWeight, *dLabels, *dChunk, *dStats, *dGrad, *dOut, *dWork;
  size_t workBytes = size_t(32) << 20;
  CHECK_CUDA(cudaMalloc(&dHidden, hidden.size() * 2));
  CHECK_CUDA(cudaMalloc(&dWeight, weight.size() * 2));
  CHECK_CUDA(cudaMalloc(&dLabels, rows * 8));
  CHECK_CUDA(cudaMalloc(&dChunk, size_t(rows) * vocab * 4));
  CHECK_CUDA(cudaMalloc(&dStats, (rows + 1) * 4));
  CHECK_CUDA(cudaMalloc(&dGrad, 4));
  CHECK_CUDA(cudaMalloc(&dOut, rows * width * 2));
  CHECK_CUDA(cudaMalloc(&dWork, workBytes));
  CHECK_CUDA(cudaMemcpy(dHidden, hidden.data(), hidden.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dWeight, weight.data(), weight.size() * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(dLabels, labels.data(), rows * 8, cudaMemcpyHostToDevice));
  float one = 1.f;
  CHECK_CUDA(cudaMemcpy(dGrad, &one, 4, cudaMemcpyHostToDevice));
  cublasLtHandle_t lt;
  CHECK_LT(cublasLtCreate(&lt));

  struct Path {
    const char *name;
    bool bf16Chunk;
    double lossErr = 0, dlogitsErr = 0, dhiddenErr = 0, meanLoss = 0;
    float logitsMs = 0, rowsMs = 0, dhiddenMs = 0;
  } paths[] = {{"fp32 chunk (old)", false}, {"bf16 chunk (new)", true}};

  int failures = 0;
  for (Path &p : paths) {
    int64_t gradLd = p.bf16Chunk ? vocab : 2 * vocab;
    // transpose_weight (W [V, H]): logits = hidden · Wᵀ, dHidden = dlogits · W.
    Gemm logits = makeGemm(lt, rows, vocab, width, true, width, width, vocab,
                           p.bf16Chunk ? CUDA_R_16BF : CUDA_R_32F, workBytes);
    Gemm dx = makeGemm(lt, rows, width, vocab, false, gradLd, width, width, CUDA_R_16BF, workBytes);
    cudaEvent_t e[4];
    for (auto &ev : e)
      CHECK_CUDA(cudaEventCreate(&ev));
    auto chunkStep = [&](bool timed) {
      kiln_head_count<<<1, 1024>>>(dLabels, static_cast<float *>(dStats), rows, vocab, 0, ignore);
      if (timed)
        CHECK_CUDA(cudaEventRecord(e[0]));
      runGemm(lt, logits, dHidden, dWeight, dChunk, dWork, workBytes);
      if (timed)
        CHECK_CUDA(cudaEventRecord(e[1]));
      if (p.bf16Chunk)
        kiln_head_rows_bf16_logits<<<unsigned(rows), 1024>>>(
            static_cast<__nv_bfloat16 *>(dChunk), dLabels, static_cast<float *>(dGrad),
            static_cast<float *>(dStats), 0, vocab, rows, 0, ignore, 0, 1);
      else
        kiln_head_rows_bf16<<<unsigned(rows), 1024>>>(
            static_cast<float *>(dChunk), dLabels, static_cast<float *>(dGrad),
            static_cast<float *>(dStats), 0, vocab, rows, 0, ignore, 0, 1);
      CHECK_CUDA(cudaGetLastError());
      if (timed)
        CHECK_CUDA(cudaEventRecord(e[2]));
      runGemm(lt, dx, dChunk, dWeight, dOut, dWork, workBytes);
      if (timed)
        CHECK_CUDA(cudaEventRecord(e[3]));
    };
    chunkStep(false);
    CHECK_CUDA(cudaDeviceSynchronize());
    // Results of one step: losses (stats), dlogits (the chunk), dHidden.
    std::vector<float> stats(rows + 1);
    CHECK_CUDA(cudaMemcpy(stats.data(), dStats, (rows + 1) * 4, cudaMemcpyDeviceToHost));
    std::vector<uint16_t> chunk(size_t(rows) * gradLd), out(rows * width);
    CHECK_CUDA(cudaMemcpy(chunk.data(), dChunk, chunk.size() * 2, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(out.data(), dOut, out.size() * 2, cudaMemcpyDeviceToHost));
    std::vector<double> loss(ns), dlogits(ns * vocab), dhidden(ns * width);
    for (int64_t s = 0; s < ns; ++s) {
      int64_t r = sample[s];
      loss[s] = stats[r];
      for (int64_t v = 0; v < vocab; ++v)
        dlogits[s * vocab + v] = fromBf16(chunk[r * gradLd + v]);
      for (int64_t h = 0; h < width; ++h)
        dhidden[s * width + h] = fromBf16(out[r * width + h]);
    }
    double total = 0;
    for (int64_t r = 0; r < rows; ++r)
      total += stats[r];
    p.meanLoss = total / stats[rows];
    p.lossErr = relErr(loss, refLoss);
    p.dlogitsErr = relErr(dlogits, refDlogits);
    p.dhiddenErr = relErr(dhidden, refDhidden);
    if (!dump.empty()) {
      std::string tag = p.bf16Chunk ? "bf16" : "fp32";
      if (!writeFile(dump + "/kiln_" + tag + "_loss.bin", loss.data(), ns * 8) ||
          !writeFile(dump + "/kiln_" + tag + "_dhidden.bin", dhidden.data(), ns * width * 8)) {
        std::fprintf(stderr, "head_ce_check: cannot write to %s\n", dump.c_str());
        return 2;
      }
    }
    // Times: the median of `reps` chunk steps, per stage.
    std::vector<float> t[3];
    for (int i = 0; i < reps; ++i) {
      chunkStep(true);
      CHECK_CUDA(cudaEventSynchronize(e[3]));
      for (int j = 0; j < 3; ++j) {
        float ms;
        CHECK_CUDA(cudaEventElapsedTime(&ms, e[j], e[j + 1]));
        t[j].push_back(ms);
      }
    }
    for (auto &v : t)
      std::sort(v.begin(), v.end());
    p.logitsMs = t[0][reps / 2], p.rowsMs = t[1][reps / 2], p.dhiddenMs = t[2][reps / 2];
    // Sanity bounds (bf16 outputs: a few 2^-9): the verdict is torch_ref.py's.
    bool bad = !(p.lossErr < 1e-2 && p.dlogitsErr < 3e-2 && p.dhiddenErr < 3e-2);
    failures += bad;
    std::printf("%-18s loss %.6e  dlogits %.6e  dHidden %.6e  (rel. to float64)  mean loss "
                "%.6f%s\n",
                p.name, p.lossErr, p.dlogitsErr, p.dhiddenErr, p.meanLoss, bad ? "  FAIL" : "");
  }
  double bytesOld = double(rows) * vocab * (4 + 4 + 2), bytesNew = double(rows) * vocab * 6;
  std::printf("\nchunk %ldx%ld, H %ld, %d reps (median ms):\n", long(rows), long(vocab),
              long(width), reps);
  std::printf("%-18s %10s %10s %10s %10s %12s\n", "path", "logits", "head_rows", "dHidden", "sum",
              "rows TB/s");
  for (const Path &p : paths)
    std::printf("%-18s %10.4f %10.4f %10.4f %10.4f %12.2f\n", p.name, p.logitsMs, p.rowsMs,
                p.dhiddenMs, p.logitsMs + p.rowsMs + p.dhiddenMs,
                (p.bf16Chunk ? bytesNew : bytesOld) / (p.rowsMs * 1e-3) / 1e12);
  double saved = (paths[0].logitsMs + paths[0].rowsMs + paths[0].dhiddenMs) -
                 (paths[1].logitsMs + paths[1].rowsMs + paths[1].dhiddenMs);
  std::printf("saved per chunk %.4f ms (x16 chunks on the 1b step: %.3f ms)\n", saved, 16 * saved);

  if (!dump.empty()) {
    bool ok = writeFile(dump + "/hidden.bin", hidden.data(), hidden.size() * 2) &&
              writeFile(dump + "/weight.bin", weight.data(), weight.size() * 2) &&
              writeFile(dump + "/labels.bin", labels.data(), rows * 8) &&
              writeFile(dump + "/sample.bin", sample.data(), ns * 8) &&
              writeFile(dump + "/ref_loss.bin", refLoss.data(), ns * 8) &&
              writeFile(dump + "/ref_dhidden.bin", refDhidden.data(), ns * width * 8);
    std::string shape = std::to_string(rows) + " " + std::to_string(vocab) + " " +
                        std::to_string(width) + " " + std::to_string(ns) + "\n";
    ok = ok && writeFile(dump + "/shape.txt", shape.data(), shape.size());
    if (!ok) {
      std::fprintf(stderr, "head_ce_check: cannot write to %s\n", dump.c_str());
      return 2;
    }
  }
  return failures ? 1 : 0;
}
