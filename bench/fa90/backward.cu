// Standalone run and timing of kiln_fa90::bwd (FlashAttention90Backward.cuh)
// for bench/fa90/bwd_check.py, which makes the inputs and checks the results
// against a float64 reference and PyTorch's backends:
//   fa90bwd B H KV SQ L D CAUSAL q.bin k.bin v.bin do.bin OUTDIR ITERS [MASK]
// reads raw bf16 q, dO ([B, H, SQ, D]), k, v ([B, KV, L, D]); runs Kiln's
// sm_90a forward (O and the row log-sum-exp) and then the backward (prepare,
// main, finish) on outputs poisoned with NaN; writes OUTDIR/{o,dq,dk,dv}.bin
// (raw bf16) and prints the median times of ITERS forwards and backwards.
// MASK, the mask operand (FlashAttention90.cuh's forms): pad:FILE (uint8
// keep [B, L]: KeyPaddingMask), doc:FILE (int32 document ids [B, SQ],
// non-decreasing, SQ == L: DocumentMask) or elem:FILE (uint8 keep [B, SQ, L]
// read by a functor, the generated kernel's form: ElementMask).
#include <cuda_runtime.h>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>
#include "../../lib/Codegen/cuda/FlashAttention90.cuh"
#include "../../lib/Codegen/cuda/FlashAttention90Backward.cuh"

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

using bf16 = __nv_bfloat16;

// The generic form: a keep tensor [B, Sq, L] read element by element, as
// the generated kernel's mask lambda reads the model's mask.
struct KeepTensor {
  const unsigned char *keep;
  int64_t Sq, L;
  __device__ float operator()(int64_t b, int64_t, int64_t i, int64_t j) const {
    return keep[(b * Sq + i) * L + j] ? 0.f : -INFINITY;
  }
};

// The forward's consumer warpgroups: the default's, or with
// -DFA90_MASKED_NC=N that many for masked forwards (A/B builds: a masked
// head-dim-64 forward spills at NC = 3, docs/benchmarks.md).
#ifndef FA90_MASKED_NC
#define FA90_MASKED_NC 0
#endif
template <int D, typename Mask> __host__ __device__ constexpr int consumersOf() {
  return FA90_MASKED_NC && !Mask::kNone ? FA90_MASKED_NC : kiln_fa90::defaultConsumers<D>();
}

// -DFA90_LAYOUT=BITS: the kernels read and write the tensors whose role bit
// is set (kiln_fa90::Layout: q 1, k 2, v 4, o 8, dO 16, dQ 32, dK 64, dV 128)
// as [B, S, H, D], as the step's `--attention-layout=bshd` launches do (1b:
// v, o, dO, dV = 156). The files stay [B, H, S, D]: inputs are permuted on
// the host before the upload and outputs back after the download, so the
// checks of bwd_check.py hold as they are.
#ifndef FA90_LAYOUT
#define FA90_LAYOUT 0
#endif
constexpr unsigned kLayout = FA90_LAYOUT;
using HarnessLayout = kiln_fa90::Layout<kLayout>;
// [B, H, S, D] <-> [B, S, H, D] on the host (toSeq: the first to the second).
static void permuteHeads(std::vector<bf16> &x, int B, int H, int S, int D, bool toSeq) {
  std::vector<bf16> y(x.size());
  for (int b = 0; b < B; ++b)
    for (int h = 0; h < H; ++h)
      for (int i = 0; i < S; ++i) {
        const size_t headMajor = (((size_t)b * H + h) * S + i) * D,
                     seqMajor = (((size_t)b * S + i) * H + h) * D;
        std::copy_n(&x[toSeq ? headMajor : seqMajor], D, &y[toSeq ? seqMajor : headMajor]);
      }
  x.swap(y);
}

