// Graph IR -> fused step -> one CUDA source per kernel, checked as text and
// compiled by NVRTC for both CI archs.
// RUN: rm -rf %t && kiln-opt %s --kiln-fuse --kiln-lower-to-step -o %t.mlir
// RUN: kiln compile %t.mlir --emit=cuda --arch=none -o %t
// RUN: FileCheck %s --check-prefix=LOOP < %t/bias_silu_k0_add_silu_cast.cu
// RUN: FileCheck %s --check-prefix=SCALAR < %t/odd_k0_exp.cu
// RUN: FileCheck %s --check-prefix=ROW < %t/norm_k0_rms_norm_grad.cu
// RUN: FileCheck %s --check-prefix=XENT < %t/xent_k0_cross_entropy_cross_entropy_grad.cu
// RUN: FileCheck %s --check-prefix=ATTN < %t/attn_k0_attention.cu
// RUN: FileCheck %s --check-prefix=LAUNCH < %t.mlir
// RUN: FileCheck %s --check-prefix=ATTN32 < %t/attn32_k0_attention.cu
// RUN: FileCheck %s --check-prefix=GRAD16 < %t/attn_grad16_k0_attention_grad.cu
// RUN: FileCheck %s --check-prefix=SCAN < %t/scan_k0_cumsum.cu
// RUN: FileCheck %s --check-prefix=SCATTER < %t/embed_grad_k0_scatter_add.cu
// RUN: FileCheck %s --check-prefix=MULTI < %t/update_k0_mul_sub.cu
// RUN: kiln compile %t.mlir --emit=cuda --arch=sm_80,sm_90 --kernel-cache=%t/cache --timing -o %t 2>&1 | FileCheck %s --check-prefix=COLD
// RUN: kiln compile %t.mlir --emit=cuda --arch=sm_80,sm_90 --kernel-cache=%t/cache --timing -o %t 2>&1 | FileCheck %s --check-prefix=WARM
// RUN: FileCheck %s --check-prefix=MANIFEST < %t/manifest.json

// Broadcasts are indexing: the bias is read at the column, nothing is
// materialized; symbolic dims are int64 parameters (renamed when they clash
// with locals); bf16 is stored converted. 32*n elements are a multiple of
// 4 for every n: 4 per thread, the input and output moved as one vector
// access each (16 bytes of f32 in, 8 bytes of bf16 out).
// LOOP: #include <cuda_bf16.h>
// LOOP: extern "C" __global__ void bias_silu_k0_add_silu_cast(
// LOOP-NEXT: const float *__restrict__ in0,
// LOOP-NEXT: const float *__restrict__ in1,
// LOOP-NEXT: __nv_bfloat16 *out0,
// LOOP-NEXT: int64_t sym_n) {
// LOOP: const int64_t n = 8*sym_n;
// LOOP: for (int64_t chunk = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; chunk < n;
// The 4 lanes share the row (32 is a multiple of 4): one division per chunk.
// LOOP: const int64_t base = chunk * 4;
// LOOP: const int64_t [[COL:ix[0-9]+]] = {{r[0-9]+}} % 32u;
// LOOP: *reinterpret_cast<uint4 *>(in0_v) = reinterpret_cast<const uint4 *>(in0)[chunk];
// LOOP: for (int lane = 0; lane < 4; ++lane) {
// LOOP-NEXT: const int64_t flat = base + lane;
// LOOP-NOT: %
// LOOP: const float [[X:v[0-9]+]] = in0_v[lane];
// The bias row's 4 lanes: one aligned vector, loaded by lane 0.
// LOOP: if (lane == 0) *reinterpret_cast<uint4 *>([[BC:in1_c[0-9]+]]) = *reinterpret_cast<const uint4 *>(in1 + ([[COL]]));
// LOOP-NEXT: const float [[B:v[0-9]+]] = [[BC]][lane];
// LOOP: out0_v[lane] = __float2bfloat16(
// LOOP: reinterpret_cast<uint2 *>(out0)[chunk] = *reinterpret_cast<const uint2 *>(out0_v);

// An element count that is not a multiple of the vector width for every n
// keeps one element per thread.
// SCALAR: const int64_t n = 3*sym_n;
// SCALAR: for (int64_t flat = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; flat < n;
// SCALAR: out0[flat] = (float)(
func.func @odd(%x: tensor<?x3xf32, #kiln.dims<[n]>>) -> tensor<?x3xf32, #kiln.dims<[n]>> {
  %0 = kiln.exp %x : tensor<?x3xf32, #kiln.dims<[n]>>
  return %0 : tensor<?x3xf32, #kiln.dims<[n]>>
}

func.func @bias_silu(%x: tensor<?x32xf32, #kiln.dims<[n]>>, %b: tensor<32xf32>) -> tensor<?x32xbf16, #kiln.dims<[n]>> {
  %0 = kiln.add %x, %b : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %1 = kiln.silu %0 : tensor<?x32xf32, #kiln.dims<[n]>>
  %2 = kiln.cast %1 : tensor<?x32xf32, #kiln.dims<[n]>> -> tensor<?x32xbf16, #kiln.dims<[n]>>
  return %2 : tensor<?x32xbf16, #kiln.dims<[n]>>
}

