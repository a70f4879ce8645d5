//===- kiln-kernel-check.cpp - Run generated kernels against references ---===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// `kiln-kernel-check DIR [KERNEL...]` runs every case (kernels and cuBLASLt
// GEMMs) that
// `kiln compile --emit=cuda --kernel-check=SIZES -o DIR` wrote under
// DIR/check/<kernel>/ on GPU 0: it loads the kernel's module (the cubin of
// the device's arch, else the PTX), uploads the inputs, poisons every output
// with NaN bytes first (then applies the zero/copy initialization that
// accumulating kernels expect), launches with the recorded geometry and
// compares with the reference interpreter's outputs:
// |out - ref| <= tol * (|ref| + mean |ref|), tol 1e-5 for fp32 kernels and
// 1e-2 for bf16/f16 ones; integers and booleans must match exactly. A case
// with `metric l2 TOL` (low-precision attention) passes when
// ||out - ref|| / ||ref|| <= TOL and no output element is NaN: the numerics
// policy of docs/codegen.md. An output with a `stride K WIDTH STRIDE` line
// (a kernel that writes a block of columns of a wider buffer, an in-place
// concatenation's part) lives in rows of STRIDE elements: its WIDTH columns
// are compared, and every element between them must still be poison. An
// input with an `instride K WIDTH STRIDE` line (a kernel that reads such a
// block) is uploaded in rows of STRIDE elements with NaN bytes between them.
//
// Harness mode (bench/attention.py): `--inputs DIR` reads in<K>.bin from
// DIR/<kernel>/ instead of the case directory, `--dump DIR` writes each
// output to DIR/<kernel>/out<K>.bin, `--time N` reports the median of N
// timed launches (after the checked one; accumulating outputs are not reset
// between them). Cases written with `--kernel-check=...,reference=none` have
// no reference and are only run.
// Exit codes: 0 all pass, 1 a mismatch, 2 usage or data error, 3 no GPU.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/CudaDriver.h"

#include <cublasLt.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <vector>

using namespace kiln::runtime;

namespace {

struct Tensor {
  std::string dtype;
  int64_t count = 0;
  std::string file;
  std::string init; // outputs: poison, zero, copy<K>
  // written (outputs) or read (inputs) as `width` columns of rows
  // `rowStride` apart (0: packed)
  int64_t width = 0, rowStride = 0;
  /// Elements of its device buffer.
  int64_t stored() const { return rowStride ? count / width * rowStride : count; }
};

struct Case {
  std::string kernel, module;
  unsigned blocks = 1, block = 256, shared = 0;
  double tolerance = 1e-5;
  bool l2 = false; // judge by relative L2 error (metric l2)
  double l2Tolerance = 0;
  bool reference = true; // expect<K>.bin files exist
  std::vector<Tensor> ins, outs;
  std::vector<int64_t> symbols;
  // GEMM cases (row-major C[b] = op(A[b]) op(B[b]), kiln_kernel.gemm).
  bool gemm = false;
  int64_t m = 0, n = 0, k = 0, batch = 1, strideA = 0, strideB = 0, strideC = 0;
  int transA = 0, transB = 0;
  std::string epilogue = "none"; // none, bias, bias_relu, bias_gelu
};

size_t elementSize(const std::string &dtype) {
  if (dtype == "f64" || dtype == "i64" || dtype == "u64")
    return 8;
  if (dtype == "f32" || dtype == "i32" || dtype == "u32")
    return 4;
  if (dtype == "bf16" || dtype == "f16" || dtype == "i16" || dtype == "u16")
    return 2;
  return 1;
}

bool readFile(const std::string &path, std::string &out) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::stringstream buffer;
  buffer << in.rdbuf();
  out = buffer.str();
  return true;
}

