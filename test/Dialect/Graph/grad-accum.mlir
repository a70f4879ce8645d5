// RUN: kiln-opt %s --kiln-autodiff '--kiln-grad-accum=micro-batches=2' | FileCheck %s

// CHECK-LABEL: func.func @accumulate
// CHECK-SAME: (%[[X0:[^:]+]]: tensor<4x8xf32> {kiln.micro_batch = 0 : i64}, %[[X1:[^:]+]]: tensor<4x8xf32> {kiln.micro_batch = 1 : i64})
// CHECK: %[[TWO:.+]] = kiln.constant dense<2.000000e+00> : tensor<f32>
// CHECK: %[[L:.+]] = kiln.div %{{.+}}, %[[TWO]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: %[[G:.+]] = kiln.div %{{.+}}, %{{.+}} : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
// CHECK: return %[[L]], %[[G]]
func.func @accumulate(%x: tensor<4x8xf32>) -> tensor<f32> {
  %w = kiln.parameter "w" trainable : tensor<8xf32>
  %y = kiln.mul %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
