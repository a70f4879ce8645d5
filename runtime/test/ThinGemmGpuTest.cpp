//===- ThinGemmGpuTest.cpp - Kiln's thin-GEMM kernels against cuBLASLt ----===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Needs a GPU (ctest label gpu). Runs the support module's thin-GEMM
// kernels as kiln-run --thin-gemm on does (ThinGemmPlan, LaunchArgs) on
// random bf16 inputs, one case per kind and layout (small K with beta = 1,
// small N split over K, small M split over K), and checks each against a
// float64 host reference beside cuBLASLt on the same inputs: the kernel's
// relative L2 error no worse than 1.05x cuBLASLt's, no NaN left of the
// poisoned output, two runs bitwise equal, and the split counters back at
// zero.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "ThinGemmPlan.h"
#include "kiln/runtime/CublasLt.h"
#include "kiln/runtime/Device.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

using namespace kiln::runtime;

namespace {
uint16_t toBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return static_cast<uint16_t>((bits + 0x7fff + ((bits >> 16) & 1)) >> 16);
}
double fromBf16(uint16_t h) {
  uint32_t bits = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

struct Case {
  int64_t m, n, k;
  bool ta, tb;
  float alpha, beta;
};

struct Buffers {
  const CudaDriver *driver;
  std::vector<CUdeviceptr> all;
  CUdeviceptr alloc(size_t bytes) {
    CUdeviceptr p = 0;
    CHECK(driver->cuMemAlloc_v2(&p, bytes) == CUDA_SUCCESS);
    all.push_back(p);
    return p;
  }
  ~Buffers() {
    for (CUdeviceptr p : all)
      driver->cuMemFree_v2(p);
  }
};

void runCase(const Device &device, const KernelModule &support, const CublasLt &lt,
             cublasLtHandle_t handle, const Case &c) {
  const CudaDriver &driver = device.getDriver();
  thin::Problem p;
  p.m = c.m, p.n = c.n, p.k = c.k, p.transA = c.ta, p.transB = c.tb;
  p.lda = c.ta ? c.m : c.k;
  p.ldb = c.tb ? c.k : c.n;
  p.ldc = c.n;
  const size_t workspaceBytes = size_t{32} << 20;
  std::string why;
  thin::Plan plan =
      thin::planThinGemm(p, device.getInfo().multiprocessorCount, workspaceBytes, why);
  CHECK(!plan.kernel.empty());
  if (plan.kernel.empty())
    return;
  std::printf("%lldx%lldx%lld %s%s beta %g: %s, %u splits\n", (long long)c.m, (long long)c.n,
              (long long)c.k, c.ta ? "t" : "n", c.tb ? "t" : "n", c.beta, plan.kernel.c_str(),
              plan.splits);

  // Random operands in [-1, 1), rounded to bf16; the reference reads the
  // rounded values.
  size_t na = c.m * c.k, nb = c.k * c.n, nc = c.m * c.n;
  std::vector<uint16_t> a(na), b(nb), c0(nc);
  uint64_t state = 0x9e3779b97f4a7c15ull ^ (c.m * 131 + c.n * 7 + c.k);
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return toBf16(static_cast<float>((state >> 40) * (2.0 / 16777216.0) - 1.0));
  };
  for (auto *v : {&a, &b, &c0})
    for (uint16_t &x : *v)
      x = next();
  std::vector<double> ref(nc);
  for (int64_t i = 0; i < c.m; ++i)
    for (int64_t j = 0; j < c.n; ++j) {
      double s = 0;
      for (int64_t q = 0; q < c.k; ++q)
        s += fromBf16(c.ta ? a[q * p.lda + i] : a[i * p.lda + q]) *
             fromBf16(c.tb ? b[j * p.ldb + q] : b[q * p.ldb + j]);
      ref[i * c.n + j] = c.alpha * s + c.beta * fromBf16(c0[i * c.n + j]);
    }

  Buffers mem{&driver, {}};
  CUdeviceptr da = mem.alloc(na * 2), db = mem.alloc(nb * 2), dc = mem.alloc(nc * 2);
  CUdeviceptr workspace = mem.alloc(workspaceBytes);
  CUdeviceptr counters = mem.alloc(thin::kMaxCounters * 4);
  CHECK(driver.cuMemcpyHtoD_v2(da, a.data(), na * 2) == CUDA_SUCCESS);
  CHECK(driver.cuMemcpyHtoD_v2(db, b.data(), nb * 2) == CUDA_SUCCESS);
  CHECK(driver.cuMemsetD8_v2(counters, 0, thin::kMaxCounters * 4) == CUDA_SUCCESS);
  std::vector<uint16_t> nan(nc, 0x7fc0);
  auto reset = [&] {
    const std::vector<uint16_t> &init = c.beta != 0 ? c0 : nan;
    CHECK(driver.cuMemcpyHtoD_v2(dc, init.data(), nc * 2) == CUDA_SUCCESS);
  };
  auto result = [&] {
    std::vector<uint16_t> host(nc);
    CHECK(device.synchronize());
    CHECK(driver.cuMemcpyDtoH_v2(host.data(), dc, nc * 2) == CUDA_SUCCESS);
    return host;
  };
  auto error = [&](const std::vector<uint16_t> &out) -> double {
    double d = 0, r = 0;
    for (size_t i = 0; i < nc; ++i) {
      double o = fromBf16(out[i]);
      if (!std::isfinite(o))
        return double(INFINITY);
      d += (o - ref[i]) * (o - ref[i]);
      r += ref[i] * ref[i];
    }
    return std::sqrt(d / r);
  };

  Expected<CUfunction> function = support.getFunction(plan.kernel);
  CHECK(function);
  if (!function)
    return;
  CHECK(driver.cuFuncSetAttribute(*function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                  static_cast<int>(plan.sharedBytes)) == CUDA_SUCCESS);
  thin::LaunchArgs args;
  args.a = da, args.b = db, args.c = dc, args.partials = workspace, args.counters = counters;
  args.m = c.m, args.n = c.n, args.k = c.k, args.lda = p.lda, args.ldb = p.ldb, args.ldc = p.ldc;
  args.alpha = c.alpha, args.beta = c.beta, args.splits = static_cast<int32_t>(plan.splits);
  void *params[] = {&args};
  auto launch = [&] {
    CHECK(driver.cuLaunchKernel(*function, plan.gridX, plan.gridY, plan.splits, plan.threads, 1,
                                1, static_cast<unsigned>(plan.sharedBytes), device.getStream(),
                                params, nullptr) == CUDA_SUCCESS);
  };
  reset();
  launch();
  std::vector<uint16_t> first = result();
  reset();
  launch();
  std::vector<uint16_t> second = result();
  CHECK(first == second);
  std::vector<uint32_t> left(thin::kMaxCounters, 1);
  CHECK(driver.cuMemcpyDtoH_v2(left.data(), counters, left.size() * 4) == CUDA_SUCCESS);
  CHECK(std::all_of(left.begin(), left.end(), [](uint32_t v) { return v == 0; }));
  double ours = error(first);

  // cuBLASLt as GemmDescriptors.cpp describes the GEMM (B first).
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t first_ = nullptr, second_ = nullptr, out_ = nullptr;
  CHECK(lt.cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) ==
        CUBLAS_STATUS_SUCCESS);
  cublasOperation_t opFirst = c.tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opSecond = c.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  lt.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opFirst, sizeof opFirst);
  lt.cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opSecond, sizeof opSecond);
  lt.cublasLtMatrixLayoutCreate(&first_, CUDA_R_16BF, c.tb ? c.k : c.n, c.tb ? c.n : c.k, p.ldb);
  lt.cublasLtMatrixLayoutCreate(&second_, CUDA_R_16BF, c.ta ? c.m : c.k, c.ta ? c.k : c.m, p.lda);
  lt.cublasLtMatrixLayoutCreate(&out_, CUDA_R_16BF, c.n, c.m, p.ldc);
  cublasLtMatmulPreference_t preference = nullptr;
  lt.cublasLtMatmulPreferenceCreate(&preference);
  uint64_t bytes = workspaceBytes;
  lt.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                          &bytes, sizeof bytes);
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  CHECK(lt.cublasLtMatmulAlgoGetHeuristic(handle, desc, first_, second_, out_, out_, preference,
                                          1, &heuristic, &found) == CUBLAS_STATUS_SUCCESS);
  CHECK(found == 1);
  reset();
  CHECK(lt.cublasLtMatmul(handle, desc, &c.alpha, reinterpret_cast<void *>(db), first_,
                          reinterpret_cast<void *>(da), second_, &c.beta,
                          reinterpret_cast<void *>(dc), out_, reinterpret_cast<void *>(dc), out_,
                          &heuristic.algo, reinterpret_cast<void *>(workspace), workspaceBytes,
                          device.getStream()) == CUBLAS_STATUS_SUCCESS);
  double theirs = error(result());
  std::printf("  relative L2 error: ours %.3e, cuBLASLt %.3e\n", ours, theirs);
  CHECK(std::isfinite(ours) && ours <= 1.05 * theirs + 1e-7);
  lt.cublasLtMatmulPreferenceDestroy(preference);
  for (cublasLtMatrixLayout_t l : {first_, second_, out_})
    lt.cublasLtMatrixLayoutDestroy(l);
  lt.cublasLtMatmulDescDestroy(desc);
}
} // namespace

