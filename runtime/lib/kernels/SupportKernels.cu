//===- SupportKernels.cu - Fills and copies as kernels ----------*- CUDA -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The step's fills and copies as kernel launches instead of cuMemset/cuMemcpy:
// a CUDA Graph's memset node may refuse a new extent when the graph is
// patched for another shape (cuGraphExecUpdate), a kernel node never does.
// Built by nvcc into a fatbin (cubins + PTX) embedded in the runtime and
// loaded with the driver API; grid-stride loops, so any grid covers any size.
//
//===----------------------------------------------------------------------===//

#include <stdint.h>

namespace {
__device__ unsigned char patternByte(uint32_t pattern, uint64_t i) {
  return static_cast<unsigned char>(pattern >> (8 * (i & 3)));
}
} // namespace

/// Writes \p bytes bytes at \p target: byte i is byte (i mod 4) of
/// \p pattern (the element value repeated to 32 bits).
extern "C" __global__ void kiln_fill(unsigned char *target, uint32_t pattern, uint64_t bytes) {
  uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t first = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint64_t vectors = reinterpret_cast<uintptr_t>(target) % 16 == 0 ? bytes / 16 : 0;
  uint4 v = make_uint4(pattern, pattern, pattern, pattern);
  for (uint64_t i = first; i < vectors; i += stride)
    reinterpret_cast<uint4 *>(target)[i] = v;
  for (uint64_t i = vectors * 16 + first; i < bytes; i += stride)
    target[i] = patternByte(pattern, i);
}

/// Holds the stream until the host's \p counter reaches \p ticket, or
/// \p timeoutNs pass: tune queues a measured block of GEMMs behind it, so
/// the block runs back to back at the GPU's pace, as under the step's CUDA
/// Graph, not at the pace the host enqueues it (StreamHold.cpp).
extern "C" __global__ void kiln_hold(const volatile unsigned long long *counter,
                                     unsigned long long ticket, unsigned long long timeoutNs) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    if (*counter >= ticket)
      return;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < timeoutNs);
}

/// Copies \p bytes bytes from \p source to \p target (no overlap).
extern "C" __global__ void kiln_copy(unsigned char *target, const unsigned char *source,
                                     uint64_t bytes) {
  uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  uint64_t first = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  bool aligned = (reinterpret_cast<uintptr_t>(target) | reinterpret_cast<uintptr_t>(source)) % 16 == 0;
  uint64_t vectors = aligned ? bytes / 16 : 0;
  for (uint64_t i = first; i < vectors; i += stride)
    reinterpret_cast<uint4 *>(target)[i] = reinterpret_cast<const uint4 *>(source)[i];
  for (uint64_t i = vectors * 16 + first; i < bytes; i += stride)
    target[i] = source[i];
}

// The fused LM head's count, row, loss and narrowing kernels.
#include "CrossEntropyKernels.cuh"

// Kiln's own kernels for the thin (LoRA) GEMMs, bf16 out (ThinGemmPlan.h).
#include "ThinGemm.cuh"
KILN_THIN_GEMM_ALL(bf16, __nv_bfloat16)

// An adapter's dT and dB from one pass over dy (LoraGradPairPlan.h).
#include "LoraGradPair.cuh"
