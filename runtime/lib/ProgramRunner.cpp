//===- ProgramRunner.cpp - Resolve and record one step program -----------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "ProgramRunner.h"

#include "ElementConversion.h"
#include "LinearCrossEntropyRun.h"
#include "kiln/artifact/HopperAttention.h"

#include <algorithm>
#include <cstring>

using namespace kiln::runtime;
using namespace kiln::artifact;

Expected<AttentionShape>
kiln::runtime::attentionShape(const StepProgram &p, const AttentionRoles &a,
                              const std::vector<std::vector<int64_t>> &shapes) {
  if (shapes[a.q].size() != 4 || shapes[a.k].size() != 4)
    return Error{"attention operands are not rank 4"};
  // Compared and read as [B, H, S, D] views; seqMajor says which are
  // stored [B, S, H, D].
  auto view = [&](int id, unsigned bit) { return headMajorShape(shapes[id], a.isSeqMajor(bit)); };
  const std::vector<int64_t> q = view(a.q, kSeqMajorQ), k = view(a.k, kSeqMajorK);
  AttentionShape s;
  s.seqMajor = a.seqMajor;
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
  std::vector<std::pair<int, unsigned>> likeQ = {{a.o, kSeqMajorO}}, likeK = {{a.v, kSeqMajorV}};
  if (a.backward) {
    likeQ.insert(likeQ.end(), {{a.dout, kSeqMajorDout}, {a.dq, kSeqMajorDq}});
    likeK.insert(likeK.end(), {{a.dk, kSeqMajorDk}, {a.dv, kSeqMajorDv}});
  }
  for (auto [id, bit] : likeQ)
    if (view(id, bit) != q || p.buffers[id].dtype != s.dtype)
      return Error{"attention buffer " + std::to_string(id) + " does not match the query"};
  for (auto [id, bit] : likeK)
    if (view(id, bit) != k || p.buffers[id].dtype != s.dtype)
      return Error{"attention buffer " + std::to_string(id) + " does not match the key"};
  if (k[0] != s.batch || k[3] != s.headDim || p.buffers[a.k].dtype != s.dtype)
    return Error{"attention key does not match the query"};
  return s;
}

ProgramRunner::~ProgramRunner() {
  for (Gemm &g : gemmList) {
    for (cublasLtMatrixLayout_t layout : {g.first, g.second, g.result})
      if (layout)
        lt->cublasLtMatrixLayoutDestroy(layout);
    if (g.desc)
      lt->cublasLtMatmulDescDestroy(g.desc);
  }
}

