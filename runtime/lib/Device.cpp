//===- Device.cpp - Context, arena, kernel images, graph replay -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/Device.h"

#include "SupportKernelsImage.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

using namespace kiln::runtime;

std::string kiln::runtime::formatGiB(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB", static_cast<double>(bytes) / (1ull << 30));
  return text;
}

//===----------------------------------------------------------------------===//
// Device
//===----------------------------------------------------------------------===//

Expected<Device> Device::open(const CudaDriver &driver, int ordinal) {
  Expected<std::vector<DeviceInfo>> devices = driver.listDevices();
  if (!devices)
    return devices.takeError();
  if (ordinal < 0 || ordinal >= static_cast<int>(devices->size()))
    return Error{"no device " + std::to_string(ordinal) + " (" + std::to_string(devices->size()) +
                 " visible)"};
  Device device;
  device.driver = &driver;
  device.info = (*devices)[ordinal];
  if (Status status = device.check(driver.cuDeviceGet(&device.device, ordinal), "cuDeviceGet");
      !status)
    return status.takeError();
  // The primary context is the one the CUDA runtime (and so cuBLASLt) uses.
  if (Status status = device.check(driver.cuDevicePrimaryCtxRetain(&device.context, device.device),
                                   "cuDevicePrimaryCtxRetain");
      !status)
    return status.takeError();
  if (Status status = device.check(driver.cuCtxSetCurrent(device.context), "cuCtxSetCurrent");
      !status)
    return status.takeError();
  // Non-blocking: the step's stream must not serialize with the legacy
  // default stream that libraries may use.
  if (Status status = device.check(driver.cuStreamCreate(&device.stream, CU_STREAM_NON_BLOCKING),
                                   "cuStreamCreate");
      !status)
    return status.takeError();
  return device;
}

Device::Device(Device &&other) noexcept
    : driver(other.driver), info(std::move(other.info)), device(other.device),
      context(other.context), stream(other.stream) {
  other.context = nullptr;
  other.stream = nullptr;
}

Device::~Device() {
  if (stream)
    driver->cuStreamDestroy_v2(stream);
  if (context)
    driver->cuDevicePrimaryCtxRelease_v2(device);
}

Status Device::check(CUresult result, const char *what) const {
  if (result == CUDA_SUCCESS)
    return Status::success();
  return Error{std::string(what) + " failed: " + driver->describe(result)};
}

Status Device::synchronize() const {
  return check(driver->cuStreamSynchronize(stream), "cuStreamSynchronize");
}

Expected<std::pair<size_t, size_t>> Device::getMemoryInfo() const {
  size_t free = 0, total = 0;
  if (Status status = check(driver->cuMemGetInfo_v2(&free, &total), "cuMemGetInfo"); !status)
    return status.takeError();
  return std::make_pair(free, total);
}

void Device::traceMemory(const std::string &stage) const {
  static const bool enabled = [] {
    const char *v = std::getenv("KILN_MEMORY_TRACE");
    return v && *v && std::string(v) != "0";
  }();
  if (!enabled || !synchronize())
    return;
  Expected<std::pair<size_t, size_t>> memory = getMemoryInfo();
  if (!memory)
    return;
  size_t free = memory->first;
  if (!traceStartFree)
    traceStartFree = traceLastFree = free;
  auto delta = [](size_t before, size_t after) {
    return static_cast<long long>(before) - static_cast<long long>(after);
  };
  std::fprintf(stderr, "memory trace: %-52s in use %13lld bytes (%+lld)\n", stage.c_str(),
               delta(*traceStartFree, free), delta(*traceLastFree, free));
  traceLastFree = free;
}

//===----------------------------------------------------------------------===//
// Arena
//===----------------------------------------------------------------------===//

Expected<Arena> Arena::allocate(const Device &device, size_t bytes) {
  Arena arena;
  arena.driver = &device.getDriver();
  arena.size = bytes;
  CUresult result = device.getDriver().cuMemAlloc_v2(&arena.base, bytes);
  if (result == CUDA_ERROR_OUT_OF_MEMORY) {
    Expected<std::pair<size_t, size_t>> memory = device.getMemoryInfo();
    std::string available = memory
                                ? formatGiB(memory->first) + " free of " + formatGiB(memory->second)
                                : "unknown free memory";
    return Error{"out of memory: the step's arena needs " + formatGiB(bytes) + " (" +
                 std::to_string(bytes) + " bytes, the planned peak), " + "device " +
                 std::to_string(device.getInfo().ordinal) + " has " + available};
  }
  if (Status status = device.check(result, "cuMemAlloc"); !status)
    return status.takeError();
  return arena;
}

