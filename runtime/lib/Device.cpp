//===- Device.cpp - Context, arena, kernel images, graph replay -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/Device.h"

#include <cstdio>

using namespace kiln::runtime;

std::string kiln::runtime::formatGiB(size_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GiB",
                static_cast<double>(bytes) / (1ull << 30));
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
    return Error{"no device " + std::to_string(ordinal) + " (" +
                 std::to_string(devices->size()) + " visible)"};
  Device device;
  device.driver = &driver;
  device.info = (*devices)[ordinal];
  if (Status status = device.check(driver.cuDeviceGet(&device.device, ordinal),
                                   "cuDeviceGet");
      !status)
    return status.takeError();
  // The primary context is the one the CUDA runtime (and so cuBLASLt) uses.
  if (Status status = device.check(
          driver.cuDevicePrimaryCtxRetain(&device.context, device.device),
          "cuDevicePrimaryCtxRetain");
      !status)
    return status.takeError();
  if (Status status = device.check(driver.cuCtxSetCurrent(device.context),
                                   "cuCtxSetCurrent");
      !status)
    return status.takeError();
  // Non-blocking: the step's stream must not serialize with the legacy
  // default stream that libraries may use.
  if (Status status = device.check(
          driver.cuStreamCreate(&device.stream, CU_STREAM_NON_BLOCKING),
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
  if (Status status =
          check(driver->cuMemGetInfo_v2(&free, &total), "cuMemGetInfo");
      !status)
    return status.takeError();
  return std::make_pair(free, total);
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
    std::string available = memory ? formatGiB(memory->first) + " free of " +
                                         formatGiB(memory->second)
                                   : "unknown free memory";
    return Error{"out of memory: the step's arena needs " + formatGiB(bytes) +
                 " (" + std::to_string(bytes) + " bytes, the planned peak), " +
                 "device " + std::to_string(device.getInfo().ordinal) +
                 " has " + available};
  }
  if (Status status = device.check(result, "cuMemAlloc"); !status)
    return status.takeError();
  return arena;
}

Arena::Arena(Arena &&other) noexcept
    : driver(other.driver), base(other.base), size(other.size) {
  other.base = 0;
}

Arena::~Arena() {
  if (base)
    driver->cuMemFree_v2(base);
}

//===----------------------------------------------------------------------===//
// KernelModule
//===----------------------------------------------------------------------===//

Expected<KernelModule> KernelModule::load(const Device &device,
                                          std::string_view image, bool isPtx,
                                          const std::string &name) {
  KernelModule module;
  module.driver = &device.getDriver();
  module.name = name;
  // PTX must be NUL-terminated; a cubin is passed as is.
  std::string data(image);
  if (isPtx)
    data.push_back('\0');
  char log[4096] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER,
                            CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void *values[] = {log, reinterpret_cast<void *>(sizeof(log))};
  CUresult result = device.getDriver().cuModuleLoadDataEx(
      &module.module, data.data(), 2, options, values);
  if (result != CUDA_SUCCESS) {
    std::string details = log;
    for (char &c : details)
      if (c == '\n' || c == '\r')
        c = ' ';
    while (!details.empty() && details.back() == ' ')
      details.pop_back();
    module.module = nullptr;
    return Error{"kernel image '" + name +
                 "' failed to load: " + device.getDriver().describe(result) +
                 (details.empty() ? "" : ": " + details)};
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
  CUresult result =
      driver->cuModuleGetFunction(&function, module, entry.c_str());
  if (result != CUDA_SUCCESS)
    return Error{"kernel image '" + name + "' has no entry '" + entry +
                 "': " + driver->describe(result)};
  return function;
}

//===----------------------------------------------------------------------===//
// GraphCache
//===----------------------------------------------------------------------===//

GraphCache::~GraphCache() {
  for (auto &[key, entry] : graphs) {
    if (entry.exec)
      driver->cuGraphExecDestroy(entry.exec);
    for (auto &[shape, graph] : entry.byShape)
      driver->cuGraphDestroy(graph);
  }
}

Status GraphCache::check(CUresult result, const char *what) const {
  if (result == CUDA_SUCCESS)
    return Status::success();
  return Error{std::string(what) + " failed: " + driver->describe(result)};
}

Expected<CUgraph> GraphCache::capture(const std::string &key,
                                      const std::function<Status(CUstream)> &record) {
  // Thread-local capture: other threads' CUDA calls stay legal meanwhile.
  if (Status status = check(driver->cuStreamBeginCapture_v2(
                                stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
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

Status GraphCache::run(const std::string &key, const std::string &shape,
                       const std::function<Status(CUstream)> &record) {
  auto it = graphs.find(key);
  if (it == graphs.end() || it->second.shape != shape) {
    Entry scratch;
    Entry &entry = it == graphs.end() ? scratch : it->second;
    CUgraph graph = nullptr;
    if (auto known = entry.byShape.find(shape); known != entry.byShape.end()) {
      graph = known->second;
    } else {
      Expected<CUgraph> captured = capture(key, record);
      if (!captured)
        return captured.takeError();
      graph = *captured;
      entry.byShape[shape] = graph;
    }
    // Same topology: patch the executable graph's node parameters.
    bool patched = false;
    if (entry.exec) {
      CUgraphExecUpdateResultInfo info{};
      patched = driver->cuGraphExecUpdate_v2(entry.exec, graph, &info) == CUDA_SUCCESS;
      if (patched) {
        ++updates;
      } else {
        driver->cuGraphExecDestroy(entry.exec);
        entry.exec = nullptr;
      }
    }
    if (!patched) {
      if (Status status = check(driver->cuGraphInstantiateWithFlags(&entry.exec, graph, 0),
                                "cuGraphInstantiate");
          !status) {
        // The key starts over on its next run.
        for (auto &[recorded, g] : entry.byShape)
          driver->cuGraphDestroy(g);
        if (it != graphs.end())
          graphs.erase(it);
        return status;
      }
      ++instantiations;
    }
    entry.shape = shape;
    if (it == graphs.end())
      it = graphs.emplace(key, std::move(scratch)).first;
  }
  return check(driver->cuGraphLaunch(it->second.exec, stream), "cuGraphLaunch");
}
