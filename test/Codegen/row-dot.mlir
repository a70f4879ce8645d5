// kiln-row-dot (lib/Dialect/Kernel/Transforms/RowDot.cpp): thin GEMMs whose
// A is a vectorized loop kernel's output, over the whole row, become part of
// that kernel (lib/Codegen/RowDotKernel.cpp: tensor-core products of the
// registers that hold the rows). The SiLU gradient of a LoRA MLP: dT =
// 2 (dg B1 + du B2), two GEMMs (the second with beta = 1), both in the kernel;
// a single product with three n-tiles (24 columns); the forward's t = h A^T
// (B stored [n, K], read transposed); a row not a multiple of
// 256 and a product wider than 64 stay GEMMs.
// RUN: kiln-opt %s --kiln-fuse --kiln-lower-to-step --kiln-row-dot -o %t.mlir
// RUN: FileCheck %s --check-prefix=IR < %t.mlir
// RUN: kiln-opt %s --kiln-fuse --kiln-lower-to-step -o %t.off.mlir
// RUN: FileCheck %s --check-prefix=OFF < %t.off.mlir
// RUN: kiln compile %t.mlir --emit=cuda --arch=sm_90,sm_75 -o %t 2>&1 | FileCheck %s --check-prefix=WROTE
// RUN: FileCheck %s --check-prefix=CUDA < %t/silu_k0_sigmoid_mul_dot.cu
// RUN: FileCheck %s --check-prefix=TILES < %t/one_k0_mul_dot.cu
// RUN: FileCheck %s --check-prefix=TRANS < %t/down_k0_mul_dot.cu
// RUN: kiln-opt %s --kiln-fuse --kiln-lower-to-step --kiln-row-dot=prefetch=true -o %t.pf.mlir
// RUN: kiln compile %t.pf.mlir --emit=cuda --arch=sm_90 -o %t.pf 2>&1 | FileCheck %s --check-prefix=WROTE
// RUN: FileCheck %s --check-prefix=PREFETCH < %t.pf/silu_k0_sigmoid_mul_dot.cu

// IR-LABEL: kiln_kernel.kernel @silu_k0_sigmoid_mul_dot <loop>
// IR-SAME: kiln.row_dot = 16
// IR: ^bb0({{.*}}: tensor<512x32xbf16>, {{.*}}: tensor<512x32xbf16>):
// IR: kiln.cast {{.*}} -> tensor<?x512xf32
// IR: kiln.matmul {{.*}} -> tensor<?x32xf32
// IR: kiln.matmul {{.*}} -> tensor<?x32xf32
// IR: kiln.add
// IR: kiln.constant dense<2.000000e+00> : tensor<f32>
// IR: kiln.mul
// IR: kiln.cast {{.*}} -> tensor<?x32xbf16
// IR-LABEL: func.func @silu
// IR-NOT: kiln_kernel.gemm
// IR: kiln_kernel.launch @silu_k0_sigmoid_mul_dot ins({{.*}}) outs({{.*}}) items = #kiln.expr<n> per 16 block 256
// IR-NOT: kiln_kernel.gemm
// IR-LABEL: kiln_kernel.kernel @one_k0_mul_dot <loop>
// IR-SAME: kiln.row_dot = 32
// IR-LABEL: func.func @one
// IR-NOT: kiln_kernel.gemm
// IR: kiln_kernel.launch @one_k0_mul_dot
// IR-LABEL: kiln_kernel.kernel @down_k0_mul_dot <loop>
// IR: kiln.matmul {{.*}} {transpose_b}
// IR-LABEL: func.func @down
// IR-NOT: kiln_kernel.gemm
// IR: kiln_kernel.launch @down_k0_mul_dot
// IR-LABEL: func.func @ragged
// IR: kiln_kernel.gemm
// IR-LABEL: func.func @wide
// IR: kiln_kernel.gemm
// OFF-LABEL: func.func @silu
// OFF-COUNT-2: kiln_kernel.gemm
// WROTE: wrote {{.*}} (5 kernels in 1 modules, 2 GEMMs)