Expected<std::unique_ptr<ProgramRunner>> ProgramRunner::prepare(
    const StepProgram &source, const std::string &origin, const Device &device, const CublasLt &lt,
    cublasLtHandle_t handle, const std::map<std::string, const KernelModule *> &modules,
    std::map<std::string, NamedTensor> &store, const WeightLoader &loadWeight,
    const SymbolBindings &sizes, const ArenaPlan &plan, const SharedMemory &memory) {
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
  // Blocks of columns lie inside their sources and only GEMMs at their row
  // stride touch them.
  Expected<std::vector<int64_t>> reachable = reachableElements(p, sizes);
  if (!reachable)
    return Error{origin + ": " + reachable.getError()};
  r->reachable = std::move(*reachable);
  if (Status s = checkStridedViews(p, sizes, r->reachable); !s)
    return Error{origin + ": " + s.getError()};

  const std::vector<size_t> &offsets = plan.offsets;
  r->arenaSize = plan.size;
  r->fillKernel = memory.fill;
  r->communicator = memory.communicator;
  r->copyKernel = memory.copy;
  if (memory.arena) {
    if (plan.size > memory.arenaBytes)
      return Error{origin + ": the arena plan at these sizes needs " + std::to_string(plan.size) +
                   " bytes; the run's arena holds " + std::to_string(memory.arenaBytes)};
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
    if (arg.role == "param" || arg.role == "state" || arg.role == "accum") {
      auto it = store.find(persistentKey(arg));
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
      Expected<DeviceBuffer> buffer =
          DeviceBuffer::allocate(device, std::max<size_t>(r->bytes[id], 1));
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
  const CudnnAttention *cudnnFor = r->chooseAttention(shapes, sizes, memory);
  std::vector<std::shared_ptr<CudnnAttention::Plan>> cudnnPlan(p.ops.size());
  std::vector<bool> replaced(p.ops.size(), false);
  std::map<int, int> statsOfOutput;           // o -> its statistics
  std::vector<int> statsOf(p.ops.size(), -1); // op -> its statistics
  std::vector<ScratchRequest> statsNeeds;
  std::vector<std::pair<size_t, size_t>> workspaceNeeds; // op, bytes
  std::vector<CUdeviceptr> statsPointer;
  std::map<size_t, CUdeviceptr> workspaceOf;
  // Forwards cuDNN does not take run as kiln_fa90 where it fits, and so do
  // their backwards where the module has one: the forward then writes the
  // row statistics (log-sum-exp) the backward reads.
  std::vector<std::optional<AttentionShape>> hopperShape(p.ops.size());
  std::map<int, CUdeviceptr> hopperStatsOfOutput;
  std::vector<CUdeviceptr> hopperStatsOf(p.ops.size(), 0);
  int64_t hopperScratchRows = 0, hopperScratchElements = 0; // the backward's D and fp32 dQ
  // A masked launch runs its kernel's own kiln_fa90 variant (the generated
  // mask inside; HopperAttentionOutput.cpp), an unmasked one the shared one.
  auto hopperMain = [&](const ProgramOp &op, const AttentionShape &s) {
    return op.attention->masked ? "kiln_fa90_" + op.name
           : s.backward ? artifact::hopperAttentionBackwardKernel(s.dtype, s.headDim, "", s.seqMajor)
                        : artifact::hopperAttentionKernel(s.dtype, s.headDim, s.seqMajor);
  };
  // Masked variants run wherever their image loads (cuDNN never takes the
  // kernel's mask): checked standalone by bench/fa90/bwd_check.py and in a
  // packed-documents step against PyTorch (scripts/gpu-sft-check.sh with
  // SFT_ATTENTION=sm90, docs/benchmarks.md).
  auto hopperHas = [&](const std::string &name) {
    return static_cast<bool>(memory.hopper->getFunction(name));
  };
  auto hopperMay = [&](const ProgramOp &op, const AttentionShape &s) {
    return hopperHas(hopperMain(op, s));
  };
  // Whether a backward that reads forward \p f's output (they pair by o)
  // has its kiln_fa90 kernel, in its own layout: then the forward writes
  // the row statistics that backward reads.
  auto hopperBackwardIn = [&](size_t f) {
    for (size_t j = f + 1; j < p.ops.size(); ++j) {
      const ProgramOp &g = p.ops[j];
      if (g.kind != ProgramOp::Kind::Launch || !g.attention || !g.attention->backward ||
          g.attention->o != p.ops[f].attention->o)
        continue;
      Expected<AttentionShape> s = attentionShape(p, *g.attention, shapes);
      if (s && hopperMay(g, *s))
        return true;
    }
    return false;
  };
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const ProgramOp &op = p.ops[i];
    if (op.kind != ProgramOp::Kind::Launch || !op.attention)
      continue;
    Expected<AttentionShape> shape = attentionShape(p, *op.attention, shapes);
    Expected<std::shared_ptr<CudnnAttention::Plan>> plan =
        !cudnnFor ? Expected<std::shared_ptr<CudnnAttention::Plan>>(Error{})
        : !shape  ? Expected<std::shared_ptr<CudnnAttention::Plan>>(shape.takeError())
                  : cudnnFor->build(*shape);
    if (plan && op.attention->backward && !statsOfOutput.count(op.attention->o))
      plan = Error{"its forward did not run on cuDNN"};
    if (op.attention->masked) // cuDNN is not given the kernel's mask
      plan = Error{"masked attention (cuDNN does not take the kernel's mask)"};
    if (!plan && memory.hopper && shape && !shape->backward &&
        artifact::hopperAttentionFits(shape->dtype, shape->headDim) && shape->kvHeads > 0 &&
        shape->heads % shape->kvHeads == 0 && hopperMay(op, *shape)) {
      hopperShape[i] = *shape;
      if (hopperBackwardIn(i) && artifact::hopperAttentionBackwardFits(shape->seq)) {
        Expected<DeviceBuffer> stats = DeviceBuffer::allocate(
            device, static_cast<size_t>(shape->batch * shape->heads * shape->seq) * 4);
        if (!stats)
          return Error{origin + ": attention statistics: " + stats.getError()};
        hopperStatsOf[i] = hopperStatsOfOutput[op.attention->o] = stats->get();
        r->owned.push_back(std::move(*stats));
      }
      for (size_t skip : op.attention->replaces)
        replaced[skip] = true;
      ++r->hopperAttention;
      continue;
    }
    if (!plan && memory.hopper && shape && shape->backward &&
        hopperStatsOfOutput.count(op.attention->o) && hopperMay(op, *shape)) {
      hopperShape[i] = *shape;
      hopperStatsOf[i] = hopperStatsOfOutput[op.attention->o];
      hopperScratchRows = std::max(hopperScratchRows, shape->batch * shape->heads * shape->seq);
      hopperScratchElements = std::max(hopperScratchElements,
                                       shape->batch * shape->heads * shape->seq * shape->headDim);
      for (size_t skip : op.attention->replaces)
        replaced[skip] = true;
      ++r->hopperAttention;
      continue;
    }
    if (!plan) {
      // A masked launch left to its kernel is not counted: cuDNN never takes
      // one (so --attention cudnn does not fail on it), as before it had roles.
      if (op.attention->masked)
        continue;
      ++r->kernelAttention;
      if (r->attentionNote.empty() && !plan.getError().empty())
        r->attentionNote = op.name + ": " + plan.getError();
      continue;
    }
    // Row statistics: fp32 [batch, heads, seq], from the forward through
    // the last backward reading them; placed below.
    if (!op.attention->backward) {
      statsOfOutput[op.attention->o] = static_cast<int>(statsNeeds.size());
      statsNeeds.push_back(
          {i, i, static_cast<size_t>(shape->batch * shape->heads * shape->seq) * 4});
    }
    statsOf[i] = statsOfOutput[op.attention->o];
    statsNeeds[statsOf[i]].last = i;
    if (int64_t bytes = CudnnAttention::workspaceBytes(**plan); bytes > 0)
      workspaceNeeds.push_back({i, static_cast<size_t>(bytes)});
    cudnnPlan[i] = std::move(*plan);
    for (size_t skip : op.attention->replaces)
      replaced[skip] = true;
    ++r->cudnnAttention;
  }
  if (Status s = r->placeAttentionScratch(statsNeeds, workspaceNeeds, plan, memory, statsPointer,
                                          workspaceOf);
      !s)
    return Error{origin + ": " + s.getError()};
  device.traceMemory("attention: " + std::to_string(r->cudnnAttention) + " on cuDNN");

  CUdeviceptr hopperDd = 0, hopperDqAcc = 0;
  if (hopperScratchRows > 0) {
    Expected<DeviceBuffer> scratch = DeviceBuffer::allocate(
        device, static_cast<size_t>(hopperScratchRows + hopperScratchElements) * 4);
    if (!scratch)
      return Error{origin + ": kiln_fa90 backward scratch: " + scratch.getError()};
    hopperDqAcc = scratch->get();
    hopperDd = hopperDqAcc + static_cast<CUdeviceptr>(hopperScratchElements) * 4;
    r->owned.push_back(std::move(*scratch));
  }

  auto check = [&](CUresult result, const char *what) { return device.check(result, what); };
  r->opAction.assign(p.ops.size(), SIZE_MAX);
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const ProgramOp &op = p.ops[i];
    std::string where = "op " + std::to_string(i);
    r->opAction[i] = r->actions.size(); // its first action, if it has one
    if (replaced[i])
      continue;
    if (hopperShape[i]) {
      // Kiln's sm_90a attention (kiln/artifact/HopperAttention.h has the
      // kernels' parameters and geometry): the forward, or the backward's
      // prepare, main and finish launches.
      const AttentionShape &s = *hopperShape[i];
      const AttentionRoles &a = *op.attention;
      float scale = static_cast<float>(s.scale);
      uint32_t scaleBits = 0;
      std::memcpy(&scaleBits, &scale, sizeof scaleBits);
      auto add = [&](const std::string &name, const std::string &label, int64_t grid, int block,
                     int shared, std::vector<CUdeviceptr> pointers,
                     std::vector<int64_t> symbols) -> Status {
        Expected<CUfunction> function = memory.hopper->getFunction(name);
        if (!function)
          return Error{origin + ": " + where + ": " + function.getError()};
        Launch launch;
        launch.name = label;
        launch.function = *function;
        launch.grid = static_cast<unsigned>(grid);
        launch.block = static_cast<unsigned>(block);
        launch.shared = static_cast<unsigned>(shared);
        if (shared > 48 * 1024)
          if (Status st = check(driver.cuFuncSetAttribute(
                                    launch.function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                    shared),
                                "cuFuncSetAttribute");
              !st)
            return Error{origin + ": kernel " + name + ": " + st.getError()};
        launch.pointers = std::move(pointers);
        launch.symbols = std::move(symbols);
        for (CUdeviceptr &ptr : launch.pointers)
          launch.params.push_back(&ptr);
        for (int64_t &value : launch.symbols)
          launch.params.push_back(&value);
        r->actions.push_back({Action::Launch, r->launchList.size()});
        r->launchList.push_back(std::move(launch));
        ++r->launches;
        return Status::success();
      };
      auto ptr = [&](int id) { return r->pointers[id]; };
      std::vector<int64_t> dims = {s.batch, s.heads, s.kvHeads, s.seq, s.kvSeq,
                                   static_cast<int64_t>(scaleBits), s.causal ? 1 : 0};
      // A masked variant takes the launch's own buffers, kiln_fa90's after
      // them, then the launch's symbols (emitHopperAttentionKernel).
      std::vector<CUdeviceptr> own;
      std::vector<int64_t> ownSymbols;
      if (a.masked) {
        for (int id : op.args)
          own.push_back(r->pointers[id]);
        for (const std::string &symbol : op.symbols) {
          auto value = sizes.find(symbol);
          if (value == sizes.end())
            return Error{origin + ": kernel " + op.name + " needs symbol '" + symbol + "'"};
          ownSymbols.push_back(value->second);
        }
      }
      auto withOwn = [&](std::vector<CUdeviceptr> extra) {
        if (!a.masked)
          return extra;
        std::vector<CUdeviceptr> all = own;
        all.insert(all.end(), extra.begin(), extra.end());
        return all;
      };
      Status added = Status::success();
      if (!s.backward) {
        added = add(hopperMain(op, s), "kiln_fa90 attention " + s.describe(),
                    artifact::hopperAttentionBlocks(s.batch, s.heads, s.seq, s.headDim),
                    artifact::hopperAttentionThreads(s.headDim),
                    artifact::hopperAttentionSharedBytes(s.headDim),
                    a.masked ? withOwn({hopperStatsOf[i]})
                             : std::vector<CUdeviceptr>{ptr(a.q), ptr(a.k), ptr(a.v), ptr(a.o),
                                                        hopperStatsOf[i]},
                    a.masked ? ownSymbols : dims);
      } else {
        // Grid-stride kernels: a few waves of 256 threads.
        const int64_t rows = s.batch * s.heads * s.seq, elements = rows * s.headDim;
        auto strided = [](int64_t threads) {
          return std::max<int64_t>(1, std::min<int64_t>((threads + 255) / 256, 4096));
        };
        // A seq-major o or dO: the prepare kernel finds rows by H and Sq.
        std::vector<int64_t> prepSymbols = {rows};
        if (s.seqMajor & artifact::kHopperPrepareLayoutBits)
          prepSymbols.insert(prepSymbols.end(), {s.heads, s.seq});
        added = add(artifact::hopperAttentionBackwardKernel(s.dtype, s.headDim, "prep_", s.seqMajor),
                    "kiln_fa90 attention prepare " + s.describe(),
                    strided(rows * (s.headDim / 8)), 256, 0,
                    {ptr(a.o), ptr(a.dout), hopperDd, hopperDqAcc}, prepSymbols);
        if (added)
          added = add(hopperMain(op, s), "kiln_fa90 attention " + s.describe(),
                      artifact::hopperAttentionBackwardBlocks(s.batch, s.kvHeads, s.kvSeq),
                      artifact::kHopperAttentionBackwardThreads,
                      artifact::hopperAttentionBackwardSharedBytes(s.headDim),
                      a.masked ? withOwn({hopperStatsOf[i], hopperDd, hopperDqAcc, ptr(a.dk),
                                          ptr(a.dv)})
                               : std::vector<CUdeviceptr>{ptr(a.q), ptr(a.k), ptr(a.v),
                                                          ptr(a.dout), hopperStatsOf[i],
                                                          hopperDd, hopperDqAcc, ptr(a.dk),
                                                          ptr(a.dv)},
                      a.masked ? ownSymbols : dims);
        if (added)
          added = add(artifact::hopperAttentionFinishKernel(s.dtype),
                      "kiln_fa90 attention finish " + s.describe(),
                      strided(elements / 4), 256, 0, {hopperDqAcc, ptr(a.dq)},
                      {static_cast<int64_t>(scaleBits), elements});
      }
      if (!added)
        return added.takeError();
      continue;
    }
    if (cudnnPlan[i]) {
      const AttentionRoles &a = *op.attention;
      Attention run;
      run.plan = cudnnPlan[i];
      auto at = [&](int id) { return id >= 0 ? r->pointers[id] : CUdeviceptr(0); };
      run.pointers = {at(a.q),    at(a.k),  at(a.v),  at(a.o), statsPointer[statsOf[i]],
                      at(a.dout), at(a.dq), at(a.dk), at(a.dv)};
      run.workspace = workspaceOf.count(i) ? workspaceOf[i] : 0;
      Expected<AttentionShape> shape = attentionShape(p, a, shapes);
      run.label = "cudnn attention " + shape->describe();
      r->actions.push_back({Action::Attention, r->attentionList.size()});
      r->attentionList.push_back(std::move(run));
      continue;
    }
    switch (op.kind) {
    case ProgramOp::Kind::Alloc: r->pointers[op.result] = r->arena + offsets[op.result]; break;
    case ProgramOp::Kind::View:
      if (!op.offset && !op.rowStride && r->bytes[op.result] > r->bytes[op.source])
        return Error{origin + ": " + where + ": view larger than its source"};
      r->pointers[op.result] = r->pointers[op.source];
      // A block at an offset (checkStridedViews checked its extent).
      if (op.offset)
        r->pointers[op.result] +=
            static_cast<CUdeviceptr>(*op.offset->evaluate(sizes)) * dtypeSize(p.buffers[op.result].dtype);
      break;
    case ProgramOp::Kind::Weight: {
      if (!op.paddedFrom.empty() &&
          (shapes[op.result].size() != 2 || op.paddedFrom[0] > shapes[op.result][0] ||
           op.paddedFrom[1] > shapes[op.result][1]))
        return Error{origin + ": " + where + ": weight '" + op.name +
                     "' is padded from a shape larger than its buffer"};
      Expected<NamedTensor *> weight = loadWeight(weightKey(p, op), p.buffers[op.result].dtype,
                                                  shapes[op.result], op.name, op.paddedFrom,
                                                  op.members, op.memberAxis);
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
      Expected<DeviceBuffer> buffer =
          DeviceBuffer::allocate(device, std::max<size_t>(data.size(), 1));
      if (!buffer)
        return Error{origin + ": " + buffer.getError()};
      if (!data.empty())
        if (Status s = check(driver.cuMemcpyHtoDAsync_v2(buffer->get(), data.data(), data.size(),
                                                         device.getStream()),
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
      launch.action = r->actions.size();
      launch.args = op.args;
      r->applyTunedLaunch(launch, op, *items, memory);
      if (!launch.shapes.empty())
        r->tunableLaunches.push_back(r->launchList.size());
      r->actions.push_back({Action::Launch, r->launchList.size()});
      r->launchList.push_back(std::move(launch));
      ++r->launches;
      break;
    }
    case ProgramOp::Kind::Gemm: {
      Expected<Gemm> g = r->buildGemm(op, sizes, where);
      if (!g)
        return g.takeError();
      g->action = r->actions.size();
      if (Status s = r->applyTunedGemm(*g, memory); !s)
        return Error{origin + ": " + where + ": " + s.getError()};
      if (Status s = r->applyThinGemm(*g, memory); !s)
        return Error{origin + ": " + where + ": " + s.getError()};
      r->actions.push_back({Action::Gemm, r->gemmList.size()});
      r->gemmList.push_back(*g);
      ++r->gemms;
      break;
    }
    case ProgramOp::Kind::LinearCrossEntropy:
      if (Status s = r->prepareHead(*op.head, shapes, memory); !s)
        return Error{origin + ": " + where + " (linear_cross_entropy): " + s.getError()};
      break;
    }
  }
  // New parameters and state replace the old ones at the end of the step.
  for (const ProgramBinding &result : p.results) {
    if (result.role != "param" && result.role != "state" && result.role != "accum")
      continue;
    auto it = store.find(persistentKey(result));
    if (it == store.end())
      continue; // The init program's results: the executor adopts them.
    CUdeviceptr target = it->second.memory.get();
    if (target != r->pointers[result.buffer])
      r->resultCopies.push_back({r->pointers[result.buffer], target, r->bytes[result.buffer]});
  }
  // NF4 GEMMs on the codes where chosen (ProgramRunnerNf4.cpp).
  if (Status s = r->prepareNf4(sizes, memory); !s)
    return s.takeError();
  // An adapter's dT and dB in one pass over Y (ProgramRunnerLoraPair.cpp).
  if (Status s = r->prepareLoraPairs(memory); !s)
    return Error{origin + ": " + s.getError()};
  return r;
}

Status ProgramRunner::prepareHead(const LinearCrossEntropy &head,
                                  const std::vector<std::vector<int64_t>> &shapes,
                                  const SharedMemory &memory) {
  if (!memory.support)
    return Error{"the support kernels are not loaded"};
  Expected<HeadKernels> kernels = loadHeadKernels(*memory.support);
  if (!kernels)
    return kernels.takeError();
  Expected<std::vector<HeadStep>> steps =
      expandLinearCrossEntropy(program, head, shapes, pointers, *kernels);
  if (!steps)
    return steps.takeError();
  for (HeadStep &step : *steps) {
    if (step.isGemm) {
      Expected<HeadGemmHandles> handles = createHeadGemm(*lt, handle, step.gemm, kWorkspaceBytes);
      if (!handles)
        return handles.takeError();
      Gemm g;
      g.desc = handles->desc;
      g.first = handles->first;
      g.second = handles->second;
      g.result = handles->result;
      g.algo = handles->algo;
      g.a = step.gemm.a;
      g.b = step.gemm.b;
      g.c = step.gemm.c;
      g.beta = step.gemm.beta;
      g.label = step.gemm.label;
      actions.push_back({Action::Gemm, gemmList.size()});
      gemmList.push_back(g);
      ++gemms;
      continue;
    }
    Launch l;
    l.name = step.launch.name;
    l.function = step.launch.function;
    l.grid = step.launch.grid;
    l.block = step.launch.block;
    l.pointers = std::move(step.launch.pointers);
    l.symbols = std::move(step.launch.ints);
    for (CUdeviceptr &ptr : l.pointers)
      l.params.push_back(&ptr);
    for (int64_t &value : l.symbols)
      l.params.push_back(&value);
    actions.push_back({Action::Launch, launchList.size()});
    launchList.push_back(std::move(l));
    ++launches;
  }
  return Status::success();
}

Status ProgramRunner::record(CUstream stream) const {
  for (std::pair<Action, size_t> action : actions)
    if (Status s = recordAction(action, stream); !s)
      return s;
  return recordResultCopies(stream);
}

Status ProgramRunner::recordWithHook(CUstream stream,
                                     const std::function<Status(size_t)> &beforeAction) const {
  for (size_t i = 0; i < actions.size(); ++i) {
    if (Status s = beforeAction(i); !s)
      return s;
    if (Status s = recordAction(actions[i], stream); !s)
      return s;
  }
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
      if (Status s =
              check(driver.cuLaunchKernel(l.function, l.grid, 1, 1, l.block, 1, 1, l.shared, stream,
                                          const_cast<void **>(l.params.data()), nullptr),
                    "cuLaunchKernel");
          !s)
        return s;
      break;
    }
    case Action::Gemm: {
      const Gemm &g = gemmList[index];
      if (g.thin.function)
        return enqueueThinGemm(g, stream);
      return enqueueGemm(index, g.algo, g.a, g.b, stream);
    }
    case Action::Fill: return recordFill(fillList[index], stream);
    case Action::Copy: return recordCopy(copyList[index], stream);
    case Action::Attention: {
      const Attention &a = attentionList[index];
      if (Status s = cudnn->run(*a.plan, a.pointers, a.workspace, stream); !s)
        return fail(s.getError());
      break;
    }
    case Action::AllReduce:
    case Action::AllReduceWait: return recordAllReduce(entry, stream);
    case Action::Nf4Gemm: return enqueueNf4(nf4List[index], /*fused=*/true, stream);
    case Action::Skipped: break;
    case Action::LoraPair: return enqueueLoraPair(pairList[index], stream);
    case Action::PairedGemm: break;
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
  return static_cast<unsigned>(
      std::min<uint64_t>(4096, std::max<uint64_t>(1, (bytes + 4095) / 4096)));
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
  CUresult result = f.elementSize == 1
                        ? driver.cuMemsetD8Async(f.target, static_cast<unsigned char>(f.pattern),
                                                 f.elements, stream)
                    : f.elementSize == 2
                        ? driver.cuMemsetD16Async(f.target, static_cast<unsigned short>(f.pattern),
                                                  f.elements, stream)
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
  case Action::Launch: return launchList[entry.second].name;
  case Action::Gemm: return gemmList[entry.second].label;
  case Action::Fill: return "memset";
  case Action::Copy: return "memcpy";
  case Action::Attention: return attentionList[entry.second].label;
  case Action::AllReduce:
    return "nccl all_reduce bucket " + std::to_string(allReduceList[entry.second].bucket) +
           " (enqueue)";
  case Action::AllReduceWait: return "nccl all_reduce wait bucket " + std::to_string(entry.second);
  case Action::Nf4Gemm: return nf4List[entry.second].label;
  case Action::Skipped: return "skipped " + launchList[entry.second].name + " (readers fused)";
  case Action::LoraPair: return pairList[entry.second].label;
  case Action::PairedGemm: return "skipped " + gemmList[entry.second].label + " (in the pair above)";
  }
  return "?";
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
