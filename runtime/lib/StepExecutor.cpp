//===- StepExecutor.cpp - Run a compiled step program on the GPU ----------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The step API: loading an artifact's programs and kernel modules, one
// prepared ProgramRunner per shape, inputs, steps and checkpoints. The
// runner is ProgramRunner.cpp (its GEMMs GemmDescriptors.cpp), the
// persistent tensors WeightLoading.cpp. Kept whole (~720 lines): one class,
// StepExecutor, whose members share its loaded programs and device buffers.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/StepExecutor.h"
#include "kiln/artifact/HopperAttention.h"

#include "ElementConversion.h"
#include "kiln/runtime/PersistentPool.h"
#include "ProgramRunner.h"
#include "WeightLoading.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <set>

using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {
/// "batch=4,seq=512".
std::string shapeKey(const SymbolBindings &sizes) {
  std::string key;
  for (const auto &[symbol, value] : sizes)
    key += (key.empty() ? "" : ",") + symbol + "=" + std::to_string(value);
  return key;
}

/// A start and a stop event on the device's stream: the device time between.
class DeviceEvents {
public:
  explicit DeviceEvents(const Device &device) : device(device) {}
  ~DeviceEvents() {
    for (CUevent e : {begin, end})
      if (e)
        device.getDriver().cuEventDestroy_v2(e);
  }
  Status start(CUstream stream) {
    const CudaDriver &d = device.getDriver();
    for (CUevent *e : {&begin, &end})
      if (!*e)
        if (Status s = device.check(d.cuEventCreate(e, CU_EVENT_DEFAULT), "cuEventCreate"); !s)
          return s;
    return device.check(d.cuEventRecord(begin, stream), "cuEventRecord");
  }
  Expected<double> stop(CUstream stream) {
    const CudaDriver &d = device.getDriver();
    if (Status s = device.check(d.cuEventRecord(end, stream), "cuEventRecord"); !s)
      return s.takeError();
    if (Status s = device.check(d.cuEventSynchronize(end), "cuEventSynchronize"); !s)
      return s.takeError();
    float ms = 0;
    if (Status s = device.check(d.cuEventElapsedTime_v2(&ms, begin, end), "cuEventElapsedTime"); !s)
      return s.takeError();
    return static_cast<double>(ms);
  }

private:
  const Device &device;
  CUevent begin = nullptr, end = nullptr;
};
} // namespace

