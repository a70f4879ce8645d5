//===- kiln-run.cpp - Kiln runtime driver tool ------------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Exit codes: 0 success, 2 usage error, 3 no usable CUDA driver or device.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/CudaDriver.h"

#include <cstdio>
#include <cstring>

using namespace kiln::runtime;

namespace {
constexpr int kExitUsage = 2;
constexpr int kExitNoDevice = 3;

constexpr const char *kUsage = "USAGE: kiln-run <command>\n"
                               "\n"
                               "COMMANDS:\n"
                               "  devices     List the visible CUDA devices\n"
                               "\n"
                               "OPTIONS:\n"
                               "  -h, --help  Show this help\n";
} // namespace

static int error(int exitCode, const std::string &message) {
  std::fprintf(stderr, "kiln-run: error: %s\n", message.c_str());
  return exitCode;
}

static int runDevices() {
  Expected<CudaDriver> driver = CudaDriver::load();
  if (!driver)
    return error(kExitNoDevice, driver.getError());
  Expected<std::vector<DeviceInfo>> devices = driver->listDevices();
  if (!devices)
    return error(kExitNoDevice, devices.getError());
  for (const DeviceInfo &device : *devices)
    std::printf("%s\n", formatDevice(device).c_str());
  return 0;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fputs(kUsage, stderr);
    return kExitUsage;
  }
  const char *command = argv[1];
  if (!std::strcmp(command, "-h") || !std::strcmp(command, "--help")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (!std::strcmp(command, "devices")) {
    if (argc > 2)
      return error(kExitUsage, "'devices' takes no arguments");
    return runDevices();
  }
  return error(kExitUsage, "unknown command '" + std::string(command) +
                               "' (see 'kiln-run --help')");
}