// The chunk's loads for its four rows first, the stores of its outputs,
// the step's 256 rows of each B through cp.async, the products, the warps'
// sums in order. With three full-size inputs (g, u, dh), 16 rows per block.
// CUDA: const int64_t rows = sym_n;
// CUDA: kiln_cp_async16(
// CUDA: kiln_dot_in_in0[h] = reinterpret_cast<const uint4 *>(in0)[chunk];
// CUDA: if (row < rows) {
// CUDA: reinterpret_cast<uint4 *>(out0)[chunk] =
// CUDA: kiln_cp_async_wait_all();
// CUDA: kiln_ldmatrix_x4_trans(b, p);
// CUDA: kiln_mma_bf16_16816(kiln_dot_acc0[0][0], a[0], b[0], b[1]);
// CUDA: for (int w = 0; w < 8; ++w) {
// CUDA: out2[(rb * 16 + r) * 32 + c] = __float2bfloat16(2.000000000e+00f * v);
// TILES: kiln_ldmatrix_x4_trans(b, p);
// TILES: kiln_ldmatrix_x2_trans(b, p);
// TILES: kiln_mma_bf16_16816(kiln_dot_acc0[1][2], a[1], b[0], b[1]);
// TILES: out1[(rb * 32 + r) * 24 + c] = __float2bfloat16(1.000000000e+00f * v);

// With prefetch the first step's inputs load before the steps, and each
// step loads the next one's before its barrier and products.
// PREFETCH: __launch_bounds__(256, 2)
// PREFETCH: kiln_dot_in_in0[h] = reinterpret_cast<const uint4 *>(in0)[chunk];
// PREFETCH: for (int64_t c0 = 0; c0 < 512; c0 += 256) {
// PREFETCH-NOT: kiln_dot_in_in0[h] = reinterpret_cast
// PREFETCH: if (c0 + 256 < 512) {
// PREFETCH: const int64_t chunk = ((row < rows ? row : rows - 1) * 512 + col + 256) / 8;
// PREFETCH-NEXT: kiln_dot_in_in1[h] = reinterpret_cast<const uint4 *>(in1)[chunk];
// PREFETCH: kiln_cp_async_wait_all();