StepExecutor::~StepExecutor() {
  if (hold.counter)
    device->getDriver().cuMemFreeHost(hold.counter);
  graphs.reset();
  variants.clear();
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
    return Error{
        "the artifact has no 'step' section (compile it with kiln compile --emit=artifact)"};
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
  // + the support kernels and the fused NF4 GEMM: no reallocation
  x->modules.reserve(artifact.getKernels().size() + 2);
  for (const auto &kernel : artifact.getKernels()) {
    Expected<KernelImageChoice> image = artifact.selectImage(
        kernel.first, info.computeCapabilityMajor, info.computeCapabilityMinor);
    // Kiln's sm_90a attention is an alternative, not a kernel the programs
    // launch: other devices run without it.
    if (!image && kernel.first == artifact::kHopperAttentionModule)
      continue;
    if (!image)
      return image.takeError();
    Expected<KernelModule> module = KernelModule::load(device, container.contents(image->section),
                                                       image->needsJit, image->section);
    if (!module)
      return module.takeError();
    x->modules.push_back(std::move(*module));
    modules[kernel.first] = &x->modules.back();
    // The image this device runs: a launch's tuning entry is the kernel's
    // content, not its name.
    x->moduleHashes[kernel.first] = hashSignature(container.contents(image->section));
  }
  x->moduleIndex = modules;
  if (auto hopper = modules.find(artifact::kHopperAttentionModule); hopper != modules.end())
    x->hopper = hopper->second;
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
  x->support = {*fill, *copy, &x->modules.back()};
  if (Expected<CUfunction> hold = x->modules.back().getFunction("kiln_hold"))
    x->hold.kernel = *hold;
  // Kiln's fused NF4 GEMM: sm_90a only, and only for steps with marked NF4
  // launches (Nf4Gemm.h).
  if (Status s = loadNf4Gemm(*x, *program, device); !s)
    return s.takeError();
  device.traceMemory("kernel modules loaded");

  // cuDNN, when the step has attention it may run.
  bool hasAttention = false;
  for (const ProgramOp &op : program->ops)
    hasAttention |= op.kind == ProgramOp::Kind::Launch && op.attention.has_value();
  if (hasAttention && options.attention == Options::Attention::Sm90 && !x->hopper)
    return Error{"--attention sm90: the artifact has no sm_90a attention for this sm_" +
                 std::to_string(info.computeCapabilityMajor) +
                 std::to_string(info.computeCapabilityMinor) +
                 " device (kernels/kiln_fa90 is compiled for sm_90 targets whose step has a "
                 "bf16 attention of head dim 64 or 128)"};
  if (hasAttention && options.attention != Options::Attention::Kernels &&
      options.attention != Options::Attention::Sm90) {
    Expected<std::unique_ptr<CudnnAttention>> cudnn = CudnnAttention::load();
    if (cudnn)
      x->cudnn = std::move(*cudnn);
    else if (options.attention == Options::Attention::Cudnn)
      return Error{"--attention cudnn: " + cudnn.getError()};
    else
      x->cudnnNote = cudnn.getError();
  } else if (hasAttention) {
    x->cudnnNote =
        options.attention == Options::Attention::Sm90 ? "--attention sm90" : "--attention kernels";
  }
  device.traceMemory("cuDNN loaded");
  // The machine's tuning key: a database entry applies only where it equals.
  x->tuningKey.gpu = info.name;
  x->tuningKey.smCount = info.multiprocessorCount;
  x->tuningKey.ccMajor = info.computeCapabilityMajor;
  x->tuningKey.ccMinor = info.computeCapabilityMinor;
  x->tuningKey.driver = device.getDriver().getDriverVersion();
  x->tuningKey.cuda = CUDA_VERSION;
  x->tuningKey.cublasLt = static_cast<int64_t>(lt.getVersion());
  x->tuningKey.cudnn = x->cudnn ? x->cudnn->getVersionString() : "none";

  WeightLoader loadNamed = x->makeWeightLoader(weights);
  // The tensors every step needs, laid out in one allocation before any is
  // made (kiln/runtime/PersistentPool.h); the init program's own inputs stay apart, so
  // that freeing them (QLoRA's bf16 weights) returns their memory.
  {
    std::vector<const StepProgram *> persistentPrograms = {program};
    for (const char *loop : {"accum", "apply", "eval"})
      if (const StepProgram *p = artifact.getProgram(loop))
        persistentPrograms.push_back(p);
    Expected<std::map<std::string, size_t>> bytes =
        persistentTensorBytes(persistentPrograms, firstSizes);
    if (!bytes)
      return bytes.takeError();
    Expected<PoolLayout> layout = layOutPool(*bytes, kArenaAlignment);
    if (!layout)
      return layout.takeError();
    Expected<std::unique_ptr<PersistentPool>> pool = PersistentPool::create(device, *layout);
    if (!pool)
      return pool.takeError();
    x->pool = std::move(*pool);
    device.traceMemory("persistent tensors' pool (" + std::to_string(x->pool->size()) + " bytes)");
  }

  cublasLtHandle_t handle = nullptr;
  if (cublasStatus_t status = lt.cublasLtCreate(&handle); status != CUBLAS_STATUS_SUCCESS)
    return Error{"cublasLtCreate failed: " + lt.describe(status)};
  x->lt = &lt;
  x->handle = handle;
  device.traceMemory("cuBLASLt handle");

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
        if (Expected<NamedTensor *> t = loadNamed(arg.name, buffer.dtype, shape, arg.name, {}, {}, 1); !t)
          return t.takeError();
    } else if (arg.role == "state") {
      x->stateNames.push_back(arg.name);
      Expected<NamedTensor> t = makeTensor(device, buffer.dtype, shape, x->pool.get(), arg.name);
      if (!t)
        return t.takeError();
      if (Status s = device.check(device.getDriver().cuMemsetD8Async(t->memory.get(), 0,
                                                                     t->count * dtypeSize(t->dtype),
                                                                     device.getStream()),
                                  "cuMemsetD8Async");
          !s)
        return s.takeError();
      x->store[arg.name] = std::move(*t);
    }
  }

  if (x->hasLoopPrograms())
    if (Status s = x->makeAccumulators(firstSizes); !s)
      return s.takeError();

  // The init program, once: its results become named tensors.
  if (init)
    if (Status s = x->runInitProgram(*init, *program, firstSizes, loadNamed); !s)
      return s.takeError();
  device.traceMemory("parameters, optimizer state, init");

  // One arena for every shape of the run: the largest plan.
  size_t arenaBytes = 0;
  for (const SymbolBindings &sizes : options.shapes) {
    std::string note; // printed when the shape is prepared
    Expected<ArenaPlan> plan = x->planFor(sizes, note);
    if (!plan)
      return plan.takeError();
    arenaBytes = std::max(arenaBytes, plan->size);
    Expected<size_t> loop = x->loopArenaBytes(sizes);
    if (!loop)
      return loop.takeError();
    arenaBytes = std::max(arenaBytes, *loop);
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
  device.traceMemory("arena and GEMM workspace");
  // Each shape's program, resolved; the first loads the frozen weights its
  // `weight` ops name.
  for (const SymbolBindings &sizes : options.shapes) {
    Expected<Shape *> shape = x->prepareShape(sizes, loadNamed);
    if (!shape)
      return shape.takeError();
  }
  x->current = &x->shapes.at(shapeKey(firstSizes));
  device.traceMemory("programs prepared (frozen weights, attention plans)");
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
  Expected<std::unique_ptr<ProgramRunner>> runner =
      prepareRunner(sizes, loadWeight, options.tuning, cudnn.get(), /*printNote=*/true);
  if (!runner)
    return runner.takeError();
  if (options.attention == Options::Attention::Cudnn && (*runner)->kernelAttention)
    return Error{"--attention cudnn: " + key + ": " + (*runner)->attentionNote};
  Shape &shape = shapes[key];
  shape.program = section;
  shape.key = key;
  shape.sizes = sizes;
  shape.runner = std::move(*runner);
  if (hasLoopPrograms())
    if (Status s = prepareLoopPrograms(shape, loadWeight); !s)
      return s.takeError();
  shape.graphKey = key;
  return &shape;
}

