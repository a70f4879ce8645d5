// Every cuDNN execution plan for the bench's causal attention shapes, timed
// one by one: is the heuristic's first choice (what kiln-run runs,
// runtime/lib/CudnnAttention.cpp) the fastest plan on this GPU, and by how
// much do the layouts (dense [B, H, S, D] against the step's seq-major
// roles) and the deterministic backward differ?
//
//   bash bench/cudnnplans/run.sh build DIR   # compiler machine (nvcc, cuDNN, frontend)
//   bash bench/cudnnplans/run.sh run DIR     # GPU machine
//
// Each plan runs on the same random bf16 inputs (the backward after the
// heuristic forward's O and statistics): 3 warm-up launches, then ITERS
// launches each between two events, the median printed in ms and TFLOP/s
// (FlashAttention's convention: causal forward 4·b·h·s²·d/2, backward 2.5×).
// The backward's outputs of every plan are compared with the first plan's
// (max |Δ| / max |ref|), so a fast plan that computes something else shows.
//
// With arguments it is instead a harness in bench/fa90/backward.cu's
// protocol (bench/attention.py --cudnn-harness, bwd_check.py --bin):
//   cudnnplans B H KV SQ L D CAUSAL q.bin k.bin v.bin do.bin OUTDIR ITERS
// runs the graphs kiln-run builds (runtime/lib/CudnnAttention.cpp: the
// heuristic's first plan, mode A) on those bf16 [B, H, S, D] inputs, writes
// o, dq, dk, dv .bin there and prints the median forward and backward
// times. PLANS_LAYOUT=BITS stores the roles of those seq-major bits
// [B, S, H, D] on the GPU (the 1b step's are 156), permuted on the host.
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "../common/check_cuda.h"

namespace fe = cudnn_frontend;


namespace {
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDout, kDq, kDk, kDv };
// The roles' seq-major bits, as kiln::artifact::AttentionLayoutBit.
enum Bit : unsigned { bQ = 1, bK = 2, bV = 4, bO = 8, bDout = 16, bDq = 32, bDk = 64, bDv = 128 };

struct Shape {
  const char *name;
  int64_t b, h, kv, s, d;
};

struct Layout {
  std::vector<int64_t> dims, strides;
};

Layout layoutOf(const Shape &s, unsigned layout, unsigned bit) {
  bool keySide = bit & (bK | bV | bDk | bDv);
  int64_t heads = keySide ? s.kv : s.h;
  Layout t;
  t.dims = {s.b, heads, s.s, s.d};
  if (layout & bit)
    t.strides = {s.s * heads * s.d, s.d, heads * s.d, 1};
  else
    t.strides = {heads * s.s * s.d, s.s * s.d, s.d, 1};
  return t;
}

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph &g, const char *name,
                                                    int64_t uid, const Shape &s, unsigned layout,
                                                    unsigned bit) {
  Layout t = layoutOf(s, layout, bit);
  return g.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(t.dims).set_stride(
          t.strides));
}

void output(const std::shared_ptr<fe::graph::Tensor_attributes> &o, const char *name, int64_t uid,
            const Shape &s, unsigned layout, unsigned bit) {
  Layout t = layoutOf(s, layout, bit);
  o->set_output(true).set_name(name).set_uid(uid).set_dim(t.dims).set_stride(t.strides);
}

std::shared_ptr<fe::graph::Graph> makeGraph(const Shape &s, unsigned layout, bool backward,
                                            bool deterministic) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = input(*g, "Q", kQ, s, layout, bQ);
  auto k = input(*g, "K", kK, s, layout, bK);
  auto v = input(*g, "V", kV, s, layout, bV);
  float scale = 1.0f / std::sqrt(float(s.d));
  if (!backward) {
    auto opt = fe::graph::SDPA_attributes()
                   .set_name("attention")
                   .set_generate_stats(true)
                   .set_attn_scale(scale)
                   .set_causal_mask(true);
    auto [o, stats] = g->sdpa(q, k, v, opt);
    output(o, "O", kO, s, layout, bO);
    stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT);
  } else {
    auto o = input(*g, "O", kO, s, layout, bO);
    auto dout = input(*g, "dO", kDout, s, layout, bDout);
    auto stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("Stats")
                               .set_uid(kStats)
                               .set_dim({s.b, s.h, s.s, 1})
                               .set_stride({s.h * s.s, s.s, 1, 1})
                               .set_data_type(fe::DataType_t::FLOAT));
    auto opt = fe::graph::SDPA_backward_attributes()
                   .set_name("attention_grad")
                   .set_attn_scale(scale)
                   .set_causal_mask(true);
    if (deterministic)
      opt.set_deterministic_algorithm(true);
    auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opt);
    output(dq, "dQ", kDq, s, layout, bDq);
    output(dk, "dK", kDk, s, layout, bDk);
    output(dv, "dV", kDv, s, layout, bDv);
  }
  return g;
}

