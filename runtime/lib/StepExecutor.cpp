//===- StepExecutor.cpp - Run a compiled step program on the GPU ----------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/StepExecutor.h"

#include "kiln/runtime/Communicator.h"
#include "kiln/runtime/CudnnAttention.h"
#include "kiln/runtime/MemoryPlanSection.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <set>

using namespace kiln::runtime;
using namespace kiln::artifact;

//===----------------------------------------------------------------------===//
// DeviceBuffer and element conversion
//===----------------------------------------------------------------------===//

Expected<DeviceBuffer> DeviceBuffer::allocate(const Device &device, size_t bytes) {
  DeviceBuffer buffer;
  buffer.driver = &device.getDriver();
  buffer.bytes = bytes;
  if (bytes == 0)
    return buffer;
  if (Status status = device.check(buffer.driver->cuMemAlloc_v2(&buffer.ptr, bytes), "cuMemAlloc");
      !status)
    return status.takeError();
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : driver(other.driver), ptr(other.ptr), bytes(other.bytes) {
  other.ptr = 0;
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    if (ptr)
      driver->cuMemFree_v2(ptr);
    driver = other.driver;
    ptr = other.ptr;
    bytes = other.bytes;
    other.ptr = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr)
    driver->cuMemFree_v2(ptr);
}

namespace {

bool isFloat(DType t) {
  return t == DType::F64 || t == DType::F32 || t == DType::BF16 || t == DType::F16;
}
bool isInteger(DType t) {
  return t == DType::I64 || t == DType::I32 || t == DType::U32 || t == DType::U16 ||
         t == DType::I16 || t == DType::U8 || t == DType::I8 || t == DType::BOOL ||
         t == DType::U64;
}

uint32_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float bitsFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t toBf16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffff) > 0x7f800000)
    return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
float fromF16(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0)
    return (sign ? -1.f : 1.f) * std::ldexp(static_cast<float>(mant), -24);
  if (exp == 31)
    return bitsFloat(sign | 0x7f800000u | (mant << 13));
  return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}
uint16_t toF16(float f) {
  // Round to nearest even through the magnitude's scaled integer value.
  uint32_t u = floatBits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000);
  float a = std::fabs(f);
  if (std::isnan(f))
    return sign | 0x7e00;
  if (a >= 65520.f)
    return sign | 0x7c00;
  if (a < 6.103515625e-05f) // subnormal: units of 2^-24
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.f));
  int e;
  float m = std::frexp(a, &e); // a = m * 2^e, m in [0.5, 1)
  float scaled = std::nearbyint(m * 2048.f); // 11 significant bits
  if (scaled >= 2048.f) {
    scaled /= 2;
    ++e;
  }
  uint32_t mant = static_cast<uint32_t>(scaled) - 1024;
  uint32_t exp = static_cast<uint32_t>(e - 1 + 15);
  if (exp >= 31)
    return sign | 0x7c00;
  return sign | static_cast<uint16_t>((exp << 10) | mant);
}

