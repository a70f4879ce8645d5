// RUN: kiln-opt %s --split-input-file --kiln-fuse --kiln-lower-to-step | FileCheck %s

// A K-concatenated LoRA product (docs/design/lora-k-concat.md): the kernel
// that computes x writes it into the first 64 columns of [x | t], the
// down projection's GEMM reads x there (lda 72) and writes t beside it
// (ldc 72), and the frozen GEMM reads [x | t] whole. No copy kernel.
// CHECK: kiln_kernel.kernel @kconcat_k0_silu <loop> symbols ["n", "s"] attributes {kiln.out_row_strides = array<i64: 72>}
// CHECK-NOT: kiln_kernel.kernel {{.*}}concat
// CHECK-LABEL: func.func @kconcat
// CHECK: %[[C:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x?x72xbf16, #kiln.dims<[n, s]>>>
// CHECK: %[[X:.+]] = kiln_kernel.view %[[C]] {offset = #kiln.expr<0>, row_stride = #kiln.expr<72>} : !kiln_kernel.buffer<tensor<?x?x72xbf16, #kiln.dims<[n, s]>>> -> !kiln_kernel.buffer<tensor<?x?x64xbf16, #kiln.dims<[n, s]>>>
// CHECK: kiln_kernel.launch @kconcat_k0_silu ins(%{{.+}} : {{.*}}) outs(%[[X]] : {{.*}})
// CHECK: %[[T:.+]] = kiln_kernel.view %[[C]] {offset = #kiln.expr<64>, row_stride = #kiln.expr<72>} : !kiln_kernel.buffer<tensor<?x?x72xbf16, #kiln.dims<[n, s]>>> -> !kiln_kernel.buffer<tensor<?x?x8xbf16, #kiln.dims<[n, s]>>>
// CHECK: kiln_kernel.gemm %[[X]], %{{.+}} -> %[[T]] m = #kiln.expr<n*s> n = #kiln.expr<8> k = #kiln.expr<64> {{.*}} {lds = #kiln.dims<[72, 64, 72]>, trans_b}
// CHECK-NOT: kiln_kernel.launch
// CHECK: kiln_kernel.gemm %[[C]], %{{.+}} -> %{{.+}} m = #kiln.expr<n*s> n = #kiln.expr<32> k = #kiln.expr<72> batch = #kiln.expr<1> strides = #kiln.dims<[0, 0, 0]> epilogue <none> compute f32 :
func.func @kconcat(%x: tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, %a: tensor<8x64xbf16>, %w: tensor<72x32xbf16>) -> tensor<?x?x32xbf16, #kiln.dims<[n, s]>> attributes {kiln.lora_k_concat} {
  %h = kiln.silu %x : tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  %t = kiln.matmul %h, %a {transpose_b} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<8x64xbf16>) -> tensor<?x?x8xbf16, #kiln.dims<[n, s]>>
  %c = kiln.concat %h, %t {axis = 2 : i64} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<?x?x8xbf16, #kiln.dims<[n, s]>>) -> tensor<?x?x72xbf16, #kiln.dims<[n, s]>>
  %y = kiln.matmul %c, %w : (tensor<?x?x72xbf16, #kiln.dims<[n, s]>>, tensor<72x32xbf16>) -> tensor<?x?x32xbf16, #kiln.dims<[n, s]>>
  return %y : tensor<?x?x32xbf16, #kiln.dims<[n, s]>>
}

// -----

