// kiln_lora_grad_pair (runtime/lib/kernels/LoraGradPair.cuh) against
// cuBLAS's two GEMMs on the LoRA backward shapes of the bench's 1b and small
// steps: error of dT and dB against float64 (‖out − ref‖/‖ref‖, outputs
// NaN-poisoned where beta = 0), bitwise repeatability, and times (median of
// REPS, L2 flushed before each run; "warm": back to back, Y left in L2 by
// the previous run as the step's producer leaves it).
//   nvcc -O3 -std=c++17 -arch=sm_90 -I runtime/lib bench/gradpair/grad_pair_check.cu \
//     runtime/lib/LoraGradPairPlan.cpp -lcublas -o grad_pair_check
//   ./grad_pair_check [REPS]
// Exits 1 when a case's error is above 1.05 x cuBLAS's (the numerics
// policy: no worse than the library's bf16 GEMM on the same inputs) or a
// result is not repeatable.
#include "../common/check_cublas.h"
#include "../common/check_cuda.h"
#include "../common/random_fill.cuh"
#include "LoraGradPairPlan.h"
#define KILN_LORA_PAIR_NO_INSTANCES
#include "kernels/LoraGradPair.cuh"

#include <cublas_v2.h>

#include <cmath>
#include <cstring>
#include <string>

using namespace kiln::runtime;

static_assert(sizeof(pair::LaunchArgs) == sizeof(kiln_pair::Params), "Params layout");
static_assert(sizeof(pair::FinishArgs) == sizeof(kiln_pair::FinishParams), "FinishParams layout");


namespace {

struct Case {
  const char *name;
  int64_t rows, cols, rank;
  float alpha, beta1, beta2;
  bool dTBeside; ///< dT written into the columns of [Y | dT] beside Y
  bool dBFirst;  ///< the program's order: dB's GEMM first
};

__global__ void fillNaN(__nv_bfloat16 *p, int64_t rows, int64_t cols, int64_t ld) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < rows * cols;
       i += (int64_t)gridDim.x * blockDim.x)
    p[(i / cols) * ld + i % cols] = __float2bfloat16(NAN);
}

/// out[r][j] = alpha sum_k A(r, k) B[k][j] + beta old[r][j] in float64,
/// A(r, k) = a[r * lda + k] or, transposed, a[k * lda + r].
__global__ void reference(const __nv_bfloat16 *a, int64_t lda, bool transA,
                          const __nv_bfloat16 *b, int64_t ldb, const __nv_bfloat16 *old,
                          int64_t ldo, double alpha, double beta, int64_t rows, int64_t rank,
                          int64_t k, double *out) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i >= rows * rank)
    return;
  int64_t r = i / rank, j = i % rank;
  double s = 0;
  for (int64_t x = 0; x < k; ++x)
    s += (double)__bfloat162float(transA ? a[x * lda + r] : a[r * lda + x]) *
         (double)__bfloat162float(b[x * ldb + j]);
  out[i] = alpha * s + (beta != 0 ? beta * (double)__bfloat162float(old[r * ldo + j]) : 0.0);
}

struct Host {
  std::vector<uint16_t> bits;
};

std::vector<uint16_t> download(const __nv_bfloat16 *p, int64_t rows, int64_t cols, int64_t ld) {
  std::vector<uint16_t> out(rows * cols);
  CHECK_CUDA(cudaMemcpy2D(out.data(), cols * 2, p, ld * 2, cols * 2, rows, cudaMemcpyDeviceToHost));
  return out;
}