double readFloat(const unsigned char *p, DType t) {
  switch (t) {
  case DType::F64: {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  case DType::F32: {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  case DType::BF16: {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return bitsFloat(static_cast<uint32_t>(h) << 16);
  }
  default: {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return fromF16(h);
  }
  }
}
void writeFloat(unsigned char *p, DType t, double v) {
  switch (t) {
  case DType::F64:
    std::memcpy(p, &v, 8);
    break;
  case DType::F32: {
    float f = static_cast<float>(v);
    std::memcpy(p, &f, 4);
    break;
  }
  case DType::BF16: {
    uint16_t h = toBf16(static_cast<float>(v));
    std::memcpy(p, &h, 2);
    break;
  }
  default: {
    uint16_t h = toF16(static_cast<float>(v));
    std::memcpy(p, &h, 2);
  }
  }
}
int64_t readInt(const unsigned char *p, DType t) {
  switch (t) {
  case DType::I64:
  case DType::U64: {
    int64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  case DType::I32: {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case DType::U32: {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  case DType::I16: {
    int16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  case DType::U16: {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  case DType::I8:
    return static_cast<int8_t>(*p);
  default:
    return *p;
  }
}
void writeInt(unsigned char *p, DType t, int64_t v) {
  size_t size = dtypeSize(t);
  if (t == DType::BOOL)
    v = v != 0;
  std::memcpy(p, &v, size); // little-endian: the low bytes
}

} // namespace

Expected<std::string> kiln::runtime::convertElements(const void *data, DType from, DType to,
                                                     size_t count) {
  const auto *in = static_cast<const unsigned char *>(data);
  size_t inSize = dtypeSize(from), outSize = dtypeSize(to);
  if (from == to)
    return std::string(reinterpret_cast<const char *>(in), count * inSize);
  std::string out(count * outSize, '\0');
  auto *o = reinterpret_cast<unsigned char *>(out.data());
  if (isFloat(from) && isFloat(to)) {
    for (size_t i = 0; i < count; ++i)
      writeFloat(o + i * outSize, to, readFloat(in + i * inSize, from));
  } else if (isInteger(from) && isInteger(to)) {
    for (size_t i = 0; i < count; ++i)
      writeInt(o + i * outSize, to, readInt(in + i * inSize, from));
  } else if (isInteger(from) && isFloat(to)) {
    for (size_t i = 0; i < count; ++i)
      writeFloat(o + i * outSize, to, static_cast<double>(readInt(in + i * inSize, from)));
  } else {
    return Error{std::string("cannot convert ") + dtypeName(from) + " to " + dtypeName(to)};
  }
  return out;
}

//===----------------------------------------------------------------------===//
// ProgramRunner: one program at fixed sizes
//===----------------------------------------------------------------------===//

namespace kiln::runtime {

/// Memory a runner places its buffers in; zero pointers: the runner
/// allocates its own. Runners of one executor share one arena and one GEMM
/// workspace: they run one at a time on one stream.
struct SharedMemory {
  CUdeviceptr arena = 0;
  size_t arenaBytes = 0;
  CUdeviceptr workspace = 0;
  /// kiln_fill and kiln_copy (kernels/SupportKernels.cu); null: memset and
  /// memcpy nodes.
  CUfunction fill = nullptr, copy = nullptr;
  /// cuDNN's fused attention for the launches that allow it; null: the
  /// generated kernels.
  const CudnnAttention *cudnn = nullptr;
  /// The data-parallel communicator for all_reduce ops; null: a run of one
  /// (outputs are the inputs).
  Communicator *communicator = nullptr;
};

class ProgramRunner {
public:
  ~ProgramRunner();
  /// Resolves every op of \p program at \p sizes, its buffers at \p plan's
  /// offsets in \p memory's arena (or an arena of its own).
  static Expected<std::unique_ptr<ProgramRunner>>
  prepare(const StepProgram &program, const std::string &origin, const Device &device,
          const CublasLt &lt, cublasLtHandle_t handle,
          const std::map<std::string, const KernelModule *> &modules,
          std::map<std::string, NamedTensor> &store, const WeightLoader &loadWeight,
          const SymbolBindings &sizes, const ArenaPlan &plan, const SharedMemory &memory = {});

  /// Enqueues every op, then the copies of new params/state into place.
  Status record(CUstream stream) const;
  /// Runs every op like record(), with an event pair around each, and
  /// returns each op's device time (no graph: launch gaps are excluded).
  Expected<std::vector<ActionTime>> profile(CUstream stream) const;
  Status upload(int id, const std::string &bytes, CUstream stream) const;
  Expected<std::string> downloadBuffer(int id) const;

  const StepProgram &getProgram() const { return program; }
  size_t arenaBytes() const { return arenaSize; }
  /// The compiler's memory plan placed the arena (not a run-time plan).
  bool usedArtifactPlan = false;
  size_t launches = 0, gemms = 0;
  /// Attention launches run by cuDNN, and those left to the kernel.
  size_t cudnnAttention = 0, kernelAttention = 0;
  /// Why the first attention launch that cuDNN could not take stayed a kernel.
  std::string attentionNote;

private:
  struct Launch {
    std::string name;
    CUfunction function = nullptr;
    unsigned grid = 1, block = 1, shared = 0;
    std::vector<CUdeviceptr> pointers;
    std::vector<int64_t> symbols;
    std::vector<void *> params;
  };
  struct Gemm {
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t first = nullptr, second = nullptr, result = nullptr;
    cublasLtMatmulAlgo_t algo{};
    CUdeviceptr a = 0, b = 0, c = 0;
    std::string label; // "gemm MxNxK" for profiles
  };
  struct Fill {
    CUdeviceptr target = 0;
    size_t elements = 0, elementSize = 1;
    uint32_t pattern = 0;
  };
  struct Copy {
    CUdeviceptr source = 0, target = 0;
    size_t bytes = 0;
  };
  struct Attention {
    std::shared_ptr<CudnnAttention::Plan> plan;
    AttentionPointers pointers;
    std::string label;
  };
  struct AllReduce {
    int64_t bucket = 0;
    std::vector<Communicator::Item> items;
  };
  enum class Action { Launch, Gemm, Fill, Copy, Attention, AllReduce, AllReduceWait };

  ProgramRunner(const Device &device, const CublasLt &lt, StepProgram program)
      : device(&device), lt(&lt), program(std::move(program)) {}
  Status fail(const std::string &what) const { return Error{origin + ": " + what}; }
  Status recordAction(std::pair<Action, size_t> action, CUstream stream) const;
  Status recordResultCopies(CUstream stream) const;
  Status recordFill(const Fill &fill, CUstream stream) const;
  Status recordCopy(const Copy &copy, CUstream stream) const;
  /// An all_reduce or its wait (DataParallelOps.cpp).
  static Status prepareAllReduce(ProgramRunner &r, const ProgramOp &op);
  Status recordAllReduce(std::pair<Action, size_t> action, CUstream stream) const;
  std::string actionLabel(std::pair<Action, size_t> action) const;

  const Device *device;
  const CublasLt *lt;
  cublasLtHandle_t handle = nullptr;
  StepProgram program;
  std::string origin;
  std::vector<CUdeviceptr> pointers;
  std::vector<size_t> bytes;
  std::vector<DeviceBuffer> owned;
  DeviceBuffer ownArena, ownWorkspace;
  CUdeviceptr arena = 0, workspace = 0;
  CUfunction fillKernel = nullptr, copyKernel = nullptr;
  size_t arenaSize = 0;
  std::vector<std::pair<Action, size_t>> actions;
  std::vector<Launch> launchList;
  std::vector<Gemm> gemmList;
  std::vector<Fill> fillList;
  std::vector<Copy> copyList, resultCopies;
  std::vector<Attention> attentionList;
  std::vector<AllReduce> allReduceList;
  const CudnnAttention *cudnn = nullptr;
  Communicator *communicator = nullptr;
  DeviceBuffer attentionWorkspace;
};

} // namespace kiln::runtime

namespace {
// Shared with the compiler's plan (MemoryPlanSection.h).
constexpr size_t kWorkspaceBytes = kGemmWorkspaceBytes;

/// The shape of an attention launch at the run's sizes, from its buffers:
/// q and o [B, H, S, D], k and v [B, Hkv, L, D], gradients like their
/// operands, all of one dtype.
Expected<AttentionShape> attentionShape(const StepProgram &p, const AttentionRoles &a,
                                        const std::vector<std::vector<int64_t>> &shapes) {
  const std::vector<int64_t> &q = shapes[a.q], &k = shapes[a.k];
  if (q.size() != 4 || k.size() != 4)
    return Error{"attention operands are not rank 4"};
  AttentionShape s;
  s.backward = a.backward;
  s.dtype = p.buffers[a.q].dtype;
  s.batch = q[0];
  s.heads = q[1];
  s.seq = q[2];
  s.headDim = q[3];
  s.kvHeads = k[1];
  s.kvSeq = k[2];
  s.causal = a.causal;
  s.scale = a.scale;
  std::vector<int> likeQ = {a.o}, likeK = {a.v};
  if (a.backward) {
    likeQ.insert(likeQ.end(), {a.dout, a.dq});
    likeK.insert(likeK.end(), {a.dk, a.dv});
  }
  for (int id : likeQ)
    if (shapes[id] != q || p.buffers[id].dtype != s.dtype)
      return Error{"attention buffer " + std::to_string(id) + " does not match the query"};
  for (int id : likeK)
    if (shapes[id] != k || p.buffers[id].dtype != s.dtype)
      return Error{"attention buffer " + std::to_string(id) + " does not match the key"};
  if (k[0] != s.batch || k[3] != s.headDim || p.buffers[a.k].dtype != s.dtype)
    return Error{"attention key does not match the query"};
  return s;
}

cudaDataType_t cudaType(DType t) {
  return t == DType::BF16 ? CUDA_R_16BF : t == DType::F16 ? CUDA_R_16F
                                        : t == DType::F64 ? CUDA_R_64F
                                                          : CUDA_R_32F;
}
} // namespace

ProgramRunner::~ProgramRunner() {
  for (Gemm &g : gemmList) {
    for (cublasLtMatrixLayout_t layout : {g.first, g.second, g.result})
      if (layout)
        lt->cublasLtMatrixLayoutDestroy(layout);
    if (g.desc)
      lt->cublasLtMatmulDescDestroy(g.desc);
  }
}

Expected<std::unique_ptr<ProgramRunner>>
ProgramRunner::prepare(const StepProgram &source, const std::string &origin, const Device &device,
                       const CublasLt &lt, cublasLtHandle_t handle,
                       const std::map<std::string, const KernelModule *> &modules,
                       std::map<std::string, NamedTensor> &store, const WeightLoader &loadWeight,
                       const SymbolBindings &sizes, const ArenaPlan &plan,
                       const SharedMemory &memory) {
  std::unique_ptr<ProgramRunner> r(new ProgramRunner(device, lt, source));
  r->origin = origin;
  r->handle = handle;
  const StepProgram &p = r->program;
  const CudaDriver &driver = device.getDriver();
  size_t n = p.buffers.size();
  r->pointers.assign(n, 0);
  r->bytes.assign(n, 0);
  std::vector<std::vector<int64_t>> shapes(n);
  for (size_t id = 0; id < n; ++id) {
    Expected<int64_t> count = p.elementCount(static_cast<int>(id), sizes);
    if (!count)
      return Error{origin + ": buffer " + std::to_string(id) + ": " + count.getError()};
    r->bytes[id] = static_cast<size_t>(*count) * dtypeSize(p.buffers[id].dtype);
    for (const SizeExpr &d : p.buffers[id].shape)
      shapes[id].push_back(*d.evaluate(sizes));
  }

  const std::vector<size_t> &offsets = plan.offsets;
  r->arenaSize = plan.size;
  r->fillKernel = memory.fill;
  r->copyKernel = memory.copy;
  r->communicator = memory.communicator;
  if (memory.arena) {
    if (plan.size > memory.arenaBytes)
      return Error{origin + ": the arena plan at these sizes needs " +
                   std::to_string(plan.size) + " bytes; the run's arena holds " +
                   std::to_string(memory.arenaBytes)};
    r->arena = memory.arena;
  } else {
    Expected<DeviceBuffer> arena = DeviceBuffer::allocate(device, r->arenaSize);
    if (!arena)
      return Error{origin + ": arena of " + std::to_string(r->arenaSize) + " bytes (" +
                   formatGiB(r->arenaSize) + "): " + arena.getError()};
    r->ownArena = std::move(*arena);
    r->arena = r->ownArena.get();
  }

  // Arguments: named tensors for params/state, owned buffers for the rest.
  for (const ProgramBinding &arg : p.args) {
    int id = arg.buffer;
    if (arg.role == "param" || arg.role == "state") {
      auto it = store.find(arg.name);
      if (it == store.end())
        return Error{origin + ": no tensor for " + arg.role + " '" + arg.name + "'"};
      if (it->second.dtype != p.buffers[id].dtype ||
          static_cast<size_t>(it->second.count) * dtypeSize(it->second.dtype) != r->bytes[id])
        return Error{origin + ": " + arg.role + " '" + arg.name + "' is " +
                     dtypeName(it->second.dtype) + " with " + std::to_string(it->second.count) +
                     " elements; the program expects " + dtypeName(p.buffers[id].dtype) + " of " +
                     std::to_string(r->bytes[id]) + " bytes"};
      r->pointers[id] = it->second.memory.get();
    } else {
      Expected<DeviceBuffer> buffer = DeviceBuffer::allocate(device, std::max<size_t>(r->bytes[id], 1));
      if (!buffer)
        return Error{origin + ": " + buffer.getError()};
      r->pointers[id] = buffer->get();
      r->owned.push_back(std::move(*buffer));
    }
  }

  if (memory.workspace) {
    r->workspace = memory.workspace;
  } else {
    Expected<DeviceBuffer> workspace = DeviceBuffer::allocate(device, kWorkspaceBytes);
    if (!workspace)
      return Error{origin + ": GEMM workspace: " + workspace.getError()};
    r->ownWorkspace = std::move(*workspace);
    r->workspace = r->ownWorkspace.get();
  }

  // Attention launches cuDNN takes, decided before any op is resolved: the
  // fills they replace come before them. A backward runs on cuDNN only
  // after a forward on cuDNN wrote the row statistics it reads.
  r->cudnn = memory.cudnn;
  std::vector<std::shared_ptr<CudnnAttention::Plan>> cudnnPlan(p.ops.size());
  std::vector<bool> replaced(p.ops.size(), false);
  std::map<int, CUdeviceptr> statsOfOutput;
  std::vector<CUdeviceptr> statsOf(p.ops.size(), 0);
  int64_t attentionWorkspaceBytes = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const ProgramOp &op = p.ops[i];
    if (op.kind != ProgramOp::Kind::Launch || !op.attention)
      continue;
    Expected<AttentionShape> shape = attentionShape(p, *op.attention, shapes);
    Expected<std::shared_ptr<CudnnAttention::Plan>> plan =
        !memory.cudnn ? Expected<std::shared_ptr<CudnnAttention::Plan>>(Error{})
        : !shape      ? Expected<std::shared_ptr<CudnnAttention::Plan>>(shape.takeError())
                      : memory.cudnn->build(*shape);
    if (plan && op.attention->backward && !statsOfOutput.count(op.attention->o))
      plan = Error{"its forward did not run on cuDNN"};
    if (!plan) {
      ++r->kernelAttention;
      if (r->attentionNote.empty() && !plan.getError().empty())
        r->attentionNote = op.name + ": " + plan.getError();
      continue;
    }
    if (!op.attention->backward) {
      Expected<DeviceBuffer> stats = DeviceBuffer::allocate(
          device, static_cast<size_t>(shape->batch * shape->heads * shape->seq) * 4);
      if (!stats)
        return Error{origin + ": attention statistics: " + stats.getError()};
      statsOfOutput[op.attention->o] = stats->get();
      r->owned.push_back(std::move(*stats));
    }
    statsOf[i] = statsOfOutput[op.attention->o];
    attentionWorkspaceBytes =
        std::max(attentionWorkspaceBytes, CudnnAttention::workspaceBytes(**plan));
    cudnnPlan[i] = std::move(*plan);
    for (size_t skip : op.attention->replaces)
      replaced[skip] = true;
    ++r->cudnnAttention;
  }
  if (attentionWorkspaceBytes > 0) {
    Expected<DeviceBuffer> ws =
        DeviceBuffer::allocate(device, static_cast<size_t>(attentionWorkspaceBytes));
    if (!ws)
      return Error{origin + ": cuDNN attention workspace: " + ws.getError()};
    r->attentionWorkspace = std::move(*ws);
  }

  auto check = [&](CUresult result, const char *what) { return device.check(result, what); };
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const ProgramOp &op = p.ops[i];
    std::string where = "op " + std::to_string(i);
    if (replaced[i])
      continue;
    if (cudnnPlan[i]) {
      const AttentionRoles &a = *op.attention;
      Attention run;
      run.plan = cudnnPlan[i];
      auto at = [&](int id) { return id >= 0 ? r->pointers[id] : CUdeviceptr(0); };
      run.pointers = {at(a.q),    at(a.k),  at(a.v),  at(a.o), statsOf[i],
                      at(a.dout), at(a.dq), at(a.dk), at(a.dv)};
      Expected<AttentionShape> shape = attentionShape(p, a, shapes);
      run.label = "cudnn attention " + shape->describe();
      r->actions.push_back({Action::Attention, r->attentionList.size()});
      r->attentionList.push_back(std::move(run));
      continue;
    }
    switch (op.kind) {
    case ProgramOp::Kind::Alloc:
      r->pointers[op.result] = r->arena + offsets[op.result];
      break;
    case ProgramOp::Kind::View:
      if (r->bytes[op.result] > r->bytes[op.source])
        return Error{origin + ": " + where + ": view larger than its source"};
      r->pointers[op.result] = r->pointers[op.source];
      break;
    case ProgramOp::Kind::Weight: {
      Expected<NamedTensor *> weight =
          loadWeight(op.name, p.buffers[op.result].dtype, shapes[op.result]);
      if (!weight)
        return Error{origin + ": " + weight.getError()};
      if ((*weight)->dtype != p.buffers[op.result].dtype ||
          static_cast<size_t>((*weight)->count) * dtypeSize((*weight)->dtype) !=
              r->bytes[op.result])
        return Error{origin + ": weight '" + op.name + "' does not match its buffer's " +
                     dtypeName(p.buffers[op.result].dtype) + " of " +
                     std::to_string(r->bytes[op.result]) + " bytes"};
      r->pointers[op.result] = (*weight)->memory.get();
      break;
    }
    case ProgramOp::Kind::Constant: {
      size_t count = r->bytes[op.result] / dtypeSize(p.buffers[op.result].dtype);
      size_t elementSize = dtypeSize(p.buffers[op.result].dtype);
      std::string data = op.bytes;
      // A splat literal holds one element.
      if (data.size() == elementSize && count > 1) {
        data.clear();
        for (size_t e = 0; e < count; ++e)
          data += op.bytes;
      }
      if (data.size() != r->bytes[op.result])
        return Error{origin + ": " + where + ": constant has " + std::to_string(op.bytes.size()) +
                     " bytes for a buffer of " + std::to_string(r->bytes[op.result])};
      Expected<DeviceBuffer> buffer = DeviceBuffer::allocate(device, std::max<size_t>(data.size(), 1));
      if (!buffer)
        return Error{origin + ": " + buffer.getError()};
      if (!data.empty())
        if (Status s = check(driver.cuMemcpyHtoDAsync_v2(buffer->get(), data.data(),
                                                         data.size(), device.getStream()),
                             "cuMemcpyHtoDAsync");
            !s)
          return s.takeError();
      r->pointers[op.result] = buffer->get();
      r->owned.push_back(std::move(*buffer));
      break;
    }
    case ProgramOp::Kind::Fill: {
      DType t = p.buffers[op.target].dtype;
      Fill fill{r->pointers[op.target], r->bytes[op.target] / dtypeSize(t), dtypeSize(t), 0};
      unsigned char bits[8] = {};
      if (isFloat(t))
        writeFloat(bits, t, op.value);
      else
        writeInt(bits, t, static_cast<int64_t>(op.value));
      if (fill.elementSize == 8) {
        if (std::any_of(bits, bits + 8, [](unsigned char c) { return c != 0; }))
          return Error{origin + ": " + where + ": non-zero fill of 8-byte elements"};
        fill.elementSize = 1;
        fill.elements *= 8;
      } else {
        std::memcpy(&fill.pattern, bits, fill.elementSize);
      }
      r->actions.push_back({Action::Fill, r->fillList.size()});
      r->fillList.push_back(fill);
      break;
    }
    case ProgramOp::Kind::AllReduce:
    case ProgramOp::Kind::AllReduceWait:
      if (Status s = prepareAllReduce(*r, op); !s)
        return Error{origin + ": " + where + ": " + s.getError()};
      break;
    case ProgramOp::Kind::Copy:
      r->actions.push_back({Action::Copy, r->copyList.size()});
      r->copyList.push_back({r->pointers[op.source], r->pointers[op.target],
                             std::min(r->bytes[op.source], r->bytes[op.target])});
      break;
    case ProgramOp::Kind::Launch: {
      auto module = modules.find(op.module);
      if (module == modules.end())
        return Error{origin + ": " + where + ": no kernel module '" + op.module + "'"};
      Expected<CUfunction> function = module->second->getFunction(op.name);
      if (!function)
        return Error{origin + ": " + function.getError()};
      Launch launch;
      launch.name = op.name;
      launch.function = *function;
      Expected<int64_t> items = op.items->evaluate(sizes);
      Expected<int64_t> shared = op.shared->evaluate(sizes);
      if (!items || !shared)
        return Error{origin + ": " + where + ": " + (items ? shared.getError() : items.getError())};
      // Kernels loop over their items, so the grid may be capped.
      int64_t blocks = std::max<int64_t>(1, (*items + op.per - 1) / op.per);
      launch.grid = static_cast<unsigned>(std::min<int64_t>(blocks, int64_t(1) << 30));
      launch.block = static_cast<unsigned>(op.block);
      launch.shared = static_cast<unsigned>(*shared);
      if (*shared > 48 * 1024)
        if (Status s = check(driver.cuFuncSetAttribute(
                                 launch.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                 static_cast<int>(*shared)),
                             "cuFuncSetAttribute");
            !s)
          return Error{origin + ": kernel " + op.name + ": " + s.getError()};
      for (int id : op.args)
        launch.pointers.push_back(r->pointers[id]);
      for (const std::string &symbol : op.symbols) {
        auto value = sizes.find(symbol);
        if (value == sizes.end())
          return Error{origin + ": kernel " + op.name + " needs symbol '" + symbol + "'"};
        launch.symbols.push_back(value->second);
      }
      for (CUdeviceptr &ptr : launch.pointers)
        launch.params.push_back(&ptr);
      for (int64_t &value : launch.symbols)
        launch.params.push_back(&value);
      r->actions.push_back({Action::Launch, r->launchList.size()});
      r->launchList.push_back(std::move(launch));
      ++r->launches;
      break;
    }
    case ProgramOp::Kind::Gemm: {
      Expected<int64_t> m = op.m->evaluate(sizes), nn = op.n->evaluate(sizes),
                        k = op.k->evaluate(sizes), batch = op.batch->evaluate(sizes);
      int64_t strides[3];
      for (int s = 0; s < 3; ++s) {
        Expected<int64_t> v = op.strides[s].evaluate(sizes);
        if (!v)
          return Error{origin + ": " + where + ": " + v.getError()};
        strides[s] = *v;
      }
      if (!m || !nn || !k || !batch)
        return Error{origin + ": " + where + ": a GEMM size does not evaluate"};
      Gemm g;
      g.label = "gemm " + std::to_string(*m) + "x" + std::to_string(*nn) + "x" +
                std::to_string(*k) + (*batch > 1 ? " batch " + std::to_string(*batch) : "") +
                " " + dtypeName(p.buffers[op.c].dtype);
      g.a = r->pointers[op.a];
      g.b = r->pointers[op.b];
      g.c = r->pointers[op.c];
      cudaDataType_t ab = cudaType(p.buffers[op.a].dtype), ct = cudaType(p.buffers[op.c].dtype);
      auto ltCheck = [&](cublasStatus_t status, const char *what) -> Status {
        if (status == CUBLAS_STATUS_SUCCESS)
          return Status::success();
        return Error{origin + ": " + where + " (gemm m=" + std::to_string(*m) + " n=" +
                     std::to_string(*nn) + " k=" + std::to_string(*k) + "): " + what +
                     " failed: " + lt.describe(status)};
      };
      if (Status s = ltCheck(lt.cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                             "cublasLtMatmulDescCreate");
          !s)
        return s.takeError();
      // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T:
      // B goes first.
      cublasOperation_t opFirst = op.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
      cublasOperation_t opSecond = op.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
      lt.cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opFirst, sizeof(opFirst));
      lt.cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opSecond, sizeof(opSecond));
      if (op.epilogue != "none") {
        cublasLtEpilogue_t epilogue;
        if (op.epilogue == "bias")
          epilogue = CUBLASLT_EPILOGUE_BIAS;
        else if (op.epilogue == "bias_relu")
          epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
        else if (op.epilogue == "bias_gelu")
          epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
        else if (op.epilogue == "relu")
          epilogue = CUBLASLT_EPILOGUE_RELU;
        else if (op.epilogue == "gelu")
          epilogue = CUBLASLT_EPILOGUE_GELU;
        else
          return Error{origin + ": " + where + ": epilogue '" + op.epilogue + "' is not supported"};
        lt.cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                          sizeof(epilogue));
        if (op.bias >= 0) {
          void *bias = reinterpret_cast<void *>(r->pointers[op.bias]);
          lt.cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                            sizeof(bias));
        }
      }
      uint64_t M = *m, N = *nn, K = *k;
      if (Status s = ltCheck(op.transB ? lt.cublasLtMatrixLayoutCreate(&g.first, ab, K, N, K)
                                       : lt.cublasLtMatrixLayoutCreate(&g.first, ab, N, K, N),
                             "cublasLtMatrixLayoutCreate");
          !s)
        return s.takeError();
      if (Status s = ltCheck(op.transA ? lt.cublasLtMatrixLayoutCreate(&g.second, ab, M, K, M)
                                       : lt.cublasLtMatrixLayoutCreate(&g.second, ab, K, M, K),
                             "cublasLtMatrixLayoutCreate");
          !s)
        return s.takeError();
      if (Status s = ltCheck(lt.cublasLtMatrixLayoutCreate(&g.result, ct, N, M, N),
                             "cublasLtMatrixLayoutCreate");
          !s)
        return s.takeError();
      int32_t count = static_cast<int32_t>(*batch);
      int64_t layoutStrides[3] = {strides[1], strides[0], strides[2]};
      cublasLtMatrixLayout_t layouts[3] = {g.first, g.second, g.result};
      if (count > 1)
        for (int s = 0; s < 3; ++s) {
          lt.cublasLtMatrixLayoutSetAttribute(layouts[s], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                              &count, sizeof(count));
          lt.cublasLtMatrixLayoutSetAttribute(layouts[s],
                                              CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                              &layoutStrides[s], sizeof(layoutStrides[s]));
        }
      cublasLtMatmulPreference_t preference = nullptr;
      if (Status s = ltCheck(lt.cublasLtMatmulPreferenceCreate(&preference),
                             "cublasLtMatmulPreferenceCreate");
          !s)
        return s.takeError();
      uint64_t workspaceBytes = kWorkspaceBytes;
      lt.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                              &workspaceBytes, sizeof(workspaceBytes));
      cublasLtMatmulHeuristicResult_t heuristic{};
      int found = 0;
      cublasStatus_t status = lt.cublasLtMatmulAlgoGetHeuristic(
          handle, g.desc, g.first, g.second, g.result, g.result, preference, 1, &heuristic, &found);
      lt.cublasLtMatmulPreferenceDestroy(preference);
      if (Status s = ltCheck(status, "cublasLtMatmulAlgoGetHeuristic"); !s)
        return s.takeError();
      if (found == 0)
        return Error{origin + ": " + where + ": cuBLASLt has no algorithm for this GEMM"};
      g.algo = heuristic.algo;
      r->actions.push_back({Action::Gemm, r->gemmList.size()});
      r->gemmList.push_back(g);
      ++r->gemms;
      break;
    }
    }
  }
  // New parameters and state replace the old ones at the end of the step.
  for (const ProgramBinding &result : p.results) {
    if (result.role != "param" && result.role != "state")
      continue;
    auto it = store.find(result.name);
    if (it == store.end())
      continue; // The init program's results: the executor adopts them.
    CUdeviceptr target = it->second.memory.get();
    if (target != r->pointers[result.buffer])
      r->resultCopies.push_back({r->pointers[result.buffer], target, r->bytes[result.buffer]});
  }
  return r;
}

