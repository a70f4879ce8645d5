//===- CudaDriver.h - Load the CUDA driver at run time ----------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Kiln's runtime tools are built and tested on machines without an NVIDIA
// driver. A binary linked against libcuda does not even start there, so the
// runtime never links it: CudaDriver dlopen()s libcuda.so.1 and resolves the
// entry points listed in CudaDriverSymbols.def. A missing driver or GPU then
// becomes a one-line error instead of a loader failure.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDADRIVER_H
#define KILN_RUNTIME_CUDADRIVER_H

#include "kiln/runtime/Expected.h"

#include <cuda.h>

#include <cstddef>
#include <string>
#include <vector>

namespace kiln::runtime {

/// What `kiln-run devices` reports about one device.
struct DeviceInfo {
  int ordinal = 0;
  std::string name;
  int computeCapabilityMajor = 0;
  int computeCapabilityMinor = 0;
  std::size_t totalMemoryBytes = 0;
  int multiprocessorCount = 0;
};

/// Formats \p device as "device 0: NVIDIA H200, sm_90, 139.8 GiB, 132 SMs".
std::string formatDevice(const DeviceInfo &device);

/// The CUDA driver API, loaded at run time and initialized (cuInit).
class CudaDriver {
public:
  static constexpr const char *kDefaultLibrary = "libcuda.so.1";

  /// Opens \p library, resolves every symbol of CudaDriverSymbols.def and
  /// calls cuInit. Tests pass another library name to reach the error paths.
  static Expected<CudaDriver> load(const char *library = kDefaultLibrary);

  /// The driver's CUDA version, e.g. 13000 for CUDA 13.0.
  int getDriverVersion() const { return driverVersion; }

  /// The visible devices; an error if there are none.
  Expected<std::vector<DeviceInfo>> listDevices() const;

  /// "CUDA_ERROR_X (text)" for \p result, as the driver names it.
  std::string describe(CUresult result) const;

  // One function pointer per entry of CudaDriverSymbols.def, named and typed
  // like the driver function (e.g. `driver.cuInit(0)`).
#define KILN_CUDA_DRIVER_SYMBOL(name) decltype(&::name) name = nullptr;
#include "kiln/runtime/CudaDriverSymbols.def"

private:
  CudaDriver() = default;

  int driverVersion = 0;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CUDADRIVER_H