Expected<std::unique_ptr<ProgramRunner>> StepExecutor::prepareRunner(const SymbolBindings &sizes,
                                                                     const WeightLoader &loadWeight,
                                                                     const TuningDb *tuning,
                                                                     const CudnnAttention *cudnnFor,
                                                                     bool printNote) {
  std::string section;
  Expected<const StepProgram *> program = programFor(sizes, section);
  if (!program)
    return program.takeError();
  std::string note;
  Expected<ArenaPlan> plan = planFor(sizes, note);
  if (!plan)
    return plan.takeError();
  if (!note.empty() && printNote)
    std::fprintf(stderr, "kiln-run: note: %s (%s)\n", note.c_str(), shapeKey(sizes).c_str());
  SharedMemory memory{arena.get(),
                      arena.size(),
                      workspace.get(),
                      support.fill,
                      support.copy,
                      cudnnFor,
                      options.communicator,
                      tuning,
                      &tuningKey,
                      options.attention != Options::Attention::Auto,
                      support.module,
                      options.attention == Options::Attention::Auto ||
                              options.attention == Options::Attention::Sm90
                          ? hopper
                          : nullptr,
                      &moduleHashes,
                      options.thinGemm};
  memory.nf4 = nf4Module;
  memory.loraPairs = options.loraGradPairs;
  Expected<std::unique_ptr<ProgramRunner>> runner =
      ProgramRunner::prepare(**program, section == "step" ? "step program" : section, *device, *lt,
                             handle, moduleIndex, store, loadWeight, sizes, *plan, memory);
  if (!runner)
    return runner.takeError();
  (*runner)->usedArtifactPlan = plan->fromArtifact;
  return runner;
}

