//===- GemmDescriptors.cpp - cuBLASLt descriptors of a program's GEMMs ---===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "ProgramRunner.h"

using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {
cudaDataType_t cudaType(DType t) {
  return t == DType::BF16  ? CUDA_R_16BF
         : t == DType::F16 ? CUDA_R_16F
         : t == DType::F64 ? CUDA_R_64F
                           : CUDA_R_32F;
}
} // namespace

Expected<ProgramRunner::Gemm> ProgramRunner::buildGemm(const ProgramOp &op,
                                                       const SymbolBindings &sizes,
                                                       const std::string &where) const {
  const StepProgram &p = program;
  Expected<int64_t> m = op.m->evaluate(sizes), nn = op.n->evaluate(sizes),
                    k = op.k->evaluate(sizes), batch = op.batch->evaluate(sizes);
  int64_t strides[3];
  for (int s = 0; s < 3; ++s) {
    Expected<int64_t> v = op.strides[s].evaluate(sizes);
    if (!v)
      return Error{origin + ": " + where + ": " + v.getError()};
    strides[s] = *v;
  }
  if (!m || !nn || !k || !batch)
    return Error{origin + ": " + where + ": a GEMM size does not evaluate"};
  // Every matrix inside its buffer at its leading dimension.
  Expected<std::vector<GemmMatrix>> matrices = gemmMatrices(p, op, sizes, reachable);
  if (!matrices)
    return Error{origin + ": " + where + ": " + matrices.getError()};
  const GemmMatrix &ma = (*matrices)[0], &mb = (*matrices)[1], &mc = (*matrices)[2];
  Gemm g;
  g.label = "gemm " + std::to_string(*m) + "x" + std::to_string(*nn) + "x" + std::to_string(*k) +
            (*batch > 1 ? " batch " + std::to_string(*batch) : "") + " " +
            dtypeName(p.buffers[op.c].dtype);
  g.a = pointers[op.a];
  g.b = pointers[op.b];
  g.c = pointers[op.c];
  g.alpha = static_cast<float>(op.alpha);
  g.beta = static_cast<float>(op.beta);
  cudaDataType_t ab = cudaType(p.buffers[op.a].dtype), ct = cudaType(p.buffers[op.c].dtype);
  auto ltCheck = [&](cublasStatus_t status, const char *what) -> Status {
    if (status == CUBLAS_STATUS_SUCCESS)
      return Status::success();
    return Error{origin + ": " + where + " (gemm m=" + std::to_string(*m) +
                 " n=" + std::to_string(*nn) + " k=" + std::to_string(*k) + "): " + what +
                 " failed: " + lt->describe(status)};
  };
  if (Status s = ltCheck(lt->cublasLtMatmulDescCreate(&g.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                         "cublasLtMatmulDescCreate");
      !s)
    return s.takeError();
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T:
  // B goes first.
  cublasOperation_t opFirst = op.transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opSecond = op.transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  lt->cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opFirst,
                                     sizeof(opFirst));
  lt->cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opSecond,
                                     sizeof(opSecond));
  if (op.epilogue != "none") {
    cublasLtEpilogue_t epilogue;
    if (op.epilogue == "bias")
      epilogue = CUBLASLT_EPILOGUE_BIAS;
    else if (op.epilogue == "bias_relu")
      epilogue = CUBLASLT_EPILOGUE_RELU_BIAS;
    else if (op.epilogue == "bias_gelu")
      epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
    else if (op.epilogue == "relu")
      epilogue = CUBLASLT_EPILOGUE_RELU;
    else if (op.epilogue == "gelu")
      epilogue = CUBLASLT_EPILOGUE_GELU;
    else
      return Error{origin + ": " + where + ": epilogue '" + op.epilogue + "' is not supported"};
    lt->cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue,
                                       sizeof(epilogue));
    if (op.bias >= 0) {
      void *bias = reinterpret_cast<void *>(pointers[op.bias]);
      lt->cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                         sizeof(bias));
    }
  }
  uint64_t M = *m, N = *nn, K = *k;
  // A row-major matrix at row stride ld is column-major with leading
  // dimension ld (docs/dialects/kernel.md, `lds`).
  int64_t ldFirst = mb.ld, ldSecond = ma.ld, ldResult = mc.ld;
  if (Status s = ltCheck(op.transB ? lt->cublasLtMatrixLayoutCreate(&g.first, ab, K, N, ldFirst)
                                   : lt->cublasLtMatrixLayoutCreate(&g.first, ab, N, K, ldFirst),
                         "cublasLtMatrixLayoutCreate");
      !s)
    return s.takeError();
  if (Status s =
          ltCheck(op.transA ? lt->cublasLtMatrixLayoutCreate(&g.second, ab, M, K, ldSecond)
                            : lt->cublasLtMatrixLayoutCreate(&g.second, ab, K, M, ldSecond),
                  "cublasLtMatrixLayoutCreate");
      !s)
    return s.takeError();
  if (Status s = ltCheck(lt->cublasLtMatrixLayoutCreate(&g.result, ct, N, M, ldResult),
                         "cublasLtMatrixLayoutCreate");
      !s)
    return s.takeError();
  int32_t count = static_cast<int32_t>(*batch);
  int64_t layoutStrides[3] = {strides[1], strides[0], strides[2]};
  cublasLtMatrixLayout_t layouts[3] = {g.first, g.second, g.result};
  if (count > 1)
    for (int s = 0; s < 3; ++s) {
      lt->cublasLtMatrixLayoutSetAttribute(layouts[s], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                           sizeof(count));
      lt->cublasLtMatrixLayoutSetAttribute(layouts[s], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                           &layoutStrides[s], sizeof(layoutStrides[s]));
    }
  cublasLtMatmulPreference_t preference = nullptr;
  if (Status s = ltCheck(lt->cublasLtMatmulPreferenceCreate(&preference),
                         "cublasLtMatmulPreferenceCreate");
      !s)
    return s.takeError();
  uint64_t workspaceBytes = kWorkspaceBytes;
  lt->cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                           &workspaceBytes, sizeof(workspaceBytes));
  cublasLtMatmulHeuristicResult_t heuristic{};
  int found = 0;
  cublasStatus_t status = lt->cublasLtMatmulAlgoGetHeuristic(
      handle, g.desc, g.first, g.second, g.result, g.result, preference, 1, &heuristic, &found);
  lt->cublasLtMatmulPreferenceDestroy(preference);
  if (Status s = ltCheck(status, "cublasLtMatmulAlgoGetHeuristic"); !s)
    return s.takeError();
  if (found == 0)
    return Error{origin + ": " + where + ": cuBLASLt has no algorithm for this GEMM"};
  g.algo = heuristic.algo;
  // What cuBLASLt is asked, nothing else: two GEMMs with equal signatures
  // share their tuned algorithm (ProgramRunnerTuning.cpp).
  int64_t lds[3] = {ldFirst, ldSecond, ldResult};
  g.hash = hashSignature(gemmSignature(p.buffers[op.a].dtype, p.buffers[op.c].dtype, op.transB,
                                       op.transA, op.epilogue, op.bias >= 0, M, N, K, count,
                                       layoutStrides, lds));
  g.shape = "m=" + std::to_string(M) + ",n=" + std::to_string(N) + ",k=" + std::to_string(K) +
            ",batch=" + std::to_string(count);
  g.cBytes = bytes[op.c];
  g.cType = p.buffers[op.c].dtype;
  g.abType = ab;
  g.outType = ct;
  g.m = M;
  g.n = N;
  g.k = K;
  g.transA = op.transA;
  g.transB = op.transB;
  g.epilogue = op.epilogue != "none";
  g.lda = ma.ld;
  g.ldb = mb.ld;
  g.ldc = mc.ld;
  g.batch = count;
  return g;
}