bool parseCase(const std::string &path, Case &c, std::string &error) {
  std::ifstream in(path);
  if (!in) {
    error = "cannot read " + path;
    return false;
  }
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream words(line);
    std::string key;
    words >> key;
    if (key == "kernel")
      words >> c.kernel;
    else if (key == "module")
      words >> c.module;
    else if (key == "launch")
      words >> c.blocks >> c.block >> c.shared;
    else if (key == "tolerance")
      words >> c.tolerance;
    else if (key == "metric") {
      std::string metric;
      words >> metric >> c.l2Tolerance;
      c.l2 = metric == "l2";
      if (!c.l2) {
        error = path + ": unknown metric '" + metric + "'";
        return false;
      }
    } else if (key == "reference") {
      std::string how;
      words >> how;
      c.reference = how != "none";
    } else if (key == "role") {
      std::string side, name;
      size_t index = 0;
      words >> side >> index >> name; // names for harnesses; the check needs none
    } else if (key == "epilogue")
      words >> c.epilogue;
    else if (key == "gemm") {
      c.gemm = true;
      words >> c.m >> c.n >> c.k >> c.batch >> c.strideA >> c.strideB >> c.strideC >> c.transA >>
          c.transB;
    } else if (key == "in" || key == "out") {
      Tensor t;
      words >> t.dtype >> t.count >> t.file;
      if (key == "out")
        words >> t.init;
      (key == "in" ? c.ins : c.outs).push_back(t);
    } else if (key == "stride") {
      size_t index = 0;
      int64_t width = 0, stride = 0;
      words >> index >> width >> stride;
      if (!words.fail() && (index >= c.outs.size() || width <= 0 || stride < width ||
                            c.outs[index].count % width || c.outs[index].init != "poison")) {
        error = path + ": bad line '" + line + "'";
        return false;
      }
      if (!words.fail()) {
        c.outs[index].width = width;
        c.outs[index].rowStride = stride;
      }
    } else if (key == "instride") {
      size_t index = 0;
      int64_t width = 0, stride = 0;
      words >> index >> width >> stride;
      if (!words.fail() &&
          (index >= c.ins.size() || width <= 0 || stride < width || c.ins[index].count % width)) {
        error = path + ": bad line '" + line + "'";
        return false;
      }
      if (!words.fail()) {
        c.ins[index].width = width;
        c.ins[index].rowStride = stride;
      }
    } else if (key == "symbol") {
      std::string name;
      int64_t value = 0;
      words >> name >> value;
      c.symbols.push_back(value);
    }
    if (!key.empty() && words.fail()) {
      error = path + ": bad line '" + line + "'";
      return false;
    }
  }
  return true;
}

