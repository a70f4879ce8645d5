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
#include <optional>
#include <string>
#include <string_view>
#include <vector>

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
  /// With KILN_MEMORY_TRACE=1 in the environment: one line on stderr with
  /// the device memory in use beyond the first traced point and the change
  /// since the last one, after synchronizing (where the measured peak goes
  /// beyond the plan). Nothing otherwise.
  void traceMemory(const std::string &stage) const;

private:
  Device() = default;
  mutable std::optional<size_t> traceStartFree, traceLastFree;
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
  static Expected<KernelModule> load(const Device &device, std::string_view image, bool isPtx,
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

/// The runtime's own kernels (lib/kernels/SupportKernels.cu, embedded):
///   kiln_fill(u8 *target, u32 pattern, u64 bytes): byte i = pattern byte i%4
///   kiln_copy(u8 *target, const u8 *source, u64 bytes)
/// Grid-stride loops: any grid covers any size.
Expected<KernelModule> loadSupportKernels(const Device &device);

/// CUDA Graphs by program and shape. A key (a program: the symbolic step or
/// one shape bucket) keeps up to \p execsPerKey executable graphs, one per
/// shape, each captured and instantiated on its shape's first run() and
/// replayed after. A new shape beyond that reuses the key's least recently
/// used executable graph: its graph is recorded (once; kept for later) and
/// patched into that executable graph with cuGraphExecUpdate — kernel
/// arguments, grids, memset and copy extents — far cheaper than
/// instantiating; when the topology differs (cuBLASLt chose a kernel
/// sequence of another length at the new sizes) the driver refuses and the
/// graph is instantiated afresh in its place. The recorded work must not
/// depend on host values that change between runs of one shape (sizes are
/// fixed per shape; data lives in the arena).
class GraphCache {
public:
  explicit GraphCache(const Device &device, size_t execsPerKey = 8)
      : driver(&device.getDriver()), stream(device.getStream()),
        execsPerKey(execsPerKey < 1 ? 1 : execsPerKey) {}
  GraphCache(const GraphCache &) = delete;
  GraphCache &operator=(const GraphCache &) = delete;
  ~GraphCache();

  Status run(const std::string &key, const std::string &shape,
             const std::function<Status(CUstream)> &record);
  Status run(const std::string &key, const std::function<Status(CUstream)> &record) {
    return run(key, "", record);
  }
  /// Executable graphs held, over all keys.
  size_t getGraphCount() const;
  /// How many (key, shape) graphs were recorded.
  size_t getCaptureCount() const { return captures; }
  /// How many executable graphs were instantiated.
  size_t getInstantiateCount() const { return instantiations; }
  /// How many new shapes were patched into an executable graph.
  size_t getUpdateCount() const { return updates; }
  /// Why the driver last refused a patch ("topology changed"); empty if it
  /// never did.
  const std::string &getLastRefusal() const { return lastRefusal; }

private:
  struct Exec {
    CUgraphExec exec = nullptr;
    std::string shape; ///< The shape it runs now.
    uint64_t lastUse = 0;
  };
  struct Entry {
    std::vector<Exec> execs;
    std::map<std::string, CUgraph> byShape; ///< Recorded graphs.
  };
  Status check(CUresult result, const char *what) const;
  Expected<CUgraph> capture(const std::string &key, const std::function<Status(CUstream)> &record);
  const CudaDriver *driver;
  CUstream stream;
  size_t execsPerKey;
  std::map<std::string, Entry> graphs;
  uint64_t clock = 0;
  size_t captures = 0, instantiations = 0, updates = 0;
  std::string lastRefusal;
};

/// "12.3 GiB".
std::string formatGiB(size_t bytes);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_DEVICE_H
