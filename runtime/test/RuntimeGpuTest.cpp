//===- RuntimeGpuTest.cpp - Arena, kernel images and graph replay -*- C++
//-*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Needs a GPU (ctest label gpu). Loads a PTX kernel (JIT), allocates an
// arena, captures a CUDA Graph per key on first use and replays it, and
// checks the out-of-memory and bad-image errors.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/runtime/Device.h"

#include <vector>

using namespace kiln::runtime;

// nvcc -ptx -arch=compute_75 of:
//   extern "C" __global__ void add_scalar(float *x, float value, unsigned n) {
//     unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
//     if (i < n) x[i] += value;
//   }
static const char *kAddScalarPtx = R"PTX(
.version 9.0
.target sm_75
.address_size 64

	// .globl	add_scalar

.visible .entry add_scalar(
	.param .u64 add_scalar_param_0,
	.param .f32 add_scalar_param_1,
	.param .u32 add_scalar_param_2
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<4>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<5>;


	ld.param.u64 	%rd1, [add_scalar_param_0];
	ld.param.f32 	%f1, [add_scalar_param_1];
	ld.param.u32 	%r2, [add_scalar_param_2];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r1, %r3, %r4, %r5;
	setp.ge.u32 	%p1, %r1, %r2;
	@%p1 bra 	$L__BB0_2;

	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r1, 4;
	add.s64 	%rd4, %rd2, %rd3;
	ld.global.f32 	%f2, [%rd4];
	add.f32 	%f3, %f2, %f1;
	st.global.f32 	[%rd4], %f3;

$L__BB0_2:
	ret;

}
)PTX";

static Status launchAdd(const CudaDriver &driver, CUfunction function,
                        CUstream stream, CUdeviceptr data, float value,
                        unsigned count) {
  void *args[] = {&data, &value, &count};
  CUresult result = driver.cuLaunchKernel(function, (count + 255) / 256, 1, 1,
                                          256, 1, 1, 0, stream, args, nullptr);
  if (result != CUDA_SUCCESS)
    return Error{"cuLaunchKernel failed: " + driver.describe(result)};
  return Status::success();
}

static std::vector<float> readBack(const Device &device, const Arena &arena,
                                   unsigned count) {
  std::vector<float> host(count, -1.f);
  CHECK(device.synchronize());
  CHECK(device.getDriver().cuMemcpyDtoH_v2(host.data(), arena.getBase(),
                                           count * sizeof(float)) ==
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
    Expected<KernelModule> module =
        KernelModule::load(*device, kAddScalarPtx, /*isPtx=*/true,
                           "kernels/add_scalar/compute_75.ptx");
    CHECK(module);
    if (!arena || !module)
      return finishChecks();
    Expected<CUfunction> add = module->getFunction("add_scalar");
    CHECK(add);
    CHECK_EQ(module->getFunction("nope").getError().substr(0, 62),
             "kernel image 'kernels/add_scalar/compute_75.ptx' has no entry");
    // The memset runs on the legacy stream, which the step's non-blocking
    // stream does not wait for.
    CHECK(driver->cuMemsetD8_v2(arena->getBase(), 0, count * sizeof(float)) ==
          CUDA_SUCCESS);
    CHECK(driver->cuCtxSynchronize() == CUDA_SUCCESS);

    // Bucket "a" adds 1 + 2 + 3 per run; the second run replays it.
    GraphCache graphs(*device);
    auto bucketA = [&](CUstream stream) -> Status {
      for (float value : {1.f, 2.f, 3.f})
        if (Status status = launchAdd(*driver, *add, stream, arena->getBase(),
                                      value, count);
            !status)
          return status;
      return Status::success();
    };
    CHECK(graphs.run("a", bucketA));
    std::vector<float> host = readBack(*device, *arena, count);
    CHECK(host.front() == 6.f && host.back() == 6.f);
    CHECK(graphs.run("a", bucketA));
    host = readBack(*device, *arena, count);
    CHECK(host.front() == 12.f && host[count / 2] == 12.f &&
          host.back() == 12.f);
    CHECK(graphs.getGraphCount() == 1 && graphs.getCaptureCount() == 1);

    // A second bucket: its own graph, over the first half only.
    auto bucketB = [&](CUstream stream) {
      return launchAdd(*driver, *add, stream, arena->getBase(), 0.5f,
                       count / 2);
    };
    CHECK(graphs.run("b", bucketB));
    host = readBack(*device, *arena, count);
    CHECK(host.front() == 12.5f && host.back() == 12.f);
    CHECK(graphs.getGraphCount() == 2 && graphs.getCaptureCount() == 2);

    // A failing recording leaves no graph behind.
    Status failed = graphs.run(
        "c", [](CUstream) { return Status(Error{"no such kernel"}); });
    CHECK_EQ(failed.getError(), "capturing the graph for 'c': no such kernel");
    CHECK(graphs.getGraphCount() == 2);
    CHECK(graphs.run("a", bucketA));
    host = readBack(*device, *arena, count);
    CHECK(host.front() == 18.5f);
  }

  // Out of memory: one line with the planned size and the free memory.
  Expected<std::pair<size_t, size_t>> memory = device->getMemoryInfo();
  CHECK(memory);
  if (memory) {
    Expected<Arena> huge =
        Arena::allocate(*device, memory->second + (1ull << 30));
    CHECK(!huge);
    std::printf("%s\n", huge.getError().c_str());
    CHECK(huge.getError().rfind("out of memory: the step's arena needs ", 0) ==
          0);
    CHECK(huge.getError().find("the planned peak), device 0 has ") !=
          std::string::npos);
  }

  // A broken image: the JIT log comes with the error, on one line.
  Expected<KernelModule> broken = KernelModule::load(
      *device, ".version 8.0\n.target sm_75\n.address_size 64\nnot ptx\n",
      /*isPtx=*/true, "kernels/broken/compute_75.ptx");
  CHECK(!broken);
  std::printf("%s\n", broken.getError().c_str());
  CHECK(broken.getError().rfind(
            "kernel image 'kernels/broken/compute_75.ptx' failed to load: "
            "CUDA_ERROR_INVALID_PTX",
            0) == 0);
  CHECK(broken.getError().find('\n') == std::string::npos);
  return finishChecks();
}