float bitsToFloat(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

double halfToDouble(uint16_t h) {
  int sign = h >> 15, exponent = (h >> 10) & 31, mantissa = h & 1023;
  double value = exponent == 0    ? std::ldexp(mantissa, -24)
                 : exponent == 31 ? (mantissa ? NAN : INFINITY)
                                  : std::ldexp(mantissa + 1024, exponent - 25);
  return sign ? -value : value;
}

/// Element i as a double (floats) or exact integer.
double element(const std::string &bytes, const std::string &dtype, size_t i) {
  const char *p = bytes.data() + i * elementSize(dtype);
  if (dtype == "f32") {
    float v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (dtype == "f64") {
    double v;
    std::memcpy(&v, p, 8);
    return v;
  }
  if (dtype == "bf16") {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return bitsToFloat(uint32_t(v) << 16);
  }
  if (dtype == "f16") {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return halfToDouble(v);
  }
  if (dtype == "i64" || dtype == "u64") {
    int64_t v;
    std::memcpy(&v, p, 8);
    return double(v);
  }
  if (dtype == "i32" || dtype == "u32") {
    int32_t v;
    std::memcpy(&v, p, 4);
    return v;
  }
  if (dtype == "i16" || dtype == "u16") {
    int16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  return static_cast<int8_t>(*p);
}

bool isFloat(const std::string &dtype) {
  return dtype == "f32" || dtype == "f64" || dtype == "bf16" || dtype == "f16";
}

/// The row-major GEMM as cuBLASLt's column-major one: a row-major X is the
/// column-major X^T, so C^T = op(B)^T op(A)^T with B first.
std::string runGemm(const Case &c, CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr out,
                    const std::string &dtype) {
  cublasLtHandle_t handle;
  if (cublasLtCreate(&handle) != CUBLAS_STATUS_SUCCESS)
    return "cublasLtCreate failed";
  cudaDataType_t type = dtype == "bf16" ? CUDA_R_16BF : dtype == "f16" ? CUDA_R_16F : CUDA_R_32F;
  cublasLtMatmulDesc_t desc;
  cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasOperation_t opFirst = c.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opSecond = c.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opFirst, sizeof(opFirst));
  cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opSecond, sizeof(opSecond));
  if (c.epilogue != "none") {
    // The bias has one entry per row of the column-major result: per n.
    cublasLtEpilogue_t epilogue = c.epilogue == "bias_relu"   ? CUBLASLT_EPILOGUE_RELU_BIAS
                                  : c.epilogue == "bias_gelu" ? CUBLASLT_EPILOGUE_GELU_BIAS
                                                              : CUBLASLT_EPILOGUE_BIAS;
    void *pointer = reinterpret_cast<void *>(bias);
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                   sizeof(epilogue));
    cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &pointer,
                                   sizeof(pointer));
  }
  // Column-major shapes (rows, cols, leading dim) of the stored matrices.
  cublasLtMatrixLayout_t first, second, result;
  if (c.transB)
    cublasLtMatrixLayoutCreate(&first, type, c.k, c.n, c.k);
  else
    cublasLtMatrixLayoutCreate(&first, type, c.n, c.k, c.n);
  if (c.transA)
    cublasLtMatrixLayoutCreate(&second, type, c.m, c.k, c.m);
  else
    cublasLtMatrixLayoutCreate(&second, type, c.k, c.m, c.k);
  cublasLtMatrixLayoutCreate(&result, type, c.n, c.m, c.n);
  int32_t batch = static_cast<int32_t>(c.batch);
  int64_t strides[3] = {c.strideB, c.strideA, c.strideC};
  cublasLtMatrixLayout_t layouts[3] = {first, second, result};
  for (int i = 0; i < 3; ++i) {
    cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch,
                                     sizeof(batch));
    cublasLtMatrixLayoutSetAttribute(layouts[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                     &strides[i], sizeof(strides[i]));
  }
  float alpha = 1.f, beta = 0.f;
  std::string error;
  cublasStatus_t status =
      cublasLtMatmul(handle, desc, &alpha, reinterpret_cast<void *>(b), first,
                     reinterpret_cast<void *>(a), second, &beta, reinterpret_cast<void *>(out),
                     result, reinterpret_cast<void *>(out), result, nullptr, nullptr, 0, nullptr);
  if (status != CUBLAS_STATUS_SUCCESS)
    error = std::string("cublasLtMatmul failed: ") + cublasLtGetStatusString(status);
  for (cublasLtMatrixLayout_t layout : layouts)
    cublasLtMatrixLayoutDestroy(layout);
  cublasLtMatmulDescDestroy(desc);
  cublasLtDestroy(handle);
  return error;
}

/// Writes bytes to path; false on failure.
bool writeFile(const std::string &path, const std::string &bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return static_cast<bool>(out);
}

struct Checker {
  CudaDriver &driver;
  std::string dir, arch;
  std::map<std::string, CUmodule> modules;
  std::string inputsDir, dumpDir; // harness mode: see the file comment
  int timedLaunches = 0;

  std::string check(CUresult result, const char *what) {
    return result == CUDA_SUCCESS ? "" : std::string(what) + ": " + driver.describe(result);
  }

