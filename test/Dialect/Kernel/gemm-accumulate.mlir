// RUN: kiln-opt %s --split-input-file --kiln-fuse --kiln-lower-to-step | FileCheck %s

// The LoRA output y + s * (t B^T): the up projection (k = 4) writes
// s * t B^T with alpha = s (the bf16-rounded constant) and the frozen GEMM
// (k = 32) adds into its buffer (beta = 1): no kernel, no [tokens x out]
// buffer of its own, and the small-k GEMM does not read C.
// CHECK-LABEL: func.func @lora_forward
// CHECK: %[[T:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x4xbf16, #kiln.dims<[n]>>>
// CHECK: kiln_kernel.gemm %arg0, %arg2 -> %[[T]] {{.*}} compute f32 {trans_b}
// CHECK: %[[Y:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x64xbf16, #kiln.dims<[n]>>>
// CHECK: kiln_kernel.gemm %[[T]], %arg3 -> %[[Y]] m = #kiln.expr<n> n = #kiln.expr<64> k = #kiln.expr<4> {{.*}} compute f32 {alpha = 2.000000e+00 : f64, trans_b}
// CHECK-NOT: kiln_kernel.alloc
// CHECK: kiln_kernel.gemm %arg0, %arg1 -> %[[Y]] m = #kiln.expr<n> n = #kiln.expr<64> k = #kiln.expr<32> {{.*}} compute f32 {accumulate, trans_b}
// CHECK-NOT: kiln_kernel.launch
// CHECK: return %[[Y]]
func.func @lora_forward(%x: tensor<?x32xbf16, #kiln.dims<[n]>>, %w: tensor<64x32xbf16>, %a: tensor<4x32xbf16>, %b: tensor<64x4xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>> {
  %y = kiln.matmul %x, %w {transpose_b} : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<64x32xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %t = kiln.matmul %x, %a {transpose_b} : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<4x32xbf16>) -> tensor<?x4xbf16, #kiln.dims<[n]>>
  %u = kiln.matmul %t, %b {transpose_b} : (tensor<?x4xbf16, #kiln.dims<[n]>>, tensor<64x4xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %c = kiln.constant dense<2.000000e+00> : tensor<f32>
  %s = kiln.cast %c : tensor<f32> -> tensor<bf16>
  %v = kiln.mul %u, %s : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<bf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %z = kiln.add %y, %v : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  return %z : tensor<?x64xbf16, #kiln.dims<[n]>>
}

// -----

// The input gradient of an input read by three linear layers: one buffer,
// the first GEMM writes it, the next two add into it. A scale whose every
// use is a GEMM operand (the LoRA dy * s) is those GEMMs' alpha.
// CHECK-LABEL: func.func @dx_sum
// CHECK: %[[D:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x32xf32, #kiln.dims<[n]>>>
// CHECK: kiln_kernel.gemm %arg0, %arg3 -> %[[D]] {{.*}} compute f32
// CHECK-NOT: kiln_kernel.alloc
// CHECK: kiln_kernel.gemm %arg1, %arg4 -> %[[D]] {{.*}} compute f32 {accumulate}
// CHECK-NOT: kiln_kernel.alloc
// CHECK: kiln_kernel.gemm %arg2, %arg5 -> %[[D]] {{.*}} compute f32 {accumulate, alpha = 5.000000e-01 : f64}
// CHECK: %[[G:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<64x4xf32>>
// CHECK: kiln_kernel.gemm %arg2, %arg6 -> %[[G]] {{.*}} compute f32 {alpha = 5.000000e-01 : f64, trans_a}
// CHECK-NOT: kiln_kernel.launch
// CHECK: return %[[D]], %[[G]]
func.func @dx_sum(%g1: tensor<?x64xf32, #kiln.dims<[n]>>, %g2: tensor<?x64xf32, #kiln.dims<[n]>>, %g3: tensor<?x64xf32, #kiln.dims<[n]>>, %w1: tensor<64x32xf32>, %w2: tensor<64x32xf32>, %w3: tensor<64x32xf32>, %t: tensor<?x4xf32, #kiln.dims<[n]>>) -> (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<64x4xf32>) {
  %d1 = kiln.matmul %g1, %w1 : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %d2 = kiln.matmul %g2, %w2 : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %s = kiln.constant dense<5.000000e-01> : tensor<f32>
  %g3s = kiln.mul %g3, %s : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<f32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %d3 = kiln.matmul %g3s, %w3 : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %s12 = kiln.add %d1, %d2 : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %s123 = kiln.add %s12, %d3 : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %db = kiln.matmul %g3s, %t {transpose_a} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x4xf32, #kiln.dims<[n]>>) -> tensor<64x4xf32>
  return %s123, %db : tensor<?x32xf32, #kiln.dims<[n]>>, tensor<64x4xf32>
}