Status StepExecutor::selectShape(const SymbolBindings &sizes) {
  // Every persistent tensor exists by now: a later shape only finds them.
  WeightLoader existing = [&](const std::string &name, DType, const std::vector<int64_t> &,
                              const std::string &, const std::vector<int64_t> &,
                              const std::vector<WeightMember> &,
                              int64_t) -> Expected<NamedTensor *> {
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
      Expected<int64_t> count =
          current->runner->getProgram().elementCount(arg.buffer, current->sizes);
      if (!count)
        return count.takeError();
      return std::make_pair(current->runner->getProgram().buffers[arg.buffer].dtype, *count);
    }
  return Error{"the step has no data input '" + name + "'"};
}

Status StepExecutor::setInput(const std::string &name, const void *data, DType dtype,
                              size_t count) {
  // The loop programs of the shape read the same inputs (each its own
  // buffers): the step, accum or eval program may run next.
  bool found = false;
  for (ProgramRunner *runner : {current->runner.get(), current->accum.get(), current->eval.get()}) {
    if (!runner)
      continue;
    for (const ProgramBinding &arg : runner->getProgram().args)
      if (arg.role == "input" && arg.name == name) {
        Expected<std::string> bytes =
            convertElements(data, dtype, runner->getProgram().buffers[arg.buffer].dtype, count);
        if (!bytes)
          return Error{"input '" + name + "': " + bytes.getError()};
        if (Status s = runner->upload(arg.buffer, *bytes, device->getStream()); !s)
          return Error{"input '" + name + "': " + s.getError()};
        found = true;
        break;
      }
  }
  if (!found)
    return Error{"the step has no data input '" + name + "'"};
  return device->synchronize();
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
      Expected<std::string> bytes =
          convertElements(checkpoint.data(*info), info->dtype, t.dtype, t.count);
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
                                           std::vector<ActionTime> *times,
                                           const std::function<Status(size_t)> *hook,
                                           double *deviceMs) {
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
      bytes = scalarBytes(dtype,
                          static_cast<double>(options.seed + (stepNumber - 1) * perStep + seeds++));
    else
      continue;
    if (Status s = step->upload(arg.buffer, bytes, stream); !s)
      return s.takeError();
  }
  Status ran = Status::success();
  DeviceEvents events(*device);
  if (deviceMs)
    if (Status s = events.start(stream); !s)
      return s.takeError();
  if (hook) {
    ran = step->recordWithHook(stream, *hook);
  } else if (times) {
    Expected<std::vector<ActionTime>> profiled = step->profile(stream);
    if (!profiled)
      return profiled.takeError();
    *times = std::move(*profiled);
  } else {
    ran = graphs ? graphs->run(current->program, current->graphKey,
                               [&](CUstream s) { return step->record(s); })
                 : step->record(stream);
  }
  if (!ran)
    return ran.takeError();
  lastGradNorm.reset();
  for (const ProgramBinding &result : p.results)
    if (result.role == "grad_norm") {
      Expected<std::string> bytes = step->downloadBuffer(result.buffer);
      if (!bytes)
        return bytes.takeError();
      Expected<std::string> value =
          convertElements(bytes->data(), p.buffers[result.buffer].dtype, DType::F64, 1);
      if (!value)
        return value.takeError();
      double norm;
      std::memcpy(&norm, value->data(), 8);
      lastGradNorm = norm;
    }
  if (deviceMs) {
    Expected<double> ms = events.stop(stream);
    if (!ms)
      return ms.takeError();
    *deviceMs = *ms;
  }
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
size_t StepExecutor::getThinGemmCount() const { return current->runner->thinGemms; }
size_t StepExecutor::getLoraPairCount() const { return current->runner->loraPairCount; }