  /// Runs one case; returns "" when it passes, else the reason.
  std::string run(const std::string &caseDir, const Case &c, std::string &summary) {
    CUmodule module = modules[c.module];
    if (!c.gemm && !module) {
      std::string image;
      if (!readFile(dir + "/" + c.module + "." + arch + ".cubin", image) &&
          !readFile(dir + "/" + c.module + ".ptx", image))
        return "no " + c.module + "." + arch + ".cubin or " + c.module + ".ptx in " + dir;
      image.push_back('\0'); // PTX is loaded as a C string
      if (std::string e = check(driver.cuModuleLoadData(&module, image.data()), "cuModuleLoadData");
          !e.empty())
        return e;
      modules[c.module] = module;
    }
    CUfunction function = nullptr;
    if (!c.gemm)
      if (std::string e = check(driver.cuModuleGetFunction(&function, module, c.kernel.c_str()),
                                "cuModuleGetFunction");
          !e.empty())
        return e;
    if (!c.gemm && c.shared > 48 * 1024)
      driver.cuFuncSetAttribute(function, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                c.shared);
    std::vector<CUdeviceptr> buffers;
    std::vector<std::string> expected(c.outs.size());
    auto release = [&] {
      for (CUdeviceptr p : buffers)
        driver.cuMemFree_v2(p);
    };
    auto alloc = [&](const Tensor &t, CUdeviceptr &ptr) {
      size_t bytes = std::max<size_t>(1, t.count * elementSize(t.dtype));
      std::string e = check(driver.cuMemAlloc_v2(&ptr, bytes), "cuMemAlloc");
      if (e.empty())
        buffers.push_back(ptr);
      return e;
    };
    std::string inputDir = caseDir;
    if (!inputsDir.empty())
      inputDir = inputsDir + "/" + c.kernel;
    for (const Tensor &t : c.ins) {
      std::string bytes;
      if (!readFile(inputDir + "/" + t.file, bytes) ||
          bytes.size() != t.count * elementSize(t.dtype)) {
        release();
        return "bad input file " + inputDir + "/" + t.file + " (want " + std::to_string(t.count) +
               " " + t.dtype + " elements)";
      }
      if (t.rowStride) {
        // Its rows `rowStride` apart, poison between them.
        size_t size = elementSize(t.dtype);
        std::string rows(t.stored() * size, '\xff');
        for (int64_t row = 0; row < t.count / t.width; ++row)
          std::memcpy(&rows[row * t.rowStride * size], &bytes[row * t.width * size],
                      t.width * size);
        bytes = std::move(rows);
      }
      Tensor stored = t;
      stored.count = t.stored();
      CUdeviceptr ptr;
      std::string e = alloc(stored, ptr);
      if (e.empty())
        e = check(driver.cuMemcpyHtoD_v2(ptr, bytes.data(), bytes.size()), "cuMemcpyHtoD");
      if (!e.empty()) {
        release();
        return e;
      }
    }
    for (size_t o = 0; o < c.outs.size(); ++o) {
      const Tensor &t = c.outs[o];
      if (!c.reference)
        expected[o].assign(t.count * elementSize(t.dtype), '\0');
      else if (!readFile(caseDir + "/" + t.file, expected[o]) ||
               expected[o].size() != t.count * elementSize(t.dtype)) {
        release();
        return "bad reference file " + t.file;
      }
      CUdeviceptr ptr;
      size_t bytes = t.stored() * elementSize(t.dtype);
      Tensor stored = t;
      stored.count = t.stored();
      std::string e = alloc(stored, ptr);
      // Poison first: an element the kernel forgets stays NaN (0xff bytes).
      if (e.empty())
        e = check(driver.cuMemsetD8_v2(ptr, 0xff, bytes), "cuMemsetD8");
      if (e.empty() && t.init == "zero")
        e = check(driver.cuMemsetD8_v2(ptr, 0, bytes), "cuMemsetD8");
      if (e.empty() && t.init.rfind("copy", 0) == 0) {
        size_t from = std::stoul(t.init.substr(4));
        if (from >= c.ins.size() || c.ins[from].rowStride)
          e = "out" + std::to_string(o) + ": bad copy source " + t.init;
      }
      if (e.empty() && t.init.rfind("copy", 0) == 0)
        e = check(driver.cuMemcpyDtoD_v2(ptr, buffers[std::stoi(t.init.substr(4))], bytes),
                  "cuMemcpyDtoD");
      if (!e.empty()) {
        release();
        return e;
      }
    }
    // Parameters: one pointer per buffer, then the int64 symbols.
    std::vector<void *> params;
    for (CUdeviceptr &p : buffers)
      params.push_back(&p);
    std::vector<int64_t> symbols = c.symbols;
    for (int64_t &s : symbols)
      params.push_back(&s);
    std::string e;
    if (c.gemm) {
      size_t operands = c.epilogue == "none" ? 2 : 3;
      if (c.ins.size() != operands || c.outs.size() != 1)
        e = "a GEMM case has two inputs (three with a bias) and one output";
      else
        e = runGemm(c, buffers[0], buffers[1], operands == 3 ? buffers[2] : 0, buffers[operands],
                    c.outs[0].dtype);
    } else {
      e = check(driver.cuLaunchKernel(function, c.blocks, 1, 1, c.block, 1, 1, c.shared, nullptr,
                                      params.data(), nullptr),
                "cuLaunchKernel");
    }
    if (e.empty())
      e = check(driver.cuCtxSynchronize(), "kernel execution");
    std::string failure;
    double worst = 0;
    std::vector<std::string> outputs(c.outs.size());
    for (size_t o = 0; o < c.outs.size() && e.empty(); ++o) {
      const Tensor &t = c.outs[o];
      size_t size = elementSize(t.dtype);
      std::string stored(t.stored() * size, '\0');
      e = check(driver.cuMemcpyDtoH_v2(stored.data(), buffers[c.ins.size() + o], stored.size()),
                "cuMemcpyDtoH");
      if (e.empty() && t.rowStride) {
        // The packed elements from their rows; the columns between them
        // must still hold the poison (the kernel wrote only its block).
        outputs[o].assign(t.count * size, '\0');
        for (int64_t row = 0; row < t.count / t.width; ++row) {
          std::memcpy(&outputs[o][row * t.width * size], &stored[row * t.rowStride * size],
                      t.width * size);
          for (int64_t b = (row * t.rowStride + t.width) * size;
               b < (row + 1) * t.rowStride * static_cast<int64_t>(size); ++b)
            if (static_cast<unsigned char>(stored[b]) != 0xff && e.empty())
              e = "out" + std::to_string(o) + ": row " + std::to_string(row) +
                  " was written past its " + std::to_string(t.width) + " columns";
        }
      } else {
        outputs[o] = std::move(stored);
      }
      if (e.empty() && !dumpDir.empty()) {
        std::string target = dumpDir + "/" + c.kernel;
        mkdir(dumpDir.c_str(), 0755);
        mkdir(target.c_str(), 0755);
        if (!writeFile(target + "/out" + std::to_string(o) + ".bin", outputs[o]))
          e = "cannot write " + target + "/out" + std::to_string(o) + ".bin";
      }
    }
    if (e.empty() && timedLaunches > 0 && !c.gemm)
      e = time(function, c, params, summary);
    for (size_t o = 0; o < c.outs.size() && e.empty() && c.reference; ++o) {
      const Tensor &t = c.outs[o];
      const std::string &got = outputs[o];
      if (c.l2 && isFloat(t.dtype)) {
        // The policy's metric: relative L2 error over the finite reference.
        double diff = 0, norm = 0;
        int64_t nan = -1;
        for (int64_t i = 0; i < t.count; ++i) {
          double want = element(expected[o], t.dtype, i), have = element(got, t.dtype, i);
          if (!std::isfinite(want))
            continue;
          if (!std::isfinite(have) && nan < 0)
            nan = i;
          diff += (have - want) * (have - want);
          norm += want * want;
        }
        double error = std::sqrt(diff / (norm + 1e-300));
        worst = std::max(worst, error);
        std::ostringstream os;
        if (nan >= 0)
          os << "out" << o << ": element " << nan << " is not finite";
        else if (!(error <= c.l2Tolerance))
          os << "out" << o << ": relative L2 error " << error << " > " << c.l2Tolerance;
        if (!os.str().empty())
          failure += (failure.empty() ? "" : "; ") + os.str();
        continue;
      }
      double meanAbs = 0;
      for (int64_t i = 0; i < t.count; ++i)
        if (std::isfinite(element(expected[o], t.dtype, i)))
          meanAbs += std::fabs(element(expected[o], t.dtype, i)) / t.count;
      int64_t bad = 0, firstBad = -1, compared = 0;
      for (int64_t i = 0; i < t.count; ++i) {
        double want = element(expected[o], t.dtype, i), have = element(got, t.dtype, i);
        bool ok;
        if (!isFloat(t.dtype))
          ok = want == have;
        else if (!std::isfinite(want))
          ok = true; // the reference itself is not finite here: nothing to compare
        else {
          double error = std::fabs(have - want) / (std::fabs(want) + meanAbs + 1e-30);
          ok = std::isfinite(have) && error <= c.tolerance;
          if (std::isfinite(error))
            worst = std::max(worst, error);
          ++compared;
        }
        if (!isFloat(t.dtype))
          ++compared;
        if (!ok && bad++ == 0)
          firstBad = i;
      }
      if (bad) {
        std::ostringstream os;
        os << "out" << o << ": " << bad << " of " << t.count << " elements differ, first at "
           << firstBad << ": got " << element(got, t.dtype, firstBad) << ", want "
           << element(expected[o], t.dtype, firstBad);
        failure += (failure.empty() ? "" : "; ") + os.str();
      } else if (compared == 0) {
        failure += (failure.empty() ? "" : "; ") + std::string("out") + std::to_string(o) +
                   ": the reference has no finite element to compare";
      }
    }
    release();
    if (!e.empty())
      return e;
    std::ostringstream os;
    if (!c.reference)
      os << "ran (no reference)";
    else if (c.l2)
      os << "relative L2 error " << worst << " (tolerance " << c.l2Tolerance << ")";
    else
      os << "max relative error " << worst << " (tolerance " << c.tolerance << ")";
    summary = os.str() + summary;
    return failure;
  }

