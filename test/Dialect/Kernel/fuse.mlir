// RUN: kiln-opt %s --split-input-file --kiln-fuse | FileCheck %s

// A pointwise chain with a broadcast scale becomes one loop fusion; the
// matmul stays outside as a GEMM.
// CHECK-LABEL: func.func @chain
// CHECK: %[[MM:.+]] = kiln.matmul
// CHECK: %[[F:.+]] = kiln_kernel.fusion <loop>(%[[MM]], %{{.+}}) : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
// CHECK-NEXT: ^bb0
// CHECK-NEXT: kiln.mul
// CHECK-NEXT: kiln.silu
// CHECK-NEXT: kiln_kernel.yield
// CHECK: return %[[F]]
func.func @chain(%x: tensor<?x64xf32, #kiln.dims<[n]>>, %w: tensor<64x64xf32>, %b: tensor<64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>> {
  %0 = kiln.matmul %x, %w : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %1 = kiln.mul %0, %b : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %2 = kiln.silu %1 : tensor<?x64xf32, #kiln.dims<[n]>>
  return %2 : tensor<?x64xf32, #kiln.dims<[n]>>
}

// -----

// RMS norm absorbs its pointwise producer (the residual add) and consumer
// (the cast); the add's result is also returned, so it stays an output.
// CHECK-LABEL: func.func @norm
// CHECK: %[[F:.+]]:2 = kiln_kernel.fusion <row>
// CHECK: kiln.add
// CHECK: kiln.rms_norm
// CHECK: kiln.cast
// CHECK: kiln_kernel.yield
// CHECK: return %[[F]]#1, %[[F]]#0
func.func @norm(%x: tensor<?x64xf32, #kiln.dims<[n]>>, %r: tensor<?x64xf32, #kiln.dims<[n]>>, %w: tensor<64xf32>) -> (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) {
  %0 = kiln.add %x, %r : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %1 = kiln.rms_norm %0, %w {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %2 = kiln.cast %1 : tensor<?x64xf32, #kiln.dims<[n]>> -> tensor<?x64xbf16, #kiln.dims<[n]>>
  return %2, %0 : tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>
}

// -----

// Cross entropy and its gradient on the same logits share one row kernel.
// CHECK-LABEL: func.func @xent
// CHECK: %[[F:.+]]:2 = kiln_kernel.fusion <row>
// CHECK: kiln.cross_entropy
// CHECK: kiln.cross_entropy_grad
// CHECK-NOT: kiln_kernel.fusion
// CHECK: return
func.func @xent(%l: tensor<?x256xf32, #kiln.dims<[n]>>, %y: tensor<?xi64, #kiln.dims<[n]>>) -> (tensor<f32>, tensor<?x256xf32, #kiln.dims<[n]>>) {
  %one = kiln.constant dense<1.0> : tensor<f32>
  %0 = kiln.cross_entropy %l, %y : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<?xi64, #kiln.dims<[n]>>) -> tensor<f32>
  %1 = kiln.cross_entropy_grad %l, %y, %one : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<?xi64, #kiln.dims<[n]>>, tensor<f32>) -> tensor<?x256xf32, #kiln.dims<[n]>>
  return %0, %1 : tensor<f32>, tensor<?x256xf32, #kiln.dims<[n]>>
}

// -----

// The optimizer's scalar bias correction is copied into the update instead
// of becoming a kernel of its own, and the updates of all parameters (their
// results only leave the step) form one multi-tensor fusion.
// CHECK-LABEL: func.func @adam
// CHECK: %[[F:.+]]:4 = kiln_kernel.fusion <loop>
// CHECK-COUNT-1: kiln.pow
// CHECK: kiln_kernel.yield
// CHECK-NOT: kiln_kernel.fusion
// CHECK: return %[[F]]#1, %[[F]]#0, %[[F]]#3, %[[F]]#2
func.func @adam(%p: tensor<8xf32>, %g: tensor<8xf32>, %m: tensor<8xf32>, %q: tensor<4xf32>, %h: tensor<4xf32>, %step: tensor<f32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4xf32>) {
  %b = kiln.constant dense<0.9> : tensor<f32>
  %one = kiln.constant dense<1.0> : tensor<f32>
  %pw = kiln.pow %b, %step : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %bc = kiln.sub %one, %pw : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %m1 = kiln.add %m, %g : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %u1 = kiln.div %m1, %bc : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %p1 = kiln.sub %p, %u1 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %m2 = kiln.add %q, %h : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %u2 = kiln.div %m2, %bc : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %p2 = kiln.sub %q, %u2 : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %p1, %m1, %p2, %m2 : tensor<8xf32>, tensor<8xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// A reshape on its own is a view, not a kernel.
// CHECK-LABEL: func.func @view
// CHECK-NOT: kiln_kernel.fusion
// CHECK: kiln.reshape
func.func @view(%x: tensor<?x4x16xf32, #kiln.dims<[n]>>) -> tensor<?x64xf32, #kiln.dims<[n]>> {
  %0 = kiln.reshape %x : tensor<?x4x16xf32, #kiln.dims<[n]>> -> tensor<?x64xf32, #kiln.dims<[n]>>
  return %0 : tensor<?x64xf32, #kiln.dims<[n]>>
}

// -----

// A per-head norm (Qwen3's q_norm) feeding the head transpose: the row
// kernel has the norm's result only at its own row, so the transpose is a
// loop kernel of its own, not a row epilogue.
// CHECK-LABEL: func.func @norm_then_transpose
// CHECK: %[[R:.+]] = kiln_kernel.fusion <row>
// CHECK: kiln.rms_norm
// CHECK-NOT: kiln.transpose
// CHECK: kiln_kernel.yield
// CHECK: kiln_kernel.fusion <loop>(%[[R]])
// CHECK: kiln.transpose
func.func @norm_then_transpose(%x: tensor<?x?x4x16xf32, #kiln.dims<[b, s]>>, %w: tensor<16xf32>) -> tensor<?x4x?x16xf32, #kiln.dims<[b, s]>> {
  %0 = kiln.rms_norm %x, %w {axis = 3 : i64, epsilon = 1.0e-6 : f64} : (tensor<?x?x4x16xf32, #kiln.dims<[b, s]>>, tensor<16xf32>) -> tensor<?x?x4x16xf32, #kiln.dims<[b, s]>>
  %1 = kiln.transpose %0 {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x4x16xf32, #kiln.dims<[b, s]>>) -> tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>
  return %1 : tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>
}

// -----

// A split (fused qkv) is one slice per piece before grouping: each slice
// fuses with its consumer, no multi-result split reaches codegen.
// CHECK-LABEL: func.func @split_pieces
// CHECK-NOT: kiln.split
// CHECK: kiln.slice %{{.+}} {starts = #kiln.dims<[0, 0]>
// CHECK: kiln.slice %{{.+}} {starts = #kiln.dims<[0, 64]>
// CHECK: kiln.slice %{{.+}} {starts = #kiln.dims<[0, 96]>
func.func @split_pieces(%x: tensor<?x128xf32, #kiln.dims<[n]>>) -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>) {
  %q, %k, %v = kiln.split %x {axis = 1 : i64} : (tensor<?x128xf32, #kiln.dims<[n]>>) -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>)
  %e = kiln.exp %q : tensor<?x64xf32, #kiln.dims<[n]>>
  return %e, %k, %v : tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>
}
