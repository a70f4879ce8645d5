// RUN: kiln-opt %s --split-input-file --kiln-autodiff '--kiln-train-step=optimizer=sgd lr=0.1 weight-decay=0' | FileCheck %s --check-prefix=SGD
// RUN: kiln-opt %s --split-input-file --kiln-autodiff '--kiln-train-step=optimizer=adamw lr=0.001' | FileCheck %s --check-prefix=ADAMW
// RUN: kiln-opt %s --split-input-file --kiln-autodiff '--kiln-train-step=optimizer=sgd momentum=0.9 nesterov=true max-grad-norm=1.0' | FileCheck %s --check-prefix=MOM
// RUN: not kiln-opt %s --kiln-autodiff '--kiln-train-step=optimizer=lion' 2>&1 | FileCheck %s --check-prefix=BAD

// SGD-LABEL: func.func @step
// SGD-SAME: (%[[X:[^:]+]]: tensor<4x8xf32>, %[[W:[^:]+]]: tensor<8xf32> {kiln.param = "w"}, %[[LR:[^:]+]]: tensor<f32> {kiln.lr}, %{{[^:]+}}: tensor<f32> {kiln.step})
// SGD-SAME: -> (tensor<f32> {kiln.name = "loss"}, tensor<8xf32> {kiln.param = "w"})
// SGD-SAME: attributes {kiln.default_lr = 1.000000e-01 : f64, kiln.optimizer = "sgd"}
// SGD-NOT: kiln.parameter "w"
// SGD: %[[U:.+]] = kiln.mul %[[LR]], %{{.+}} : (tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
// SGD: %[[N:.+]] = kiln.sub %[[W]], %[[U]]
// SGD: return %{{.+}}, %[[N]]

// AdamW threads two state tensors per parameter and uses the step number
// for bias correction.
// ADAMW-LABEL: func.func @step
// ADAMW-SAME: {kiln.state = "w/exp_avg"}
// ADAMW-SAME: {kiln.state = "w/exp_avg_sq"}
// ADAMW-SAME: %[[T:[^:]+]]: tensor<f32> {kiln.step})
// ADAMW-SAME: -> (tensor<f32> {kiln.name = "loss"}, tensor<8xf32> {kiln.param = "w"}, tensor<8xf32> {kiln.state = "w/exp_avg"}, tensor<8xf32> {kiln.state = "w/exp_avg_sq"})
// ADAMW: kiln.pow %{{.+}}, %[[T]]
// ADAMW: kiln.sqrt

// Momentum needs a buffer; clipping reduces all gradients to one norm.
// MOM-LABEL: func.func @step
// MOM-SAME: {kiln.state = "w/momentum_buffer"}
// MOM: kiln.min
// MOM: kiln.eq
// MOM: kiln.select

// BAD: unknown optimizer 'lion' (adamw or sgd)
func.func @step(%x: tensor<4x8xf32>) -> (tensor<f32> {kiln.name = "loss"}) {
  %w = kiln.parameter "w" trainable : tensor<8xf32>
  %y = kiln.mul %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