std::string StepExecutor::getAttentionSummary() const {
  const ProgramRunner &r = *current->runner;
  if (!r.cudnnAttention && !r.kernelAttention && !r.hopperAttention)
    return "";
  std::string line =
      "attention: " + std::to_string(r.cudnnAttention) + " launches on " +
      (cudnn ? cudnn->describe() : std::string("cuDNN")) + ", " +
      (r.hopperAttention ? std::to_string(r.hopperAttention) + " on kiln_fa90 (sm_90a), "
                         : std::string()) +
      std::to_string(r.kernelAttention) + " on kernels";
  if (!cudnnNote.empty())
    line += " (cuDNN: " + cudnnNote + ")";
  else if (!r.attentionNote.empty())
    line += " (" + r.attentionNote + ")";
  if (r.scratchInPlan || r.scratchOutside)
    line += "; its statistics and workspace: " + std::to_string(r.scratchInPlan) +
            " bytes in the plan's free space, " + std::to_string(r.scratchOutside) +
            " bytes beside it";
  return line;
}

//===----------------------------------------------------------------------===//
// Tuning (docs/tuning.md): counts, variants, and the hooks kiln-run tune uses
//===----------------------------------------------------------------------===//

size_t StepExecutor::getTunedOpCount() const {
  size_t n = 0;
  for (const auto &entry : shapes)
    n += entry.second.runner->tunedOps;
  return n;
}

size_t StepExecutor::getDefaultOpCount() const {
  size_t n = 0;
  for (const auto &entry : shapes)
    n += entry.second.runner->defaultOps;
  return n;
}

std::string StepExecutor::getTuningNote() const {
  for (const auto &entry : shapes)
    if (!entry.second.runner->tuningNote.empty())
      return entry.second.key + ": " + entry.second.runner->tuningNote;
  return "";
}

std::vector<StepExecutor::GemmSite> StepExecutor::getGemmSites() const {
  return current->runner->getGemmSites();
}

Expected<std::vector<cublasLtMatmulAlgo_t>> StepExecutor::getGemmCandidates(size_t site,
                                                                            int topK) const {
  return current->runner->getGemmCandidates(site, topK);
}

Expected<std::vector<cublasLtMatmulAlgo_t>>
StepExecutor::getGemmSearchSpace(size_t site, const std::vector<cublasLtMatmulAlgo_t> &seeds,
                                 size_t limit) const {
  return current->runner->getGemmSearchSpace(site, seeds, limit);
}

Expected<GemmConfig> StepExecutor::getGemmConfig(const cublasLtMatmulAlgo_t &algo) const {
  return readGemmConfig(*lt, algo);
}

std::vector<StepExecutor::Nf4Site> StepExecutor::getNf4Sites() const {
  return current->runner->getNf4Sites();
}

Status StepExecutor::enqueueNf4Site(size_t site, bool fused) const {
  return current->runner->enqueueNf4Site(site, fused, device->getStream());
}

std::vector<StepExecutor::LaunchSite> StepExecutor::getLaunchSites() const {
  return current->runner->getLaunchSites();
}

Status StepExecutor::enqueueLaunch(size_t site, size_t shape) const {
  return current->runner->enqueueLaunch(site, shape, device->getStream());
}

Status StepExecutor::enqueueGemm(size_t site, const cublasLtMatmulAlgo_t &algo, CUdeviceptr a,
                                 CUdeviceptr b) const {
  return current->runner->enqueueGemm(site, algo, a, b, device->getStream());
}

std::optional<StepExecutor::AttentionSite> StepExecutor::getAttentionSite() const {
  const ProgramRunner &r = *current->runner;
  if (r.attentionHash.empty())
    return std::nullopt;
  return AttentionSite{r.attentionHash, shapeKey(current->sizes), r.attentionLabel,
                       r.cudnnAttention, r.kernelAttention};
}