__global__ void fillRandom(__nv_bfloat16 *p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    p[i] = __float2bfloat16((float(x) / 4294967296.0f - 0.5f) * 2.0f);
  }
}

struct Buffers {
  void *q, *k, *v, *o, *stats, *dout, *dq, *dk, *dv, *dqRef, *dkRef, *dvRef;
  size_t qBytes, kvBytes;
};

float maxRelDiff(const void *a, const void *ref, size_t n) {
  std::vector<__nv_bfloat16> ha(n), hr(n);
  CHECK_CUDA(cudaMemcpy(ha.data(), a, n * 2, cudaMemcpyDeviceToHost));
  CHECK_CUDA(cudaMemcpy(hr.data(), ref, n * 2, cudaMemcpyDeviceToHost));
  float diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    float x = __bfloat162float(ha[i]), r = __bfloat162float(hr[i]);
    if (!std::isfinite(x))
      return INFINITY;
    diff = std::max(diff, std::fabs(x - r));
    scale = std::max(scale, std::fabs(r));
  }
  return scale > 0 ? diff / scale : diff;
}

double flops(const Shape &s, bool backward) {
  double f = 4.0 * s.b * s.h * double(s.s) * s.s * s.d / 2;
  return backward ? 2.5 * f : f;
}

// Times every plan of one graph; returns false when none ran.
bool sweep(cudnnHandle_t handle, const Shape &s, unsigned layout, bool backward,
           bool deterministic, Buffers &buf, int iters, bool firstIsReference) {
  auto g = makeGraph(s, layout, backward, deterministic);
  const char *what = backward ? (deterministic ? "bwd-det" : "bwd") : "fwd";
  auto fail = [&](const char *stage, fe::error_t e) {
    std::printf("%-6s layout %3u %-8s %s failed: %s\n", s.name, layout, what, stage,
                e.get_message().c_str());
    return false;
  };
  if (auto e = g->validate(); e.is_bad())
    return fail("validate", e);
  if (auto e = g->build_operation_graph(handle); e.is_bad())
    return fail("build_operation_graph", e);
  if (auto e = g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
      e.is_bad())
    return fail("heuristics", e);
  (void)g->check_support(handle); // unsupported plans fail to build below
  int64_t count = g->get_execution_plan_count();
  std::unordered_map<int64_t, void *> pack{
      {kQ, buf.q}, {kK, buf.k}, {kV, buf.v}, {kO, buf.o}, {kStats, buf.stats}};
  if (backward) {
    pack[kDout] = buf.dout;
    pack[kDq] = buf.dq;
    pack[kDk] = buf.dk;
    pack[kDv] = buf.dv;
  }
  int ran = 0;
  for (int64_t i = 0; i < count; ++i) {
    std::string name = "?";
    (void)g->get_plan_name_at_index(i, name);
    if (auto e = g->build_plan_at_index(i); e.is_bad()) {
      std::printf("%-6s layout %3u %-8s plan %2lld %-40s not built\n", s.name, layout, what,
                  (long long)i, name.c_str());
      continue;
    }
    int64_t ws = 0;
    (void)g->get_workspace_size_plan_at_index(i, ws);
    void *workspace = nullptr;
    if (ws > 0)
      CHECK_CUDA(cudaMalloc(&workspace, ws));
    if (backward) {
      CHECK_CUDA(cudaMemset(buf.dq, 0xff, buf.qBytes)); // NaN-poisoned outputs
      CHECK_CUDA(cudaMemset(buf.dk, 0xff, buf.kvBytes));
      CHECK_CUDA(cudaMemset(buf.dv, 0xff, buf.kvBytes));
    }
    bool ok = true;
    for (int w = 0; w < 3 && ok; ++w)
      ok = g->execute_plan_at_index(handle, pack, workspace, i).is_good();
    if (!ok) {
      std::printf("%-6s layout %3u %-8s plan %2lld %-40s does not run\n", s.name, layout, what,
                  (long long)i, name.c_str());
      if (workspace)
        CHECK_CUDA(cudaFree(workspace));
      continue;
    }
    CHECK_CUDA(cudaDeviceSynchronize());
    float median = medianEventMs(
        iters, [&] { (void)g->execute_plan_at_index(handle, pack, workspace, i); });
    std::string check;
    if (backward) {
      size_t nq = buf.qBytes / 2, nkv = buf.kvBytes / 2;
      if (firstIsReference && ran == 0) {
        CHECK_CUDA(cudaMemcpy(buf.dqRef, buf.dq, buf.qBytes, cudaMemcpyDeviceToDevice));
        CHECK_CUDA(cudaMemcpy(buf.dkRef, buf.dk, buf.kvBytes, cudaMemcpyDeviceToDevice));
        CHECK_CUDA(cudaMemcpy(buf.dvRef, buf.dv, buf.kvBytes, cudaMemcpyDeviceToDevice));
        check = "reference";
      } else {
        char text[96];
        std::snprintf(text, sizeof text, "vs ref dq %.1e dk %.1e dv %.1e",
                      maxRelDiff(buf.dq, buf.dqRef, nq), maxRelDiff(buf.dk, buf.dkRef, nkv),
                      maxRelDiff(buf.dv, buf.dvRef, nkv));
        check = text;
      }
    }
    std::printf("%-6s layout %3u %-8s plan %2lld %-40s ws %9lld  %.4f ms  %6.1f TFLOP/s  %s\n",
                s.name, layout, what, (long long)i, name.c_str(), (long long)ws, median,
                flops(s, backward) / median / 1e9, check.c_str());
    std::fflush(stdout);
    ++ran;
    if (workspace)
      CHECK_CUDA(cudaFree(workspace));
  }
  return ran > 0;
}

