//===- Device.h - Context, arena, kernel images, graph replay ---*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The pieces of step execution that do not depend on how the step program
// is encoded: one device's primary context and stream, the single arena all
// of a step's buffers live in (allocated once, with a clear out-of-memory
// report), kernel images loaded from cubin or JIT-compiled from PTX with the
// JIT log in the error, and a cache of CUDA Graphs — one per program (the
// symbolic step or a shape bucket), captured on first use, replayed after,
// and patched in place for a new shape.
//
// Every object keeps a pointer to the CudaDriver it was made with, which
// must outlive it, and arenas, modules and graphs must be destroyed before
// their Device. Needs a GPU; tested by RuntimeGpuTest (label gpu).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_DEVICE_H
#define KILN_RUNTIME_DEVICE_H

#include "kiln/runtime/CudaDriver.h"

#include <functional>
#include <map>
#include <string>
#include <string_view>

namespace kiln::runtime {

/// One device's primary context, current on the calling thread, and a
/// stream. Move-only.
class Device {
public:
  static Expected<Device> open(const CudaDriver &driver, int ordinal);
  Device(Device &&other) noexcept;
  Device &operator=(Device &&) = delete;
  Device(const Device &) = delete;
  ~Device();

  const CudaDriver &getDriver() const { return *driver; }
  const DeviceInfo &getInfo() const { return info; }
  CUstream getStream() const { return stream; }

  /// Free and total device memory now.
  Expected<std::pair<size_t, size_t>> getMemoryInfo() const;
  /// "<what> failed: CUDA_ERROR_X (text)" for a failed \p result.
  Status check(CUresult result, const char *what) const;
  Status synchronize() const;

private:
  Device() = default;
  const CudaDriver *driver = nullptr;
  DeviceInfo info;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
};

/// The one device allocation of a step. Move-only; freed on destruction.
class Arena {
public:
  /// Allocates \p bytes; out of memory is one line with the planned size
  /// and the device's free and total memory.
  static Expected<Arena> allocate(const Device &device, size_t bytes);
  Arena(Arena &&other) noexcept;
  Arena &operator=(Arena &&) = delete;
  Arena(const Arena &) = delete;
  ~Arena();

  CUdeviceptr getBase() const { return base; }
  size_t getSize() const { return size; }

private:
  Arena() = default;
  const CudaDriver *driver = nullptr;
  CUdeviceptr base = 0;
  size_t size = 0;
};

/// A loaded kernel image. Move-only; unloaded on destruction.
class KernelModule {
public:
  /// Loads \p image (a cubin, or PTX text the driver JIT-compiles for this
  /// device). \p name (the artifact section) names it in errors, which carry
  /// the JIT log on one line.
  static Expected<KernelModule> load(const Device &device,
                                     std::string_view image, bool isPtx,
                                     const std::string &name);
  KernelModule(KernelModule &&other) noexcept;
  KernelModule &operator=(KernelModule &&) = delete;
  KernelModule(const KernelModule &) = delete;
  ~KernelModule();

  Expected<CUfunction> getFunction(const std::string &entry) const;

private:
  KernelModule() = default;
  const CudaDriver *driver = nullptr;
  CUmodule module = nullptr;
  std::string name;
};

/// CUDA Graphs by program and shape. A key (a program: the symbolic step or
/// one shape bucket) has one executable graph. Its first run() captures what
/// \p record enqueues and instantiates it; later runs at the same shape
/// replay it. A run at a new shape of the same key records that shape's
/// graph (once; kept for later switches back) and patches the executable
/// graph in place with cuGraphExecUpdate — kernel arguments, grids, memset
/// and copy extents — which is far cheaper than instantiating; when the
/// topology differs (cuBLASLt picked a kernel sequence of another length)
/// the update is refused and the key is instantiated afresh. The recorded
/// work must not depend on host values that change between runs of one
/// shape (sizes are fixed per shape; data lives in the arena).
class GraphCache {
public:
  explicit GraphCache(const Device &device)
      : driver(&device.getDriver()), stream(device.getStream()) {}
  GraphCache(const GraphCache &) = delete;
  GraphCache &operator=(const GraphCache &) = delete;
  ~GraphCache();

  Status run(const std::string &key, const std::string &shape,
             const std::function<Status(CUstream)> &record);
  Status run(const std::string &key,
             const std::function<Status(CUstream)> &record) {
    return run(key, "", record);
  }
  /// Keys with an executable graph.
  size_t getGraphCount() const { return graphs.size(); }
  /// How many (key, shape) graphs were recorded.
  size_t getCaptureCount() const { return captures; }
  /// How many executable graphs were instantiated.
  size_t getInstantiateCount() const { return instantiations; }
  /// How many shape switches patched an executable graph in place.
  size_t getUpdateCount() const { return updates; }

private:
  struct Entry {
    CUgraphExec exec = nullptr;
    std::string shape;                   ///< The shape exec runs now.
    std::map<std::string, CUgraph> byShape; ///< Recorded graphs.
  };
  Status check(CUresult result, const char *what) const;
  Expected<CUgraph> capture(const std::string &key,
                            const std::function<Status(CUstream)> &record);
  const CudaDriver *driver;
  CUstream stream;
  std::map<std::string, Entry> graphs;
  size_t captures = 0, instantiations = 0, updates = 0;
};

/// "12.3 GiB".
std::string formatGiB(size_t bytes);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_DEVICE_H