Arena::Arena(Arena &&other) noexcept : driver(other.driver), base(other.base), size(other.size) {
  other.base = 0;
}

Arena::~Arena() {
  if (base)
    driver->cuMemFree_v2(base);
}

//===----------------------------------------------------------------------===//
// KernelModule
//===----------------------------------------------------------------------===//

Expected<KernelModule> KernelModule::load(const Device &device, std::string_view image, bool isPtx,
                                          const std::string &name) {
  KernelModule module;
  module.driver = &device.getDriver();
  module.name = name;
  // PTX must be NUL-terminated; a cubin is passed as is.
  std::string data(image);
  if (isPtx)
    data.push_back('\0');
  char log[4096] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {log, reinterpret_cast<void *>(sizeof(log))};
  CUresult result =
      device.getDriver().cuModuleLoadDataEx(&module.module, data.data(), 2, options, values);
  if (result != CUDA_SUCCESS) {
    std::string details = log;
    for (char &c : details)
      if (c == '\n' || c == '\r')
        c = ' ';
    while (!details.empty() && details.back() == ' ')
      details.pop_back();
    module.module = nullptr;
    return Error{"kernel image '" + name + "' failed to load: " +
                 device.getDriver().describe(result) + (details.empty() ? "" : ": " + details)};
  }
  return module;
}

KernelModule::KernelModule(KernelModule &&other) noexcept
    : driver(other.driver), module(other.module), name(std::move(other.name)) {
  other.module = nullptr;
}

KernelModule::~KernelModule() {
  if (module)
    driver->cuModuleUnload(module);
}

Expected<CUfunction> KernelModule::getFunction(const std::string &entry) const {
  CUfunction function = nullptr;
  CUresult result = driver->cuModuleGetFunction(&function, module, entry.c_str());
  if (result != CUDA_SUCCESS)
    return Error{"kernel image '" + name + "' has no entry '" + entry +
                 "': " + driver->describe(result)};
  return function;
}

Expected<KernelModule> kiln::runtime::loadSupportKernels(const Device &device) {
  return KernelModule::load(device,
                            std::string_view(reinterpret_cast<const char *>(kSupportKernelsImage),
                                             sizeof(kSupportKernelsImage)),
                            /*isPtx=*/false, "runtime support kernels");
}

//===----------------------------------------------------------------------===//
// GraphCache
//===----------------------------------------------------------------------===//

GraphCache::~GraphCache() {
  for (auto &[key, entry] : graphs) {
    for (Exec &e : entry.execs)
      driver->cuGraphExecDestroy(e.exec);
    for (auto &[shape, graph] : entry.byShape)
      driver->cuGraphDestroy(graph);
  }
}

size_t GraphCache::getGraphCount() const {
  size_t count = 0;
  for (const auto &[key, entry] : graphs)
    count += entry.execs.size();
  return count;
}

Status GraphCache::check(CUresult result, const char *what) const {
  if (result == CUDA_SUCCESS)
    return Status::success();
  return Error{std::string(what) + " failed: " + driver->describe(result)};
}