template <int D, typename Mask>
__global__ void __launch_bounds__(kiln_fa90::threads<consumersOf<D, Mask>()>(), 1)
    fa90Forward(const bf16 *q, const bf16 *k, const bf16 *v, bf16 *o, float *lse, int64_t B,
                int64_t H, int64_t Hkv, int64_t Sq, int64_t L, float scale, bool causal,
                Mask mask) {
  extern __shared__ __align__(1024) unsigned char smem[];
  kiln_fa90::forward<bf16, D, consumersOf<D, Mask>(), Mask>(
      q, k, v, o, lse, B, H, Hkv, Sq, L, scale, causal, smem, mask, HarnessLayout());
}
template <int D>
__global__ void fa90Prepare(const bf16 *o, const bf16 *dO, float *dd, float *dqAcc, int64_t rows,
                            int64_t H, int64_t Sq) {
  kiln_fa90::bwd::prepare<bf16, D>(o, dO, dd, dqAcc, rows, H, Sq, HarnessLayout());
}
template <int D, typename Mask>
__global__ void __launch_bounds__(kiln_fa90::bwd::kThreads, 1)
    fa90Backward(const bf16 *q, const bf16 *k, const bf16 *v, const bf16 *dO, const float *lse,
                 const float *dd, float *dqAcc, bf16 *dK, bf16 *dV, int64_t B, int64_t H,
                 int64_t Hkv, int64_t Sq, int64_t L, float scale, bool causal, Mask mask) {
  extern __shared__ __align__(1024) unsigned char smem[];
  kiln_fa90::bwd::backward<bf16, D, Mask>(q, k, v, dO, lse, dd, dqAcc, dK, dV, B, H, Hkv, Sq, L,
                                          scale, causal, smem, mask, HarnessLayout());
}
__global__ void fa90Finish(const float *dqAcc, bf16 *dq, float scale, int64_t n) {
  kiln_fa90::bwd::finish<bf16>(dqAcc, dq, scale, n);
}

static bool readRaw(const char *path, size_t count, std::vector<bf16> &data) {
  data.resize(count);
  FILE *f = std::fopen(path, "rb");
  const bool ok = f && std::fread(data.data(), 2, count, f) == count;
  if (f)
    std::fclose(f);
  if (!ok)
    std::fprintf(stderr, "fa90bwd: cannot read %zu bf16 values from %s\n", count, path);
  return ok;
}
// seq: the tensor is stored [B, S, H, D] on the device (permuted back here).
static bool writeRaw(const std::string &path, const bf16 *dev, size_t count, bool seq = false,
                     int B = 0, int H = 0, int S = 0, int D = 0) {
  std::vector<bf16> host(count);
  CHECK(cudaMemcpy(host.data(), dev, count * 2, cudaMemcpyDeviceToHost));
  if (seq)
    permuteHeads(host, B, H, S, D, false);
  FILE *f = std::fopen(path.c_str(), "wb");
  const bool ok = f && std::fwrite(host.data(), 2, count, f) == count;
  if (f)
    std::fclose(f);
  if (!ok)
    std::fprintf(stderr, "fa90bwd: cannot write %s\n", path.c_str());
  return ok;
}