// 64 f32 columns: 16 vectors of 4, a warp per row (16 of its lanes hold
// one vector each, in registers) with warp reductions; the weight gradient
// sums over rows with atomic adds (test/Codegen/row-vector.mlir has the
// vectorized layouts).
// ROW: for (int64_t row = blockIdx.x * 8 + threadIdx.x / 32; row < rows; row += (int64_t)gridDim.x * 8)
// ROW: ms = kiln_warp_reduce(ms, false) / (float)cols;
// ROW: const float rstd = rsqrtf(ms + 1.000000000e-06f);
// ROW: mgx = kiln_warp_reduce(mgx, false) / (float)cols;
// ROW: kiln_atomic_add(&out1[col],
// ROW: out0_v[lane] =
func.func @norm(%x: tensor<?x64xf32, #kiln.dims<[n]>>, %w: tensor<64xf32>, %dy: tensor<?x64xf32, #kiln.dims<[n]>>) -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) {
  %dx, %dw = kiln.rms_norm_grad %x, %w, %dy {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>, tensor<?x64xf32, #kiln.dims<[n]>>) -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>)
  return %dx, %dw : tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>
}

// Loss and logit gradient from one pass over each row: the fp32 logits are
// read, the gradient written, no probabilities stored.
// XENT: counted = kiln_block_reduce(counted, red, false);
// XENT: mx = kiln_warp_reduce(mx, true);
// XENT: se = kiln_warp_reduce(se, false);
// XENT: kiln_atomic_add(out0, loss / counted);
// XENT: const float scale = counts ? 1.000000000e+00f / counted : 0.f;
// XENT: out1_v[lane] = (float)(
func.func @xent(%l: tensor<?x256xf32, #kiln.dims<[n]>>, %y: tensor<?xi64, #kiln.dims<[n]>>) -> (tensor<f32>, tensor<?x256xf32, #kiln.dims<[n]>>) {
  %one = kiln.constant dense<1.0> : tensor<f32>
  %0 = kiln.cross_entropy %l, %y : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<?xi64, #kiln.dims<[n]>>) -> tensor<f32>
  %1 = kiln.cross_entropy_grad %l, %y, %one : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<?xi64, #kiln.dims<[n]>>, tensor<f32>) -> tensor<?x256xf32, #kiln.dims<[n]>>
  return %0, %1 : tensor<f32>, tensor<?x256xf32, #kiln.dims<[n]>>
}

// bf16 grouped-query attention: the tiled tensor-core kernel, a block of 128
// threads per 64 query rows, reading the dense inputs (rows D apart).
// LAUNCH: kiln_kernel.launch @attn_k0_attention {{.*}} items = #kiln.expr<4*b*s> per 64 block 128 shared #kiln.expr<35840>
// ATTN: extern __shared__ __align__(128) unsigned char kiln_flash_smem[];
// ATTN: auto mask = [&](int64_t, int64_t, int64_t, int64_t) { return 0.f; };
// ATTN: kiln_flash::forward<__nv_bfloat16, 16>(in0, kiln_flash::Strides{64*sym_s, 16*sym_s, 16}, in1, kiln_flash::Strides{32*sym_s, 16*sym_s, 16}, in2, kiln_flash::Strides{32*sym_s, 16*sym_s, 16}, sym_b, 4, 2, sym_s, sym_s, 2.500000000e-01f, true, mask, storeO, kiln_flash_smem);
func.func @attn(%q: tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>, %k: tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, %v: tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>) -> tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>> {
  %0 = kiln.attention %q, %k, %v {causal} : (tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>) -> tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>
  return %0 : tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>
}

// f16 attention gradient with a boolean mask (fused into the kernel): the
// tiled backward; dK and dV accumulate in fp32 with float4 atomics.
// GRAD16: auto mask = [&](int64_t b, int64_t h, int64_t i, int64_t j) -> float {
// GRAD16: auto addDK = [&](int64_t b, int64_t h, int64_t i, int64_t d, float4 x) { kiln_flash::atomicAdd4(&out1[
// GRAD16: kiln_flash::backward<__half, 32>(in0, kiln_flash::Strides{64*sym_s, 32*sym_s, 32}, in1, kiln_flash::Strides{64*sym_s, 32*sym_s, 32}, in2, kiln_flash::Strides{64*sym_s, 32*sym_s, 32}, in4, kiln_flash::Strides{64*sym_s, 32*sym_s, 32}, sym_b, 2, 2, sym_s, sym_s, 1.767766953e-01f, false, mask, storeDQ, addDK, addDV, true, true, true, kiln_flash_smem);
func.func @attn_grad16(%q: tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>, %k: tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>, %v: tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>, %m: tensor<?x1x1x?xi1, #kiln.dims<[b, s]>>, %dy: tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>) -> (tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>) {
  %0:3 = kiln.attention_grad %q, %k, %v mask %m grad %dy : (tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>, tensor<?x1x1x?xi1, #kiln.dims<[b, s]>>, tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>) -> (tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>)
  return %0#0, %0#1, %0#2 : tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xf16, #kiln.dims<[b, s]>>
}

// fp32 (or a head dim the tiles do not take): one score row in shared
// memory per query row.
// ATTN32: extern __shared__ float kiln_smem[];
// ATTN32: const int64_t group = 4 / 2; // query heads per kv head
// ATTN32: if (j > i) s = -KILN_INF;
// ATTN32: out0[
func.func @attn32(%q: tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>, %k: tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, %v: tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>) -> tensor<?x4x?x16xf32, #kiln.dims<[b, s]>> {
  %0 = kiln.attention %q, %k, %v {causal} : (tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>, tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>) -> tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>
  return %0 : tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>
}

// SCAN: for (int64_t s = 0; s < seq; ++s)
// SCAN: sum += 
func.func @scan(%x: tensor<?x?xi64, #kiln.dims<[b, seq]>>) -> tensor<?x?xi64, #kiln.dims<[b, seq]>> {
  %0 = kiln.cumsum %x {axis = 1 : i64} : tensor<?x?xi64, #kiln.dims<[b, seq]>>
  return %0 : tensor<?x?xi64, #kiln.dims<[b, seq]>>
}

// SCATTER: The output already holds the destination (kiln_kernel.copy).
// SCATTER: kiln_atomic_add(&out0[
func.func @embed_grad(%d: tensor<256x64xf32>, %i: tensor<?xi64, #kiln.dims<[n]>>, %u: tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<256x64xf32> {
  %0 = kiln.scatter_add %d, %i, %u {axis = 0 : i64} : (tensor<256x64xf32>, tensor<?xi64, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<256x64xf32>
  return %0 : tensor<256x64xf32>
}

// One launch updates tensors of different sizes, segment after segment.
// MULTI: // 2 segments, one per distinct element count
// MULTI: const int64_t n = (8*sym_n + 64);
// MULTI: if (g < 8*sym_n) {
// MULTI-NEXT: const int64_t flat = g;
// MULTI: out0[flat] =
// MULTI: else {
// MULTI-NEXT: const int64_t flat = g - 8*sym_n;
// MULTI: out1[flat] =
func.func @update(%p: tensor<?x8xf32, #kiln.dims<[n]>>, %g: tensor<?x8xf32, #kiln.dims<[n]>>, %q: tensor<64xf32>, %h: tensor<64xf32>, %lr: tensor<f32>) -> (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<64xf32>) {
  %0 = kiln.mul %g, %lr : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<f32>) -> tensor<?x8xf32, #kiln.dims<[n]>>
  %1 = kiln.sub %p, %0 : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<?x8xf32, #kiln.dims<[n]>>) -> tensor<?x8xf32, #kiln.dims<[n]>>
  %2 = kiln.mul %h, %lr : (tensor<64xf32>, tensor<f32>) -> tensor<64xf32>
  %3 = kiln.sub %q, %2 : (tensor<64xf32>, tensor<64xf32>) -> tensor<64xf32>
  return %1, %3 : tensor<?x8xf32, #kiln.dims<[n]>>, tensor<64xf32>
}

// COLD: kiln: 13 kernels in 1 modules, 0 GEMMs -> {{.*}}; NVRTC {{[0-9.]+}}: 2 compiled, 0 cached
// WARM: NVRTC {{[0-9.]+}}: 0 compiled, 2 cached

// MANIFEST: "archs": [
// MANIFEST-NEXT: "sm_80",
// MANIFEST-NEXT: "sm_90"
// MANIFEST: "name": "attn_k0_attention",
// MANIFEST: "cubins": {
// MANIFEST-NEXT: "sm_80": "module0.sm_80.cubin",
// MANIFEST-NEXT: "sm_90": "module0.sm_90.cubin"
// MANIFEST: "ptx": "module0.ptx"

// bf16 values computed inside a kernel hold what their type holds: the
// narrowing cast and the bf16 exp are each rounded to bf16 (as the
// interpreter's values are; `kiln_round_bf16`, Bf16.cuh), the widening
// cast is free.
// RUN: cat %t/bf16_chain_k0_*.cu | FileCheck %s --check-prefix=ROUND
// ROUND: const float [[C:v[0-9]+]] = kiln_round_bf16(
// ROUND: const float [[E:v[0-9]+]] = kiln_round_bf16(expf([[C]]));
// ROUND: out0[flat] = (float)([[E]]);
func.func @bf16_chain(%x: tensor<?x3xf32, #kiln.dims<[n]>>) -> tensor<?x3xf32, #kiln.dims<[n]>> {
  %0 = kiln.cast %x : tensor<?x3xf32, #kiln.dims<[n]>> -> tensor<?x3xbf16, #kiln.dims<[n]>>
  %1 = kiln.exp %0 : tensor<?x3xbf16, #kiln.dims<[n]>>
  %2 = kiln.cast %1 : tensor<?x3xbf16, #kiln.dims<[n]>> -> tensor<?x3xf32, #kiln.dims<[n]>>
  return %2 : tensor<?x3xf32, #kiln.dims<[n]>>
}