  /// The median of timedLaunches launches (after two untimed ones), appended
  /// to the summary as "; median X ms over N launches".
  std::string time(CUfunction function, const Case &c, std::vector<void *> &params,
                   std::string &summary) {
    CUevent start, stop;
    if (std::string e = check(driver.cuEventCreate(&start, 0), "cuEventCreate"); !e.empty())
      return e;
    if (std::string e = check(driver.cuEventCreate(&stop, 0), "cuEventCreate"); !e.empty())
      return e;
    std::vector<float> times;
    std::string e;
    for (int i = -2; i < timedLaunches && e.empty(); ++i) {
      e = check(driver.cuEventRecord(start, nullptr), "cuEventRecord");
      if (e.empty())
        e = check(driver.cuLaunchKernel(function, c.blocks, 1, 1, c.block, 1, 1, c.shared, nullptr,
                                        params.data(), nullptr),
                  "cuLaunchKernel");
      if (e.empty())
        e = check(driver.cuEventRecord(stop, nullptr), "cuEventRecord");
      if (e.empty())
        e = check(driver.cuEventSynchronize(stop), "kernel execution");
      float ms = 0;
      if (e.empty() && i >= 0 &&
          (e = check(driver.cuEventElapsedTime_v2(&ms, start, stop), "cuEventElapsedTime")).empty())
        times.push_back(ms);
    }
    driver.cuEventDestroy_v2(start);
    driver.cuEventDestroy_v2(stop);
    if (!e.empty())
      return e;
    std::sort(times.begin(), times.end());
    std::ostringstream os;
    os << "; median " << times[times.size() / 2] << " ms over " << times.size() << " launches";
    summary += os.str();
    return "";
  }
};

} // namespace

