//===- CudnnAttention.h - cuDNN's fused attention, loaded at run time -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A second implementation of the step program's tiled attention launches
// (docs/runtime.md, "Attention implementations"): cuDNN 9's fused scaled
// dot-product attention, forward and backward, built through the cuDNN
// frontend's graph API. libcudnn is opened with dlopen when the executor
// starts; without it (or in a runtime built without the frontend headers)
// load() says why in one line and the generated kernels run instead.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_CUDNNATTENTION_H
#define KILN_RUNTIME_CUDNNATTENTION_H

#include "kiln/artifact/Safetensors.h"
#include "kiln/runtime/Expected.h"

#include <cuda.h>

#include <memory>
#include <string>
#include <vector>

namespace kiln::runtime {

/// One attention op at one shape: row-major [batch, heads, seq, dim]
/// tensors (key and value with kvHeads heads of kvSeq rows), or, for the
/// roles in `seqMajor` (kiln/artifact/HopperAttention.h's bits),
/// [batch, seq, heads, dim].
struct AttentionShape {
  bool backward = false;
  artifact::DType dtype = artifact::DType::BF16;
  int64_t batch = 0, heads = 0, kvHeads = 0, seq = 0, kvSeq = 0, headDim = 0;
  bool causal = false;
  double scale = 1;
  unsigned seqMajor = 0;
  /// "backward b4 h32 kv8 s2048 d64 causal", then " bshd v o do dv" when
  /// some roles are seq-major (tuning keys these apart).
  std::string describe() const;
};

/// The [batch, heads, seq, dim] dims and element strides of the tensor of
/// role \p bit (a kiln/artifact/HopperAttention.h AttentionLayoutBit) as
/// cuDNN's graph takes them: dense [B, H, S, D] strides {H S D, S D, D, 1},
/// seq-major {S H D, D, H D, 1}.
struct AttentionTensorLayout {
  std::vector<int64_t> dims, strides;
};
AttentionTensorLayout attentionTensorLayout(const AttentionShape &shape, unsigned bit);

/// Device pointers of one execution. `stats` is the forward's fp32
/// [batch, heads, seq] log-sum-exp of the scaled scores, written by the
/// forward and read by the backward.
struct AttentionPointers {
  CUdeviceptr q = 0, k = 0, v = 0, o = 0, stats = 0;
  CUdeviceptr dout = 0, dq = 0, dk = 0, dv = 0;
};

class CudnnAttention {
public:
  class Plan;
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention &) = delete;
  CudnnAttention &operator=(const CudnnAttention &) = delete;

  /// Opens libcudnn (KILN_CUDNN_LIBRARY, else libcudnn.so.9 on the loader
  /// path, else the CUDA toolkit's library directory) and creates a handle
  /// in the current context. The error says which library was tried.
  static Expected<std::unique_ptr<CudnnAttention>> load();

  /// "cuDNN 9.19.0 (libcudnn.so.9)".
  const std::string &describe() const { return description; }
  /// "9.19.0".
  const std::string &getVersionString() const { return versionString; }

  /// A finalized execution plan for \p shape, or why cuDNN cannot run it.
  Expected<std::shared_ptr<Plan>> build(const AttentionShape &shape) const;
  /// Device bytes \p plan needs as scratch.
  static int64_t workspaceBytes(const Plan &plan);
  /// Enqueues \p plan on \p stream (capturable into a CUDA Graph).
  Status run(const Plan &plan, const AttentionPointers &pointers, CUdeviceptr workspace,
             CUstream stream) const;

private:
  CudnnAttention() = default;
  void *library = nullptr;
  void *handle = nullptr; // cudnnHandle_t
  std::string description, versionString;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_CUDNNATTENTION_H
