// How much of the LoRA weight-gradient GEMMs (dA, dB) a second stream hides
// behind the backward's input-gradient chain: one 1b layer's backward GEMMs
// (bench "1b": tokens 8192, hidden 2048, intermediate 8192, kv 512, r 16 per
// adapter), pointwise kernels standing in for the norm, SiLU and RoPE
// gradients and a large GEMM standing in for attention's backward, captured
// in one CUDA Graph of 16 layers:
//   serial   every op on one stream (what kiln-run records today);
//   side     dA/dB forked onto a second stream where their inputs exist,
//            joined at the end of the layer;
//   side16   joined once after the 16 layers;
//   lowprio  side16 with the second stream at a lower priority.
// Prints the graph's median time per variant and each op class's serial time.
//   nvcc -O3 -std=c++17 -arch=sm_90 overlap_check.cu -lcublas -o overlap_check
#include "../common/check_cublas.h"
#include "../common/check_cuda.h"
#include "../common/random_fill.cuh"

#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>


namespace {

constexpr int64_t T = 8192, H = 2048, I = 8192, KV = 512;

struct Op {
  const char *name;
  bool gemm;
  int64_t m, n, k; // row-major C[m, n] = op(A)[m, k] op(B)[k, n]
  bool transA, transB;
  float beta;
  bool side;     // a weight gradient: may run on the second stream
  int64_t bytes; // pointwise: bytes read and written
  __nv_bfloat16 *a = nullptr, *b = nullptr, *c = nullptr;
};

Op gemm(const char *name, int64_t m, int64_t n, int64_t k, bool tA, bool tB, float beta, bool side) {
  return Op{name, true, m, n, k, tA, tB, beta, side, 0};
}
Op pointwise(const char *name, int64_t bytes) {
  return Op{name, false, 0, 0, 0, false, false, 0, false, bytes};
}

std::vector<Op> layerBackward() {
  return {
      // down projection (r 16): dT, dX (K-concatenated), dB, dA
      gemm("dT", T, 16, H, false, false, 0, false),
      gemm("dX frozen", T, I, H + 16, false, true, 0, false),
      gemm("dB", H, 16, T, true, false, 0, true),
      gemm("dA", 16, I, T, true, false, 0, true),
      pointwise("silu grad", 805'000'000),
      // gate/up (r 16 each, A shared)
      gemm("dT", T, 16, I, false, false, 0, false),
      gemm("dT", T, 16, I, false, false, 0, false),
      gemm("dB", I, 16, T, true, false, 0, true),
      gemm("dB", I, 16, T, true, false, 0, true),
      gemm("dX frozen", T, H, I + 32, false, true, 0, false),
      gemm("dX frozen", T, H, I, false, true, 1, false),
      gemm("dA", 32, H, T, true, false, 0, true),
      pointwise("norm grad", 134'000'000),
      // o projection
      gemm("dT", T, 16, H, false, false, 0, false),
      gemm("dX frozen", T, H, H + 16, false, true, 0, false),
      gemm("dB", H, 16, T, true, false, 0, true),
      gemm("dA", 16, H, T, true, false, 0, true),
      gemm("attention stand-in", T, 4096, I, false, true, 0, false),
      pointwise("rope grad", 128'000'000),
      // q/k/v (r 16 each, A shared: t [T, 48])
      gemm("dT", T, 48, H, false, false, 0, false),
      gemm("dT", T, 48, KV, false, false, 1, false),
      gemm("dT", T, 48, KV, false, false, 1, false),
      gemm("dX frozen", T, H, H + 48, false, true, 0, false),
      gemm("dX frozen", T, H, KV, false, true, 1, false),
      gemm("dX frozen", T, H, KV, false, true, 1, false),
      gemm("dB", H, 16, T, true, false, 0, true),
      gemm("dB", KV, 16, T, true, false, 0, true),
      gemm("dB", KV, 16, T, true, false, 0, true),
      gemm("dA", 48, H, T, true, false, 0, true),
      pointwise("norm grad", 134'000'000),
  };
}

__global__ void streamKernel(const uint4 *in, uint4 *out, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n;
       i += (int64_t)gridDim.x * blockDim.x) {
    uint4 v = in[i];
    v.x ^= 1;
    out[i] = v;
  }
}

__nv_bfloat16 *alloc(int64_t elements, uint32_t seed) {
  void *p;
  CHECK_CUDA(cudaMalloc(&p, elements * 2));
  fillUniformBf16<<<1024, 256>>>((__nv_bfloat16 *)p, elements, seed, 0.5f);
  return (__nv_bfloat16 *)p;
}

