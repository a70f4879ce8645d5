//===- CudaDriver.cpp - Load the CUDA driver at run time --------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/CudaDriver.h"

#include <dlfcn.h>

#include <iomanip>
#include <sstream>
#include <string_view>

using namespace kiln::runtime;

#define KILN_STRINGIFY_IMPL(x) #x
#define KILN_STRINGIFY(x) KILN_STRINGIFY_IMPL(x)

/// glibc's dlerror() repeats the library name ("libcuda.so.1: cannot open
/// ..."); drop it, since the message names the library already.
static std::string dlopenReason(const char *library) {
  const char *reason = ::dlerror();
  if (!reason)
    return "unknown dlopen error";
  std::string_view text(reason);
  std::string prefix = std::string(library) + ": ";
  if (text.substr(0, prefix.size()) == prefix)
    text.remove_prefix(prefix.size());
  return std::string(text);
}

Expected<CudaDriver> CudaDriver::load(const char *library) {
  // RTLD_LOCAL keeps the driver's symbols out of the global namespace;
  // RTLD_NOW surfaces a broken install here rather than at a later call.
  // The handle is never closed: unloading libcuda while the process may still
  // use it is unsafe, and nothing would be gained.
  void *handle = ::dlopen(library, RTLD_NOW | RTLD_LOCAL);
  if (!handle)
    return Error{"no CUDA driver found (" + std::string(library) + ": " + dlopenReason(library) +
                 "); kiln-run needs an NVIDIA GPU and driver"};

  CudaDriver driver;
  // If <cuda.h> maps the name to another one (cuDeviceTotalMem ->
  // cuDeviceTotalMem_v2), dlsym(#name) would find the legacy ABI.
#define KILN_CUDA_DRIVER_SYMBOL(name)                                                              \
  static_assert(std::string_view(#name) == KILN_STRINGIFY(name),                                   \
                "<cuda.h> renames " #name "; list the versioned name in CudaDriverSymbols.def");   \
  driver.name = reinterpret_cast<decltype(driver.name)>(::dlsym(handle, #name));                   \
  if (!driver.name)                                                                                \
    return Error{std::string(library) + " does not export " #name                                  \
                                        "; the NVIDIA driver is too old for kiln-run"};
#include "kiln/runtime/CudaDriverSymbols.def"

  if (CUresult result = driver.cuInit(0); result != CUDA_SUCCESS)
    return Error{"cuInit failed: " + driver.describe(result)};
  if (CUresult result = driver.cuDriverGetVersion(&driver.driverVersion); result != CUDA_SUCCESS)
    return Error{"cuDriverGetVersion failed: " + driver.describe(result)};
  return driver;
}

std::string CudaDriver::describe(CUresult result) const {
  const char *name = nullptr;
  const char *text = nullptr;
  if (cuGetErrorName(result, &name) != CUDA_SUCCESS || !name)
    return "CUresult " + std::to_string(static_cast<int>(result));
  if (cuGetErrorString(result, &text) != CUDA_SUCCESS || !text)
    return name;
  return std::string(name) + " (" + text + ")";
}

Expected<std::vector<DeviceInfo>> CudaDriver::listDevices() const {
  auto failed = [&](const char *call, int ordinal, CUresult result) {
    return Error{std::string(call) + " failed for device " + std::to_string(ordinal) + ": " +
                 describe(result)};
  };

  int count = 0;
  if (CUresult result = cuDeviceGetCount(&count); result != CUDA_SUCCESS)
    return Error{"cuDeviceGetCount failed: " + describe(result)};
  if (count == 0)
    return Error{"no CUDA device visible"};

  std::vector<DeviceInfo> devices;
  for (int ordinal = 0; ordinal < count; ++ordinal) {
    DeviceInfo info;
    info.ordinal = ordinal;
    CUdevice device;
    if (CUresult result = cuDeviceGet(&device, ordinal); result != CUDA_SUCCESS)
      return failed("cuDeviceGet", ordinal, result);

    char name[256] = {};
    if (CUresult result = cuDeviceGetName(name, sizeof(name), device); result != CUDA_SUCCESS)
      return failed("cuDeviceGetName", ordinal, result);
    info.name = name;

    struct {
      CUdevice_attribute attribute;
      int *value;
    } attributes[] = {
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, &info.computeCapabilityMajor},
        {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, &info.computeCapabilityMinor},
        {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, &info.multiprocessorCount},
    };
    for (auto &[attribute, value] : attributes)
      if (CUresult result = cuDeviceGetAttribute(value, attribute, device); result != CUDA_SUCCESS)
        return failed("cuDeviceGetAttribute", ordinal, result);

    if (CUresult result = cuDeviceTotalMem_v2(&info.totalMemoryBytes, device);
        result != CUDA_SUCCESS)
      return failed("cuDeviceTotalMem", ordinal, result);
    devices.push_back(std::move(info));
  }
  return devices;
}

std::string kiln::runtime::formatDevice(const DeviceInfo &device) {
  std::ostringstream out;
  out << "device " << device.ordinal << ": " << device.name << ", sm_"
      << device.computeCapabilityMajor << device.computeCapabilityMinor << ", " << std::fixed
      << std::setprecision(1) << static_cast<double>(device.totalMemoryBytes) / (1ull << 30)
      << " GiB, " << device.multiprocessorCount << " SMs";
  return out.str();
}
