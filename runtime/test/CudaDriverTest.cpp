//===- CudaDriverTest.cpp - Tests for CudaDriver ----------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Self-contained checks (no test framework: the runtime depends only on the
// CUDA toolkit). Without arguments every check must pass on any machine, with
// or without a GPU; `--require-gpu` also demands a working driver and device.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/runtime/CudaDriver.h"

#include <cstdio>
#include <cstring>
#include <string>

using namespace kiln::runtime;

static bool startsWith(const std::string &s, const std::string &prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

static bool endsWith(const std::string &s, const std::string &suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

static void testFormatDevice() {
  DeviceInfo h200{0, "NVIDIA H200", 9, 0, 150119243776ull, 132};
  CHECK_EQ(formatDevice(h200), "device 0: NVIDIA H200, sm_90, 139.8 GiB, 132 SMs");
  DeviceInfo future{3, "Some GPU", 12, 1, 8ull << 30, 48};
  CHECK_EQ(formatDevice(future), "device 3: Some GPU, sm_121, 8.0 GiB, 48 SMs");
}

// The error paths, reached deterministically by loading other libraries.
static void testLoadErrors() {
  Expected<CudaDriver> missing = CudaDriver::load("libkiln-no-such-driver.so.1");
  CHECK(!missing);
  CHECK_EQ(missing.getError(), "no CUDA driver found (libkiln-no-such-driver.so.1: cannot open "
                               "shared object file: No such file or directory); kiln-run needs an "
                               "NVIDIA GPU and driver");

  // A real library that is not the driver: the first symbol lookup fails.
  Expected<CudaDriver> notADriver = CudaDriver::load("libc.so.6");
  CHECK(!notADriver);
  CHECK_EQ(notADriver.getError(),
           "libc.so.6 does not export cuGetErrorName; the NVIDIA driver is too "
           "old for kiln-run");
}

// The real driver: either it works, or loading fails with one clear line.
static void testLoadDriver(bool requireGpu) {
  Expected<CudaDriver> driver = CudaDriver::load();
  if (!driver) {
    const std::string &error = driver.getError();
    std::printf("driver: %s\n", error.c_str());
    CHECK(!requireGpu);
    CHECK(error.find('\n') == std::string::npos);
    CHECK((startsWith(error, "no CUDA driver found (libcuda.so.1: ") &&
           endsWith(error, "); kiln-run needs an NVIDIA GPU and driver")) ||
          startsWith(error, "cuInit failed: CUDA_ERROR_"));
    return;
  }

  std::printf("driver: CUDA %d.%d\n", driver->getDriverVersion() / 1000,
              driver->getDriverVersion() % 1000 / 10);
  CHECK(driver->getDriverVersion() > 0);
  CHECK_EQ(driver->describe(CUDA_ERROR_INVALID_VALUE),
           "CUDA_ERROR_INVALID_VALUE (invalid argument)");

  Expected<std::vector<DeviceInfo>> devices = driver->listDevices();
  if (!devices) {
    std::printf("devices: %s\n", devices.getError().c_str());
    CHECK(!requireGpu);
    CHECK_EQ(devices.getError(), "no CUDA device visible");
    return;
  }
  CHECK(!devices->empty());
  for (const DeviceInfo &device : *devices) {
    std::printf("%s\n", formatDevice(device).c_str());
    CHECK(!device.name.empty());
    CHECK(device.computeCapabilityMajor >= 5);
    CHECK(device.totalMemoryBytes > 0);
    CHECK(device.multiprocessorCount > 0);
  }
}

int main(int argc, char **argv) {
  bool requireGpu = argc == 2 && !std::strcmp(argv[1], "--require-gpu");
  if (argc > 2 || (argc == 2 && !requireGpu)) {
    std::fprintf(stderr, "usage: CudaDriverTest [--require-gpu]\n");
    return 2;
  }
  testFormatDevice();
  testLoadErrors();
  testLoadDriver(requireGpu);
  return finishChecks();
}
