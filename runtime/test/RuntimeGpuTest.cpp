//===- RuntimeGpuTest.cpp - Arena, kernel images and graph replay -*- C++
//-*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Needs a GPU (ctest label gpu). Loads a PTX kernel (JIT), allocates an
// arena, captures a CUDA Graph per key on first use and replays it, patches
// it for a new shape of the same topology (re-instantiates for another), and
// checks the out-of-memory and bad-image errors.
//
//===----------------------------------------------------------------------===//

#include "AddScalarPtx.h"
#include "Check.h"

#include "kiln/runtime/Device.h"

#include <algorithm>
#include <tuple>
#include <vector>

using namespace kiln::runtime;

static Status launchAdd(const CudaDriver &driver, CUfunction function, CUstream stream,
                        CUdeviceptr data, float value, unsigned count) {
  void *args[] = {&data, &value, &count};
  CUresult result = driver.cuLaunchKernel(function, (count + 255) / 256, 1, 1, 256, 1, 1, 0, stream,
                                          args, nullptr);
  if (result != CUDA_SUCCESS)
    return Error{"cuLaunchKernel failed: " + driver.describe(result)};
  return Status::success();
}

static std::vector<float> readBack(const Device &device, const Arena &arena, unsigned count) {
  std::vector<float> host(count, -1.f);
  CHECK(device.synchronize());
  CHECK(device.getDriver().cuMemcpyDtoH_v2(host.data(), arena.getBase(), count * sizeof(float)) ==
        CUDA_SUCCESS);
  return host;
}