template <int R, int WC, int BM, int S> __global__ void __launch_bounds__(256)
    variantKernel(kiln_pair::Params p) {
  kiln_pair::loraGradPair<R, WC, BM, S>(p);
}
using Kernel = void (*)(kiln_pair::Params);
template <int BM, int S> Kernel pick(int64_t r, int64_t wc) {
  Kernel k = wc == 64 ? (r == 16   ? variantKernel<16, 64, BM, S>
                         : r == 32 ? variantKernel<32, 64, BM, S>
                                   : variantKernel<48, 64, BM, S>)
             : r == 16 ? variantKernel<16, 32, BM, S>
             : r == 32 ? variantKernel<32, 32, BM, S>
             : r == 48 ? variantKernel<48, 32, BM, S>
                       : variantKernel<64, 32, BM, S>;
  CHECK_CUDA(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 227 * 1024));
  return k;
}
Kernel kernelFor(int64_t r, int64_t wc, int64_t bm, int64_t s) {
  if (bm == 64 && s == 2) return pick<64, 2>(r, wc);
  if (bm == 32 && s == 3) return pick<32, 3>(r, wc);
  if (bm == 32 && s == 4) return pick<32, 4>(r, wc);

  std::fprintf(stderr, "no variant m%lld s%lld\n", (long long)bm, (long long)s);
  std::exit(2);
}

float toFloat(uint16_t b) {
  uint32_t u = uint32_t(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/// ‖out − ref‖/‖ref‖; infinite when an element is not finite.
double relError(const std::vector<uint16_t> &out, const std::vector<double> &ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    double o = toFloat(out[i]);
    if (!std::isfinite(o))
      return INFINITY;
    num += (o - ref[i]) * (o - ref[i]);
    den += ref[i] * ref[i];
  }
  return std::sqrt(num / den);
}

} // namespace

