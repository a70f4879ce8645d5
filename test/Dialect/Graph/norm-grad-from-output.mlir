// RUN: kiln-opt --split-input-file --kiln-norm-grad-from-output %s | FileCheck %s

// Hugging Face's RMSNorm in a bf16 step: the norm with a unit weight, a cast,
// the frozen scale. The backward keeps %h for the LoRA gradient, so the
// norm's gradient divides %h by the scale and reads the saved rstd; %x is
// no longer read by the backward. The scale gets kiln.nonzero.
// CHECK-LABEL: func.func @hf_rms_norm
// CHECK: %[[G:.+]] = kiln.parameter "gamma" {kiln.nonzero}
// CHECK: %[[Y:.+]], %[[R:.+]] = kiln.rms_norm_with_rstd %arg0, %[[ONES:.+]] {axis = 2 : i64, epsilon = 1.000000e-05 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>) -> (tensor<2x8x64xf32>, tensor<2x8xf32>)
// CHECK: %[[YB:.+]] = kiln.cast %[[Y]]
// CHECK: %[[H:.+]] = kiln.mul %[[G]], %[[YB]]
// CHECK: kiln.rms_norm_grad_from_output %[[H]], %[[G]], %[[ONES]], %[[R]], %arg2 {axis = 2 : i64}
// CHECK-NOT: kiln.rms_norm_grad %
func.func @hf_rms_norm(%x: tensor<2x8x64xf32>, %dh: tensor<2x8x16xbf16>, %dy: tensor<2x8x64xf32>)
    -> (tensor<f32>, tensor<2x8x64xf32>, tensor<16x64xbf16>) {
  %ones = kiln.constant dense<1.0> : tensor<64xf32>
  %gamma = kiln.parameter "gamma" : tensor<64xbf16>
  %a = kiln.parameter "lora_A" trainable : tensor<16x64xbf16>
  %y = kiln.rms_norm %x, %ones {axis = 2 : i64, epsilon = 1.0E-5 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>) -> tensor<2x8x64xf32>
  %yb = kiln.cast %y : tensor<2x8x64xf32> -> tensor<2x8x64xbf16>
  %h = kiln.mul %gamma, %yb : (tensor<64xbf16>, tensor<2x8x64xbf16>) -> tensor<2x8x64xbf16>
  %p = kiln.matmul %h, %a {transpose_b} : (tensor<2x8x64xbf16>, tensor<16x64xbf16>) -> tensor<2x8x16xbf16>
  %pf = kiln.cast %p : tensor<2x8x16xbf16> -> tensor<2x8x16xf32>
  %l = kiln.reduce_sum %pf {axes = array<i64: 0, 1, 2>} : (tensor<2x8x16xf32>) -> tensor<f32>
  // The backward: the adapter's gradient reads %h, the norm's its input.
  %da = kiln.matmul %dh, %h {transpose_a} : (tensor<2x8x16xbf16>, tensor<2x8x64xbf16>) -> tensor<2x16x64xbf16>
  %das = kiln.reduce_sum %da {axes = array<i64: 0>} : (tensor<2x16x64xbf16>) -> tensor<16x64xbf16>
  %dx, %dw = kiln.rms_norm_grad %x, %ones, %dy {axis = 2 : i64, epsilon = 1.0E-5 : f64} : (tensor<2x8x64xf32>, tensor<64xf32>, tensor<2x8x64xf32>) -> (tensor<2x8x64xf32>, tensor<64xf32>)
  return %l, %dx, %das : tensor<f32>, tensor<2x8x64xf32>, tensor<16x64xbf16>
}

// -----