int main() {
  Expected<CudaDriver> driver = CudaDriver::load();
  if (!driver) {
    std::fprintf(stderr, "%s\n", driver.getError().c_str());
    return 1;
  }
  Expected<Device> device = Device::open(*driver, 0);
  if (!device) {
    std::fprintf(stderr, "%s\n", device.getError().c_str());
    return 1;
  }
  std::printf("%s\n", formatDevice(device->getInfo()).c_str());
  {
    const unsigned count = 100000;
    Expected<Arena> arena = Arena::allocate(*device, 1 << 20);
    CHECK(arena);
    Expected<KernelModule> module = KernelModule::load(*device, kAddScalarPtx, /*isPtx=*/true,
                                                       "kernels/add_scalar/compute_75.ptx");
    CHECK(module);
    if (!arena || !module)
      return finishChecks();
    Expected<CUfunction> add = module->getFunction("add_scalar");
    CHECK(add);
    const std::string missing =
        "kernel image 'kernels/add_scalar/compute_75.ptx' has no entry 'nope'";
    CHECK_EQ(module->getFunction("nope").getError().substr(0, missing.size()), missing);
    // The memset runs on the legacy stream, which the step's non-blocking
    // stream does not wait for.
    CHECK(driver->cuMemsetD8_v2(arena->getBase(), 0, count * sizeof(float)) == CUDA_SUCCESS);
    CHECK(driver->cuCtxSynchronize() == CUDA_SUCCESS);

    // Bucket "a" adds 1 + 2 + 3 per run; the second run replays it.
    GraphCache graphs(*device);
    auto bucketA = [&](CUstream stream) -> Status {
      for (float value : {1.f, 2.f, 3.f})
        if (Status status = launchAdd(*driver, *add, stream, arena->getBase(), value, count);
            !status)
          return status;
      return Status::success();
    };
    CHECK(graphs.run("a", bucketA));
    std::vector<float> host = readBack(*device, *arena, count);
    CHECK(host.front() == 6.f && host.back() == 6.f);
    CHECK(graphs.run("a", bucketA));
    host = readBack(*device, *arena, count);
    CHECK(host.front() == 12.f && host[count / 2] == 12.f && host.back() == 12.f);
    CHECK(graphs.getGraphCount() == 1 && graphs.getCaptureCount() == 1);

    // A second bucket: its own graph, over the first half only.
    auto bucketB = [&](CUstream stream) {
      return launchAdd(*driver, *add, stream, arena->getBase(), 0.5f, count / 2);
    };
    CHECK(graphs.run("b", bucketB));
    host = readBack(*device, *arena, count);
    CHECK(host.front() == 12.5f && host.back() == 12.f);
    CHECK(graphs.getGraphCount() == 2 && graphs.getCaptureCount() == 2);

    // A failing recording leaves no graph behind.
    Status failed = graphs.run("c", [](CUstream) { return Status(Error{"no such kernel"}); });
    CHECK_EQ(failed.getError(), "capturing the graph for 'c': no such kernel");
    CHECK(graphs.getGraphCount() == 2);
    CHECK(graphs.run("a", bucketA));
    host = readBack(*device, *arena, count);
    CHECK(host.front() == 18.5f);

    // One program at several shapes, one executable graph: a new shape with
    // the same topology patches it (grid and count change) instead of
    // instantiating; switching back reuses the recorded graph.
    CHECK(driver->cuMemsetD8_v2(arena->getBase(), 0, count * sizeof(float)) == CUDA_SUCCESS);
    GraphCache shapes(*device, /*execsPerKey=*/1);
    auto addOver = [&](unsigned n) {
      return [&, n](CUstream stream) {
        return launchAdd(*driver, *add, stream, arena->getBase(), 1.f, n);
      };
    };
    CHECK(shapes.run("step", "n=all", addOver(count)));
    CHECK(shapes.run("step", "n=half", addOver(count / 2)));
    host = readBack(*device, *arena, count);
    CHECK(host.front() == 2.f && host[count / 2 - 1] == 2.f && host[count / 2] == 1.f &&
          host.back() == 1.f);
    CHECK(shapes.getInstantiateCount() == 1 && shapes.getUpdateCount() == 1);
    CHECK(shapes.run("step", "n=all", addOver(count)));
    host = readBack(*device, *arena, count);
    CHECK(host.front() == 3.f && host.back() == 2.f);
    CHECK(shapes.getCaptureCount() == 2 && shapes.getUpdateCount() == 2 &&
          shapes.getInstantiateCount() == 1 && shapes.getGraphCount() == 1);
    // Another topology (two launches): the update is refused and the key is
    // instantiated afresh, still with the right result.
    auto twice = [&](CUstream stream) -> Status {
      for (int i = 0; i < 2; ++i)
        if (Status status = launchAdd(*driver, *add, stream, arena->getBase(), 1.f, count); !status)
          return status;
      return Status::success();
    };
    CHECK(shapes.run("step", "twice", twice));
    host = readBack(*device, *arena, count);
    CHECK(host.front() == 5.f && host.back() == 4.f);
    CHECK(shapes.getInstantiateCount() == 2 && shapes.getGraphCount() == 1);
    CHECK(shapes.run("step", "n=half", addOver(count / 2)));
    host = readBack(*device, *arena, count);
    CHECK(host.front() == 6.f && host.back() == 4.f);

    // Two executable graphs per key: two shapes alternate without patching.
    GraphCache two(*device, 2);
    for (int i = 0; i < 3; ++i) {
      CHECK(two.run("step", "n=all", addOver(count)));
      CHECK(two.run("step", "n=half", addOver(count / 2)));
    }
    host = readBack(*device, *arena, count);
    CHECK(host.front() == 12.f && host.back() == 7.f);
    CHECK(two.getCaptureCount() == 2 && two.getInstantiateCount() == 2 &&
          two.getUpdateCount() == 0 && two.getGraphCount() == 2);
  }

  // The support kernels (fills and copies in graphs) at aligned and odd
  // offsets and sizes, against a host model.
  {
    Expected<KernelModule> support = loadSupportKernels(*device);
    CHECK(support);
    Expected<Arena> arena = Arena::allocate(*device, 1 << 16);
    CHECK(arena);
    if (support && arena) {
      Expected<CUfunction> fill = support->getFunction("kiln_fill");
      Expected<CUfunction> copy = support->getFunction("kiln_copy");
      CHECK(fill && copy);
      const size_t n = 1 << 15;
      std::vector<unsigned char> model(n * 2), source(n);
      for (size_t i = 0; i < n; ++i)
        source[i] = static_cast<unsigned char>(i * 7 + 3);
      CUdeviceptr base = arena->getBase();
      CHECK(driver->cuMemcpyHtoD_v2(base + n, source.data(), n) == CUDA_SUCCESS);
      CHECK(driver->cuMemsetD8_v2(base, 0, n) == CUDA_SUCCESS);
      CUstream stream = device->getStream();
      auto launch = [&](CUfunction f, void **args) {
        CHECK(driver->cuLaunchKernel(f, 3, 1, 1, 256, 1, 1, 0, stream, args, nullptr) ==
              CUDA_SUCCESS);
      };
      // (offset, bytes, pattern): aligned, odd start, odd length.
      for (auto [offset, bytes, pattern] :
           {std::tuple<size_t, uint64_t, uint32_t>{0, 4096, 0x3f803f80u},
            {3, 1001, 0x01010101u * 7},
            {256, 17, 0xdeadbeefu}}) {
        CUdeviceptr target = base + offset;
        void *args[] = {&target, &pattern, &bytes};
        launch(*fill, args);
        for (size_t i = 0; i < bytes; ++i)
          model[offset + i] = static_cast<unsigned char>(pattern >> (8 * (i % 4)));
      }
      for (auto [to, from, bytes] :
           {std::tuple<size_t, size_t, uint64_t>{8192, 0, 8192}, {20001, 5, 3333}}) {
        CUdeviceptr target = base + to, src = base + n + from;
        void *args[] = {&target, &src, &bytes};
        launch(*copy, args);
        std::copy(source.begin() + from, source.begin() + from + bytes, model.begin() + to);
      }
      std::vector<unsigned char> got(n);
      CHECK(device->synchronize());
      CHECK(driver->cuMemcpyDtoH_v2(got.data(), base, n) == CUDA_SUCCESS);
      size_t wrong = 0;
      for (size_t i = 0; i < n; ++i)
        wrong += got[i] != model[i];
      CHECK_EQ(std::to_string(wrong) + " wrong bytes", std::string("0 wrong bytes"));
    }
  }

  // Out of memory: one line with the planned size and the free memory.
  Expected<std::pair<size_t, size_t>> memory = device->getMemoryInfo();
  CHECK(memory);
  if (memory) {
    Expected<Arena> huge = Arena::allocate(*device, memory->second + (1ull << 30));
    CHECK(!huge);
    std::printf("%s\n", huge.getError().c_str());
    CHECK(huge.getError().rfind("out of memory: the step's arena needs ", 0) == 0);
    CHECK(huge.getError().find("the planned peak), device 0 has ") != std::string::npos);
  }

  // A broken image: the JIT log comes with the error, on one line.
  Expected<KernelModule> broken =
      KernelModule::load(*device, ".version 8.0\n.target sm_75\n.address_size 64\nnot ptx\n",
                         /*isPtx=*/true, "kernels/broken/compute_75.ptx");
  CHECK(!broken);
  std::printf("%s\n", broken.getError().c_str());
  CHECK(broken.getError().rfind("kernel image 'kernels/broken/compute_75.ptx' failed to load: "
                                "CUDA_ERROR_INVALID_PTX",
                                0) == 0);
  CHECK(broken.getError().find('\n') == std::string::npos);
  return finishChecks();
}