// The forward's O and statistics for the backward: the heuristic's plan.
void forward(cudnnHandle_t handle, const Shape &s, unsigned layout, Buffers &buf) {
  auto g = makeGraph(s, layout, false, false);
  if (g->build(handle, {fe::HeurMode_t::A}).is_bad()) {
    std::fprintf(stderr, "forward build failed for %s\n", s.name);
    std::exit(1);
  }
  int64_t ws = 0;
  (void)g->get_workspace_size(ws);
  void *workspace = nullptr;
  if (ws)
    CHECK_CUDA(cudaMalloc(&workspace, ws));
  std::unordered_map<int64_t, void *> pack{
      {kQ, buf.q}, {kK, buf.k}, {kV, buf.v}, {kO, buf.o}, {kStats, buf.stats}};
  if (g->execute(handle, pack, workspace).is_bad()) {
    std::fprintf(stderr, "forward failed for %s\n", s.name);
    std::exit(1);
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  if (workspace)
    CHECK_CUDA(cudaFree(workspace));
}

std::vector<__nv_bfloat16> readFile(const char *path, size_t n) {
  std::vector<__nv_bfloat16> host(n);
  FILE *f = std::fopen(path, "rb");
  bool ok = f && std::fread(host.data(), 2, n, f) == n;
  if (f)
    std::fclose(f);
  if (!ok) {
    std::fprintf(stderr, "cudnnplans: cannot read %zu bf16 values from %s\n", n, path);
    std::exit(2);
  }
  return host;
}

// [B, H, S, D] <-> [B, S, H, D] on the host.
void permuteHeads(std::vector<__nv_bfloat16> &x, const Shape &s, int64_t heads, bool toSeq) {
  std::vector<__nv_bfloat16> y(x.size());
  for (int64_t b = 0; b < s.b; ++b)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < s.s; ++i) {
        size_t headMajor = ((b * heads + h) * s.s + i) * s.d, seqMajor = ((b * s.s + i) * heads + h) * s.d;
        std::copy_n(&x[toSeq ? headMajor : seqMajor], s.d, &y[toSeq ? seqMajor : headMajor]);
      }
  x.swap(y);
}

std::shared_ptr<fe::graph::Graph> heuristicPlan(cudnnHandle_t handle, const Shape &s,
                                                unsigned layout, bool backward, void **workspace) {
  auto g = makeGraph(s, layout, backward, false);
  if (auto e = g->build(handle, {fe::HeurMode_t::A}); e.is_bad()) {
    std::fprintf(stderr, "cudnnplans: %s build failed: %s\n", backward ? "backward" : "forward",
                 e.get_message().c_str());
    std::exit(1);
  }
  int64_t ws = 0;
  (void)g->get_workspace_size(ws);
  *workspace = nullptr;
  if (ws)
    CHECK_CUDA(cudaMalloc(workspace, ws));
  return g;
}

