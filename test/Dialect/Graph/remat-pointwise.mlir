// RUN: kiln-opt %s --split-input-file --kiln-remat=budget=pointwise | FileCheck %s --check-prefix=POINTWISE
// RUN: kiln-opt %s --split-input-file --kiln-remat=budget=auto | FileCheck %s --check-prefix=AUTO

// The backward pass reads %h, the norm %n and %e = exp(%n). `pointwise`
// recomputes only the exp (its input %n is kept anyway): two tensors kept,
// the norm not recomputed. `auto` may recompute the norm too and keeps %h
// alone. Both record the roofline estimate of the step before and after.
// POINTWISE-LABEL: func.func @norm_exp
// POINTWISE-SAME: budget = "pointwise"
// POINTWISE-SAME: recomputed = 1 : i64, saved = 2 : i64, saved_before = 3 : i64
// POINTWISE-SAME: step_us = {{[0-9]+}} : i64, step_us_before = {{[0-9]+}} : i64
// POINTWISE: %[[N:.+]] = kiln.rms_norm
// POINTWISE: kiln.reduce_sum
// POINTWISE-NOT: kiln.rms_norm
// POINTWISE: %[[E2:.+]] = kiln.exp %[[N]] {kiln.recomputed}
// POINTWISE-NOT: kiln.recomputed

// AUTO-LABEL: func.func @norm_exp
// AUTO-SAME: budget = "auto"
// AUTO-SAME: recomputed = 2 : i64, saved = 1 : i64, saved_before = 3 : i64
// AUTO: kiln.reduce_sum
// AUTO: %[[N2:.+]] = kiln.rms_norm {{.+}} {{{.*}}kiln.recomputed{{.*}}}
// AUTO: kiln.exp %[[N2]] {kiln.recomputed}
func.func @norm_exp(%x: tensor<64x128xf32>) -> (tensor<f32>, tensor<128x128xf32> {kiln.grad_of = "w"}) {
  %w = kiln.parameter "w" trainable : tensor<128x128xf32>
  %g = kiln.parameter "g" : tensor<128xf32>
  %h = kiln.matmul %x, %w : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
  %n = kiln.rms_norm %h, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<64x128xf32>, tensor<128xf32>) -> tensor<64x128xf32>
  %e = kiln.exp %n : tensor<64x128xf32>
  %l = kiln.reduce_sum %e {axes = array<i64: 0, 1>} : (tensor<64x128xf32>) -> tensor<f32>
  %a = kiln.mul %e, %n : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
  %b = kiln.mul %a, %h : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
  %dw = kiln.matmul %x, %b {transpose_a} : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>
  return %l, %dw : tensor<f32>, tensor<128x128xf32>
}

// -----

// A tiny value is kept even where recomputing it would save bytes: each
// recomputed op costs a launch, priced at 1/4096 of the bytes the step kept
// before remat (here 16 bytes). %c (a cast of the 4-element %v, 8 bytes)
// stays; the 32 KiB %e = exp(%h) is recomputed.
// POINTWISE-LABEL: func.func @tiny
// POINTWISE-SAME: recomputed = 1 : i64, saved = 2 : i64, saved_before = 3 : i64
// POINTWISE: %[[C:.+]] = kiln.cast %arg1
// POINTWISE: kiln.add
// POINTWISE: kiln.exp {{.+}} {kiln.recomputed}
// POINTWISE: kiln.mul %[[C]], %[[C]]
// POINTWISE-NOT: kiln.recomputed
func.func @tiny(%x: tensor<64x128xf32>, %v: tensor<4xf32>) -> (tensor<f32>, tensor<128x128xf32> {kiln.grad_of = "w"}) {
  %w = kiln.parameter "w" trainable : tensor<128x128xf32>
  %h = kiln.matmul %x, %w : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
  %c = kiln.cast %v : tensor<4xf32> -> tensor<4xbf16>
  %cs = kiln.reduce_sum %c {axes = array<i64: 0>} : (tensor<4xbf16>) -> tensor<bf16>
  %cf = kiln.cast %cs : tensor<bf16> -> tensor<f32>
  %e = kiln.exp %h : tensor<64x128xf32>
  %l0 = kiln.reduce_sum %e {axes = array<i64: 0, 1>} : (tensor<64x128xf32>) -> tensor<f32>
  %l = kiln.add %l0, %cf : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %e2 = kiln.mul %e, %h : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
  %k = kiln.mul %c, %c : (tensor<4xbf16>, tensor<4xbf16>) -> tensor<4xbf16>
  %ks = kiln.reduce_sum %k {axes = array<i64: 0>} : (tensor<4xbf16>) -> tensor<bf16>
  %kf = kiln.cast %ks : tensor<bf16> -> tensor<f32>
  %b = kiln.mul %e2, %kf : (tensor<64x128xf32>, tensor<f32>) -> tensor<64x128xf32>
  %dw = kiln.matmul %x, %b {transpose_a} : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>
  return %l, %dw : tensor<f32>, tensor<128x128xf32>
}