int main() {
  Expected<CudaDriver> driver = CudaDriver::load();
  if (!driver) {
    std::fprintf(stderr, "%s\n", driver.getError().c_str());
    return 1;
  }
  Expected<Device> device = Device::open(*driver, 0);
  if (!device) {
    std::fprintf(stderr, "%s\n", device.getError().c_str());
    return 1;
  }
  std::printf("%s\n", formatDevice(device->getInfo()).c_str());
  Expected<KernelModule> support = loadSupportKernels(*device);
  Expected<CublasLt> lt = CublasLt::load();
  if (!support || !lt) {
    std::fprintf(stderr, "%s\n", !support ? support.getError().c_str() : lt.getError().c_str());
    return 1;
  }
  cublasLtHandle_t handle = nullptr;
  CHECK(lt->cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
  const Case cases[] = {
      {512, 256, 32, false, true, 2, 1},  // up projection, C += s t B^T
      {512, 384, 16, false, false, 1, 0}, // dX = dT A
      {1024, 48, 512, false, true, 1, 0}, // down projection x A^T
      {256, 16, 4096, true, false, 2, 0}, // dB = s dy^T t, split over K
      {48, 128, 4096, true, false, 1, 0}, // dA = dT^T x, split over K
  };
  for (const Case &c : cases)
    runCase(*device, *support, *lt, handle, c);
  lt->cublasLtDestroy(handle);
  return checkFailures() != 0;
}