// x is also a result (read as packed): t is still written in place, x is
// copied into its columns by a copy kernel (at the concat), not both.
// CHECK: kiln_kernel.kernel @kept_k{{[0-9]+}}_columns <loop> symbols ["n", "s"] attributes {kiln.out_row_strides = array<i64: 72>}
// CHECK-LABEL: func.func @kept
// CHECK: %[[H:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x?x64xbf16, #kiln.dims<[n, s]>>>
// CHECK: kiln_kernel.launch @kept_k0_silu ins(%{{.+}} : {{.*}}) outs(%[[H]] : {{.*}})
// CHECK: %[[C:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x?x72xbf16, #kiln.dims<[n, s]>>>
// CHECK: %[[T:.+]] = kiln_kernel.view %[[C]] {offset = #kiln.expr<64>, row_stride = #kiln.expr<72>}
// CHECK: kiln_kernel.gemm %[[H]], %{{.+}} -> %[[T]] {{.*}} {lds = #kiln.dims<[64, 64, 72]>, trans_b}
// CHECK: %[[X:.+]] = kiln_kernel.view %[[C]] {offset = #kiln.expr<0>, row_stride = #kiln.expr<72>}
// CHECK: kiln_kernel.launch @kept_k{{[0-9]+}}_columns ins(%[[H]] : {{.*}}) outs(%[[X]] : {{.*}})
// CHECK-NOT: _concat
// CHECK: return %{{.+}}, %[[H]]
func.func @kept(%x: tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, %a: tensor<8x64xbf16>, %w: tensor<72x32xbf16>) -> (tensor<?x?x32xbf16, #kiln.dims<[n, s]>>, tensor<?x?x64xbf16, #kiln.dims<[n, s]>>) attributes {kiln.lora_k_concat} {
  %h = kiln.silu %x : tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  %t = kiln.matmul %h, %a {transpose_b} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<8x64xbf16>) -> tensor<?x?x8xbf16, #kiln.dims<[n, s]>>
  %c = kiln.concat %h, %t {axis = 2 : i64} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<?x?x8xbf16, #kiln.dims<[n, s]>>) -> tensor<?x?x72xbf16, #kiln.dims<[n, s]>>
  %y = kiln.matmul %c, %w : (tensor<?x?x72xbf16, #kiln.dims<[n, s]>>, tensor<72x32xbf16>) -> tensor<?x?x32xbf16, #kiln.dims<[n, s]>>
  return %y, %h : tensor<?x?x32xbf16, #kiln.dims<[n, s]>>, tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
}

// -----

