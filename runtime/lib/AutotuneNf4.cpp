//===- AutotuneNf4.cpp - Fused NF4 GEMM against dequantize + cuBLASLt -----===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// One NF4 signature (direction, quantization, alpha/beta, m x n x k; the
// decoder layers' projections share one) measured on the step's buffers:
// the default is the dequantize launch plus the cuBLASLt GEMM on its bf16
// output, the candidate the fused kernel on the codes. Both read the same
// operands every call (the weight's codes and the bf16 copy both fit the
// L2 cache, so neither is flattered more than the other).
//
//===----------------------------------------------------------------------===//

#include "AutotuneNf4.h"
#include "AutotuneTiming.h"

#include "kiln/runtime/Nf4Gemm.h"

#include <algorithm>

using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {

Expected<std::string> downloadBytes(const Device &device, CUdeviceptr ptr, size_t bytes) {
  if (Status s = device.synchronize(); !s)
    return s.takeError();
  std::string data(bytes, '\0');
  if (Status s = device.check(device.getDriver().cuMemcpyDtoH_v2(data.data(), ptr, bytes),
                              "cuMemcpyDtoH");
      !s)
    return s.takeError();
  return data;
}

Status uploadBytes(const Device &device, CUdeviceptr ptr, const std::string &data) {
  if (Status s = device.synchronize(); !s)
    return s;
  return device.check(device.getDriver().cuMemcpyHtoD_v2(ptr, data.data(), data.size()),
                      "cuMemcpyHtoD");
}

/// Median milliseconds per call of each candidate (0: default, 1: fused),
/// round-robin samples of \p calls back-to-back calls.
Status timeCandidates(StepExecutor &x, const Device &device, size_t site, int calls, int warmup,
                      int reps, std::vector<double> &ms) {
  Expected<std::vector<double>> medians =
      timeRuns(x, device, {0, 1}, warmup, reps, calls,
               [&](size_t candidate) { return x.enqueueNf4Site(site, candidate == 1); });
  if (!medians)
    return medians.takeError();
  ms = std::move(*medians);
  return Status::success();
}

} // namespace

Expected<TuningEntry> kiln::runtime::tuneNf4(StepExecutor &x, const Device &device,
                                             const std::vector<StepExecutor::Nf4Site> &sites,
                                             const std::vector<size_t> &members,
                                             const TuneOptions &options, TunedOp &row) {
  size_t index = members.front();
  const StepExecutor::Nf4Site &site = sites[index];
  row.label = site.label;
  row.calls = members.size();
  row.candidates = 2;
  Expected<std::string> saved = downloadBytes(device, site.c, site.cBytes);
  if (!saved)
    return saved.takeError();
  // Numerics: each computes C once from the same C (beta may be 1).
  std::string outputs[2];
  for (int c = 0; c < 2; ++c) {
    if (Status s = uploadBytes(device, site.c, *saved); !s)
      return s.takeError();
    if (Status s = x.enqueueNf4Site(index, c == 1); !s)
      return s.takeError();
    Expected<std::string> out = downloadBytes(device, site.c, site.cBytes);
    if (!out)
      return out.takeError();
    outputs[c] = std::move(*out);
  }
  double error = relativeL2(outputs[1].data(), outputs[0].data(), DType::BF16, site.cBytes / 2);
  bool eligible = error <= numericsBound(DType::BF16);
  // A sample of the default lasts about sampleMs (one probe call sizes it).
  std::vector<double> probe;
  if (Status s = timeCandidates(x, device, index, 1, 1, 3, probe); !s)
    return s.takeError();
  int calls = static_cast<int>(std::clamp(
      probe[0] > 0 ? options.sampleMs / probe[0] : 1.0, 1.0, 64.0));
  std::vector<double> ms;
  if (Status s = timeCandidates(x, device, index, calls, options.warmup, options.reps, ms); !s)
    return s.takeError();
  if (Status s = uploadBytes(device, site.c, *saved); !s)
    return s.takeError();
  size_t winner = chooseWinner({ms[0], eligible ? ms[1] : -1.0});
  TuningEntry entry;
  entry.kind = "nf4";
  entry.hash = site.hash;
  entry.shape = site.shape;
  entry.label = site.label;
  entry.candidates = 2;
  entry.choice = static_cast<int64_t>(winner);
  entry.impl = winner ? kNf4Fused : kNf4Default;
  entry.defaultMs = ms[0];
  entry.tunedMs = ms[winner];
  entry.error = winner ? error : 0;
  row.eligible = eligible ? 2 : 1;
  row.defaultMs = ms[0];
  row.tunedMs = ms[winner];
  row.error = entry.error;
  row.changed = winner != 0;
  // The fused kernel's time and error are shown either way: what tune saw.
  char text[160];
  std::snprintf(text, sizeof(text), "%s (fused %.4f ms, rel. error %.1e%s)",
                winner ? kNf4Fused : "default (dequant+cublaslt)", ms[1], error,
                eligible ? "" : ", beyond the bf16 bound");
  row.choice = text;
  return entry;
}
