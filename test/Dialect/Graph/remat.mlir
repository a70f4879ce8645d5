// RUN: kiln-opt %s --split-input-file --kiln-remat=budget=auto | FileCheck %s --check-prefix=AUTO
// RUN: kiln-opt %s --split-input-file --kiln-remat=budget=none | FileCheck %s --check-prefix=NONE

// Backward reads %a and %b (tanh' and exp' in terms of their outputs).
// %b is exp(%a): keeping %a alone and recomputing exp next to its backward
// use halves the kept bytes. Keeping %h instead would cost the same and
// recompute more, so the latest cheapest cut wins.
// AUTO-LABEL: func.func @chain
// AUTO-SAME: kiln.remat = {budget = "auto", extra_flops = 8192 : i64
// AUTO-SAME: recomputed = 1 : i64, saved = 1 : i64, saved_before = 2 : i64, saved_bytes = 32768 : i64, saved_bytes_before = 65536 : i64
// AUTO: %[[H:.+]] = kiln.matmul
// AUTO: %[[A:.+]] = kiln.tanh %[[H]] : tensor<64x128xf32>
// AUTO: %[[B:.+]] = kiln.exp %[[A]] : tensor<64x128xf32>
// AUTO: kiln.reduce_sum %[[B]]
// AUTO: %[[B2:.+]] = kiln.exp %[[A]] {kiln.recomputed} : tensor<64x128xf32>
// AUTO: kiln.mul %[[B2]], %{{.+}} :
// AUTO: kiln.mul %[[A]], %[[A]] :
// AUTO-NOT: kiln.recomputed

// NONE-LABEL: func.func @chain
// NONE-NOT: kiln.remat
// NONE-NOT: kiln.recomputed
func.func @chain(%x: tensor<64x128xf32>) -> (tensor<f32>, tensor<128x128xf32> {kiln.grad_of = "w"}) {
  %w = kiln.parameter "w" trainable : tensor<128x128xf32>
  %h = kiln.matmul %x, %w : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
  %a = kiln.tanh %h : tensor<64x128xf32>
  %b = kiln.exp %a : tensor<64x128xf32>
  %l = kiln.reduce_sum %b {axes = array<i64: 0, 1>} : (tensor<64x128xf32>) -> tensor<f32>
  %one = kiln.constant dense<1.0> : tensor<f32>
  %da = kiln.mul %b, %one : (tensor<64x128xf32>, tensor<f32>) -> tensor<64x128xf32>
  %t = kiln.mul %a, %a : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
  %s = kiln.sub %one, %t : (tensor<f32>, tensor<64x128xf32>) -> tensor<64x128xf32>
  %dh = kiln.mul %da, %s : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
  %dw = kiln.matmul %x, %dh {transpose_a} : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>
  return %l, %dw : tensor<f32>, tensor<128x128xf32>
}

// -----

// Backward reads only %a. Recomputing it would mean keeping both matmul
// results; keeping %a itself is cheapest, so nothing is recomputed (among
// equally cheap cuts the pass keeps the latest values).
// AUTO-LABEL: func.func @fanin
// AUTO-SAME: recomputed = 0 : i64, saved = 1 : i64, saved_before = 1 : i64, saved_bytes = 32768 : i64
// AUTO-NOT: kiln.recomputed
func.func @fanin(%x: tensor<64x128xf32>) -> (tensor<f32>, tensor<128x128xf32> {kiln.grad_of = "w"}) {
  %w = kiln.parameter "w" trainable : tensor<128x128xf32>
  %h1 = kiln.matmul %x, %w : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
  %h2 = kiln.matmul %x, %w {transpose_b} : (tensor<64x128xf32>, tensor<128x128xf32>) -> tensor<64x128xf32>
  %c = kiln.add %h1, %h2 : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
  %a = kiln.tanh %c : tensor<64x128xf32>
  %l = kiln.reduce_sum %a {axes = array<i64: 0, 1>} : (tensor<64x128xf32>) -> tensor<f32>
  %t = kiln.mul %a, %a : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<64x128xf32>
  %dw = kiln.matmul %x, %t {transpose_a} : (tensor<64x128xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>
  return %l, %dw : tensor<f32>, tensor<128x128xf32>
}
