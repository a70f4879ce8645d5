// RUN: kiln-opt %s --split-input-file --kiln-autodiff --verify-diagnostics | FileCheck %s

// Broadcast mul then sum: the weight gradient sums the broadcast dim away.
// CHECK-LABEL: func.func @broadcast
// CHECK-SAME: -> (tensor<f32> {kiln.name = "loss"}, tensor<8xf32> {kiln.grad_of = "w"})
// CHECK: %[[W:.+]] = kiln.parameter "w" trainable
// CHECK: %[[L:.+]] = kiln.reduce_sum
// CHECK: %[[D:.+]] = kiln.mul %{{.+}}, %arg0
// CHECK: %[[G:.+]] = kiln.reduce_sum %[[D]] {axes = array<i64: 0>}
// CHECK: return %[[L]], %[[G]]
func.func @broadcast(%x: tensor<4x8xf32>) -> (tensor<f32> {kiln.name = "loss"}) {
  %w = kiln.parameter "w" trainable : tensor<8xf32>
  %y = kiln.mul %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A frozen matmul weight gets no gradient: only the input gradient (towards
// the trainable w1) is built, never dW2 = h^T dY.
// CHECK-LABEL: func.func @frozen_weight
// CHECK-SAME: -> (tensor<f32>, tensor<16x8xf32> {kiln.grad_of = "w1"})
// CHECK: %[[W2:.+]] = kiln.parameter "w2" : tensor<4x16xf32>
// CHECK: kiln.matmul %{{.+}}, %[[W2]] :
// CHECK-NOT: tensor<4x16xf32> {kiln.grad_of
// CHECK-NOT: -> tensor<4x16xf32>
// CHECK: return
func.func @frozen_weight(%x: tensor<2x8xf32>) -> tensor<f32> {
  %w1 = kiln.parameter "w1" trainable : tensor<16x8xf32>
  %w2 = kiln.parameter "w2" : tensor<4x16xf32>
  %h = kiln.matmul %x, %w1 {transpose_b} : (tensor<2x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>
  %y = kiln.matmul %h, %w2 {transpose_b} : (tensor<2x16xf32>, tensor<4x16xf32>) -> tensor<2x4xf32>
  %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<2x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Fan-out: a parameter used twice gets the sum of both gradients.
// CHECK-LABEL: func.func @fan_out
// CHECK: %[[A:.+]] = kiln.add %{{.+}}, %{{.+}} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
// CHECK: return %{{.+}}, %[[A]]
func.func @fan_out() -> tensor<f32> {
  %w = kiln.parameter "w" trainable : tensor<3xf32>
  %y = kiln.mul %w, %w : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %l = kiln.reduce_sum %y {axes = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// stop_gradient cuts the path: the loss does not depend on the parameter,
// which has no gradient at all (PyTorch: .grad stays None, the optimizer
// skips it). It is frozen; the function returns the loss alone.
// CHECK-LABEL: func.func @stopped() -> tensor<f32>
// CHECK: kiln.parameter "w" : tensor<3xf32>
// CHECK-NOT: kiln.grad_of
// CHECK: return %{{[0-9]+}} : tensor<f32>
func.func @stopped() -> tensor<f32> {
  %w = kiln.parameter "w" trainable : tensor<3xf32>
  %s = kiln.stop_gradient %w : tensor<3xf32>
  %l = kiln.reduce_sum %s {axes = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// An op without a VJP on the differentiated path is an error naming it.
func.func @no_vjp(%x: tensor<3xf32>) -> tensor<f32> {
  %w = kiln.parameter "w" trainable : tensor<3xf32>
  // expected-error @+1 {{'kiln.opaque' has no gradient (VJP) but lies on the differentiated path}}
  %y = kiln.opaque "Mystery"(%w) {domain = "", node_name = "m", onnx_attributes = {}} : (tensor<3xf32>) -> tensor<3xf32>
  %l = kiln.reduce_sum %y {axes = array<i64: 0>} : (tensor<3xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The loss must be a float scalar.
// expected-error @+1 {{the loss (first result) must be a float scalar}}
func.func @bad_loss(%x: tensor<3xf32>) -> tensor<3xf32> {
  return %x : tensor<3xf32>
}