int main(int argc, char **argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  const Case cases[] = {
      {"1b gate dT,dB", 8192, 8192, 32, 2, 0, 0, false, false},
      {"1b up dB,dT+=", 8192, 8192, 32, 2, 1, 0, false, true},
      {"1b down dT|,dB", 8192, 2048, 16, 2, 0, 0, true, false},
      {"1b o dT|,dB", 8192, 2048, 16, 2, 0, 0, true, false},
      {"1b q dT,dB", 8192, 2048, 48, 2, 0, 0, false, false},
      {"1b k dB,dT+=", 8192, 512, 48, 2, 1, 0, false, true},
      {"small down dT|,dB", 8192, 768, 16, 2, 0, 0, true, false},
      {"small q dT,dB", 8192, 768, 48, 2, 0, 0, false, false},
      {"small gate dT,dB", 8192, 2048, 32, 2, 0, 0, false, false},
      {"r64 dT,dB beta", 4096, 1024, 64, 0.5f, 1, 1, false, false},
  };
  int sms = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const size_t workspaceBytes = size_t{32} << 20;
  void *workspace, *flush;
  CHECK_CUDA(cudaMalloc(&workspace, workspaceBytes));
  const size_t flushBytes = size_t{256} << 20;
  CHECK_CUDA(cudaMalloc(&flush, flushBytes));
  cublasHandle_t handle;
  CHECK_CUBLAS(cublasCreate(&handle));

  bool ok = true;
  double sumOurs = 0, sumLib = 0;
  std::printf("%-26s %6s %6s %3s | %10s %10s | %10s %10s | %8s %8s %8s %8s | plan\n", "case", "T",
              "N", "R", "dT err", "cuBLAS", "dB err", "cuBLAS", "ours", "cuBLAS", "warm", "cuBLAS");
  for (const Case &c : cases) {
    const int64_t T = c.rows, N = c.cols, R = c.rank;
    const int64_t ldy = c.dTBeside ? N + R : N;
    __nv_bfloat16 *y, *bm, *t, *dT, *dB, *oldT, *oldB;
    CHECK_CUDA(cudaMalloc(&y, T * ldy * 2));
    CHECK_CUDA(cudaMalloc(&bm, N * R * 2));
    CHECK_CUDA(cudaMalloc(&t, T * R * 2));
    CHECK_CUDA(cudaMalloc(&dB, N * R * 2));
    CHECK_CUDA(cudaMalloc(&oldT, T * R * 2));
    CHECK_CUDA(cudaMalloc(&oldB, N * R * 2));
    fillUniformBf16<<<1024, 256>>>(y, T * ldy, 1, 1.f);
    fillUniformBf16<<<1024, 256>>>(bm, N * R, 2, 0.05f);
    fillUniformBf16<<<1024, 256>>>(t, T * R, 3, 1.f);
    fillUniformBf16<<<1024, 256>>>(oldT, T * R, 4, 1.f);
    fillUniformBf16<<<1024, 256>>>(oldB, N * R, 5, 1.f);
    int64_t lddT = c.dTBeside ? ldy : R;
    if (c.dTBeside)
      dT = y + N; // the columns beside Y
    else
      CHECK_CUDA(cudaMalloc(&dT, T * R * 2));

    pair::Gemm gT, gB;
    gT.a = (uint64_t)y, gT.b = (uint64_t)bm, gT.c = (uint64_t)dT;
    gT.m = T, gT.n = R, gT.k = N, gT.lda = ldy, gT.ldb = R, gT.ldc = lddT;
    gT.alpha = c.alpha, gT.beta = c.beta1;
    gB.a = (uint64_t)y, gB.b = (uint64_t)t, gB.c = (uint64_t)dB;
    gB.m = N, gB.n = R, gB.k = T, gB.lda = ldy, gB.ldb = R, gB.ldc = R, gB.transA = true;
    gB.alpha = c.alpha, gB.beta = c.beta2;
    const pair::Gemm &first = c.dBFirst ? gB : gT, &second = c.dBFirst ? gT : gB;
    const pair::Shape shapes[] = {{64, 2, 32}, {64, 2, 48}, {32, 3, 32}, {32, 4, 32}};
    for (const pair::Shape &shape : shapes) {
    std::string why;
    pair::Plan plan = pair::planLoraGradPair(first, second, sms, workspaceBytes, why, shape);
    if (plan.kernel.empty()) {
      std::printf("%-20s m%lld s%lld refused: %s\n", c.name, (long long)shape.tileRows,
                  (long long)shape.stages, why.c_str());
      continue;
    }
    pair::LaunchArgs args;
    pair::FinishArgs fin;
    pair::fillLaunchArgs(plan, first, second, (uint64_t)workspace, args, fin);
    kiln_pair::Params kp;
    kiln_pair::FinishParams fp;
    std::memcpy(&kp, &args, sizeof kp);
    std::memcpy(&fp, &fin, sizeof fp);
    Kernel kernel = kernelFor(R, plan.strip / 8, shape.tileRows, shape.stages);
    unsigned finishGrid = pair::finishBlocks(plan, sms);
    auto restore = [&] { // the outputs' prior values (beta 1) or NaN
      if (c.beta1 != 0)
        CHECK_CUDA(cudaMemcpy2D(dT, lddT * 2, oldT, R * 2, R * 2, T, cudaMemcpyDeviceToDevice));
      else
        fillNaN<<<512, 256>>>(dT, T, R, lddT);
      if (c.beta2 != 0)
        CHECK_CUDA(cudaMemcpy(dB, oldB, N * R * 2, cudaMemcpyDeviceToDevice));
      else
        fillNaN<<<512, 256>>>(dB, N, R, R);
    };
    auto ours = [&] {
      kernel<<<dim3(plan.gridX, plan.gridY), pair::kThreads, plan.sharedBytes>>>(kp);
      kiln_lora_grad_pair_finish<<<finishGrid, 256>>>(fp);
    };
    auto library = [&] {
      // Row-major C[m,n] = op(A) op(B): column-major C^T = op(B)^T op(A)^T.
      float a = c.alpha, b1 = c.beta1, b2 = c.beta2;
      CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, R, T, N, &a, bm, CUDA_R_16BF, R,
                                y, CUDA_R_16BF, ldy, &b1, dT, CUDA_R_16BF, lddT, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
      CHECK_CUBLAS(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_T, R, N, T, &a, t, CUDA_R_16BF, R, y,
                                CUDA_R_16BF, ldy, &b2, dB, CUDA_R_16BF, R, CUBLAS_COMPUTE_32F,
                                CUBLAS_GEMM_DEFAULT));
    };
    // References.
    double *refT, *refB;
    CHECK_CUDA(cudaMalloc(&refT, T * R * 8));
    CHECK_CUDA(cudaMalloc(&refB, N * R * 8));
    reference<<<(T * R + 255) / 256, 256>>>(y, ldy, false, bm, R, oldT, R, c.alpha, c.beta1, T, R,
                                            N, refT);
    reference<<<(N * R + 255) / 256, 256>>>(y, ldy, true, t, R, oldB, R, c.alpha, c.beta2, N, R, T,
                                            refB);
    CHECK_CUDA(cudaGetLastError());
    std::vector<double> hT(T * R), hB(N * R);
    CHECK_CUDA(cudaMemcpy(hT.data(), refT, hT.size() * 8, cudaMemcpyDeviceToHost));
    CHECK_CUDA(cudaMemcpy(hB.data(), refB, hB.size() * 8, cudaMemcpyDeviceToHost));

    restore();
    ours();
    CHECK_CUDA(cudaGetLastError());
    CHECK_CUDA(cudaDeviceSynchronize());
    auto oursT = download(dT, T, R, lddT), oursB = download(dB, N, R, R);
    restore();
    ours();
    CHECK_CUDA(cudaDeviceSynchronize());
    bool repeat = oursT == download(dT, T, R, lddT) && oursB == download(dB, N, R, R);
    restore();
    library();
    CHECK_CUDA(cudaDeviceSynchronize());
    auto libT = download(dT, T, R, lddT), libB = download(dB, N, R, R);
    double eT = relError(oursT, hT), eB = relError(oursB, hB);
    double lT = relError(libT, hT), lB = relError(libB, hB);
    bool pass = repeat && eT <= 1.05 * lT && eB <= 1.05 * lB;
    ok = ok && pass;

    auto cold = [&](auto run) {
      return medianEventMs(reps, [&] {
        CHECK_CUDA(cudaMemsetAsync(flush, reps & 0xff, flushBytes));
        run();
      });
    };
    // Timed with beta as stated: the outputs' contents do not matter here.
    float flushMs = medianEventMs(reps, [&] { CHECK_CUDA(cudaMemsetAsync(flush, 1, flushBytes)); });
    float oursMs = cold(ours) - flushMs, libMs = cold(library) - flushMs;
    float mainMs = cold([&] {
                     kernel<<<dim3(plan.gridX, plan.gridY), pair::kThreads, plan.sharedBytes>>>(kp);
                   }) - flushMs;
    float oursWarm = medianEventMs(reps, ours), libWarm = medianEventMs(reps, library);
    sumOurs += oursMs, sumLib += libMs;
    std::printf("%-26s %6lld %6lld %3lld | %10.3e %10.3e | %10.3e %10.3e | %8.1f %8.1f %8.1f %8.1f "
                "| main %6.1f | %s %ux%u x%d%s %s\n",
                (std::string(c.name) + " m" + std::to_string(shape.tileRows) + "s" +
                 std::to_string(shape.stages) + "w" + std::to_string(plan.strip / 8)).c_str(), (long long)T, (long long)N, (long long)R, eT, lT, eB, lB, oursMs * 1000,
                libMs * 1000, oursWarm * 1000, libWarm * 1000, mainMs * 1000, plan.kernel.c_str(), plan.gridX,
                plan.gridY, plan.tilesPerGroup, repeat ? "" : " NOT REPEATABLE",
                pass ? "PASS" : "FAIL");
    cudaFree(refT), cudaFree(refB);
    }
    cudaFree(y), cudaFree(bm), cudaFree(t), cudaFree(dB);
    cudaFree(oldT), cudaFree(oldB);
    if (!c.dTBeside)
      cudaFree(dT);
  }
  std::printf("%s (cold sums: ours %.1f us, cuBLAS %.1f us)\n", ok ? "ALL PASS" : "SOME FAILED",
              sumOurs * 1000, sumLib * 1000);
  return ok ? 0 : 1;
}
