// Placement and buckets of the gradient all-reduces (kiln-data-parallel).
// RUN: kiln-opt %s --kiln-autodiff '--kiln-data-parallel=bucket-mb=0.0004' | FileCheck %s --check-prefix=SMALL
// RUN: kiln-opt %s --kiln-autodiff --kiln-data-parallel | FileCheck %s --check-prefix=ONE
// RUN: not kiln-opt %s --kiln-autodiff '--kiln-data-parallel=bucket-mb=0' 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not kiln-opt %s --kiln-data-parallel 2>&1 | FileCheck %s --check-prefix=NOGRADS

// The backward produces dw2 (256 bytes) first, then db1 (64), then dw1
// (512). Buckets of 0.0004 MiB (419 bytes): {dw2, db1} right after db1,
// then {dw1} alone (larger than a bucket), then the loss before the return.
// SMALL-LABEL: func.func @mlp
// SMALL-SAME: kiln.data_parallel = {bucket_mb = 4.000000e-04 : f64, buckets = 3 : i64}
// SMALL: %[[L:.+]] = kiln.reduce_sum %{{.+}} {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
// SMALL: %[[DW2:.+]] = kiln.matmul %{{.+}}, %{{.+}} {transpose_a} : (tensor<4x16xf32>, tensor<4x4xf32>) -> tensor<16x4xf32>
// SMALL-NOT: kiln.all_reduce
// SMALL: %[[DB1:.+]] = kiln.reduce_sum %{{.+}} {axes = array<i64: 0>} : (tensor<4x16xf32>) -> tensor<16xf32>
// SMALL-NEXT: %[[R0:.+]]:2 = kiln.all_reduce %[[DW2]], %[[DB1]] bucket 0 : tensor<16x4xf32>, tensor<16xf32>
// SMALL-NEXT: %[[DW1:.+]] = kiln.matmul %arg0, %{{.+}} {transpose_a} : (tensor<4x8xf32>, tensor<4x16xf32>) -> tensor<8x16xf32>
// SMALL-NEXT: %[[R1:.+]] = kiln.all_reduce %[[DW1]] bucket 1 : tensor<8x16xf32>
// SMALL-NEXT: %[[RL:.+]] = kiln.all_reduce %[[L]] bucket 2 {loss} : tensor<f32>
// SMALL-NEXT: return %[[RL]], %[[R1]], %[[R0]]#1, %[[R0]]#0

// The default, 25 MiB: one bucket after the last gradient.
// ONE-LABEL: func.func @mlp
// ONE-SAME: kiln.data_parallel = {bucket_mb = 2.500000e+01 : f64, buckets = 2 : i64}
// ONE: %[[DW1:.+]] = kiln.matmul %arg0, %{{.+}} {transpose_a}
// ONE-NEXT: %[[R:.+]]:3 = kiln.all_reduce %{{.+}}, %{{.+}}, %[[DW1]] bucket 0 : tensor<16x4xf32>, tensor<16xf32>, tensor<8x16xf32>
// ONE-NEXT: %[[RL:.+]] = kiln.all_reduce %{{.+}} bucket 1 {loss} : tensor<f32>
// ONE-NEXT: return %[[RL]], %[[R]]#2, %[[R]]#1, %[[R]]#0

// ZERO: error: bucket-mb must be a positive number of MiB, got 0
// NOGRADS: error: no gradient results; run kiln-autodiff first
func.func @mlp(%x: tensor<4x8xf32>) -> tensor<f32> {
  %w1 = kiln.parameter "w1" trainable : tensor<8x16xf32>
  %b1 = kiln.parameter "b1" trainable : tensor<16xf32>
  %w2 = kiln.parameter "w2" trainable : tensor<16x4xf32>
  %h = kiln.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %hb = kiln.add %h, %b1 : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %a = kiln.relu %hb : tensor<4x16xf32>
  %y = kiln.matmul %a, %w2 : (tensor<4x16xf32>, tensor<16x4xf32>) -> tensor<4x4xf32>
  %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