template <typename F> float medianMs(F &&fn, int iters) {
  for (int w = 0; w < 3; ++w)
    fn();
  return medianEventMs(iters, fn);
}

int harness(cudnnHandle_t handle, char **argv) {
  Shape s{"harness", std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3]),
          std::atoi(argv[4]), std::atoi(argv[6])};
  bool causal = std::atoi(argv[7]) != 0;
  int iters = std::atoi(argv[13]);
  if (std::atoi(argv[5]) != s.s || !causal || s.kv <= 0 || s.h % s.kv) {
    std::fprintf(stderr, "cudnnplans: the harness runs causal shapes with SQ == L only\n");
    return 2;
  }
  unsigned layout = std::getenv("PLANS_LAYOUT") ? unsigned(std::atoi(std::getenv("PLANS_LAYOUT"))) : 0;
  size_t nq = size_t(s.b) * s.h * s.s * s.d, nk = size_t(s.b) * s.kv * s.s * s.d;
  std::vector<__nv_bfloat16> hq = readFile(argv[8], nq), hk = readFile(argv[9], nk),
                             hv = readFile(argv[10], nk), hdo = readFile(argv[11], nq);
  if (layout & bQ) permuteHeads(hq, s, s.h, true);
  if (layout & bK) permuteHeads(hk, s, s.kv, true);
  if (layout & bV) permuteHeads(hv, s, s.kv, true);
  if (layout & bDout) permuteHeads(hdo, s, s.h, true);
  Buffers buf{};
  void **qSide[] = {&buf.q, &buf.o, &buf.dout, &buf.dq};
  void **kvSide[] = {&buf.k, &buf.v, &buf.dk, &buf.dv};
  for (void **p : qSide)
    CHECK_CUDA(cudaMalloc(p, nq * 2));
  for (void **p : kvSide)
    CHECK_CUDA(cudaMalloc(p, nk * 2));
  CHECK_CUDA(cudaMalloc(&buf.stats, size_t(s.b) * s.h * s.s * 4));
  CHECK_CUDA(cudaMemcpy(buf.q, hq.data(), nq * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(buf.k, hk.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(buf.v, hv.data(), nk * 2, cudaMemcpyHostToDevice));
  CHECK_CUDA(cudaMemcpy(buf.dout, hdo.data(), nq * 2, cudaMemcpyHostToDevice));
  for (void **p : {&buf.o, &buf.dq}) // NaN where cuDNN writes: a skipped element shows
    CHECK_CUDA(cudaMemset(*p, 0xff, nq * 2));
  for (void **p : {&buf.dk, &buf.dv})
    CHECK_CUDA(cudaMemset(*p, 0xff, nk * 2));
  void *fws = nullptr, *bws = nullptr;
  auto fg = heuristicPlan(handle, s, layout, false, &fws);
  auto bg = heuristicPlan(handle, s, layout, true, &bws);
  std::unordered_map<int64_t, void *> fpack{
      {kQ, buf.q}, {kK, buf.k}, {kV, buf.v}, {kO, buf.o}, {kStats, buf.stats}};
  auto bpack = fpack;
  bpack[kDout] = buf.dout;
  bpack[kDq] = buf.dq;
  bpack[kDk] = buf.dk;
  bpack[kDv] = buf.dv;
  auto forward = [&] {
    if (fg->execute(handle, fpack, fws).is_bad()) {
      std::fprintf(stderr, "cudnnplans: forward failed\n");
      std::exit(1);
    }
  };
  auto backward = [&] {
    if (bg->execute(handle, bpack, bws).is_bad()) {
      std::fprintf(stderr, "cudnnplans: backward failed\n");
      std::exit(1);
    }
  };
  forward();
  backward();
  CHECK_CUDA(cudaDeviceSynchronize());
  std::string dir = argv[12];
  struct Out { const char *name; void *p; size_t n; int64_t heads; unsigned bit; };
  for (Out o : {Out{"o", buf.o, nq, s.h, bO}, Out{"dq", buf.dq, nq, s.h, bDq},
                Out{"dk", buf.dk, nk, s.kv, bDk}, Out{"dv", buf.dv, nk, s.kv, bDv}}) {
    std::vector<__nv_bfloat16> host(o.n);
    CHECK_CUDA(cudaMemcpy(host.data(), o.p, o.n * 2, cudaMemcpyDeviceToHost));
    if (layout & o.bit)
      permuteHeads(host, s, o.heads, false);
    std::string path = dir + "/" + o.name + ".bin";
    FILE *f = std::fopen(path.c_str(), "wb");
    bool ok = f && std::fwrite(host.data(), 2, o.n, f) == o.n;
    if (f)
      std::fclose(f);
    if (!ok) {
      std::fprintf(stderr, "cudnnplans: cannot write %s\n", path.c_str());
      return 2;
    }
  }
  if (iters > 0) {
    std::string plan = "?";
    (void)bg->get_plan_name(plan);
    std::printf("fwd %.4f ms bwd %.4f ms (cuDNN %zu, backward plan %s, layout %u)\n",
                medianMs(forward, iters), medianMs(backward, iters), cudnnGetVersion(),
                plan.c_str(), layout);
  } else {
    std::printf("fwd - ms bwd - ms\n");
  }
  return 0;
}
} // namespace

