//===- LinearCrossEntropyRun.cpp - The fused LM head, chunk by chunk ------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "LinearCrossEntropyRun.h"

#include <algorithm>
#include <cstring>

using kiln::artifact::DType;

namespace kiln::runtime {

Expected<HeadKernels> loadHeadKernels(const KernelModule &support) {
  HeadKernels k;
  const char *names[] = {"kiln_head_count",     "kiln_head_loss",     "kiln_head_rows_f32",
                         "kiln_head_rows_bf16", "kiln_head_rows_f16", "kiln_head_narrow_bf16",
                         "kiln_head_narrow_f16", "kiln_head_rows_bf16_logits"};
  CUfunction *slots[] = {&k.count,     &k.loss,      &k.rows[0],  &k.rows[1],        &k.rows[2],
                         &k.narrow[0], &k.narrow[1], &k.rowsBf16Logits};
  for (size_t i = 0; i < std::size(names); ++i) {
    Expected<CUfunction> f = support.getFunction(names[i]);
    if (!f)
      return f.takeError();
    *slots[i] = *f;
  }
  return k;
}

namespace {

std::string shapeText(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i)
    s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

cudaDataType_t cudaTypeOf(DType t) {
  return t == DType::BF16 ? CUDA_R_16BF : t == DType::F16 ? CUDA_R_16F : CUDA_R_32F;
}

/// The largest power of two (at most 256) that divides the address: what
/// cuBLASLt may assume of it.
uint32_t alignmentOf(CUdeviceptr p) {
  uint32_t a = 256;
  while (a > 1 && p % a)
    a /= 2;
  return a;
}

} // namespace

Expected<std::vector<HeadStep>>
expandLinearCrossEntropy(const StepProgram &p, const LinearCrossEntropy &h,
                         const std::vector<std::vector<int64_t>> &shapes,
                         const std::vector<CUdeviceptr> &pointers, const HeadKernels &kernels) {
  const std::vector<int64_t> &hidden = shapes[h.hidden], &weight = shapes[h.weight];
  int64_t rows = hidden[0], width = hidden[1];
  int64_t vocab = h.transposeWeight ? weight[0] : weight[1];
  auto mismatch = [&](const char *what, const std::vector<int64_t> &shape) {
    return Error{std::string(what) + " is " + shapeText(shape) + " for hidden " +
                 shapeText(hidden) + " and weight " + shapeText(weight)};
  };
  if ((h.transposeWeight ? weight[1] : weight[0]) != width)
    return mismatch("the weight", weight);
  if (shapes[h.labels] != std::vector<int64_t>{rows})
    return mismatch("labels", shapes[h.labels]);
  if (shapes[h.chunk] != std::vector<int64_t>{h.chunkTokens, vocab})
    return mismatch("the chunk", shapes[h.chunk]);
  if (shapes[h.stats] != std::vector<int64_t>{rows + 1})
    return mismatch("stats", shapes[h.stats]);
  if (h.hiddenGrad >= 0 && shapes[h.hiddenGrad] != hidden)
    return mismatch("hidden_grad", shapes[h.hiddenGrad]);
  for (int id : {h.weightGrad, h.weightAccum})
    if (id >= 0 && shapes[id] != weight)
      return mismatch("the weight gradient", shapes[id]);

  DType element = p.buffers[h.hidden].dtype;
  int64_t elementBytes = element == DType::F32 ? 4 : 2;
  int elementIndex = element == DType::F32 ? 0 : element == DType::BF16 ? 1 : 2;
  // A bf16 chunk (bf16 logits, compiled with bf16_logits) holds its bf16
  // gradient element for element; in an fp32 chunk a 16-bit gradient row
  // sits at the start of its fp32 row: stride 2·vocab.
  DType chunkType = p.buffers[h.chunk].dtype;
  if (chunkType != DType::F32 && !(chunkType == DType::BF16 && element == DType::BF16))
    return Error{"the chunk of a " + std::string(element == DType::F32 ? "F32" : "16-bit") +
                 " head must be F32 (BF16 only for a BF16 head)"};
  bool bf16Chunk = chunkType == DType::BF16;
  int64_t gradLd = element == DType::F32 || bf16Chunk ? vocab : 2 * vocab;
  CUfunction rowsKernel = bf16Chunk ? kernels.rowsBf16Logits : kernels.rows[elementIndex];
  bool gradient = h.grad >= 0;
  int64_t labels32 = p.buffers[h.labels].dtype == DType::I32;
  int64_t capBits;
  std::memcpy(&capBits, &h.softcap, sizeof(capBits));
  CUdeviceptr chunk = pointers[h.chunk], stats = pointers[h.stats];

  std::vector<HeadStep> steps;
  auto launch = [&](const char *name, CUfunction f, unsigned grid, unsigned block,
                    std::vector<CUdeviceptr> ptrs, std::vector<int64_t> ints) {
    HeadStep s;
    s.launch = {name, f, grid, block, std::move(ptrs), std::move(ints)};
    steps.push_back(std::move(s));
  };
  auto gemm = [&](HeadGemm g, const std::string &what) {
    HeadStep s;
    s.isGemm = true;
    g.label = "head " + what + " gemm " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" +
              std::to_string(g.k);
    s.gemm = g;
    steps.push_back(std::move(s));
  };

  launch("kiln_head_count", kernels.count, 1, 1024, {pointers[h.labels], stats},
         {rows, vocab, labels32, h.ignoreIndex});
  int target = h.weightAccum >= 0 ? h.weightAccum : h.weightGrad;
  for (int64_t first = 0; first < rows; first += h.chunkTokens) {
    int64_t count = std::min(h.chunkTokens, rows - first);
    CUdeviceptr hiddenRows = pointers[h.hidden] + first * width * elementBytes;
    // logits [count, V] = hidden rows · W (or · Wᵀ), fp32 accumulation,
    // out in the chunk's type.
    HeadGemm logits;
    logits.a = hiddenRows;
    logits.b = pointers[h.weight];
    logits.c = chunk;
    logits.ab = element;
    logits.ct = chunkType;
    logits.m = count, logits.n = vocab, logits.k = width;
    logits.lda = width;
    logits.transB = h.transposeWeight;
    logits.ldb = h.transposeWeight ? width : vocab;
    logits.ldc = vocab;
    gemm(logits, "logits");
    launch("kiln_head_rows", rowsKernel, static_cast<unsigned>(count), 1024,
           {chunk, pointers[h.labels], gradient ? pointers[h.grad] : stats, stats},
           {first, vocab, rows, labels32, h.ignoreIndex, capBits, gradient ? 1 : 0});
    if (!gradient)
      continue;
    // dHidden rows [count, H] = dlogits · Wᵀ (or · W).
    HeadGemm dx;
    dx.a = chunk;
    dx.lda = gradLd;
    dx.b = pointers[h.weight];
    dx.transB = !h.transposeWeight;
    dx.ldb = h.transposeWeight ? width : vocab;
    dx.c = pointers[h.hiddenGrad] + first * width * elementBytes;
    dx.ldc = width;
    dx.ab = dx.ct = element;
    dx.m = count, dx.n = width, dx.k = vocab;
    gemm(dx, "hidden_grad");
    if (target < 0)
      continue;
    // dW += hidden rowsᵀ · dlogits ([H, V]) or dlogitsᵀ · hidden rows ([V, H]).
    HeadGemm dw;
    dw.ab = element;
    dw.ct = DType::F32;
    dw.transA = true;
    dw.beta = first == 0 ? 0.f : 1.f;
    dw.c = pointers[target];
    dw.k = count;
    if (h.transposeWeight) {
      dw.a = chunk, dw.lda = gradLd;
      dw.b = hiddenRows, dw.ldb = width;
      dw.m = vocab, dw.n = width, dw.ldc = width;
    } else {
      dw.a = hiddenRows, dw.lda = width;
      dw.b = chunk, dw.ldb = gradLd;
      dw.m = width, dw.n = vocab, dw.ldc = vocab;
    }
    gemm(dw, "weight_grad");
  }
  launch("kiln_head_loss", kernels.loss, 1, 1024, {stats, pointers[h.loss]}, {rows});
  if (h.weightAccum >= 0) {
    int64_t n = width * vocab;
    unsigned grid = static_cast<unsigned>(std::min<int64_t>(4096, (n + 255) / 256));
    // No chunk (no tokens): the accumulator was never written.
    if (rows == 0)
      return Error{"the fused LM head has no tokens to accumulate a weight gradient over"};
    launch("kiln_head_narrow", kernels.narrow[element == DType::BF16 ? 0 : 1], std::max(grid, 1u),
           256, {pointers[h.weightAccum], pointers[h.weightGrad]}, {n});
  }
  return steps;
}

Expected<HeadGemmHandles> createHeadGemm(const CublasLt &lt, cublasLtHandle_t handle,
                                         const HeadGemm &g, uint64_t workspaceBytes) {
  HeadGemmHandles out;
  auto check = [&](cublasStatus_t status, const char *what) -> Status {
    if (status == CUBLAS_STATUS_SUCCESS)
      return Status::success();
    return Error{g.label + ": " + what + " failed: " + lt.describe(status)};
  };
  cudaDataType_t ab = cudaTypeOf(g.ab), ct = cudaTypeOf(g.ct);
  if (Status s = check(lt.cublasLtMatmulDescCreate(&out.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                       "cublasLtMatmulDescCreate");
      !s)
    return s.takeError();
  // Row-major C = op(A) op(B) is column-major Cᵀ = op(B)ᵀ op(A)ᵀ: B first.
  cublasOperation_t opFirst = g.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opSecond = g.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  lt.cublasLtMatmulDescSetAttribute(out.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opFirst,
                                    sizeof(opFirst));
  lt.cublasLtMatmulDescSetAttribute(out.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opSecond,
                                    sizeof(opSecond));
  uint64_t M = g.m, N = g.n, K = g.k;
  if (Status s = check(g.transB ? lt.cublasLtMatrixLayoutCreate(&out.first, ab, K, N, g.ldb)
                                : lt.cublasLtMatrixLayoutCreate(&out.first, ab, N, K, g.ldb),
                       "cublasLtMatrixLayoutCreate");
      !s)
    return s.takeError();
  if (Status s = check(g.transA ? lt.cublasLtMatrixLayoutCreate(&out.second, ab, M, K, g.lda)
                                : lt.cublasLtMatrixLayoutCreate(&out.second, ab, K, M, g.lda),
                       "cublasLtMatrixLayoutCreate");
      !s)
    return s.takeError();
  if (Status s = check(lt.cublasLtMatrixLayoutCreate(&out.result, ct, N, M, g.ldc),
                       "cublasLtMatrixLayoutCreate");
      !s)
    return s.takeError();
  cublasLtMatmulPreference_t preference = nullptr;
  if (Status s =
          check(lt.cublasLtMatmulPreferenceCreate(&preference), "cublasLtMatmulPreferenceCreate");
      !s)
    return s.takeError();
  lt.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                          &workspaceBytes, sizeof(workspaceBytes));
  // Chunk offsets move the pointers off cuBLASLt's assumed 256 bytes.
  uint32_t alignFirst = alignmentOf(g.b), alignSecond = alignmentOf(g.a),
           alignResult = alignmentOf(g.c);
  lt.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                          &alignFirst, sizeof(alignFirst));
  lt.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                          &alignSecond, sizeof(alignSecond));
  lt.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                          &alignResult, sizeof(alignResult));
  lt.cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                          &alignResult, sizeof(alignResult));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  cublasStatus_t status =
      lt.cublasLtMatmulAlgoGetHeuristic(handle, out.desc, out.first, out.second, out.result,
                                        out.result, preference, 1, &heuristic, &found);
  lt.cublasLtMatmulPreferenceDestroy(preference);
  if (Status s = check(status, "cublasLtMatmulAlgoGetHeuristic"); !s)
    return s.takeError();
  if (found == 0)
    return Error{g.label + ": cuBLASLt has no algorithm for this GEMM"};
  out.algo = heuristic.algo;
  return out;
}

} // namespace kiln::runtime