// -----

// An argument or a term read elsewhere is not written in place: both adds
// stay in a kernel.
// CHECK-LABEL: func.func @not_in_place
// CHECK-NOT: accumulate
// CHECK: kiln_kernel.launch @not_in_place_k0_add_exp_mul
// CHECK-NOT: accumulate
// CHECK: return
func.func @not_in_place(%x: tensor<?x32xf32, #kiln.dims<[n]>>, %w: tensor<64x32xf32>, %r: tensor<?x64xf32, #kiln.dims<[n]>>) -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) {
  %y = kiln.matmul %x, %w {transpose_b} : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %a = kiln.add %r, %y : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %e = kiln.exp %r : tensor<?x64xf32, #kiln.dims<[n]>>
  %y2 = kiln.matmul %x, %w {transpose_b} : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %b = kiln.add %e, %y2 : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %f = kiln.mul %e, %b : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  return %a, %f : tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>
}

// -----

// Two products: the one with the smaller k writes C whichever side of the
// add it is on; with a symbolic k the right side accumulates into the left.
// CHECK-LABEL: func.func @small_k_writes
// CHECK: %[[D:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x32xf32, #kiln.dims<[n]>>>
// CHECK: kiln_kernel.gemm %arg1, %arg3 -> %[[D]] m = #kiln.expr<n> n = #kiln.expr<32> k = #kiln.expr<4> {{.*}} compute f32 {alpha = 5.000000e-01 : f64}
// CHECK-NOT: kiln_kernel.alloc
// CHECK: kiln_kernel.gemm %arg0, %arg2 -> %[[D]] m = #kiln.expr<n> n = #kiln.expr<32> k = #kiln.expr<64> {{.*}} compute f32 {accumulate}
// CHECK: %[[E:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<4x32xf32>>
// CHECK: kiln_kernel.gemm %arg4, %arg2 -> %[[E]] m = #kiln.expr<4> n = #kiln.expr<32> k = #kiln.expr<64> {{.*}} compute f32
// CHECK-NOT: kiln_kernel.alloc
// CHECK: kiln_kernel.gemm %arg5, %arg6 -> %[[E]] m = #kiln.expr<4> n = #kiln.expr<32> k = #kiln.expr<m> {{.*}} compute f32 {accumulate}
// CHECK-NOT: kiln_kernel.launch
// CHECK: return %[[D]], %[[E]]
func.func @small_k_writes(%g: tensor<?x64xf32, #kiln.dims<[n]>>, %dt: tensor<?x4xf32, #kiln.dims<[n]>>, %w: tensor<64x32xf32>, %a: tensor<4x32xf32>, %p: tensor<4x64xf32>, %q: tensor<4x?xf32, #kiln.dims<[m]>>, %r: tensor<?x32xf32, #kiln.dims<[m]>>) -> (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<4x32xf32>) {
  %frozen = kiln.matmul %g, %w : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %lora = kiln.matmul %dt, %a : (tensor<?x4xf32, #kiln.dims<[n]>>, tensor<4x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %s = kiln.constant dense<5.000000e-01> : tensor<f32>
  %scaled = kiln.mul %lora, %s : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<f32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %d = kiln.add %frozen, %scaled : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %e1 = kiln.matmul %p, %w : (tensor<4x64xf32>, tensor<64x32xf32>) -> tensor<4x32xf32>
  %e2 = kiln.matmul %q, %r : (tensor<4x?xf32, #kiln.dims<[m]>>, tensor<?x32xf32, #kiln.dims<[m]>>) -> tensor<4x32xf32>
  %e = kiln.add %e1, %e2 : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<4x32xf32>
  return %d, %e : tensor<?x32xf32, #kiln.dims<[n]>>, tensor<4x32xf32>
}
