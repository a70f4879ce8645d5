//===- DeviceBuffer.cpp - One device allocation ---------------------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/StepExecutor.h"

using namespace kiln::runtime;

Expected<DeviceBuffer> DeviceBuffer::allocate(const Device &device, size_t bytes) {
  DeviceBuffer buffer;
  buffer.driver = &device.getDriver();
  buffer.bytes = bytes;
  if (bytes == 0)
    return buffer;
  if (Status status = device.check(buffer.driver->cuMemAlloc_v2(&buffer.ptr, bytes), "cuMemAlloc");
      !status)
    return status.takeError();
  return buffer;
}

DeviceBuffer DeviceBuffer::borrowed(CUdeviceptr ptr, size_t bytes) {
  DeviceBuffer buffer;
  buffer.ptr = ptr;
  buffer.bytes = bytes;
  return buffer;
}

DeviceBuffer::DeviceBuffer(DeviceBuffer &&other) noexcept
    : driver(other.driver), ptr(other.ptr), bytes(other.bytes) {
  other.ptr = 0;
}

DeviceBuffer &DeviceBuffer::operator=(DeviceBuffer &&other) noexcept {
  if (this != &other) {
    if (ptr && driver)
      driver->cuMemFree_v2(ptr);
    driver = other.driver;
    ptr = other.ptr;
    bytes = other.bytes;
    other.ptr = 0;
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr && driver)
    driver->cuMemFree_v2(ptr);
}