Status ProgramRunner::record(CUstream stream) const {
  for (std::pair<Action, size_t> action : actions)
    if (Status s = recordAction(action, stream); !s)
      return s;
  return recordResultCopies(stream);
}

Status ProgramRunner::recordAction(std::pair<Action, size_t> entry, CUstream stream) const {
  const CudaDriver &driver = device->getDriver();
  auto check = [&](CUresult result, const char *what) { return device->check(result, what); };
  auto [action, index] = entry;
  {
    switch (action) {
    case Action::Launch: {
      const Launch &l = launchList[index];
      if (Status s = check(driver.cuLaunchKernel(l.function, l.grid, 1, 1, l.block, 1, 1, l.shared,
                                                 stream, const_cast<void **>(l.params.data()),
                                                 nullptr),
                           "cuLaunchKernel");
          !s)
        return s;
      break;
    }
    case Action::Gemm: {
      const Gemm &g = gemmList[index];
      float alpha = 1.f, beta = 0.f;
      cublasStatus_t status = lt->cublasLtMatmul(
          handle, g.desc, &alpha, reinterpret_cast<void *>(g.b), g.first,
          reinterpret_cast<void *>(g.a), g.second, &beta, reinterpret_cast<void *>(g.c), g.result,
          reinterpret_cast<void *>(g.c), g.result, &g.algo, reinterpret_cast<void *>(workspace),
          kWorkspaceBytes, stream);
      if (status != CUBLAS_STATUS_SUCCESS)
        return fail("cublasLtMatmul failed: " + lt->describe(status));
      break;
    }
    case Action::Fill:
      return recordFill(fillList[index], stream);
    case Action::Copy:
      return recordCopy(copyList[index], stream);
    case Action::Attention: {
      const Attention &a = attentionList[index];
      if (Status s = cudnn->run(*a.plan, a.pointers, attentionWorkspace.get(), stream); !s)
        return fail(s.getError());
      break;
    }
    case Action::AllReduce:
    case Action::AllReduceWait:
      return recordAllReduce(entry, stream);
    }
  }
  return Status::success();
}

