//===- CudnnAttention.cpp - cuDNN's fused attention, loaded at run time ---===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Built with the cuDNN frontend headers (KILN_HAVE_CUDNN_FRONTEND) in their
// dynamic-loading mode: every cuDNN call goes through the library handle
// opened here, so kiln-run never links libcudnn. Without the headers, load()
// reports that this runtime was built without cuDNN.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/CudnnAttention.h"

#include "kiln/artifact/HopperAttention.h"

#include <cstdlib>
#include <dlfcn.h>
#include <vector>

using namespace kiln::runtime;
using kiln::artifact::DType;

std::string AttentionShape::describe() const {
  std::string s = std::string(backward ? "backward" : "forward") + " b" + std::to_string(batch) +
                  " h" + std::to_string(heads) + " kv" + std::to_string(kvHeads) + " s" +
                  std::to_string(seq);
  if (kvSeq != seq)
    s += " l" + std::to_string(kvSeq);
  s += " d" + std::to_string(headDim) + (causal ? " causal" : "");
  if (seqMajor) {
    s += " bshd";
    for (unsigned bit = 0; bit < 8; ++bit)
      if (seqMajor & (1u << bit))
        s += std::string(" ") + artifact::attentionRoleName(bit);
  }
  return s;
}

AttentionTensorLayout kiln::runtime::attentionTensorLayout(const AttentionShape &s, unsigned bit) {
  bool keySide = bit & (artifact::kSeqMajorK | artifact::kSeqMajorV | artifact::kSeqMajorDk |
                        artifact::kSeqMajorDv);
  int64_t heads = keySide ? s.kvHeads : s.heads, rows = keySide ? s.kvSeq : s.seq, d = s.headDim;
  AttentionTensorLayout t;
  t.dims = {s.batch, heads, rows, d};
  if (s.seqMajor & bit)
    t.strides = {rows * heads * d, d, heads * d, 1};
  else
    t.strides = {heads * rows * d, rows * d, d, 1};
  return t;
}

#ifdef KILN_HAVE_CUDNN_FRONTEND

#include <cudnn_frontend.h>

namespace cudnn_frontend {
// The frontend's dynamic-loading mode resolves every cuDNN symbol here.
void *cudnn_dlhandle = nullptr;
} // namespace cudnn_frontend

namespace fe = cudnn_frontend;

class CudnnAttention::Plan {
public:
  std::shared_ptr<fe::graph::Graph> graph;
  AttentionShape shape;
  int64_t workspace = 0;
};

namespace {
// Tensor uids of the variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDout, kDq, kDk, kDv };

// Dims and strides from attentionTensorLayout: cuDNN reads each tensor at
// its own layout.
std::shared_ptr<fe::graph::Tensor_attributes> tensor(fe::graph::Graph &graph, const char *name,
                                                     int64_t uid, const AttentionShape &s,
                                                     unsigned bit) {
  AttentionTensorLayout t = attentionTensorLayout(s, bit);
  return graph.tensor(
      fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(t.dims).set_stride(
          t.strides));
}

void setOutput(const std::shared_ptr<fe::graph::Tensor_attributes> &out, const char *name,
               int64_t uid, const AttentionShape &s, unsigned bit) {
  AttentionTensorLayout t = attentionTensorLayout(s, bit);
  out->set_output(true).set_name(name).set_uid(uid).set_dim(t.dims).set_stride(t.strides);
}

std::string dlopenReason() {
  const char *reason = ::dlerror();
  return reason ? reason : "dlopen failed";
}
} // namespace

CudnnAttention::~CudnnAttention() {
  if (handle) {
    using Destroy = int (*)(void *);
    if (auto destroy = reinterpret_cast<Destroy>(::dlsym(library, "cudnnDestroy")))
      destroy(handle);
  }
  // The library stays open: plans and the frontend hold its symbols.
}