void enqueue(const Op &op, cublasHandle_t h, cudaStream_t s) {
  if (!op.gemm) {
    int64_t n = op.bytes / 2 / 16;
    streamKernel<<<132 * 8, 512, 0, s>>>((const uint4 *)op.a, (uint4 *)op.c, n);
    CHECK_CUDA(cudaGetLastError());
    return;
  }
  CHECK_CUBLAS(cublasSetStream(h, s));
  float alpha = 1, beta = op.beta;
  // Row-major C[m,n] = op(A) op(B) is column-major C^T[n,m] = op(B)^T op(A)^T.
  int64_t lda = op.transA ? op.m : op.k, ldb = op.transB ? op.k : op.n;
  CHECK_CUBLAS(cublasGemmEx(h, op.transB ? CUBLAS_OP_T : CUBLAS_OP_N,
                            op.transA ? CUBLAS_OP_T : CUBLAS_OP_N, op.n, op.m, op.k, &alpha, op.b,
                            CUDA_R_16BF, ldb, op.a, CUDA_R_16BF, lda, &beta, op.c, CUDA_R_16BF,
                            op.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

enum class Mode { Serial, Side, Side16 };

cudaGraphExec_t capture(std::vector<std::vector<Op>> &layers, Mode mode, cudaStream_t main,
                        cudaStream_t side, cublasHandle_t hMain, cublasHandle_t hSide) {
  std::vector<cudaEvent_t> events;
  auto event = [&] {
    cudaEvent_t e;
    CHECK_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    events.push_back(e);
    return e;
  };
  CHECK_CUDA(cudaStreamBeginCapture(main, cudaStreamCaptureModeGlobal));
  bool forked = false;
  for (auto &layer : layers) {
    for (const Op &op : layer) {
      if (mode == Mode::Serial || !op.side) {
        enqueue(op, hMain, main);
        continue;
      }
      cudaEvent_t ready = event(); // its inputs are on the main stream up to here
      CHECK_CUDA(cudaEventRecord(ready, main));
      CHECK_CUDA(cudaStreamWaitEvent(side, ready));
      enqueue(op, hSide, side);
      forked = true;
    }
    if (mode == Mode::Side && forked) {
      cudaEvent_t done = event();
      CHECK_CUDA(cudaEventRecord(done, side));
      CHECK_CUDA(cudaStreamWaitEvent(main, done));
      forked = false;
    }
  }
  if (forked) {
    cudaEvent_t done = event();
    CHECK_CUDA(cudaEventRecord(done, side));
    CHECK_CUDA(cudaStreamWaitEvent(main, done));
  }
  cudaGraph_t graph;
  CHECK_CUDA(cudaStreamEndCapture(main, &graph));
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaGraphInstantiate(&exec, graph, 0));
  CHECK_CUDA(cudaGraphDestroy(graph));
  return exec;
}

} // namespace

int main(int argc, char **argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 15;
  int layersCount = 16;
  // Each layer has its own operands (the step's are distinct tensors; no
  // layer's GEMM finds the previous layer's operands in L2).
  std::vector<std::vector<Op>> layers(layersCount, layerBackward());
  uint32_t seed = 1;
  size_t total = 0;
  for (auto &layer : layers)
    for (Op &op : layer) {
      if (op.gemm) {
        op.a = alloc(op.m * op.k, seed++);
        op.b = alloc(op.k * op.n, seed++);
        op.c = alloc(op.m * op.n, seed++);
        total += 2 * (op.m * op.k + op.k * op.n + op.m * op.n);
      } else {
        op.a = alloc(op.bytes / 4, seed++);
        op.c = alloc(op.bytes / 4, seed++);
        total += op.bytes;
      }
    }
  CHECK_CUDA(cudaDeviceSynchronize());
  std::printf("operands %.2f GiB\n", total / double(1ull << 30));

  int least, greatest;
  CHECK_CUDA(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t main, side, low, high;
  CHECK_CUDA(cudaStreamCreateWithFlags(&main, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithPriority(&low, cudaStreamNonBlocking, least));
  CHECK_CUDA(cudaStreamCreateWithPriority(&high, cudaStreamNonBlocking, greatest));
  cublasHandle_t hMain, hSide;
  CHECK_CUBLAS(cublasCreate(&hMain));
  CHECK_CUBLAS(cublasCreate(&hSide));
  void *w1, *w2;
  size_t wsBytes = 32u << 20;
  CHECK_CUDA(cudaMalloc(&w1, wsBytes));
  CHECK_CUDA(cudaMalloc(&w2, wsBytes));
  CHECK_CUBLAS(cublasSetWorkspace(hMain, w1, wsBytes));
  CHECK_CUBLAS(cublasSetWorkspace(hSide, w2, wsBytes));

  // Serial time per op class (events around each op of layer 0, 5 runs).
  {
    std::vector<std::pair<std::string, double>> classes;
    for (Op &op : layers[0]) {
      float ms = medianEventMs(5, [&] { enqueue(op, hMain, 0); });
      std::string name = std::string(op.name) + (op.gemm ? " " + std::to_string(op.m) + "x" +
                                                                std::to_string(op.n) + "x" +
                                                                std::to_string(op.k)
                                                          : "");
      std::printf("  op %-34s %8.1f us%s\n", name.c_str(), ms * 1000, op.side ? "  (side)" : "");
      bool found = false;
      for (auto &c : classes)
        if (c.first == op.name) c.second += ms, found = true;
      if (!found) classes.push_back({op.name, ms});
    }
    for (auto &c : classes)
      std::printf("class %-20s %7.3f ms per layer, %7.2f ms per 16\n", c.first.c_str(), c.second,
                  16 * c.second);
  }

  struct Variant {
    const char *name;
    Mode mode;
    cudaStream_t side;
  } variants[] = {{"serial", Mode::Serial, side},
                  {"side", Mode::Side, side},
                  {"side16", Mode::Side16, side},
                  {"lowprio", Mode::Side16, low},
                  {"highmain", Mode::Side16, low}};
  std::vector<cudaGraphExec_t> execs;
  for (auto &v : variants) {
    cudaStream_t m = std::string(v.name) == "highmain" ? high : main;
    execs.push_back(capture(layers, v.mode, m, v.side, hMain, hSide));
  }
  // Alternate the variants, three rounds.
  std::vector<std::vector<float>> ms(execs.size());
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < execs.size(); ++i) {
      CHECK_CUDA(cudaGraphLaunch(execs[i], main)); // warm-up
      CHECK_CUDA(cudaStreamSynchronize(main));
      ms[i].push_back(medianEventMs(reps, [&] { CHECK_CUDA(cudaGraphLaunch(execs[i], 0)); }));
    }
  for (size_t i = 0; i < execs.size(); ++i)
    std::printf("variant %-9s %8.3f %8.3f %8.3f ms (16 layers)\n", variants[i].name, ms[i][0],
                ms[i][1], ms[i][2]);
  return 0;
}