Status ProgramRunner::recordResultCopies(CUstream stream) const {
  for (const Copy &c : resultCopies)
    if (Status s = recordCopy(c, stream); !s)
      return s;
  return Status::success();
}

namespace {
/// Blocks of 256 threads for a grid-stride loop over \p bytes (16 per
/// thread per pass), at most 4096.
unsigned supportGrid(uint64_t bytes) {
  return static_cast<unsigned>(std::min<uint64_t>(4096, std::max<uint64_t>(1, (bytes + 4095) / 4096)));
}
} // namespace

Status ProgramRunner::recordFill(const Fill &f, CUstream stream) const {
  const CudaDriver &driver = device->getDriver();
  if (fillKernel) {
    CUdeviceptr target = f.target;
    uint32_t pattern = f.elementSize == 1   ? (f.pattern & 0xff) * 0x01010101u
                       : f.elementSize == 2 ? (f.pattern & 0xffff) * 0x00010001u
                                            : f.pattern;
    uint64_t bytes = f.elements * f.elementSize;
    void *args[] = {&target, &pattern, &bytes};
    return device->check(driver.cuLaunchKernel(fillKernel, supportGrid(bytes), 1, 1, 256, 1, 1, 0,
                                               stream, args, nullptr),
                         "cuLaunchKernel (kiln_fill)");
  }
  CUresult result =
      f.elementSize == 1
          ? driver.cuMemsetD8Async(f.target, static_cast<unsigned char>(f.pattern), f.elements, stream)
      : f.elementSize == 2
          ? driver.cuMemsetD16Async(f.target, static_cast<unsigned short>(f.pattern), f.elements,
                                    stream)
          : driver.cuMemsetD32Async(f.target, f.pattern, f.elements, stream);
  return device->check(result, "cuMemsetAsync");
}

