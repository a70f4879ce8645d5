// RUN: kiln-opt %s --split-input-file --kiln-fuse --kiln-lower-to-step --kiln-dedupe-kernels | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-fuse --kiln-lower-to-step | FileCheck %s --check-prefix=OFF

// Two layers compute SiLU on the same shapes: one kernel, launched twice.
// The norms differ in epsilon: two kernels.
// CHECK-LABEL: kiln_kernel.kernel @layers_k0_silu <loop>
// CHECK-NOT: kiln_kernel.kernel @layers_k1_silu
// CHECK: kiln_kernel.kernel @layers_k2_rms_norm
// CHECK: kiln_kernel.kernel @layers_k3_rms_norm
// CHECK-LABEL: func.func @layers
// CHECK: kiln_kernel.launch @layers_k0_silu ins(%[[A:[^ ]+]] :
// CHECK: kiln_kernel.launch @layers_k0_silu ins(%[[C:[^ ]+]] :
// CHECK: kiln_kernel.launch @layers_k2_rms_norm
// CHECK: kiln_kernel.launch @layers_k3_rms_norm
// OFF: kiln_kernel.kernel @layers_k0_silu
// OFF: kiln_kernel.kernel @layers_k1_silu
// OFF: kiln_kernel.launch @layers_k1_silu
func.func @layers(%x: tensor<?x64xf32, #kiln.dims<[n]>>, %w1: tensor<64x64xf32>, %w2: tensor<64x64xf32>, %g: tensor<64xf32>) -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) {
  %a = kiln.matmul %x, %w1 : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %b = kiln.silu %a : tensor<?x64xf32, #kiln.dims<[n]>>
  %c = kiln.matmul %b, %w2 : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %d = kiln.silu %c : tensor<?x64xf32, #kiln.dims<[n]>>
  %m = kiln.matmul %d, %w2 : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %e = kiln.rms_norm %m, %g {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %f = kiln.matmul %e, %w1 : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %h = kiln.rms_norm %f, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  return %e, %h : tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>
}

// -----

// Kernels are shared across the module's functions (the init program and
// shape buckets launch the step's kernels); another shape is another kernel.
// CHECK-LABEL: kiln_kernel.kernel @first_k0_exp
// CHECK-LABEL: func.func @first
// CHECK: kiln_kernel.launch @first_k0_exp
// CHECK-NOT: kiln_kernel.kernel @second_k0_exp
// CHECK: kiln_kernel.kernel @second_k1_exp
// CHECK-LABEL: func.func @second
// CHECK: kiln_kernel.launch @first_k0_exp
// CHECK: kiln_kernel.launch @second_k1_exp
func.func @first(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %y = kiln.exp %x : tensor<8x16xf32>
  return %y : tensor<8x16xf32>
}
func.func @second(%x: tensor<8x16xf32>, %w: tensor<16x4xf32>) -> tensor<8x4xf32> {
  %y = kiln.exp %x : tensor<8x16xf32>
  %z = kiln.matmul %y, %w : (tensor<8x16xf32>, tensor<16x4xf32>) -> tensor<8x4xf32>
  %e = kiln.exp %z : tensor<8x4xf32>
  return %e : tensor<8x4xf32>
}