Status StepExecutor::prepareVariant(const std::string &name, const TuningDb *tuning,
                                    std::optional<bool> attentionOnCudnn) {
  const Shape &base = shapes.at(current->key);
  if (attentionOnCudnn && *attentionOnCudnn && !cudnn)
    return Error{"cuDNN is not loaded" + (cudnnNote.empty() ? "" : " (" + cudnnNote + ")")};
  WeightLoader existing = [&](const std::string &weight, DType, const std::vector<int64_t> &,
                              const std::string &, const std::vector<int64_t> &,
                              const std::vector<WeightMember> &,
                              int64_t) -> Expected<NamedTensor *> {
    auto it = store.find(weight);
    if (it == store.end())
      return Error{"weight '" + weight + "' was not loaded"};
    return &it->second;
  };
  const CudnnAttention *cudnnFor = attentionOnCudnn && !*attentionOnCudnn ? nullptr : cudnn.get();
  Expected<std::unique_ptr<ProgramRunner>> runner =
      prepareRunner(base.sizes, existing, tuning, cudnnFor, /*printNote=*/false);
  if (!runner)
    return runner.takeError();
  Shape &variant = variants[base.key + "#" + name];
  variant.program = base.program;
  variant.key = base.key;
  variant.sizes = base.sizes;
  variant.runner = std::move(*runner);
  // A new graph key: a graph captured from a replaced variant is never replayed.
  variant.graphKey = base.key + "#" + name + "#" + std::to_string(++variantGeneration);
  // The data inputs setInput gave the shape (arguments are per runner).
  if (Status s = variant.runner->copyInputsFrom(*base.runner, device->getStream()); !s)
    return s;
  current = &shapes.at(base.key);
  return Status::success();
}

Status StepExecutor::selectVariant(const std::string &name) {
  if (name.empty()) {
    current = &shapes.at(current->key);
    return Status::success();
  }
  auto it = variants.find(current->key + "#" + name);
  if (it == variants.end())
    return Error{current->key + ": no variant '" + name + "'"};
  current = &it->second;
  return Status::success();
}

Expected<double> StepExecutor::runStepWithHook(int64_t stepNumber, double lr,
                                               const std::function<Status(size_t)> &beforeAction) {
  return runStepWith(stepNumber, lr, nullptr, &beforeAction, nullptr);
}

Expected<double> StepExecutor::runTimedStep(int64_t stepNumber, double lr, double &deviceMs) {
  return runStepWith(stepNumber, lr, nullptr, nullptr, &deviceMs);
}

Status StepExecutor::snapshotTrainable() {
  snapshot.clear();
  const CudaDriver &driver = device->getDriver();
  for (const std::vector<std::string> *names : {&paramNames, &stateNames})
    for (const std::string &name : *names) {
      NamedTensor &t = store.at(name);
      Expected<DeviceBuffer> copy = DeviceBuffer::allocate(*device, t.memory.size());
      if (!copy)
        return Error{"a copy of '" + name + "' to restore after measuring: " + copy.getError()};
      if (Status s =
              device->check(driver.cuMemcpyDtoDAsync_v2(copy->get(), t.memory.get(),
                                                        t.memory.size(), device->getStream()),
                            "cuMemcpyDtoDAsync");
          !s)
        return s;
      snapshot.emplace_back(&t, std::move(*copy));
    }
  return device->synchronize();
}

Status StepExecutor::restoreTrainable() {
  const CudaDriver &driver = device->getDriver();
  for (auto &[tensor, copy] : snapshot)
    if (Status s = device->check(driver.cuMemcpyDtoDAsync_v2(tensor->memory.get(), copy.get(),
                                                             copy.size(), device->getStream()),
                                 "cuMemcpyDtoDAsync");
        !s)
      return s;
  return device->synchronize();
}