Status ProgramRunner::recordCopy(const Copy &c, CUstream stream) const {
  if (!c.bytes)
    return Status::success();
  const CudaDriver &driver = device->getDriver();
  if (copyKernel) {
    CUdeviceptr target = c.target, source = c.source;
    uint64_t bytes = c.bytes;
    void *args[] = {&target, &source, &bytes};
    return device->check(driver.cuLaunchKernel(copyKernel, supportGrid(bytes), 1, 1, 256, 1, 1, 0,
                                               stream, args, nullptr),
                         "cuLaunchKernel (kiln_copy)");
  }
  return device->check(driver.cuMemcpyDtoDAsync_v2(c.target, c.source, c.bytes, stream),
                       "cuMemcpyDtoDAsync");
}

std::string ProgramRunner::actionLabel(std::pair<Action, size_t> entry) const {
  switch (entry.first) {
  case Action::Launch:
    return launchList[entry.second].name;
  case Action::Gemm:
    return gemmList[entry.second].label;
  case Action::Fill:
    return "memset";
  case Action::Copy:
    return "memcpy";
  case Action::Attention:
    return attentionList[entry.second].label;
  case Action::AllReduce:
    return "nccl all_reduce bucket " + std::to_string(allReduceList[entry.second].bucket) +
           " (enqueue)";
  case Action::AllReduceWait:
    return "nccl all_reduce wait bucket " + std::to_string(entry.second);
  }
  return "?";
}

// Data parallelism (docs/runtime.md): with a communicator an all_reduce is
// the bucket's NCCL calls on the communication stream and its wait an
// event wait; without one (a run of one) the outputs are the inputs: a
// copy where the reduction is out of place, else nothing.
Status ProgramRunner::prepareAllReduce(ProgramRunner &r, const ProgramOp &op) {
  const StepProgram &p = r.program;
  if (op.kind == ProgramOp::Kind::AllReduceWait) {
    if (r.communicator)
      r.actions.push_back({Action::AllReduceWait, static_cast<size_t>(op.bucket)});
    return Status::success();
  }
  if (!r.communicator) {
    for (size_t i = 0; i < op.ins.size(); ++i)
      if (op.ins[i] != op.outs[i]) {
        r.actions.push_back({Action::Copy, r.copyList.size()});
        r.copyList.push_back({r.pointers[op.ins[i]], r.pointers[op.outs[i]],
                              r.bytes[op.ins[i]]});
      }
    return Status::success();
  }
  if (Status s = r.communicator->prepareBucket(op.bucket); !s)
    return s;
  AllReduce reduce;
  reduce.bucket = op.bucket;
  for (size_t i = 0; i < op.ins.size(); ++i) {
    DType dtype = p.buffers[op.ins[i]].dtype;
    std::optional<nccl::DataType> type = nccl::dataTypeOf(dtype);
    if (!type)
      return Error{std::string("NCCL cannot average ") + dtypeName(dtype)};
    reduce.items.push_back({r.pointers[op.ins[i]], r.pointers[op.outs[i]],
                            r.bytes[op.ins[i]] / dtypeSize(dtype), *type});
  }
  r.actions.push_back({Action::AllReduce, r.allReduceList.size()});
  r.allReduceList.push_back(std::move(reduce));
  return Status::success();
}

Status ProgramRunner::recordAllReduce(std::pair<Action, size_t> entry, CUstream stream) const {
  if (entry.first == Action::AllReduceWait)
    return communicator->wait(static_cast<int64_t>(entry.second), stream);
  const AllReduce &reduce = allReduceList[entry.second];
  if (Status s = communicator->allReduce(reduce.bucket, reduce.items, stream); !s)
    return fail(s.getError());
  return Status::success();
}

