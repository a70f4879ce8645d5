// RUN: kiln-opt %s --split-input-file --kiln-fuse --kiln-lower-to-step | FileCheck %s

// A shared weight folds the batch into m; the fused pointwise ops become a
// kernel symbol and one launch: 4 f32 elements per thread (16 bytes).
// CHECK: kiln_kernel.kernel @mlp_k0_mul_silu <loop> symbols ["n", "s"]
// CHECK: kiln.silu
// CHECK-LABEL: func.func @mlp
// CHECK-SAME: (%[[X:.+]]: !kiln_kernel.buffer<tensor<?x?x64xf32, #kiln.dims<[n, s]>>>, %[[W:.+]]: !kiln_kernel.buffer<tensor<64x32xf32>>, %[[B:.+]]: !kiln_kernel.buffer<tensor<32xf32>>)
// CHECK: %[[Y:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x?x32xf32, #kiln.dims<[n, s]>>>
// CHECK: kiln_kernel.gemm %[[X]], %[[W]] -> %[[Y]] m = #kiln.expr<n*s> n = #kiln.expr<32> k = #kiln.expr<64> batch = #kiln.expr<1> strides = #kiln.dims<[0, 0, 0]> epilogue <none> compute f32
// CHECK: %[[Z:.+]] = kiln_kernel.alloc
// CHECK: kiln_kernel.launch @mlp_k0_mul_silu ins(%[[Y]], %[[B]] : {{.*}}) outs(%[[Z]] : {{.*}}) items = #kiln.expr<8*n*s> per 256 block 256 shared #kiln.expr<0>
// CHECK: return %[[Z]]
func.func @mlp(%x: tensor<?x?x64xf32, #kiln.dims<[n, s]>>, %w: tensor<64x32xf32>, %b: tensor<32xf32>) -> tensor<?x?x32xf32, #kiln.dims<[n, s]>> {
  %0 = kiln.matmul %x, %w : (tensor<?x?x64xf32, #kiln.dims<[n, s]>>, tensor<64x32xf32>) -> tensor<?x?x32xf32, #kiln.dims<[n, s]>>
  %1 = kiln.mul %0, %b : (tensor<?x?x32xf32, #kiln.dims<[n, s]>>, tensor<32xf32>) -> tensor<?x?x32xf32, #kiln.dims<[n, s]>>
  %2 = kiln.silu %1 : tensor<?x?x32xf32, #kiln.dims<[n, s]>>
  return %2 : tensor<?x?x32xf32, #kiln.dims<[n, s]>>
}

// -----

// The weight gradient summed over the batch is one GEMM with k = n*s.
// CHECK-LABEL: func.func @wgrad
// CHECK: %[[G:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<64x32xf32>>
// CHECK: kiln_kernel.gemm %{{.+}}, %{{.+}} -> %[[G]] m = #kiln.expr<64> n = #kiln.expr<32> k = #kiln.expr<n*s> batch = #kiln.expr<1> strides = #kiln.dims<[0, 0, 0]> epilogue <none> compute f32 {trans_a}
// CHECK-NOT: kiln_kernel.launch
// CHECK: return %[[G]]
func.func @wgrad(%x: tensor<?x?x64xf32, #kiln.dims<[n, s]>>, %dy: tensor<?x?x32xf32, #kiln.dims<[n, s]>>) -> tensor<64x32xf32> {
  %0 = kiln.matmul %x, %dy {transpose_a} : (tensor<?x?x64xf32, #kiln.dims<[n, s]>>, tensor<?x?x32xf32, #kiln.dims<[n, s]>>) -> tensor<?x64x32xf32, #kiln.dims<[n]>>
  %1 = kiln.reduce_sum %0 {axes = array<i64: 0>} : (tensor<?x64x32xf32, #kiln.dims<[n]>>) -> tensor<64x32xf32>
  return %1 : tensor<64x32xf32>
}

// -----

// Batched attention-style products keep their batch and strides.
// CHECK-LABEL: func.func @batched
// CHECK: kiln_kernel.gemm {{.*}} m = #kiln.expr<s> n = #kiln.expr<s> k = #kiln.expr<16> batch = #kiln.expr<4*n> strides = #kiln.dims<[16*s, 16*s, s*s]> epilogue <none> compute f32 {trans_b}
func.func @batched(%q: tensor<?x4x?x16xbf16, #kiln.dims<[n, s]>>, %k: tensor<?x4x?x16xbf16, #kiln.dims<[n, s]>>) -> tensor<?x4x?x?xbf16, #kiln.dims<[n, s, s]>> {
  %0 = kiln.matmul %q, %k {transpose_b} : (tensor<?x4x?x16xbf16, #kiln.dims<[n, s]>>, tensor<?x4x?x16xbf16, #kiln.dims<[n, s]>>) -> tensor<?x4x?x?xbf16, #kiln.dims<[n, s, s]>>
  return %0 : tensor<?x4x?x?xbf16, #kiln.dims<[n, s, s]>>
}

// -----

// Norm weight gradients accumulate atomically: their buffer is zeroed
// right before the launch. Frozen parameters become weights. Rows of 64
// f32 (16 vectors) run a warp each, 8 per block (RowLayout).
// CHECK-LABEL: func.func @normgrad
// CHECK: %[[W:.+]] = kiln_kernel.weight "norm.weight" : !kiln_kernel.buffer<tensor<64xf32>>
// CHECK: %[[DX:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>
// CHECK: %[[DW:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<64xf32>>
// CHECK: kiln_kernel.fill %[[DW]], 0.000000e+00
// CHECK: kiln_kernel.launch @normgrad_k0_rms_norm_grad ins(%{{.+}}, %[[W]], %{{.+}} : {{.*}}) outs(%[[DX]], %[[DW]] : {{.*}}) items = #kiln.expr<n> per 8 block 256
func.func @normgrad(%x: tensor<?x64xf32, #kiln.dims<[n]>>, %dy: tensor<?x64xf32, #kiln.dims<[n]>>) -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) {
  %w = kiln.parameter "norm.weight" : tensor<64xf32>
  %dx, %dw = kiln.rms_norm_grad %x, %w, %dy {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>, tensor<?x64xf32, #kiln.dims<[n]>>) -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>)
  return %dx, %dw : tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>
}

// -----

// Scatter-add accumulates atomically into its output: a small splat
// destination copied into the kernel becomes a fill, an input a copy.
// CHECK-LABEL: func.func @embed_grads
// CHECK: %[[Z:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<8x4xf32>>
// CHECK-NEXT: kiln_kernel.fill %[[Z]], 0.000000e+00
// CHECK: kiln_kernel.launch @embed_grads_k0_scatter_add
// CHECK: %[[D:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<8x4xf32>>
// CHECK-NEXT: kiln_kernel.copy %arg2 -> %[[D]]
// CHECK: kiln_kernel.launch @embed_grads_k1_scatter_add
func.func @embed_grads(%i: tensor<?xi64, #kiln.dims<[n]>>, %u: tensor<?x4xf32, #kiln.dims<[n]>>, %d: tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>) {
  %zero = kiln.constant dense<0.0> : tensor<8x4xf32>
  %0 = kiln.scatter_add %zero, %i, %u {axis = 0 : i64} : (tensor<8x4xf32>, tensor<?xi64, #kiln.dims<[n]>>, tensor<?x4xf32, #kiln.dims<[n]>>) -> tensor<8x4xf32>
  %1 = kiln.scatter_add %d, %i, %u {axis = 0 : i64} : (tensor<8x4xf32>, tensor<?xi64, #kiln.dims<[n]>>, tensor<?x4xf32, #kiln.dims<[n]>>) -> tensor<8x4xf32>
  return %0, %1 : tensor<8x4xf32>, tensor<8x4xf32>
}

// -----

// A bias add (and a ReLU on it) after a GEMM is cuBLASLt's epilogue, issued
// where the chain ends (the bias is computed after the matmul here); tanh
// GELU would be bias_gelu, erf GELU is not cuBLASLt's and stays a kernel.
// CHECK-LABEL: func.func @linear_relu
// CHECK-NOT: kiln_kernel.launch
// CHECK: %[[Y:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x32xf32, #kiln.dims<[n]>>>
// CHECK: kiln_kernel.gemm %arg0, %arg1 bias %{{.+}} -> %[[Y]] {{.*}} epilogue <bias_relu>
// CHECK: return %[[Y]]
func.func @linear_relu(%x: tensor<?x64xf32, #kiln.dims<[n]>>, %w: tensor<64x32xf32>, %b: tensor<32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>> {
  %0 = kiln.matmul %x, %w : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %bb = kiln.reshape %b : tensor<32xf32> -> tensor<32xf32>
  %1 = kiln.add %0, %bb : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %2 = kiln.relu %1 : tensor<?x32xf32, #kiln.dims<[n]>>
  return %2 : tensor<?x32xf32, #kiln.dims<[n]>>
}

// CHECK-LABEL: func.func @linear_gelu_erf
// CHECK: kiln_kernel.gemm {{.*}} epilogue <bias>
// CHECK: kiln_kernel.launch @linear_gelu_erf_k0_gelu
func.func @linear_gelu_erf(%x: tensor<?x64xf32, #kiln.dims<[n]>>, %w: tensor<64x32xf32>, %b: tensor<32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>> {
  %0 = kiln.matmul %x, %w : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %1 = kiln.add %0, %b : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %2 = kiln.gelu %1 : tensor<?x32xf32, #kiln.dims<[n]>>
  return %2 : tensor<?x32xf32, #kiln.dims<[n]>>
}
