// RUN: kiln-opt %s --split-input-file --kiln-fuse | FileCheck %s

// Fewer elementwise kernels (kiln-fuse, Fuse.cpp): sibling kernels that read
// one input, elementwise values recomputed where their operands are read
// anyway, producers that join once all their readers are in one kernel, and
// fills computed where they are read.

// The SiLU-and-product gradient: d(up) = dy * silu(gate) and d(gate) (the
// sigmoid chain) both read dy; they are one kernel with two outputs, placed
// where d(up) was (its GEMM comes before d(gate)), and it recomputes
// silu(gate) from gate, which it reads anyway: the forward kernel stores only
// silu(gate) * up, not silu(gate) for the backward.
// CHECK-LABEL: func.func @silu_grad
// CHECK: %[[H:.+]] = kiln_kernel.fusion <loop>(%arg0, %arg1) : ({{.*}}) -> tensor<?x64xbf16, #kiln.dims<[n]>> {
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.silu
// CHECK-NEXT: kiln.mul
// CHECK-NEXT: kiln_kernel.yield %{{[0-9]+}} : tensor
// CHECK: kiln.matmul %[[H]], %arg2
// CHECK: %[[DY:.+]] = kiln.matmul %arg3, %arg2 {transpose_b}
// CHECK: %[[G:.+]]:2 = kiln_kernel.fusion <loop>(%arg0, %[[DY]], %arg1)
// CHECK: kiln.silu
// CHECK: kiln.sigmoid
// CHECK: kiln_kernel.yield
// CHECK-NEXT: }
// CHECK-NEXT: kiln.matmul %[[G]]#0, %arg4 {transpose_b}
// CHECK-NEXT: kiln.matmul %[[G]]#1, %arg4 {transpose_b}
// CHECK-NOT: kiln_kernel.fusion
// CHECK: return
func.func @silu_grad(%g: tensor<?x64xbf16, #kiln.dims<[n]>>, %u: tensor<?x64xbf16, #kiln.dims<[n]>>, %w: tensor<64x32xbf16>, %dyo: tensor<?x32xbf16, #kiln.dims<[n]>>, %wg: tensor<32x64xbf16>) -> (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) {
  %s = kiln.silu %g : tensor<?x64xbf16, #kiln.dims<[n]>>
  %h = kiln.mul %s, %u : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %y = kiln.matmul %h, %w : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x32xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %dy = kiln.matmul %dyo, %w {transpose_b} : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<64x32xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %du = kiln.mul %dy, %s : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %a = kiln.matmul %du, %wg {transpose_b} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<32x64xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %one = kiln.constant dense<1.0> : tensor<bf16>
  %sig = kiln.sigmoid %g : tensor<?x64xbf16, #kiln.dims<[n]>>
  %t = kiln.sub %one, %sig : (tensor<bf16>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %t2 = kiln.mul %g, %t : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %t3 = kiln.add %t2, %one : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<bf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %t4 = kiln.mul %sig, %t3 : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %dyu = kiln.mul %dy, %u : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %dg = kiln.mul %dyu, %t4 : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %b = kiln.matmul %dg, %wg {transpose_b} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<32x64xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  return %y, %a, %b : tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>
}

// -----

// The pointwise recompute of silu(gate) * up in the backward (remat) sits
// before the LoRA GEMM that reads it (dB = t^T h), which comes before the
// GEMM of the gradient dy that the SiLU gradient reads. The recompute, d(up)
// (which reads the recomputed silu(gate)) and d(gate) become one kernel with
// three outputs at the SiLU gradient's place, reading gate and up once; the
// dB GEMM moves after it.
// CHECK-LABEL: func.func @silu_recompute
// CHECK: %[[DY:.+]] = kiln.matmul %arg3, %arg4 {transpose_b}
// CHECK-NEXT: %[[F:.+]]:3 = kiln_kernel.fusion <loop>(%arg0, %arg1, %[[DY]]) : ({{.*}}) -> (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) {
// CHECK-COUNT-1: kiln.silu
// CHECK: kiln.sigmoid
// CHECK: kiln_kernel.yield
// CHECK-NEXT: }
// CHECK-NEXT: kiln.matmul %arg2, %[[F]]#0 {transpose_a}
// CHECK-NEXT: kiln.matmul %[[F]]#1, %arg5 {transpose_b}
// CHECK-NEXT: kiln.matmul %[[F]]#2, %arg5 {transpose_b}
// CHECK-NOT: kiln_kernel.fusion
// CHECK: return
func.func @silu_recompute(%g: tensor<?x64xbf16, #kiln.dims<[n]>>, %u: tensor<?x64xbf16, #kiln.dims<[n]>>, %t: tensor<?x16xbf16, #kiln.dims<[n]>>, %dyo: tensor<?x32xbf16, #kiln.dims<[n]>>, %w: tensor<64x32xbf16>, %wg: tensor<32x64xbf16>) -> (tensor<16x64xbf16>, tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) {
  %s = kiln.silu %g : tensor<?x64xbf16, #kiln.dims<[n]>>
  %h = kiln.mul %s, %u : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %db = kiln.matmul %t, %h {transpose_a} : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<16x64xbf16>
  %dy = kiln.matmul %dyo, %w {transpose_b} : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<64x32xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %du = kiln.mul %dy, %s : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %one = kiln.constant dense<1.0> : tensor<bf16>
  %sig = kiln.sigmoid %g : tensor<?x64xbf16, #kiln.dims<[n]>>
  %t1 = kiln.sub %one, %sig : (tensor<bf16>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %t2 = kiln.mul %g, %t1 : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %t3 = kiln.add %t2, %one : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<bf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %t4 = kiln.mul %sig, %t3 : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %dyu = kiln.mul %dy, %u : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %dg = kiln.mul %dyu, %t4 : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %a = kiln.matmul %du, %wg {transpose_b} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<32x64xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %b = kiln.matmul %dg, %wg {transpose_b} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<32x64xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  return %db, %a, %b : tensor<16x64xbf16>, tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>
}

// -----

// A big reader between the siblings stays where it is: moving it would keep
// its [n, 64] input alive longer than the merge saves ([n, 8] here).
// CHECK-LABEL: func.func @sink_holds_more
// CHECK: kiln_kernel.fusion <loop>(%arg0, %arg1) :
// CHECK: kiln.matmul %arg2, %{{.+}} {transpose_a}
// CHECK: kiln_kernel.fusion <loop>
// CHECK-NOT: kiln_kernel.fusion
// CHECK: return
func.func @sink_holds_more(%g: tensor<?x8xbf16, #kiln.dims<[n]>>, %u: tensor<?x8xbf16, #kiln.dims<[n]>>, %big: tensor<?x64xbf16, #kiln.dims<[n]>>, %dyo: tensor<?x32xbf16, #kiln.dims<[n]>>, %w: tensor<8x32xbf16>) -> (tensor<64x8xbf16>, tensor<?x32xbf16, #kiln.dims<[n]>>) {
  %s = kiln.silu %g : tensor<?x8xbf16, #kiln.dims<[n]>>
  %h = kiln.mul %s, %u : (tensor<?x8xbf16, #kiln.dims<[n]>>, tensor<?x8xbf16, #kiln.dims<[n]>>) -> tensor<?x8xbf16, #kiln.dims<[n]>>
  %y = kiln.matmul %big, %h {transpose_a} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x8xbf16, #kiln.dims<[n]>>) -> tensor<64x8xbf16>
  %dy = kiln.matmul %dyo, %w {transpose_b} : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<8x32xbf16>) -> tensor<?x8xbf16, #kiln.dims<[n]>>
  %du = kiln.mul %dy, %u : (tensor<?x8xbf16, #kiln.dims<[n]>>, tensor<?x8xbf16, #kiln.dims<[n]>>) -> tensor<?x8xbf16, #kiln.dims<[n]>>
  %a = kiln.matmul %du, %w : (tensor<?x8xbf16, #kiln.dims<[n]>>, tensor<8x32xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  return %y, %a : tensor<64x8xbf16>, tensor<?x32xbf16, #kiln.dims<[n]>>
}

// -----

// RoPE on a head transpose: the transpose feeds both halves of the rotation
// (two slices of half its size), so it could not join the first slice; once
// the concat has both halves it joins, and one kernel reads the projection's
// [b, s, h*d] output and writes the rotated [b, h, s, d].
// CHECK-LABEL: func.func @rope
// CHECK: kiln_kernel.fusion <loop>(%arg0, %arg1, %arg2)
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.reshape
// CHECK-NEXT: kiln.transpose
// CHECK: kiln.concat
// CHECK-NEXT: kiln_kernel.yield
// CHECK-NOT: kiln_kernel.fusion
func.func @rope(%x: tensor<?x?x128xbf16, #kiln.dims<[b, s]>>, %cos: tensor<1x1x?x32xbf16, #kiln.dims<[s]>>, %sin: tensor<1x1x?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x2x?x64xbf16, #kiln.dims<[b, s]>> {
  %r = kiln.reshape %x : tensor<?x?x128xbf16, #kiln.dims<[b, s]>> -> tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>
  %t = kiln.transpose %r {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>) -> tensor<?x2x?x64xbf16, #kiln.dims<[b, s]>>
  %lo = kiln.slice %t {starts = #kiln.dims<[0, 0, 0, 0]>, steps = array<i64: 1, 1, 1, 1>} : tensor<?x2x?x64xbf16, #kiln.dims<[b, s]>> -> tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>
  %hi = kiln.slice %t {starts = #kiln.dims<[0, 0, 0, 32]>, steps = array<i64: 1, 1, 1, 1>} : tensor<?x2x?x64xbf16, #kiln.dims<[b, s]>> -> tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>
  %a = kiln.mul %lo, %cos : (tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>, tensor<1x1x?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>
  %b = kiln.mul %hi, %sin : (tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>, tensor<1x1x?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>
  %c = kiln.sub %a, %b : (tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>) -> tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>
  %d = kiln.mul %hi, %cos : (tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>, tensor<1x1x?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>
  %e = kiln.mul %lo, %sin : (tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>, tensor<1x1x?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>
  %f = kiln.add %d, %e : (tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>) -> tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>
  %o = kiln.concat %c, %f {axis = 3 : i64} : (tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>) -> tensor<?x2x?x64xbf16, #kiln.dims<[b, s]>>
  return %o : tensor<?x2x?x64xbf16, #kiln.dims<[b, s]>>
}

// -----

// A zero fill read by two concats (the gradient of RoPE's halves) is no
// kernel and no buffer: each concat computes the zeros itself.
// CHECK-LABEL: func.func @zero_pieces
// CHECK: %[[A:.+]] = kiln_kernel.fusion <loop>(%arg0) :
// CHECK: kiln.expand
// CHECK: kiln.concat
// CHECK: kiln.matmul %[[A]], %arg2
// CHECK: %[[C:.+]] = kiln_kernel.fusion <loop>(%arg1) :
// CHECK: kiln.expand
// CHECK: kiln.concat
// CHECK: kiln.matmul %[[C]], %arg2
func.func @zero_pieces(%p: tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>, %q: tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>, %w: tensor<64x16xbf16>) -> (tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>) {
  %zero = kiln.constant dense<0.0> : tensor<bf16>
  %z = kiln.expand %zero : tensor<bf16> -> tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>
  %a = kiln.concat %z, %p {axis = 3 : i64} : (tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>) -> tensor<?x2x?x64xbf16, #kiln.dims<[b, s]>>
  %ma = kiln.matmul %a, %w : (tensor<?x2x?x64xbf16, #kiln.dims<[b, s]>>, tensor<64x16xbf16>) -> tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>
  %c = kiln.concat %q, %z {axis = 3 : i64} : (tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x32xbf16, #kiln.dims<[b, s]>>) -> tensor<?x2x?x64xbf16, #kiln.dims<[b, s]>>
  %mc = kiln.matmul %c, %w : (tensor<?x2x?x64xbf16, #kiln.dims<[b, s]>>, tensor<64x16xbf16>) -> tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>
  return %ma, %mc : tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>
}

// -----

// The bf16 copies of fp32 adapters (small, static, read only from arguments
// and parameters) are one multi-tensor kernel where the first one was, not
// one kernel per adapter before each GEMM.
// CHECK-LABEL: func.func @adapter_casts
// CHECK: %[[C:.+]]:2 = kiln_kernel.fusion <loop>(%arg1, %arg2)
// CHECK: kiln.cast
// CHECK: kiln.cast
// CHECK: kiln_kernel.yield
// CHECK: %[[Y:.+]] = kiln.matmul %arg0, %[[C]]#0 {transpose_b}
// CHECK: kiln.matmul %[[Y]], %[[C]]#1 {transpose_b}
// CHECK-NOT: kiln_kernel.fusion
func.func @adapter_casts(%x: tensor<?x64xbf16, #kiln.dims<[n]>>, %a: tensor<16x64xf32>, %b: tensor<64x16xf32>) -> tensor<?x64xbf16, #kiln.dims<[n]>> {
  %ca = kiln.cast %a : tensor<16x64xf32> -> tensor<16x64xbf16>
  %t = kiln.matmul %x, %ca {transpose_b} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<16x64xbf16>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
  %cb = kiln.cast %b : tensor<64x16xf32> -> tensor<64x16xbf16>
  %y = kiln.matmul %t, %cb {transpose_b} : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<64x16xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  return %y : tensor<?x64xbf16, #kiln.dims<[n]>>
}

// -----

// The norm gradient reads the fp32 norm input as a cast of the bf16
// residual sum, which the forward stores anyway (the next layer reads it):
// the forward kernel no longer stores the fp32 copy for the backward.
// CHECK-LABEL: func.func @norm_input
// CHECK: %[[F:.+]]:2 = kiln_kernel.fusion <row>(%arg0, %arg1, %arg2) : ({{.*}}) -> (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>)
// CHECK: %[[G:.+]]:2 = kiln_kernel.fusion <row>(%[[F]]#0,
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.cast %{{.+}} : tensor<?x64xbf16, #kiln.dims<[n]>> -> tensor<?x64xf32, #kiln.dims<[n]>>
// CHECK: kiln.rms_norm_grad
func.func @norm_input(%x: tensor<?x64xbf16, #kiln.dims<[n]>>, %r: tensor<?x64xbf16, #kiln.dims<[n]>>, %w: tensor<64xf32>, %wq: tensor<64x64xbf16>, %dyo: tensor<?x64xbf16, #kiln.dims<[n]>>) -> (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) {
  %s = kiln.add %x, %r : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %f = kiln.cast %s : tensor<?x64xbf16, #kiln.dims<[n]>> -> tensor<?x64xf32, #kiln.dims<[n]>>
  %n = kiln.rms_norm %f, %w {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %c = kiln.cast %n : tensor<?x64xf32, #kiln.dims<[n]>> -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %y = kiln.matmul %c, %wq : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x64xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %dy = kiln.matmul %dyo, %wq {transpose_b} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x64xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %dyf = kiln.cast %dy : tensor<?x64xbf16, #kiln.dims<[n]>> -> tensor<?x64xf32, #kiln.dims<[n]>>
  %dx, %dw = kiln.rms_norm_grad %f, %w, %dyf {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>, tensor<?x64xf32, #kiln.dims<[n]>>) -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>)
  return %s, %y, %dx, %dw : tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>
}