Expected<std::vector<ActionTime>> ProgramRunner::profile(CUstream stream) const {
  const CudaDriver &driver = device->getDriver();
  auto check = [&](CUresult result, const char *what) { return device->check(result, what); };
  // One event before each action and one at the end; destroyed on return.
  std::vector<CUevent> events(actions.size() + 2, nullptr);
  struct Destroy {
    const CudaDriver &driver;
    std::vector<CUevent> &events;
    ~Destroy() {
      for (CUevent e : events)
        if (e)
          driver.cuEventDestroy_v2(e);
    }
  } destroy{driver, events};
  for (CUevent &e : events)
    if (Status s = check(driver.cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate"); !s)
      return s.takeError();
  for (size_t i = 0; i < actions.size(); ++i) {
    if (Status s = check(driver.cuEventRecord(events[i], stream), "cuEventRecord"); !s)
      return s.takeError();
    if (Status s = recordAction(actions[i], stream); !s)
      return s.takeError();
  }
  if (Status s = check(driver.cuEventRecord(events[actions.size()], stream), "cuEventRecord"); !s)
    return s.takeError();
  if (Status s = recordResultCopies(stream); !s)
    return s.takeError();
  if (Status s = check(driver.cuEventRecord(events.back(), stream), "cuEventRecord"); !s)
    return s.takeError();
  if (Status s = check(driver.cuEventSynchronize(events.back()), "cuEventSynchronize"); !s)
    return s.takeError();
  std::vector<ActionTime> times;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    float ms = 0;
    if (Status s = check(driver.cuEventElapsedTime_v2(&ms, events[i], events[i + 1]),
                         "cuEventElapsedTime");
        !s)
      return s.takeError();
    times.push_back({i < actions.size() ? actionLabel(actions[i]) : "result copies", ms});
  }
  return times;
}

Status ProgramRunner::upload(int id, const std::string &data, CUstream stream) const {
  if (data.size() != bytes[id])
    return fail("buffer " + std::to_string(id) + " takes " + std::to_string(bytes[id]) +
                " bytes, got " + std::to_string(data.size()));
  if (data.empty())
    return Status::success();
  return device->check(
      device->getDriver().cuMemcpyHtoDAsync_v2(pointers[id], data.data(), data.size(), stream),
      "cuMemcpyHtoDAsync");
}

Expected<std::string> ProgramRunner::downloadBuffer(int id) const {
  std::string data(bytes[id], '\0');
  if (Status s = device->synchronize(); !s)
    return s.takeError();
  if (!data.empty())
    if (Status s = device->check(
            device->getDriver().cuMemcpyDtoH_v2(data.data(), pointers[id], data.size()),
            "cuMemcpyDtoH");
        !s)
      return s.takeError();
  return data;
}

//===----------------------------------------------------------------------===//
// StepExecutor
//===----------------------------------------------------------------------===//

namespace {
/// "batch=4,seq=512".
std::string shapeKey(const SymbolBindings &sizes) {
  std::string key;
  for (const auto &[symbol, value] : sizes)
    key += (key.empty() ? "" : ",") + symbol + "=" + std::to_string(value);
  return key;
}

Expected<NamedTensor> makeTensor(const Device &device, DType dtype, std::vector<int64_t> shape) {
  NamedTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.count = 1;
  for (int64_t d : t.shape)
    t.count *= d;
  Expected<DeviceBuffer> memory =
      DeviceBuffer::allocate(device, std::max<size_t>(1, t.count * dtypeSize(dtype)));
  if (!memory)
    return memory.takeError();
  t.memory = std::move(*memory);
  return t;
}

// Every transfer goes through the executor's stream: the synchronous driver
// calls use the legacy stream, which a non-blocking stream does not wait for.
Status uploadTo(const Device &device, NamedTensor &t, const std::string &bytes) {
  if (bytes.empty())
    return Status::success();
  if (Status s = device.check(device.getDriver().cuMemcpyHtoDAsync_v2(
                                  t.memory.get(), bytes.data(), bytes.size(), device.getStream()),
                              "cuMemcpyHtoDAsync");
      !s)
    return s;
  return device.synchronize();
}

std::string scalarBytes(DType dtype, double value) {
  unsigned char bits[8] = {};
  if (isFloat(dtype))
    writeFloat(bits, dtype, value);
  else
    writeInt(bits, dtype, static_cast<int64_t>(value));
  return std::string(reinterpret_cast<char *>(bits), dtypeSize(dtype));
}
} // namespace

StepExecutor::~StepExecutor() {
  graphs.reset();
  shapes.clear();
  if (handle)
    lt->cublasLtDestroy(handle);
}

Expected<std::unique_ptr<StepExecutor>>
StepExecutor::create(const StepArtifact &artifact, const Device &device, const CublasLt &lt,
                     const std::vector<SafetensorsFile> *weights, const Options &options) {
  std::unique_ptr<StepExecutor> x(new StepExecutor());
  x->device = &device;
  x->options = options;
  const Artifact &container = artifact.getContainer();
  x->artifact = &artifact;
  if (options.shapes.empty())
    return Error{"no shape to run the step at"};
  const SymbolBindings &firstSizes = options.shapes.front();
  if (!container.find("step"))
    return Error{"the artifact has no 'step' section (compile it with kiln compile --emit=artifact)"};
  std::string mainSection;
  Expected<const StepProgram *> mainProgram = x->programFor({}, mainSection);
  if (!mainProgram)
    return mainProgram.takeError();
  const StepProgram *program = *mainProgram;
  x->defaultLr = program->defaultLr;
  // Decoded and validated with the artifact (StepArtifact::decode).
  std::optional<StepProgram> init;
  if (const StepProgram *decoded = artifact.getProgram("init"))
    init = *decoded;

  // Kernel modules: the image for this device of every module.
  const DeviceInfo &info = device.getInfo();
  std::map<std::string, const KernelModule *> modules;
  x->modules.reserve(artifact.getKernels().size() + 1); // + the support kernels: no reallocation
  for (const auto &kernel : artifact.getKernels()) {
    Expected<KernelImageChoice> image =
        artifact.selectImage(kernel.first, info.computeCapabilityMajor, info.computeCapabilityMinor);
    if (!image)
      return image.takeError();
    Expected<KernelModule> module = KernelModule::load(device, container.contents(image->section),
                                                       image->needsJit, image->section);
    if (!module)
      return module.takeError();
    x->modules.push_back(std::move(*module));
    modules[kernel.first] = &x->modules.back();
  }
  x->moduleIndex = modules;
  // The runtime's own fill and copy kernels: graph nodes a new shape can
  // patch (memset nodes may refuse a new extent).
  Expected<KernelModule> supportModule = loadSupportKernels(device);
  if (!supportModule)
    return supportModule.takeError();
  x->modules.push_back(std::move(*supportModule));
  Expected<CUfunction> fill = x->modules.back().getFunction("kiln_fill");
  Expected<CUfunction> copy = x->modules.back().getFunction("kiln_copy");
  if (!fill || !copy)
    return (fill ? copy.takeError() : fill.takeError());
  x->support = {*fill, *copy};

  // cuDNN, when the step has attention it may run.
  bool hasAttention = false;
  for (const ProgramOp &op : program->ops)
    hasAttention |= op.kind == ProgramOp::Kind::Launch && op.attention.has_value();
  if (hasAttention && options.attention != Options::Attention::Kernels) {
    Expected<std::unique_ptr<CudnnAttention>> cudnn = CudnnAttention::load();
    if (cudnn)
      x->cudnn = std::move(*cudnn);
    else if (options.attention == Options::Attention::Cudnn)
      return Error{"--attention cudnn: " + cudnn.getError()};
    else
      x->cudnnNote = cudnn.getError();
  } else if (hasAttention) {
    x->cudnnNote = "--attention kernels";
  }

  // Named tensors from the weights file: by the artifact's parameter list.
  std::map<std::string, const ParamSpec *> specs;
  for (const ParamSpec &param : artifact.getParams())
    specs[param.name] = &param;
  // --init random: a splitmix64 stream per tensor (seeded by the name), so
  // a tensor's values do not depend on load order.
  auto randomTensor = [&](const std::string &name, DType dtype,
                          const std::vector<int64_t> &shape) -> Expected<NamedTensor *> {
    Expected<NamedTensor> tensor = makeTensor(device, dtype, shape);
    if (!tensor)
      return tensor.takeError();
    uint64_t state = *options.randomInitSeed ^ 0x9E3779B97F4A7C15ull;
    for (char c : name)
      state = (state ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
    std::vector<float> values(static_cast<size_t>(tensor->count));
    bool isNorm = name.find("norm") != std::string::npos;
    for (float &v : values) {
      if (shape.size() < 2) {
        v = isNorm ? 1.0f : 0.0f;
        continue;
      }
      state += 0x9E3779B97F4A7C15ull;
      uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      float unit = static_cast<float>(z >> 40) * (1.0f / 16777216.0f); // [0, 1)
      v = (2.0f * unit - 1.0f) * 0.034641016f; // std 0.02
    }
    Expected<std::string> bytes = convertElements(values.data(), DType::F32, dtype, tensor->count);
    if (!bytes)
      return Error{"--init random: '" + name + "': " + bytes.getError()};
    if (Status s = uploadTo(device, *tensor, *bytes); !s)
      return s.takeError();
    return &(x->store[name] = std::move(*tensor));
  };
  auto loadNamed = [&](const std::string &name, DType dtype,
                       const std::vector<int64_t> &shape) -> Expected<NamedTensor *> {
    auto existing = x->store.find(name);
    if (existing != x->store.end())
      return &existing->second;
    auto spec = specs.find(name);
    // The model file's own small values (RoPE frequencies, norm weights),
    // when the weights lack the tensor: never random.
    auto inlineValue = [&]() -> Expected<NamedTensor *> {
      Expected<NamedTensor> tensor = makeTensor(device, dtype, shape);
      if (!tensor)
        return tensor.takeError();
      Expected<std::string> bytes = convertElements(
          spec->second->value.data(), spec->second->dtype, dtype, tensor->count);
      if (!bytes || bytes->size() != tensor->count * dtypeSize(dtype))
        return Error{"artifact value of '" + name + "' does not fit its buffer"};
      if (Status s = uploadTo(device, *tensor, *bytes); !s)
        return s.takeError();
      return &(x->store[name] = std::move(*tensor));
    };
    bool hasValue = spec != specs.end() && !spec->second->value.empty();
    if (!weights && options.randomInitSeed)
      return hasValue ? inlineValue() : randomTensor(name, dtype, shape);
    if (!weights || spec == specs.end())
      return Error{"no weights for '" + name + "'" +
                   (weights ? " (not in the artifact's params)" : " (no --weights)")};
    Expected<WeightMatch> match = artifact.matchWeight(*spec->second, *weights);
    if (!match)
      return match.takeError();
    if (!match->tensor && hasValue)
      return inlineValue();
    if (!match->tensor)
      return Error{weights->front().getPath() + ": missing weight '" + spec->second->source + "'"};
    const TensorInfo &info = *match->tensor;
    const SafetensorsFile &file = *match->file;
    const unsigned char *data = file.data(info);
    std::string transposed;
    if (match->transpose) {
      size_t rows = info.shape[0], cols = info.shape[1], size = dtypeSize(info.dtype);
      transposed.resize(rows * cols * size);
      for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < cols; ++j)
          std::memcpy(&transposed[(j * rows + i) * size], data + (i * cols + j) * size, size);
      data = reinterpret_cast<const unsigned char *>(transposed.data());
    }
    Expected<NamedTensor> tensor = makeTensor(device, dtype, shape);
    if (!tensor)
      return tensor.takeError();
    if (static_cast<int64_t>(info.getElementCount()) != tensor->count)
      return Error{file.getPath() + ": weight '" + info.name + "' has " +
                   std::to_string(info.getElementCount()) + " elements; '" + name + "' needs " +
                   std::to_string(tensor->count)};
    Expected<std::string> bytes = convertElements(data, info.dtype, dtype, tensor->count);
    if (!bytes)
      return Error{file.getPath() + ": weight '" + info.name + "': " + bytes.getError()};
    if (Status s = uploadTo(device, *tensor, *bytes); !s)
      return s.takeError();
    return &(x->store[name] = std::move(*tensor));
  };

  cublasLtHandle_t handle = nullptr;
  if (cublasStatus_t status = lt.cublasLtCreate(&handle); status != CUBLAS_STATUS_SUCCESS)
    return Error{"cublasLtCreate failed: " + lt.describe(status)};
  x->lt = &lt;
  x->handle = handle;

  // Parameters the init program does not make come from the weights.
  std::set<std::string> fromInit;
  if (init)
    for (const ProgramBinding &result : init->results)
      if (result.role == "param")
        fromInit.insert(result.name);
  for (const ProgramBinding &arg : program->args) {
    const ProgramBuffer &buffer = program->buffers[arg.buffer];
    std::vector<int64_t> shape;
    for (const SizeExpr &d : buffer.shape) {
      Expected<int64_t> v = d.evaluate(firstSizes);
      if (!v)
        return v.takeError();
      shape.push_back(*v);
    }
    if (arg.role == "param") {
      x->paramNames.push_back(arg.name);
      if (!fromInit.count(arg.name))
        if (Expected<NamedTensor *> t = loadNamed(arg.name, buffer.dtype, shape); !t)
          return t.takeError();
    } else if (arg.role == "state") {
      x->stateNames.push_back(arg.name);
      Expected<NamedTensor> t = makeTensor(device, buffer.dtype, shape);
      if (!t)
        return t.takeError();
      if (Status s = device.check(device.getDriver().cuMemsetD8Async(
                                      t->memory.get(), 0, t->count * dtypeSize(t->dtype),
                                      device.getStream()),
                                  "cuMemsetD8Async");
          !s)
        return s.takeError();
      x->store[arg.name] = std::move(*t);
    }
  }

  // The init program, once: its results become named tensors.
  if (init) {
    Expected<ArenaPlan> plan = init->planArena(firstSizes, kArenaAlignment);
    if (!plan)
      return Error{"init program: " + plan.getError()};
    Expected<std::unique_ptr<ProgramRunner>> runner = ProgramRunner::prepare(
        *init, "init program", device, lt, handle, modules, x->store, loadNamed, firstSizes,
        *plan);
    if (!runner)
      return runner.takeError();
    for (const ProgramBinding &arg : init->args) {
      if (arg.role != "rng_seed")
        return Error{"init program: argument role '" + arg.role + "' is not supported"};
      if (Status s = (*runner)->upload(arg.buffer,
                                       scalarBytes(init->buffers[arg.buffer].dtype,
                                                   static_cast<double>(options.seed)),
                                       device.getStream());
          !s)
        return s.takeError();
    }
    if (Status s = (*runner)->record(device.getStream()); !s)
      return s.takeError();
    for (const ProgramBinding &result : init->results) {
      if (result.role != "param")
        continue;
      Expected<std::string> bytes = (*runner)->downloadBuffer(result.buffer);
      if (!bytes)
        return bytes.takeError();
      const ProgramBuffer &buffer = init->buffers[result.buffer];
      std::vector<int64_t> shape;
      for (const SizeExpr &d : buffer.shape)
        shape.push_back(*d.evaluate(firstSizes));
      Expected<NamedTensor> t = makeTensor(device, buffer.dtype, shape);
      if (!t)
        return t.takeError();
      if (Status s = uploadTo(device, *t, *bytes); !s)
        return s.takeError();
      x->store[result.name] = std::move(*t);
    }
    if (Status s = device.synchronize(); !s)
      return s.takeError();
    // What only the init program read (the bf16 weights NF4 codes are made
    // from) is freed: QLoRA must not keep the weights it quantized.
    std::set<std::string> needed;
    std::vector<const StepProgram *> programs = {program};
    for (const BucketSpec &bucket : artifact.getBuckets())
      if (const StepProgram *p = artifact.getProgram(bucket.section))
        programs.push_back(p);
    for (const StepProgram *p : programs) {
      for (const ProgramBinding &arg : p->args)
        needed.insert(arg.name);
      for (const ProgramOp &op : p->ops)
        if (op.kind == ProgramOp::Kind::Weight)
          needed.insert(op.name);
    }
    for (auto it = x->store.begin(); it != x->store.end();)
      it = needed.count(it->first) ? std::next(it) : x->store.erase(it);
  }

  // One arena for every shape of the run: the largest plan.
  size_t arenaBytes = 0;
  for (const SymbolBindings &sizes : options.shapes) {
    std::string note; // printed when the shape is prepared
    Expected<ArenaPlan> plan = x->planFor(sizes, note);
    if (!plan)
      return plan.takeError();
    arenaBytes = std::max(arenaBytes, plan->size);
  }
  Expected<DeviceBuffer> arena = DeviceBuffer::allocate(device, arenaBytes);
  if (!arena)
    return Error{"step program: arena of " + std::to_string(arenaBytes) + " bytes (" +
                 formatGiB(arenaBytes) + "): " + arena.getError()};
  x->arena = std::move(*arena);
  Expected<DeviceBuffer> workspace = DeviceBuffer::allocate(device, kWorkspaceBytes);
  if (!workspace)
    return Error{"step program: GEMM workspace: " + workspace.getError()};
  x->workspace = std::move(*workspace);
  // Each shape's program, resolved; the first loads the frozen weights its
  // `weight` ops name.
  for (const SymbolBindings &sizes : options.shapes) {
    Expected<Shape *> shape = x->prepareShape(sizes, loadNamed);
    if (!shape)
      return shape.takeError();
  }
  x->current = &x->shapes.at(shapeKey(firstSizes));
  if (options.useGraphs)
    x->graphs = std::make_unique<GraphCache>(device, options.graphsPerProgram);
  if (Status s = device.synchronize(); !s)
    return s.takeError();
  return x;
}

Expected<const StepProgram *> StepExecutor::programFor(const SymbolBindings &sizes,
                                                       std::string &section) {
  const BucketSpec *bucket = sizes.empty() ? nullptr : artifact->selectBucket(sizes);
  section = bucket ? bucket->section : "step";
  if (const StepProgram *decoded = artifact->getProgram(section))
    return decoded;
  auto known = programs.find(section);
  if (known != programs.end())
    return &known->second;
  const Artifact &container = artifact->getContainer();
  if (!container.find(section))
    return Error{"the artifact has no '" + section + "' section"};
  Expected<StepProgram> decoded =
      StepProgram::decode(container.contents(section), "section '" + section + "'");
  if (!decoded)
    return decoded.takeError();
  return &(programs[section] = std::move(*decoded));
}

Expected<ArenaPlan> StepExecutor::planFor(const SymbolBindings &sizes, std::string &note) {
  std::string section;
  Expected<const StepProgram *> program = programFor(sizes, section);
  if (!program)
    return program.takeError();
  // The compiler's plan is the symbolic step's: when it holds at these
  // sizes, else one made here.
  const std::optional<StepMemoryPlan> &memoryPlan = artifact->getMemoryPlan();
  note.clear();
  Expected<ArenaPlan> plan = chooseArenaPlan(
      **program, section == "step" && memoryPlan ? &*memoryPlan : nullptr, sizes, note);
  if (!plan)
    return Error{"step program at " + shapeKey(sizes) + ": " + plan.getError()};
  plan->fromArtifact = section == "step" && memoryPlan && note.empty();
  return plan;
}

Expected<StepExecutor::Shape *> StepExecutor::prepareShape(const SymbolBindings &sizes,
                                                          const WeightLoader &loadWeight) {
  std::string key = shapeKey(sizes);
  if (auto known = shapes.find(key); known != shapes.end())
    return &known->second;
  if (Status s = checkGuards(artifact->getGuards(), sizes); !s)
    return Error{key + ": " + s.getError()};
  std::string section;
  Expected<const StepProgram *> program = programFor(sizes, section);
  if (!program)
    return program.takeError();
  std::string note;
  Expected<ArenaPlan> plan = planFor(sizes, note);
  if (!plan)
    return plan.takeError();
  if (!note.empty())
    std::fprintf(stderr, "kiln-run: note: %s (%s)\n", note.c_str(), key.c_str());
  SharedMemory memory{arena.get(), arena.size(), workspace.get(), support.fill, support.copy,
                      cudnn.get(), options.communicator};
  Expected<std::unique_ptr<ProgramRunner>> runner =
      ProgramRunner::prepare(**program, section == "step" ? "step program" : section, *device,
                             *lt, handle, moduleIndex, store, loadWeight, sizes, *plan, memory);
  if (!runner)
    return runner.takeError();
  if (options.attention == Options::Attention::Cudnn && (*runner)->kernelAttention)
    return Error{"--attention cudnn: " + key + ": " + (*runner)->attentionNote};
  (*runner)->usedArtifactPlan = plan->fromArtifact;
  Shape &shape = shapes[key];
  shape.program = section;
  shape.key = key;
  shape.sizes = sizes;
  shape.runner = std::move(*runner);
  return &shape;
}

Status StepExecutor::selectShape(const SymbolBindings &sizes) {
  // Every persistent tensor exists by now: a later shape only finds them.
  WeightLoader existing = [&](const std::string &name, DType,
                              const std::vector<int64_t> &) -> Expected<NamedTensor *> {
    auto it = store.find(name);
    if (it == store.end())
      return Error{"weight '" + name + "' was not loaded"};
    return &it->second;
  };
  Expected<Shape *> shape = prepareShape(sizes, existing);
  if (!shape)
    return shape.takeError();
  current = *shape;
  return Status::success();
}

const std::string &StepExecutor::getProgramName() const { return current->program; }

std::vector<std::string> StepExecutor::getDataInputs() const {
  std::vector<std::string> names;
  for (const ProgramBinding &arg : current->runner->getProgram().args)
    if (arg.role == "input")
      names.push_back(arg.name);
  return names;
}

Expected<std::pair<DType, int64_t>> StepExecutor::getInputSpec(const std::string &name) const {
  for (const ProgramBinding &arg : current->runner->getProgram().args)
    if (arg.role == "input" && arg.name == name) {
      Expected<int64_t> count = current->runner->getProgram().elementCount(arg.buffer, current->sizes);
      if (!count)
        return count.takeError();
      return std::make_pair(current->runner->getProgram().buffers[arg.buffer].dtype, *count);
    }
  return Error{"the step has no data input '" + name + "'"};
}

Status StepExecutor::setInput(const std::string &name, const void *data, DType dtype, size_t count) {
  for (const ProgramBinding &arg : current->runner->getProgram().args)
    if (arg.role == "input" && arg.name == name) {
      Expected<std::string> bytes =
          convertElements(data, dtype, current->runner->getProgram().buffers[arg.buffer].dtype, count);
      if (!bytes)
        return Error{"input '" + name + "': " + bytes.getError()};
      if (Status s = current->runner->upload(arg.buffer, *bytes, device->getStream()); !s)
        return Error{"input '" + name + "': " + s.getError()};
      return device->synchronize();
    }
  return Error{"the step has no data input '" + name + "'"};
}

Status StepExecutor::loadCheckpoint(const SafetensorsFile &checkpoint) {
  auto load = [&](const std::string &prefix, const std::vector<std::string> &names) -> Status {
    for (const std::string &name : names) {
      const TensorInfo *info = checkpoint.find(prefix + name);
      if (!info)
        continue;
      NamedTensor &t = store.at(name);
      if (info->getElementCount() != t.count)
        return Error{checkpoint.getPath() + ": '" + info->name + "' has the wrong element count"};
      Expected<std::string> bytes = convertElements(checkpoint.data(*info), info->dtype, t.dtype, t.count);
      if (!bytes)
        return Error{checkpoint.getPath() + ": '" + info->name + "': " + bytes.getError()};
      if (Status s = uploadTo(*device, t, *bytes); !s)
        return s;
    }
    return Status::success();
  };
  if (Status s = load("params/", paramNames); !s)
    return s;
  return load("state/", stateNames);
}

Expected<double> StepExecutor::runStep(int64_t stepNumber, double lr) {
  return runStepWith(stepNumber, lr, nullptr);
}

Expected<double> StepExecutor::runProfiledStep(int64_t stepNumber, double lr,
                                               std::vector<ActionTime> &times) {
  return runStepWith(stepNumber, lr, &times);
}

Expected<double> StepExecutor::runStepWith(int64_t stepNumber, double lr,
                                           std::vector<ActionTime> *times) {
  ProgramRunner *step = current->runner.get();
  const StepProgram &p = step->getProgram();
  CUstream stream = device->getStream();
  size_t seeds = 0, perStep = 0;
  for (const ProgramBinding &arg : p.args)
    perStep += arg.role == "rng_seed";
  for (const ProgramBinding &arg : p.args) {
    DType dtype = p.buffers[arg.buffer].dtype;
    std::string bytes;
    if (arg.role == "lr")
      bytes = scalarBytes(dtype, lr);
    else if (arg.role == "step")
      bytes = scalarBytes(dtype, static_cast<double>(stepNumber));
    else if (arg.role == "rng_seed")
      // Every seed argument of every step draws different numbers (as
      // kiln interp numbers them).
      bytes = scalarBytes(dtype, static_cast<double>(options.seed + (stepNumber - 1) * perStep +
                                                     seeds++));
    else
      continue;
    if (Status s = step->upload(arg.buffer, bytes, stream); !s)
      return s.takeError();
  }
  Status ran = Status::success();
  if (times) {
    Expected<std::vector<ActionTime>> profiled = step->profile(stream);
    if (!profiled)
      return profiled.takeError();
    *times = std::move(*profiled);
  } else {
    ran = graphs ? graphs->run(current->program, current->key,
                               [&](CUstream s) { return step->record(s); })
                 : step->record(stream);
  }
  if (!ran)
    return ran.takeError();
  for (const ProgramBinding &result : p.results)
    if (result.role == "loss") {
      Expected<std::string> bytes = step->downloadBuffer(result.buffer);
      if (!bytes)
        return bytes.takeError();
      Expected<std::string> value =
          convertElements(bytes->data(), p.buffers[result.buffer].dtype, DType::F64, 1);
      if (!value)
        return value.takeError();
      double loss;
      std::memcpy(&loss, value->data(), 8);
      return loss;
    }
  return Error{"the step has no loss result"};
}

std::optional<double> StepExecutor::getDefaultLr() const { return defaultLr; }

Status StepExecutor::readTrainable(std::vector<std::pair<std::string, NamedTensor *>> &params,
                                   std::vector<std::pair<std::string, NamedTensor *>> &state) {
  for (const std::string &name : paramNames)
    params.push_back({name, &store.at(name)});
  for (const std::string &name : stateNames)
    state.push_back({name, &store.at(name)});
  return device->synchronize();
}

Expected<std::string> StepExecutor::download(const NamedTensor &tensor) const {
  std::string data(tensor.count * dtypeSize(tensor.dtype), '\0');
  if (Status s = device->synchronize(); !s)
    return s.takeError();
  if (!data.empty())
    if (Status s = device->check(
            device->getDriver().cuMemcpyDtoH_v2(data.data(), tensor.memory.get(), data.size()),
            "cuMemcpyDtoH");
        !s)
      return s.takeError();
  return data;
}

size_t StepExecutor::getPersistentBytes() const {
  size_t total = 0;
  for (const auto &entry : store)
    total += entry.second.memory.size();
  return total;
}
size_t StepExecutor::getArenaBytes() const { return arena.size() + workspace.size(); }
bool StepExecutor::usesArtifactPlan() const { return current->runner->usedArtifactPlan; }
size_t StepExecutor::getGraphCaptures() const { return graphs ? graphs->getCaptureCount() : 0; }
size_t StepExecutor::getGraphInstantiations() const {
  return graphs ? graphs->getInstantiateCount() : 0;
}
size_t StepExecutor::getGraphUpdates() const { return graphs ? graphs->getUpdateCount() : 0; }
std::string StepExecutor::getGraphRefusal() const {
  return graphs ? graphs->getLastRefusal() : std::string();
}
size_t StepExecutor::getLaunchCount() const { return current->runner->launches; }
size_t StepExecutor::getGemmCount() const { return current->runner->gemms; }

std::string StepExecutor::getAttentionSummary() const {
  const ProgramRunner &r = *current->runner;
  if (!r.cudnnAttention && !r.kernelAttention)
    return "";
  std::string line = "attention: " + std::to_string(r.cudnnAttention) + " launches on " +
                     (cudnn ? cudnn->describe() : std::string("cuDNN")) + ", " +
                     std::to_string(r.kernelAttention) + " on kernels";
  if (!cudnnNote.empty())
    line += " (cuDNN: " + cudnnNote + ")";
  else if (!r.attentionNote.empty())
    line += " (" + r.attentionNote + ")";
  return line;
}