int main(int argc, char **argv) {
  const Shape shapes[] = {{"small", 8, 12, 12, 1024, 64},
                          {"1b", 4, 32, 8, 2048, 64},
                          {"8b", 2, 32, 8, 4096, 128}};
  const char *only = std::getenv("PLANS_ONLY"); // e.g. "1b,8b"
  int iters = std::getenv("PLANS_ITERS") ? std::atoi(std::getenv("PLANS_ITERS")) : 20;
  // Dense, and the 1b step's layout (v, o, dO, dV seq-major: bits 156).
  std::vector<unsigned> layouts = {0, bV | bO | bDout | bDv};
  cudnnHandle_t handle;
  if (cudnnCreate(&handle) != CUDNN_STATUS_SUCCESS) {
    std::fprintf(stderr, "cudnnCreate failed\n");
    return 1;
  }
  if (argc == 14) {
    int rc = harness(handle, argv);
    cudnnDestroy(handle);
    return rc;
  }
  if (argc != 1) {
    std::fprintf(stderr, "usage: cudnnplans  (every plan of the bench shapes), or\n"
                         "       cudnnplans B H KV SQ L D CAUSAL q.bin k.bin v.bin do.bin OUTDIR ITERS\n");
    return 2;
  }
  std::printf("cuDNN %zu, frontend %d\n", cudnnGetVersion(), CUDNN_FRONTEND_VERSION);
  for (const Shape &s : shapes) {
    if (only && !std::strstr(only, s.name))
      continue;
    Buffers buf{};
    buf.qBytes = size_t(s.b) * s.h * s.s * s.d * 2;
    buf.kvBytes = size_t(s.b) * s.kv * s.s * s.d * 2;
    void **qSide[] = {&buf.q, &buf.o, &buf.dout, &buf.dq, &buf.dqRef};
    void **kvSide[] = {&buf.k, &buf.v, &buf.dk, &buf.dv, &buf.dkRef, &buf.dvRef};
    for (void **p : qSide)
      CHECK_CUDA(cudaMalloc(p, buf.qBytes));
    for (void **p : kvSide)
      CHECK_CUDA(cudaMalloc(p, buf.kvBytes));
    CHECK_CUDA(cudaMalloc(&buf.stats, size_t(s.b) * s.h * s.s * 4));
    fillRandom<<<1024, 256>>>((__nv_bfloat16 *)buf.q, buf.qBytes / 2, 1);
    fillRandom<<<1024, 256>>>((__nv_bfloat16 *)buf.k, buf.kvBytes / 2, 2);
    fillRandom<<<1024, 256>>>((__nv_bfloat16 *)buf.v, buf.kvBytes / 2, 3);
    fillRandom<<<1024, 256>>>((__nv_bfloat16 *)buf.dout, buf.qBytes / 2, 4);
    CHECK_CUDA(cudaDeviceSynchronize());
    for (unsigned layout : layouts) {
      sweep(handle, s, layout, false, false, buf, iters, false);
      forward(handle, s, layout, buf);
      sweep(handle, s, layout, true, false, buf, iters, true);
      sweep(handle, s, layout, true, true, buf, iters, false);
    }
    for (void **p : qSide)
      CHECK_CUDA(cudaFree(*p));
    for (void **p : kvSide)
      CHECK_CUDA(cudaFree(*p));
    CHECK_CUDA(cudaFree(buf.stats));
  }
  cudnnDestroy(handle);
  return 0;
}
