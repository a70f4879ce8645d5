//===- NvrtcTest.cpp - NVRTC wrapper: logs in errors, cache, PTX ----------===//

#include "kiln/Codegen/Nvrtc.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <gtest/gtest.h>

using namespace kiln::codegen;

namespace {

const char *kGood = R"(extern "C" __global__ void scale(float *x, long long n) {
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) x[i] *= 2.f;
})";

std::string tempDir() {
  llvm::SmallString<128> dir;
  EXPECT_FALSE(llvm::sys::fs::createUniqueDirectory("kiln-nvrtc-test", dir));
  return std::string(dir);
}

TEST(Nvrtc, CompileErrorCarriesTheLog) {
  NvrtcOptions options;
  KernelSource bad{"broken", "extern \"C\" __global__ void broken() { undefined_thing(); }"};
  llvm::Expected<std::string> result = compileKernel(bad, "sm_90", options);
  ASSERT_FALSE(static_cast<bool>(result));
  std::string message = llvm::toString(result.takeError());
  EXPECT_NE(message.find("kernel 'broken' (sm_90)"), std::string::npos) << message;
  EXPECT_NE(message.find("undefined_thing"), std::string::npos) << message;
}

TEST(Nvrtc, CubinAndPtxFromOneCompile) {
  NvrtcOptions options;
  std::string ptx;
  llvm::Expected<std::string> cubin =
      compileKernel({"scale", kGood}, "sm_80", options, nullptr, &ptx);
  ASSERT_TRUE(static_cast<bool>(cubin)) << llvm::toString(cubin.takeError());
  EXPECT_EQ(cubin->substr(0, 4), std::string("\x7f"
                                             "ELF"));
  EXPECT_NE(ptx.find(".target sm_80"), std::string::npos);
  EXPECT_NE(ptx.find(".entry scale"), std::string::npos);
}

TEST(Nvrtc, CacheKeysOnSourceAndArch) {
  NvrtcOptions options;
  options.cacheDir = tempDir();
  bool hit = true;
  ASSERT_TRUE(static_cast<bool>(compileKernel({"scale", kGood}, "sm_90", options, &hit)));
  EXPECT_FALSE(hit);
  ASSERT_TRUE(static_cast<bool>(compileKernel({"scale", kGood}, "sm_90", options, &hit)));
  EXPECT_TRUE(hit);
  // Another arch or another source is another entry.
  ASSERT_TRUE(static_cast<bool>(compileKernel({"scale", kGood}, "sm_80", options, &hit)));
  EXPECT_FALSE(hit);
  std::string changed = std::string(kGood) + "\n// changed\n";
  ASSERT_TRUE(static_cast<bool>(compileKernel({"scale", changed}, "sm_90", options, &hit)));
  EXPECT_FALSE(hit);
  llvm::sys::fs::remove_directories(options.cacheDir);
}

TEST(Nvrtc, ParallelCompileReportsEveryFailure) {
  NvrtcOptions options;
  options.archs = {"sm_90", "sm_80"};
  std::vector<KernelSource> kernels = {{"good", kGood},
                                       {"bad1", "extern \"C\" __global__ void bad1() { x; }"},
                                       {"bad2", "extern \"C\" __global__ void bad2() { y; }"}};
  llvm::Expected<std::vector<CompiledKernel>> result = compileKernels(kernels, options);
  ASSERT_FALSE(static_cast<bool>(result));
  std::string message = llvm::toString(result.takeError());
  EXPECT_NE(message.find("kernel 'bad1' (sm_80)"), std::string::npos) << message;
  EXPECT_NE(message.find("kernel 'bad2' (sm_90)"), std::string::npos) << message;
  kernels.resize(1);
  llvm::Expected<std::vector<CompiledKernel>> ok = compileKernels(kernels, options);
  ASSERT_TRUE(static_cast<bool>(ok)) << llvm::toString(ok.takeError());
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].cubins.size(), 2u);
  EXPECT_NE((*ok)[0].ptx.find(".target sm_80"), std::string::npos); // the oldest arch
}

TEST(Nvrtc, ArchList) {
  llvm::Expected<std::vector<std::string>> archs = parseArchList("sm_90, sm_80");
  ASSERT_TRUE(static_cast<bool>(archs));
  EXPECT_EQ(*archs, (std::vector<std::string>{"sm_90", "sm_80"}));
  llvm::Expected<std::vector<std::string>> bad = parseArchList("sm_90,compute_80");
  ASSERT_FALSE(static_cast<bool>(bad));
  EXPECT_NE(llvm::toString(bad.takeError()).find("'compute_80'"), std::string::npos);
}

} // namespace
