//===- StepTime.h - A roofline estimate of a step's device time -*- C++ -*-===//
//
// What recomputation costs in time, not FLOPs: contractions run at a GEMM
// rate, everything else at a memory bandwidth, and a chain of single-use
// pointwise/row ops counts as one fused kernel (it moves only what enters
// and leaves the chain). kiln-remat bounds its `auto` plans by it.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ANALYSIS_STEPTIME_H
#define KILN_ANALYSIS_STEPTIME_H

#include "kiln/Analysis/MemoryPlan.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace kiln {

/// The device the estimate assumes. The defaults are the H200 rates the 1b
/// LoRA step's profile shows (docs/memory.md, "Time cost model"): bf16
/// GEMMs at 720 TFLOP/s, cuDNN's causal attention at 300 TFLOP/s of the
/// unmasked count halved, generated kernels moving 3.0 TB/s, and a few
/// microseconds per launch.
struct DeviceRates {
  double gemmFlopsPerSecond = 720e12;
  double attentionFlopsPerSecond = 300e12;
  double bytesPerSecond = 3.0e12;
  double launchSeconds = 4e-6;
};

/// Estimated device seconds of one execution of the single-block function
/// `func` at `symbols`: the top-level ops in order, fused as described above.
double estimateStepSeconds(mlir::func::FuncOp func, const SymbolValues &symbols,
                           const DeviceRates &rates = DeviceRates());

} // namespace kiln

#endif // KILN_ANALYSIS_STEPTIME_H