int main(int argc, char **argv) {
  if (argc < 2 || std::string(argv[1]) == "--help") {
    std::cerr << "usage: kiln-kernel-check DIR [--inputs DIR] [--dump DIR] [--time N] [KERNEL...]\n"
                 "  runs DIR/check/<kernel>/ (from kiln compile --emit=cuda --kernel-check=...)\n"
                 "  --inputs DIR  read each case's in<K>.bin from DIR/<kernel>/\n"
                 "  --dump DIR    write each case's outputs to DIR/<kernel>/out<K>.bin\n"
                 "  --time N      also print the median time of N launches\n";
    return 2;
  }
  std::string dir = argv[1];
  std::string inputsDir, dumpDir;
  int timedLaunches = 0;
  std::vector<std::string> only;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    bool valued = arg == "--inputs" || arg == "--dump" || arg == "--time";
    if (valued && i + 1 == argc) {
      std::cerr << "kiln-kernel-check: error: " << arg << " needs a value\n";
      return 2;
    }
    if (arg == "--inputs")
      inputsDir = argv[++i];
    else if (arg == "--dump")
      dumpDir = argv[++i];
    else if (arg == "--time") {
      char *end = nullptr;
      long n = std::strtol(argv[++i], &end, 10);
      if (*end || n < 1 || n > 100000) {
        std::cerr << "kiln-kernel-check: error: --time needs a count in 1..100000\n";
        return 2;
      }
      timedLaunches = static_cast<int>(n);
    } else if (arg.rfind("--", 0) == 0) {
      std::cerr << "kiln-kernel-check: error: unknown option " << arg << "\n";
      return 2;
    } else
      only.push_back(arg);
  }
  std::vector<std::string> names;
  if (DIR *d = opendir((dir + "/check").c_str())) {
    while (dirent *entry = readdir(d))
      if (entry->d_name[0] != '.')
        names.push_back(entry->d_name);
    closedir(d);
  } else {
    std::cerr << "kiln-kernel-check: error: no " << dir
              << "/check (run kiln compile --emit=cuda "
                 "--kernel-check=SIZES -o "
              << dir << ")\n";
    return 2;
  }
  std::sort(names.begin(), names.end());
  if (!only.empty())
    names.erase(std::remove_if(names.begin(), names.end(),
                               [&](const std::string &n) {
                                 return std::find(only.begin(), only.end(), n) == only.end();
                               }),
                names.end());
  Expected<CudaDriver> driver = CudaDriver::load();
  if (!driver) {
    std::cerr << "kiln-kernel-check: error: " << driver.getError() << "\n";
    return 3;
  }
  Expected<std::vector<DeviceInfo>> devices = driver->listDevices();
  if (!devices) {
    std::cerr << "kiln-kernel-check: error: " << devices.getError() << "\n";
    return 3;
  }
  const DeviceInfo &device = devices->front();
  CUdevice handle;
  CUcontext context;
  if (driver->cuDeviceGet(&handle, 0) != CUDA_SUCCESS ||
      driver->cuDevicePrimaryCtxRetain(&context, handle) != CUDA_SUCCESS ||
      driver->cuCtxSetCurrent(context) != CUDA_SUCCESS) {
    std::cerr << "kiln-kernel-check: error: cannot create a context on device 0\n";
    return 3;
  }
  Checker checker{
      *driver,
      dir,
      "sm_" + std::to_string(device.computeCapabilityMajor * 10 + device.computeCapabilityMinor),
      {},
      inputsDir,
      dumpDir,
      timedLaunches};
  unsigned passed = 0, failed = 0;
  for (const std::string &name : names) {
    Case c;
    std::string error;
    std::string caseDir = dir + "/check/" + name;
    if (!parseCase(caseDir + "/case.txt", c, error)) {
      std::cerr << "kiln-kernel-check: error: " << error << "\n";
      return 2;
    }
    std::string summary;
    std::string failure = checker.run(caseDir, c, summary);
    if (failure.empty()) {
      ++passed;
      std::cout << "PASS " << name << ": " << summary << "\n";
    } else {
      ++failed;
      std::cout << "FAIL " << name << ": " << failure << "\n";
    }
  }
  std::cout << passed << " passed, " << failed << " failed on " << formatDevice(device) << "\n";
  return failed ? 1 : 0;
}