Expected<std::unique_ptr<CudnnAttention>> CudnnAttention::load() {
  std::vector<std::string> candidates;
  if (const char *path = std::getenv("KILN_CUDNN_LIBRARY"); path && *path)
    candidates.push_back(path);
  candidates.push_back("libcudnn.so.9");
#ifdef KILN_CUDA_LIBRARY_DIR
  candidates.push_back(std::string(KILN_CUDA_LIBRARY_DIR) + "/libcudnn.so.9");
#endif
  void *library = nullptr;
  std::string loaded, tried;
  for (const std::string &candidate : candidates) {
    library = ::dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (library) {
      loaded = candidate;
      break;
    }
    tried += (tried.empty() ? "" : "; ") + dlopenReason();
  }
  if (!library)
    return Error{"cuDNN not found (" + tried +
                 "); set KILN_CUDNN_LIBRARY to libcudnn.so.9 to use cuDNN's attention"};
  using GetVersion = size_t (*)();
  auto getVersion = reinterpret_cast<GetVersion>(::dlsym(library, "cudnnGetVersion"));
  if (!getVersion)
    return Error{loaded + " does not export cudnnGetVersion; it is not a usable cuDNN"};
  size_t version = getVersion();
  if (version < 90000)
    return Error{loaded + " is cuDNN " + std::to_string(version) +
                 "; fused attention needs cuDNN 9 or newer"};
  fe::cudnn_dlhandle = library;

  std::unique_ptr<CudnnAttention> cudnn(new CudnnAttention());
  cudnn->library = library;
  using Create = int (*)(void **);
  auto create = reinterpret_cast<Create>(::dlsym(library, "cudnnCreate"));
  if (!create)
    return Error{loaded + " does not export cudnnCreate"};
  if (int status = create(&cudnn->handle); status != 0)
    return Error{loaded + ": cudnnCreate failed with status " + std::to_string(status)};
  cudnn->versionString = std::to_string(version / 10000) + "." +
                         std::to_string(version / 100 % 100) + "." + std::to_string(version % 100);
  cudnn->description = "cuDNN " + cudnn->versionString + " (" + loaded + ")";
  return cudnn;
}

Expected<std::shared_ptr<CudnnAttention::Plan>>
CudnnAttention::build(const AttentionShape &s) const {
  if (s.dtype != DType::BF16 && s.dtype != DType::F16)
    return Error{"cuDNN attention needs bf16 or f16, not " +
                 std::string(artifact::dtypeName(s.dtype))};
  if (s.headDim % 8 != 0 || s.headDim > 256)
    return Error{"cuDNN attention needs a head dim that is a multiple of 8 up to 256"};
  if (s.kvHeads <= 0 || s.heads % s.kvHeads != 0)
    return Error{"query heads must be a multiple of the kv heads"};
  auto plan = std::make_shared<Plan>();
  plan->shape = s;
  plan->graph = std::make_shared<fe::graph::Graph>();
  fe::graph::Graph &graph = *plan->graph;
  graph.set_io_data_type(s.dtype == DType::BF16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = tensor(graph, "Q", kQ, s, artifact::kSeqMajorQ);
  auto k = tensor(graph, "K", kK, s, artifact::kSeqMajorK);
  auto v = tensor(graph, "V", kV, s, artifact::kSeqMajorV);
  float scale = static_cast<float>(s.scale);
  try {
    if (!s.backward) {
      auto options = fe::graph::SDPA_attributes()
                         .set_name("attention")
                         .set_generate_stats(true)
                         .set_attn_scale(scale);
      if (s.causal)
        options.set_causal_mask(true);
      auto [o, stats] = graph.sdpa(q, k, v, options);
      setOutput(o, "O", kO, s, artifact::kSeqMajorO);
      stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT);
    } else {
      auto o = tensor(graph, "O", kO, s, artifact::kSeqMajorO);
      auto dout = tensor(graph, "dO", kDout, s, artifact::kSeqMajorDout);
      auto stats = graph.tensor(fe::graph::Tensor_attributes()
                                    .set_name("Stats")
                                    .set_uid(kStats)
                                    .set_dim({s.batch, s.heads, s.seq, 1})
                                    .set_stride({s.heads * s.seq, s.seq, 1, 1})
                                    .set_data_type(fe::DataType_t::FLOAT));
      auto options =
          fe::graph::SDPA_backward_attributes().set_name("attention_grad").set_attn_scale(scale);
      if (s.causal)
        options.set_causal_mask(true);
      auto [dq, dk, dv] = graph.sdpa_backward(q, k, v, o, dout, stats, options);
      setOutput(dq, "dQ", kDq, s, artifact::kSeqMajorDq);
      setOutput(dk, "dK", kDk, s, artifact::kSeqMajorDk);
      setOutput(dv, "dV", kDv, s, artifact::kSeqMajorDv);
    }
    auto h = static_cast<cudnnHandle_t>(handle);
    auto check = [&](fe::error_t e, const char *stage) -> Status {
      if (e.is_good())
        return Status::success();
      return Error{std::string("cuDNN ") + stage + " for attention " + s.describe() + ": " +
                   e.get_message()};
    };
    if (Status st = check(graph.validate(), "validate"); !st)
      return st.takeError();
    if (Status st = check(graph.build_operation_graph(h), "build_operation_graph"); !st)
      return st.takeError();
    if (Status st = check(graph.create_execution_plans({fe::HeurMode_t::A}), "heuristics"); !st)
      return st.takeError();
    if (Status st = check(graph.check_support(h), "check_support"); !st)
      return st.takeError();
    if (Status st = check(graph.build_plans(h), "build_plans"); !st)
      return st.takeError();
    if (Status st = check(graph.get_workspace_size(plan->workspace), "workspace"); !st)
      return st.takeError();
  } catch (const std::exception &e) {
    return Error{std::string("cuDNN attention ") + s.describe() + ": " + e.what()};
  }
  return plan;
}

