// RUN: kiln-opt %s --kiln-autodiff '--kiln-train-step=optimizer=adamw lr=0.001' | FileCheck %s
// RUN: kiln-opt %s --kiln-autodiff '--kiln-train-step=optimizer=sgd lr=0.1 momentum=0.9' | FileCheck %s --check-prefix=SGD

// A bf16 parameter trains with fp32 optimizer math: in bf16, beta2 = 0.999
// rounds to 1, 1 - beta2^t is 0 and the first update is NaN. The moments,
// lr and step are fp32; the gradient widens, the new value narrows back.
// CHECK-LABEL: func.func @step
// CHECK-SAME: %[[W:[^:]+]]: tensor<8xbf16> {kiln.param = "w"}
// CHECK-SAME: tensor<8xf32> {kiln.state = "w/exp_avg"}
// CHECK-SAME: tensor<8xf32> {kiln.state = "w/exp_avg_sq"}
// CHECK-SAME: tensor<f32> {kiln.lr}
// CHECK-SAME: tensor<f32> {kiln.step}
// CHECK-SAME: -> (tensor<f32> {kiln.name = "loss"}, tensor<8xbf16> {kiln.param = "w"}, tensor<8xf32> {kiln.state = "w/exp_avg"}, tensor<8xf32> {kiln.state = "w/exp_avg_sq"})
// CHECK-DAG: kiln.cast %{{.+}} : tensor<8xbf16> -> tensor<8xf32>
// CHECK-DAG: kiln.cast %[[W]] : tensor<8xbf16> -> tensor<8xf32>
// CHECK: %[[NEW:.+]] = kiln.cast %{{.+}} : tensor<8xf32> -> tensor<8xbf16>
// CHECK: return %{{.+}}, %[[NEW]]

// SGD-LABEL: func.func @step
// SGD-SAME: tensor<8xf32> {kiln.state = "w/momentum_buffer"}
// SGD-SAME: tensor<f32> {kiln.lr}
// SGD: kiln.cast %{{.+}} : tensor<8xf32> -> tensor<8xbf16>
func.func @step(%x: tensor<4x8xbf16>) -> (tensor<f32> {kiln.name = "loss"}) {
  %w = kiln.parameter "w" trainable : tensor<8xbf16>
  %y = kiln.mul %x, %w : (tensor<4x8xbf16>, tensor<8xbf16>) -> tensor<4x8xbf16>
  %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<4x8xbf16>) -> tensor<bf16>
  %f = kiln.cast %l : tensor<bf16> -> tensor<f32>
  return %f : tensor<f32>
}