// t is read again after the concat's last use (the backward's dB): in
// place it would keep all of [x | t] alive, so t stays its own buffer and
// is copied beside x, which its kernel writes in place.
// CHECK-LABEL: func.func @late
// CHECK: %[[C:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x?x72xbf16, #kiln.dims<[n, s]>>>
// CHECK: %[[X:.+]] = kiln_kernel.view %[[C]] {offset = #kiln.expr<0>, row_stride = #kiln.expr<72>}
// CHECK: kiln_kernel.launch @late_k0_silu ins(%{{.+}} : {{.*}}) outs(%[[X]] : {{.*}})
// CHECK: %[[T:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x?x8xbf16, #kiln.dims<[n, s]>>>
// CHECK: kiln_kernel.gemm %[[X]], %{{.+}} -> %[[T]] {{.*}} {lds = #kiln.dims<[72, 64, 8]>, trans_b}
// CHECK: %[[TC:.+]] = kiln_kernel.view %[[C]] {offset = #kiln.expr<64>, row_stride = #kiln.expr<72>}
// CHECK: kiln_kernel.launch @late_k{{[0-9]+}}_columns ins(%[[T]] : {{.*}}) outs(%[[TC]] : {{.*}})
// CHECK: kiln_kernel.gemm %[[C]]
// CHECK: kiln_kernel.gemm %{{.+}}, %[[T]] -> %{{.+}} {{.*}} k = #kiln.expr<n*s> {{.*}} {trans_a}
func.func @late(%x: tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, %a: tensor<8x64xbf16>, %w: tensor<72x32xbf16>, %dy: tensor<?x?x32xbf16, #kiln.dims<[n, s]>>) -> (tensor<?x?x32xbf16, #kiln.dims<[n, s]>>, tensor<32x8xbf16>) attributes {kiln.lora_k_concat} {
  %h = kiln.silu %x : tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  %t = kiln.matmul %h, %a {transpose_b} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<8x64xbf16>) -> tensor<?x?x8xbf16, #kiln.dims<[n, s]>>
  %c = kiln.concat %h, %t {axis = 2 : i64} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<?x?x8xbf16, #kiln.dims<[n, s]>>) -> tensor<?x?x72xbf16, #kiln.dims<[n, s]>>
  %y = kiln.matmul %c, %w : (tensor<?x?x72xbf16, #kiln.dims<[n, s]>>, tensor<72x32xbf16>) -> tensor<?x?x32xbf16, #kiln.dims<[n, s]>>
  %g = kiln.matmul %dy, %t {transpose_a} : (tensor<?x?x32xbf16, #kiln.dims<[n, s]>>, tensor<?x?x8xbf16, #kiln.dims<[n, s]>>) -> tensor<?x32x8xbf16, #kiln.dims<[n]>>
  %db = kiln.reduce_sum %g {axes = array<i64: 0>} : (tensor<?x32x8xbf16, #kiln.dims<[n]>>) -> tensor<32x8xbf16>
  return %y, %db : tensor<?x?x32xbf16, #kiln.dims<[n, s]>>, tensor<32x8xbf16>
}

// -----

// Columns that are not multiples of 8 elements stay packed (16-byte
// vector stores and cuBLASLt's alignment).
// CHECK-LABEL: func.func @unaligned
// CHECK-NOT: row_stride
// CHECK: kiln_kernel.launch @unaligned_k{{[0-9]+}}_concat
func.func @unaligned(%x: tensor<?x?x60xbf16, #kiln.dims<[n, s]>>, %a: tensor<8x60xbf16>, %w: tensor<68x32xbf16>) -> tensor<?x?x32xbf16, #kiln.dims<[n, s]>> attributes {kiln.lora_k_concat} {
  %h = kiln.silu %x : tensor<?x?x60xbf16, #kiln.dims<[n, s]>>
  %t = kiln.matmul %h, %a {transpose_b} : (tensor<?x?x60xbf16, #kiln.dims<[n, s]>>, tensor<8x60xbf16>) -> tensor<?x?x8xbf16, #kiln.dims<[n, s]>>
  %c = kiln.concat %h, %t {axis = 2 : i64} : (tensor<?x?x60xbf16, #kiln.dims<[n, s]>>, tensor<?x?x8xbf16, #kiln.dims<[n, s]>>) -> tensor<?x?x68xbf16, #kiln.dims<[n, s]>>
  %y = kiln.matmul %c, %w : (tensor<?x?x68xbf16, #kiln.dims<[n, s]>>, tensor<68x32xbf16>) -> tensor<?x?x32xbf16, #kiln.dims<[n, s]>>
  return %y : tensor<?x?x32xbf16, #kiln.dims<[n, s]>>
}

// -----

// A step kiln-lora-k-concat did not rewrite (no kiln.lora_k_concat) keeps
// its copy kernels.
// CHECK-LABEL: func.func @plain
// CHECK-NOT: row_stride
// CHECK: kiln_kernel.launch @plain_k{{[0-9]+}}_concat
func.func @plain(%x: tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, %a: tensor<8x64xbf16>, %w: tensor<72x32xbf16>) -> tensor<?x?x32xbf16, #kiln.dims<[n, s]>> {
  %h = kiln.silu %x : tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  %t = kiln.matmul %h, %a {transpose_b} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<8x64xbf16>) -> tensor<?x?x8xbf16, #kiln.dims<[n, s]>>
  %c = kiln.concat %h, %t {axis = 2 : i64} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<?x?x8xbf16, #kiln.dims<[n, s]>>) -> tensor<?x?x72xbf16, #kiln.dims<[n, s]>>
  %y = kiln.matmul %c, %w : (tensor<?x?x72xbf16, #kiln.dims<[n, s]>>, tensor<72x32xbf16>) -> tensor<?x?x32xbf16, #kiln.dims<[n, s]>>
  return %y : tensor<?x?x32xbf16, #kiln.dims<[n, s]>>
}

// -----

// x is read again after the concat's last use too (the backward's dA =
// dT^T x): x is the wide part, so it stays in place (the whole [x | t]
// lives on, t's columns more than x alone) and the late GEMM reads it
// through its view (ldb 72). t's late reader (dB) comes before x's, while
// the buffer lives anyway: t stays in place too, its GEMM writes it there
// (ldc 72) and dB reads it there (ldb 72). No copy kernel.
// CHECK-LABEL: func.func @late_x
// CHECK: %[[C:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x?x72xbf16, #kiln.dims<[n, s]>>>
// CHECK: %[[X:.+]] = kiln_kernel.view %[[C]] {offset = #kiln.expr<0>, row_stride = #kiln.expr<72>}
// CHECK: kiln_kernel.launch @late_x_k0_silu ins(%{{.+}} : {{.*}}) outs(%[[X]] : {{.*}})
// CHECK: %[[T:.+]] = kiln_kernel.view %[[C]] {offset = #kiln.expr<64>, row_stride = #kiln.expr<72>}
// CHECK: kiln_kernel.gemm %[[X]], %{{.+}} -> %[[T]] {{.*}} {lds = #kiln.dims<[72, 64, 72]>, trans_b}
// CHECK-NOT: kiln_kernel.launch
// CHECK: kiln_kernel.gemm %[[C]]
// CHECK: kiln_kernel.gemm %{{.+}}, %[[T]] -> %{{.+}} m = #kiln.expr<32> n = #kiln.expr<8> k = #kiln.expr<n*s> {{.*}} {lds = #kiln.dims<[32, 72, 8]>, trans_a}
// CHECK: kiln_kernel.gemm %{{.+}}, %[[X]] -> %{{.+}} m = #kiln.expr<8> n = #kiln.expr<64> k = #kiln.expr<n*s> {{.*}} {lds = #kiln.dims<[8, 72, 64]>, trans_a}
func.func @late_x(%x: tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, %a: tensor<8x64xbf16>, %w: tensor<72x32xbf16>, %dy: tensor<?x?x32xbf16, #kiln.dims<[n, s]>>, %dt: tensor<?x?x8xbf16, #kiln.dims<[n, s]>>) -> (tensor<?x?x32xbf16, #kiln.dims<[n, s]>>, tensor<32x8xbf16>, tensor<8x64xbf16>) attributes {kiln.lora_k_concat} {
  %h = kiln.silu %x : tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  %t = kiln.matmul %h, %a {transpose_b} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<8x64xbf16>) -> tensor<?x?x8xbf16, #kiln.dims<[n, s]>>
  %c = kiln.concat %h, %t {axis = 2 : i64} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<?x?x8xbf16, #kiln.dims<[n, s]>>) -> tensor<?x?x72xbf16, #kiln.dims<[n, s]>>
  %y = kiln.matmul %c, %w : (tensor<?x?x72xbf16, #kiln.dims<[n, s]>>, tensor<72x32xbf16>) -> tensor<?x?x32xbf16, #kiln.dims<[n, s]>>
  %g = kiln.matmul %dy, %t {transpose_a} : (tensor<?x?x32xbf16, #kiln.dims<[n, s]>>, tensor<?x?x8xbf16, #kiln.dims<[n, s]>>) -> tensor<?x32x8xbf16, #kiln.dims<[n]>>
  %db = kiln.reduce_sum %g {axes = array<i64: 0>} : (tensor<?x32x8xbf16, #kiln.dims<[n]>>) -> tensor<32x8xbf16>
  %ga = kiln.matmul %dt, %h {transpose_a} : (tensor<?x?x8xbf16, #kiln.dims<[n, s]>>, tensor<?x?x64xbf16, #kiln.dims<[n, s]>>) -> tensor<?x8x64xbf16, #kiln.dims<[n]>>
  %da = kiln.reduce_sum %ga {axes = array<i64: 0>} : (tensor<?x8x64xbf16, #kiln.dims<[n]>>) -> tensor<8x64xbf16>
  return %y, %db, %da : tensor<?x?x32xbf16, #kiln.dims<[n, s]>>, tensor<32x8xbf16>, tensor<8x64xbf16>
}

// -----

// dy read through a scale folded into the dT GEMM's alpha (the LoRA
// backward's dy · s): the GEMM reads dy in place (lda 72, alpha 2) and
// writes dT beside it; no copy kernel.
// CHECK-LABEL: func.func @scaled
// CHECK: %[[C:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x?x72xbf16, #kiln.dims<[n, s]>>>
// CHECK: %[[DY:.+]] = kiln_kernel.view %[[C]] {offset = #kiln.expr<0>, row_stride = #kiln.expr<72>}
// CHECK: kiln_kernel.launch @scaled_k0_silu ins(%{{.+}} : {{.*}}) outs(%[[DY]] : {{.*}})
// CHECK: %[[DT:.+]] = kiln_kernel.view %[[C]] {offset = #kiln.expr<64>, row_stride = #kiln.expr<72>}
// CHECK: kiln_kernel.gemm %[[DY]], %{{.+}} -> %[[DT]] {{.*}} {alpha = 2.000000e+00 : f64, lds = #kiln.dims<[72, 8, 72]>}
// CHECK-NOT: kiln_kernel.launch
// CHECK: kiln_kernel.gemm %[[C]]
func.func @scaled(%x: tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, %b: tensor<64x8xbf16>, %w: tensor<32x72xbf16>) -> tensor<?x?x32xbf16, #kiln.dims<[n, s]>> attributes {kiln.lora_k_concat} {
  %dy = kiln.silu %x : tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  %two = kiln.constant dense<2.0> : tensor<bf16>
  %dys = kiln.mul %dy, %two : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<bf16>) -> tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  %dt = kiln.matmul %dys, %b : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<64x8xbf16>) -> tensor<?x?x8xbf16, #kiln.dims<[n, s]>>
  %c = kiln.concat %dy, %dt {axis = 2 : i64} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<?x?x8xbf16, #kiln.dims<[n, s]>>) -> tensor<?x?x72xbf16, #kiln.dims<[n, s]>>
  %dx = kiln.matmul %c, %w {transpose_b} : (tensor<?x?x72xbf16, #kiln.dims<[n, s]>>, tensor<32x72xbf16>) -> tensor<?x?x32xbf16, #kiln.dims<[n, s]>>
  return %dx : tensor<?x?x32xbf16, #kiln.dims<[n, s]>>
}