template <typename F> static float median(F &&fn, int iters) {
  cudaEvent_t e0, e1;
  CHECK(cudaEventCreate(&e0));
  CHECK(cudaEventCreate(&e1));
  for (int w = 0; w < 3; ++w)
    fn();
  std::vector<float> times;
  for (int it = 0; it < std::max(iters, 1); ++it) {
    CHECK(cudaEventRecord(e0));
    fn();
    CHECK(cudaEventRecord(e1));
    CHECK(cudaEventSynchronize(e1));
    float t;
    CHECK(cudaEventElapsedTime(&t, e0, e1));
    times.push_back(t);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

template <int D, typename Mask>
static int runShape(int B, int H, int Hkv, int Sq, int L, bool causal, char **paths, int iters,
                    Mask mask) {
  const size_t nq = (size_t)B * H * Sq * D, nk = (size_t)B * Hkv * L * D, rows = (size_t)B * H * Sq;
  std::vector<bf16> hq, hk, hv, hdo;
  if (!readRaw(paths[0], nq, hq) || !readRaw(paths[1], nk, hk) || !readRaw(paths[2], nk, hv) ||
      !readRaw(paths[3], nq, hdo))
    return 2;
  auto bit = [](unsigned b) { return (kLayout & b) != 0; };
  if (bit(1)) permuteHeads(hq, B, H, Sq, D, true);
  if (bit(2)) permuteHeads(hk, B, Hkv, L, D, true);
  if (bit(4)) permuteHeads(hv, B, Hkv, L, D, true);
  if (bit(16)) permuteHeads(hdo, B, H, Sq, D, true);
  bf16 *q, *k, *v, *o, *dO, *dq, *dk, *dv;
  float *lse, *dd, *acc;
  CHECK(cudaMalloc(&q, nq * 2)); CHECK(cudaMalloc(&k, nk * 2)); CHECK(cudaMalloc(&v, nk * 2));
  CHECK(cudaMalloc(&o, nq * 2)); CHECK(cudaMalloc(&dO, nq * 2)); CHECK(cudaMalloc(&dq, nq * 2));
  CHECK(cudaMalloc(&dk, nk * 2)); CHECK(cudaMalloc(&dv, nk * 2));
  CHECK(cudaMalloc(&lse, rows * 4)); CHECK(cudaMalloc(&dd, rows * 4)); CHECK(cudaMalloc(&acc, nq * 4));
  CHECK(cudaMemcpy(q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(k, hk.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(v, hv.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dO, hdo.data(), nq * 2, cudaMemcpyHostToDevice));
  // NaN everywhere the kernels write: an element they skip shows.
  for (auto [p, n] : {std::pair<void *, size_t>{o, nq * 2}, {dq, nq * 2}, {dk, nk * 2}, {dv, nk * 2},
                      {lse, rows * 4}, {dd, rows * 4}, {acc, nq * 4}})
    CHECK(cudaMemset(p, 0xff, n));
  const float scale = 1.f / std::sqrt((float)D);
  constexpr int nc = consumersOf<D, Mask>();
  constexpr int fwdBytes = kiln_fa90::Smem<D, nc>::bytes, bwdBytes = kiln_fa90::bwd::Smem<D>::bytes;
  CHECK(cudaFuncSetAttribute(fa90Forward<D, Mask>, cudaFuncAttributeMaxDynamicSharedMemorySize, fwdBytes));
  CHECK(cudaFuncSetAttribute(fa90Backward<D, Mask>, cudaFuncAttributeMaxDynamicSharedMemorySize, bwdBytes));
  auto forward = [&] {
    const int blocks = (Sq + 64 * nc - 1) / (64 * nc) * B * H;
    fa90Forward<D, Mask><<<blocks, kiln_fa90::threads<nc>(), fwdBytes>>>(
        q, k, v, o, lse, B, H, Hkv, Sq, L, scale, causal, mask);
    CHECK(cudaGetLastError());
  };
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  auto backward = [&] {
    fa90Prepare<D><<<sms * 8, 256>>>(o, dO, dd, acc, (int64_t)rows, H, Sq);
    const int blocks = (L + kiln_fa90::bwd::BN - 1) / kiln_fa90::bwd::BN * B * Hkv;
    fa90Backward<D, Mask><<<blocks, kiln_fa90::bwd::kThreads, bwdBytes>>>(
        q, k, v, dO, lse, dd, acc, dk, dv, B, H, Hkv, Sq, L, scale, causal, mask);
    fa90Finish<<<sms * 8, 256>>>(acc, dq, scale, (int64_t)nq);
    CHECK(cudaGetLastError());
  };
  forward();
  backward();
  CHECK(cudaDeviceSynchronize());
  const std::string dir = paths[4];
  if (!writeRaw(dir + "/o.bin", o, nq, bit(8), B, H, Sq, D) ||
      !writeRaw(dir + "/dq.bin", dq, nq, bit(32), B, H, Sq, D) ||
      !writeRaw(dir + "/dk.bin", dk, nk, bit(64), B, Hkv, L, D) ||
      !writeRaw(dir + "/dv.bin", dv, nk, bit(128), B, Hkv, L, D))
    return 2;
  if (iters > 0) {
    const float f = median(forward, iters), bw = median(backward, iters);
    // The main kernel alone, for the share of prepare and finish.
    const int blocks = (L + kiln_fa90::bwd::BN - 1) / kiln_fa90::bwd::BN * B * Hkv;
    const float mainOnly = median([&] {
      fa90Backward<D, Mask><<<blocks, kiln_fa90::bwd::kThreads, bwdBytes>>>(
          q, k, v, dO, lse, dd, acc, dk, dv, B, H, Hkv, Sq, L, scale, causal, mask);
    }, iters);
    std::printf("fwd %.4f ms bwd %.4f ms (main kernel %.4f ms)\n", f, bw, mainOnly);
  } else {
    std::printf("fwd - ms bwd - ms\n");
  }
  for (void *p : {(void *)q, (void *)k, (void *)v, (void *)o, (void *)dO, (void *)dq, (void *)dk,
                  (void *)dv, (void *)lse, (void *)dd, (void *)acc})
    cudaFree(p);
  return 0;
}

template <typename T> static T *deviceFile(const char *path, size_t count) {
  std::vector<T> host(count);
  FILE *f = std::fopen(path, "rb");
  const bool ok = f && std::fread(host.data(), sizeof(T), count, f) == count;
  if (f)
    std::fclose(f);
  if (!ok) {
    std::fprintf(stderr, "fa90bwd: cannot read %zu mask values from %s\n", count, path);
    std::exit(2);
  }
  T *dev;
  CHECK(cudaMalloc(&dev, count * sizeof(T)));
  CHECK(cudaMemcpy(dev, host.data(), count * sizeof(T), cudaMemcpyHostToDevice));
  return dev;
}

template <int D>
static int withMask(const char *spec, int B, int H, int Hkv, int Sq, int L, bool causal,
                    char **paths, int iters) {
  const std::string s = spec ? spec : "none";
  const char *file = s.size() > 4 ? spec + 4 : "";
  if (s == "none")
    return runShape<D>(B, H, Hkv, Sq, L, causal, paths, iters, kiln_fa90::NoMask());
  if (s.rfind("pad:", 0) == 0)
    return runShape<D>(B, H, Hkv, Sq, L, causal, paths, iters,
                       kiln_fa90::KeyPaddingMask{deviceFile<unsigned char>(file, (size_t)B * L), L});
  if (s.rfind("doc:", 0) == 0 && Sq == L)
    return runShape<D>(B, H, Hkv, Sq, L, causal, paths, iters,
                       kiln_fa90::DocumentMask{deviceFile<int>(file, (size_t)B * Sq), Sq});
  if (s.rfind("elem:", 0) == 0)
    return runShape<D>(B, H, Hkv, Sq, L, causal, paths, iters,
                       kiln_fa90::elementMask(KeepTensor{
                           deviceFile<unsigned char>(spec + 5, (size_t)B * Sq * L), Sq, L}));
  std::fprintf(stderr, "fa90bwd: unknown mask '%s' (none, pad:FILE, doc:FILE with SQ == L, elem:FILE)\n",
               spec);
  return 2;
}

int main(int argc, char **argv) {
  if (argc != 14 && argc != 15) {
    std::fprintf(stderr, "usage: fa90bwd B H KV SQ L D CAUSAL q.bin k.bin v.bin do.bin OUTDIR ITERS "
                         "[none|pad:FILE|doc:FILE|elem:FILE]\n");
    return 2;
  }
  const int B = std::atoi(argv[1]), H = std::atoi(argv[2]), Hkv = std::atoi(argv[3]),
            Sq = std::atoi(argv[4]), L = std::atoi(argv[5]), D = std::atoi(argv[6]),
            causal = std::atoi(argv[7]), iters = std::atoi(argv[13]);
  if (B <= 0 || H <= 0 || Hkv <= 0 || H % Hkv || Sq <= 0 || L <= 0 || Sq % 4 ||
      (D != 64 && D != 128)) {
    std::fprintf(stderr, "fa90bwd: unsupported shape b%d h%d kv%d sq%d l%d d%d\n", B, H, Hkv, Sq,
                 L, D);
    return 2;
  }
  const char *mask = argc == 15 ? argv[14] : nullptr;
  return D == 64 ? withMask<64>(mask, B, H, Hkv, Sq, L, causal != 0, argv + 8, iters)
                 : withMask<128>(mask, B, H, Hkv, Sq, L, causal != 0, argv + 8, iters);
}
