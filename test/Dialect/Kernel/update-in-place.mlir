// RUN: kiln-opt %s --split-input-file --kiln-autodiff '--kiln-train-step=optimizer=adamw lr=0.001' --kiln-fuse --kiln-lower-to-step --kiln-update-in-place | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-autodiff '--kiln-train-step=optimizer=adamw lr=0.001' --kiln-fuse --kiln-lower-to-step | FileCheck %s --check-prefix=OFF

// The whole step fuses into one multi-segment kernel. The AdamW moments are
// read only at the element the kernel writes: their new values are views of
// the old buffers (no copy-back). The parameter is also read by the loss
// segment at other elements (x * w over [4, 8]): it keeps a fresh buffer.
// CHECK-LABEL: func.func @step
// CHECK-SAME: %[[W:[^:]+]]: !kiln_kernel.buffer<tensor<8xf32>> {kiln.param = "w"}
// CHECK-SAME: %[[M:[^:]+]]: !kiln_kernel.buffer<tensor<8xf32>> {kiln.state = "w/exp_avg"}
// CHECK-SAME: %[[V:[^:]+]]: !kiln_kernel.buffer<tensor<8xf32>> {kiln.state = "w/exp_avg_sq"}
// CHECK: %[[NM:.+]] = kiln_kernel.view %[[M]]
// CHECK: %[[NV:.+]] = kiln_kernel.view %[[V]]
// CHECK: %[[NW:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<8xf32>>
// CHECK: kiln_kernel.launch
// CHECK: return %{{.+}}, %[[NW]], %[[NM]], %[[NV]]
// OFF-NOT: kiln_kernel.view
func.func @step(%x: tensor<4x8xf32>) -> (tensor<f32> {kiln.name = "loss"}) {
  %w = kiln.parameter "w" trainable : tensor<8xf32>
  %y = kiln.mul %x, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<4x8xf32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A matmul between the parameter and its update: the gradient is a GEMM, so
// the update kernel is separate and the parameter is dead after it: all
// three tensors update in place.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: %[[W:[^:]+]]: !kiln_kernel.buffer<tensor<8x4xf32>> {kiln.param = "w"}
// CHECK: kiln_kernel.gemm
// CHECK: %[[NW:.+]] = kiln_kernel.view %[[W]]
// CHECK: kiln_kernel.launch {{.*}} outs({{.*}}%[[NW]]
// CHECK-NOT: kiln_kernel.alloc : !kiln_kernel.buffer<tensor<8x4xf32>>
// CHECK: return
func.func @linear(%x: tensor<16x8xf32>) -> (tensor<f32> {kiln.name = "loss"}) {
  %w = kiln.parameter "w" trainable : tensor<8x4xf32>
  %y = kiln.matmul %x, %w : (tensor<16x8xf32>, tensor<8x4xf32>) -> tensor<16x4xf32>
  %s = kiln.mul %y, %y : (tensor<16x4xf32>, tensor<16x4xf32>) -> tensor<16x4xf32>
  %l = kiln.reduce_sum %s {axes = array<i64: 0, 1>} : (tensor<16x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