int64_t CudnnAttention::workspaceBytes(const Plan &plan) { return plan.workspace; }

Status CudnnAttention::run(const Plan &plan, const AttentionPointers &p, CUdeviceptr workspace,
                           CUstream stream) const {
  auto h = static_cast<cudnnHandle_t>(handle);
  auto ptr = [](CUdeviceptr d) { return reinterpret_cast<void *>(d); };
  std::unordered_map<int64_t, void *> pack{
      {kQ, ptr(p.q)}, {kK, ptr(p.k)}, {kV, ptr(p.v)}, {kO, ptr(p.o)}, {kStats, ptr(p.stats)}};
  if (plan.shape.backward) {
    pack[kDout] = ptr(p.dout);
    pack[kDq] = ptr(p.dq);
    pack[kDk] = ptr(p.dk);
    pack[kDv] = ptr(p.dv);
  }
  try {
    if (cudnnStatus_t status = fe::detail::set_stream(h, reinterpret_cast<cudaStream_t>(stream));
        status != CUDNN_STATUS_SUCCESS)
      return Error{"cudnnSetStream failed with status " + std::to_string(int(status))};
    fe::error_t e = plan.graph->execute(h, pack, ptr(workspace));
    if (!e.is_good())
      return Error{"cuDNN attention " + plan.shape.describe() + ": " + e.get_message()};
  } catch (const std::exception &e) {
    return Error{"cuDNN attention " + plan.shape.describe() + ": " + e.what()};
  }
  return Status::success();
}

#else // !KILN_HAVE_CUDNN_FRONTEND

class CudnnAttention::Plan {};

CudnnAttention::~CudnnAttention() = default;

Expected<std::unique_ptr<CudnnAttention>> CudnnAttention::load() {
  return Error{"this kiln-run was built without the cuDNN frontend headers "
               "(configure runtime/ with -DKILN_CUDNN_FRONTEND_INCLUDE=DIR)"};
}

Expected<std::shared_ptr<CudnnAttention::Plan>>
CudnnAttention::build(const AttentionShape &) const {
  return Error{"built without cuDNN"};
}

int64_t CudnnAttention::workspaceBytes(const Plan &) { return 0; }

Status CudnnAttention::run(const Plan &, const AttentionPointers &, CUdeviceptr, CUstream) const {
  return Error{"built without cuDNN"};
}

#endif // KILN_HAVE_CUDNN_FRONTEND
