//===- CudaPrelude.cpp - What every kernel source starts with -------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The fixed device code is in lib/Codegen/cuda/*.cuh, embedded at build
// time (cmake/EmbedText.cmake); only the 8-bit dynamic map's table is
// printed here, from the table the interpreter uses.
//
//===----------------------------------------------------------------------===//

#include "kiln/Codegen/Cuda.h"
#include "kiln/Support/DynamicMap8.h"
#include "llvm/Support/FormatVariadic.h"

namespace kiln::codegen {
namespace {

// Device helpers every source starts with (block reductions, atomics,
// Philox, NF4 codes). The fp16/bf16 headers are large: they are included
// only when used.
#include "Bf16.cuh.inc"
#include "DynamicMap8.cuh.inc"
#include "F16.cuh.inc"
#include "FlashAttention.cuh.inc"
#include "FlashAttention90.cuh.inc"
#include "FlashAttention90Backward.cuh.inc"
#include "Prelude.cuh.inc"

} // namespace

/// The 8-bit dynamic map of blockwise quantization, printed from the same
/// table the interpreter uses, and its nearest-code search.
static std::string dynamicMap8Prelude() {
  std::string text = "// bitsandbytes' 8-bit dynamic map (NF4 double quantization).\n"
                     "__device__ const float kiln_dynamic_map8[256] = {";
  for (int i = 0; i < 256; ++i)
    text += (i % 4 == 0 ? "\n    " : " ") + llvm::formatv("{0:e9}f", kDynamicMap8[i]).str() + ",";
  text += "};\n";
  text += kDynamicMap8Cuh;
  return text;
}

const char *flashAttentionPrelude() { return kFlashAttentionCuh; }

const char *flashAttention90Prelude() { return kFlashAttention90Cuh; }

const char *flashAttention90BackwardPrelude() { return kFlashAttention90BackwardCuh; }

std::string cudaPrelude(bool bf16, bool f16, bool dynamicMap8, bool flashAttention) {
  std::string prelude;
  if (f16)
    prelude += kF16Cuh;
  if (bf16)
    prelude += kBf16Cuh;
  prelude += kPreludeCuh;
  if (dynamicMap8)
    prelude += dynamicMap8Prelude();
  if (flashAttention)
    prelude += flashAttentionPrelude();
  return prelude;
}

} // namespace kiln::codegen