// The norm's own frozen weight (no multiply after it): the kept result is
// divided by that weight.
// CHECK-LABEL: func.func @own_weight
// CHECK: %[[W:.+]] = kiln.parameter "w" {kiln.nonzero}
// CHECK: %[[Y:.+]], %[[R:.+]] = kiln.rms_norm_with_rstd %arg0, %[[W]]
// CHECK: kiln.rms_norm_grad_from_output %[[Y]], %[[W]], %[[W]], %[[R]], %arg2
func.func @own_weight(%x: tensor<8x64xf32>, %dh: tensor<8x16xf32>, %dy: tensor<8x64xf32>)
    -> (tensor<f32>, tensor<8x64xf32>, tensor<16x64xf32>) {
  %w = kiln.parameter "w" : tensor<64xf32>
  %a = kiln.parameter "lora_A" trainable : tensor<16x64xf32>
  %y = kiln.rms_norm %x, %w {axis = 1 : i64, epsilon = 1.0E-5 : f64} : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %p = kiln.matmul %y, %a {transpose_b} : (tensor<8x64xf32>, tensor<16x64xf32>) -> tensor<8x16xf32>
  %l = kiln.reduce_sum %p {axes = array<i64: 0, 1>} : (tensor<8x16xf32>) -> tensor<f32>
  %da = kiln.matmul %dh, %y {transpose_a} : (tensor<8x16xf32>, tensor<8x64xf32>) -> tensor<16x64xf32>
  %dx, %dw = kiln.rms_norm_grad %x, %w, %dy {axis = 1 : i64, epsilon = 1.0E-5 : f64} : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<64xf32>)
  return %l, %dx, %da : tensor<f32>, tensor<8x64xf32>, tensor<16x64xf32>
}

// -----

// Left alone: a trained weight (it changes every step, so no load-time
// check covers it), a constant weight with a zero, and an output the
// backward does not read (%y3: keeping it would cost what it saves). Each
// alone is rewritten (@own_weight).
// CHECK-LABEL: func.func @not_divisible
// CHECK-NOT: rms_norm_with_rstd
// CHECK-NOT: kiln.nonzero
// CHECK-COUNT-3: kiln.rms_norm_grad %
func.func @not_divisible(%x1: tensor<8x64xf32>, %x2: tensor<8x64xf32>, %x3: tensor<8x64xf32>, %dh: tensor<8x16xf32>, %dy: tensor<8x64xf32>)
    -> (tensor<f32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>) {
  %w = kiln.parameter "trained" trainable : tensor<64xf32>
  %z = kiln.constant dense<[0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]> : tensor<64xf32>
  %f = kiln.parameter "frozen" : tensor<64xf32>
  %a = kiln.parameter "lora_A" trainable : tensor<16x64xf32>
  %y1 = kiln.rms_norm %x1, %w {axis = 1 : i64, epsilon = 1.0E-5 : f64} : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %y2 = kiln.rms_norm %x2, %z {axis = 1 : i64, epsilon = 1.0E-5 : f64} : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %y3 = kiln.rms_norm %x3, %f {axis = 1 : i64, epsilon = 1.0E-5 : f64} : (tensor<8x64xf32>, tensor<64xf32>) -> tensor<8x64xf32>
  %s12 = kiln.add %y1, %y2 : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %s = kiln.add %s12, %y3 : (tensor<8x64xf32>, tensor<8x64xf32>) -> tensor<8x64xf32>
  %p = kiln.matmul %s, %a {transpose_b} : (tensor<8x64xf32>, tensor<16x64xf32>) -> tensor<8x16xf32>
  %l = kiln.reduce_sum %p {axes = array<i64: 0, 1>} : (tensor<8x16xf32>) -> tensor<f32>
  %da1 = kiln.matmul %dh, %y1 {transpose_a} : (tensor<8x16xf32>, tensor<8x64xf32>) -> tensor<16x64xf32>
  %da2 = kiln.matmul %dh, %y2 {transpose_a} : (tensor<8x16xf32>, tensor<8x64xf32>) -> tensor<16x64xf32>
  %dx1, %dw1 = kiln.rms_norm_grad %x1, %w, %dy {axis = 1 : i64, epsilon = 1.0E-5 : f64} : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<64xf32>)
  %dx2, %dw2 = kiln.rms_norm_grad %x2, %z, %dy {axis = 1 : i64, epsilon = 1.0E-5 : f64} : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<64xf32>)
  %dx3, %dw3 = kiln.rms_norm_grad %x3, %f, %dy {axis = 1 : i64, epsilon = 1.0E-5 : f64} : (tensor<8x64xf32>, tensor<64xf32>, tensor<8x64xf32>) -> (tensor<8x64xf32>, tensor<64xf32>)
  return %l, %dx1, %dx2, %dx3, %da1, %da2 : tensor<f32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<8x64xf32>, tensor<16x64xf32>, tensor<16x64xf32>
}