func.func @silu(%g: tensor<?x512xbf16, #kiln.dims<[n]>>, %u: tensor<?x512xbf16, #kiln.dims<[n]>>, %dh: tensor<?x512xbf16, #kiln.dims<[n]>>, %b1: tensor<512x32xbf16>, %b2: tensor<512x32xbf16>) -> (tensor<?x512xbf16, #kiln.dims<[n]>>, tensor<?x512xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) {
  %s = kiln.sigmoid %g : tensor<?x512xbf16, #kiln.dims<[n]>>
  %du = kiln.mul %dh, %s : (tensor<?x512xbf16, #kiln.dims<[n]>>, tensor<?x512xbf16, #kiln.dims<[n]>>) -> tensor<?x512xbf16, #kiln.dims<[n]>>
  %dg = kiln.mul %du, %u : (tensor<?x512xbf16, #kiln.dims<[n]>>, tensor<?x512xbf16, #kiln.dims<[n]>>) -> tensor<?x512xbf16, #kiln.dims<[n]>>
  %p1 = kiln.matmul %dg, %b1 : (tensor<?x512xbf16, #kiln.dims<[n]>>, tensor<512x32xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %p2 = kiln.matmul %du, %b2 : (tensor<?x512xbf16, #kiln.dims<[n]>>, tensor<512x32xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %c = kiln.constant dense<2.0> : tensor<bf16>
  %s1 = kiln.mul %p1, %c : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<bf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %s2 = kiln.mul %p2, %c : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<bf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %dt = kiln.add %s1, %s2 : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  return %dg, %du, %dt : tensor<?x512xbf16, #kiln.dims<[n]>>, tensor<?x512xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>
}

func.func @one(%x: tensor<?x256xbf16, #kiln.dims<[n]>>, %y: tensor<?x256xbf16, #kiln.dims<[n]>>, %b: tensor<256x24xbf16>) -> (tensor<?x256xbf16, #kiln.dims<[n]>>, tensor<?x24xbf16, #kiln.dims<[n]>>) {
  %z = kiln.mul %x, %y : (tensor<?x256xbf16, #kiln.dims<[n]>>, tensor<?x256xbf16, #kiln.dims<[n]>>) -> tensor<?x256xbf16, #kiln.dims<[n]>>
  %d = kiln.matmul %z, %b : (tensor<?x256xbf16, #kiln.dims<[n]>>, tensor<256x24xbf16>) -> tensor<?x24xbf16, #kiln.dims<[n]>>
  return %z, %d : tensor<?x256xbf16, #kiln.dims<[n]>>, tensor<?x24xbf16, #kiln.dims<[n]>>
}

// B^T's rows staged at a pitch of 264, the fragments read straight from them.
// TRANS: kiln_cp_async16(kiln_dot_b0 + r * 264 + cn * 8, in2 + r * 512 + c0 + cn * 8);
// TRANS: const uint2 b = *reinterpret_cast<const uint2 *>(kiln_dot_b0 + (8 + g) * 264 + warp * 32 + 8 * t + 4 * ks);
// TRANS: kiln_mma_bf16_16816(kiln_dot_acc0[1][1], a[1], b.x, b.y);
func.func @down(%x: tensor<?x512xbf16, #kiln.dims<[n]>>, %y: tensor<?x512xbf16, #kiln.dims<[n]>>, %a: tensor<16x512xbf16>) -> (tensor<?x512xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>) {
  %h = kiln.mul %x, %y : (tensor<?x512xbf16, #kiln.dims<[n]>>, tensor<?x512xbf16, #kiln.dims<[n]>>) -> tensor<?x512xbf16, #kiln.dims<[n]>>
  %t = kiln.matmul %h, %a {transpose_b} : (tensor<?x512xbf16, #kiln.dims<[n]>>, tensor<16x512xbf16>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
  return %h, %t : tensor<?x512xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>
}


func.func @ragged(%x: tensor<?x320xbf16, #kiln.dims<[n]>>, %y: tensor<?x320xbf16, #kiln.dims<[n]>>, %b: tensor<320x16xbf16>) -> (tensor<?x320xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>) {
  %z = kiln.mul %x, %y : (tensor<?x320xbf16, #kiln.dims<[n]>>, tensor<?x320xbf16, #kiln.dims<[n]>>) -> tensor<?x320xbf16, #kiln.dims<[n]>>
  %d = kiln.matmul %z, %b : (tensor<?x320xbf16, #kiln.dims<[n]>>, tensor<320x16xbf16>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
  return %z, %d : tensor<?x320xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>
}

func.func @wide(%x: tensor<?x256xbf16, #kiln.dims<[n]>>, %y: tensor<?x256xbf16, #kiln.dims<[n]>>, %b: tensor<256x72xbf16>) -> (tensor<?x256xbf16, #kiln.dims<[n]>>, tensor<?x72xbf16, #kiln.dims<[n]>>) {
  %z = kiln.mul %x, %y : (tensor<?x256xbf16, #kiln.dims<[n]>>, tensor<?x256xbf16, #kiln.dims<[n]>>) -> tensor<?x256xbf16, #kiln.dims<[n]>>
  %d = kiln.matmul %z, %b : (tensor<?x256xbf16, #kiln.dims<[n]>>, tensor<256x72xbf16>) -> tensor<?x72xbf16, #kiln.dims<[n]>>
  return %z, %d : tensor<?x256xbf16, #kiln.dims<[n]>>, tensor<?x72xbf16, #kiln.dims<[n]>>
}