Expected<CUgraph> GraphCache::capture(const std::string &key,
                                      const std::function<Status(CUstream)> &record) {
  // Thread-local capture: other threads' CUDA calls stay legal meanwhile.
  if (Status status =
          check(driver->cuStreamBeginCapture_v2(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
                "cuStreamBeginCapture");
      !status)
    return status.takeError();
  Status recorded = record(stream);
  CUgraph graph = nullptr;
  CUresult ended = driver->cuStreamEndCapture(stream, &graph);
  if (!recorded) {
    if (graph)
      driver->cuGraphDestroy(graph);
    return Error{"capturing the graph for '" + key + "': " + recorded.getError()};
  }
  if (Status status = check(ended, "cuStreamEndCapture"); !status)
    return status.takeError();
  ++captures;
  return graph;
}

namespace {
/// "parameters changed at a memset node".
std::string describeRefusal(const CudaDriver &driver, const CUgraphExecUpdateResultInfo &info) {
  const char *why = "refused";
  switch (info.result) {
  case CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED: why = "topology changed"; break;
  case CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED: why = "node type changed"; break;
  case CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED:
  case CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE:
    why = "kernel function changed";
    break;
  case CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED: why = "parameters changed"; break;
  case CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED: why = "not supported"; break;
  case CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED: why = "attributes changed"; break;
  default: break;
  }
  std::string text = why;
  CUgraphNodeType type;
  if (info.errorNode && driver.cuGraphNodeGetType(info.errorNode, &type) == CUDA_SUCCESS)
    text += type == CU_GRAPH_NODE_TYPE_KERNEL   ? " at a kernel node"
            : type == CU_GRAPH_NODE_TYPE_MEMSET ? " at a memset node"
            : type == CU_GRAPH_NODE_TYPE_MEMCPY ? " at a memcpy node"
                                                : " at a node of type " + std::to_string(type);
  return text;
}
/// "812 nodes: 805 kernel, 7 memset".
std::string describeNodes(const CudaDriver &driver, CUgraph graph) {
  size_t count = 0;
  if (driver.cuGraphGetNodes(graph, nullptr, &count) != CUDA_SUCCESS)
    return "?";
  std::vector<CUgraphNode> nodes(count);
  if (count && driver.cuGraphGetNodes(graph, nodes.data(), &count) != CUDA_SUCCESS)
    return "?";
  std::map<std::string, size_t> byType;
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    if (driver.cuGraphNodeGetType(node, &type) != CUDA_SUCCESS)
      continue;
    ++byType[type == CU_GRAPH_NODE_TYPE_KERNEL   ? "kernel"
             : type == CU_GRAPH_NODE_TYPE_MEMSET ? "memset"
             : type == CU_GRAPH_NODE_TYPE_MEMCPY ? "memcpy"
                                                 : "type " + std::to_string(type)];
  }
  std::string text = std::to_string(count) + " nodes:";
  for (const auto &[type, n] : byType)
    text += " " + std::to_string(n) + " " + type + ",";
  text.pop_back();
  return text;
}
} // namespace

Status GraphCache::run(const std::string &key, const std::string &shape,
                       const std::function<Status(CUstream)> &record) {
  Entry &entry = graphs[key];
  auto running = std::find_if(entry.execs.begin(), entry.execs.end(),
                              [&](const Exec &e) { return e.shape == shape; });
  if (running == entry.execs.end()) {
    CUgraph graph = nullptr;
    if (auto known = entry.byShape.find(shape); known != entry.byShape.end()) {
      graph = known->second;
    } else {
      Expected<CUgraph> captured = capture(key, record);
      if (!captured)
        return captured.takeError();
      graph = entry.byShape[shape] = *captured;
    }
    if (entry.execs.size() < execsPerKey) {
      entry.execs.push_back({});
      running = entry.execs.end() - 1;
    } else {
      // Same topology: patch the least recently used one in place.
      running =
          std::min_element(entry.execs.begin(), entry.execs.end(),
                           [](const Exec &a, const Exec &b) { return a.lastUse < b.lastUse; });
      CUgraphExecUpdateResultInfo info{};
      if (driver->cuGraphExecUpdate_v2(running->exec, graph, &info) == CUDA_SUCCESS) {
        ++updates;
      } else {
        lastRefusal = describeRefusal(*driver, info);
        if (info.result == CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED)
          lastRefusal += " (" + running->shape + ": " +
                         describeNodes(*driver, entry.byShape.at(running->shape)) + "; " + shape +
                         ": " + describeNodes(*driver, graph) + ")";
        driver->cuGraphExecDestroy(running->exec);
        running->exec = nullptr;
      }
    }
    if (!running->exec) {
      if (Status status = check(driver->cuGraphInstantiateWithFlags(&running->exec, graph, 0),
                                "cuGraphInstantiate");
          !status) {
        entry.execs.erase(running);
        return status;
      }
      ++instantiations;
    }
    running->shape = shape;
  }
  running->lastUse = ++clock;
  return check(driver->cuGraphLaunch(running->exec, stream), "cuGraphLaunch");
}
