// RUN: kiln-opt %s --split-input-file --kiln-raise-composites | FileCheck %s
// Masks a static-shape export folds into constants, judged by their values
// (MaskAnalysis.cpp): a kiln.parameter the importer recorded a keep pattern
// for (kiln.mask_pattern), a non-splat i1 constant, an arange constant.

// A [B, 1, S, S] 0/-inf initializer recorded causal: `causal`, no mask.
// CHECK-LABEL: func.func @recorded_causal
// CHECK: kiln.attention %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}} {causal, scale = 2.500000e-01 : f64}
// CHECK-NOT: kiln.softmax
func.func @recorded_causal(%q: tensor<2x2x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32> {
  %mask = kiln.parameter "val_142" trainable {kiln.mask_pattern = "causal"} : tensor<2x1x4x4xf32>
  %qk = kiln.matmul %q, %k {transpose_b} : (tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x4xf32>
  %c = kiln.constant dense<0.25> : tensor<f32>
  %scaled = kiln.mul %qk, %c : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
  %scores = kiln.add %scaled, %mask : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = kiln.softmax %scores {axis = 3 : i64} : tensor<2x2x4x4xf32>
  %o = kiln.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
  return %o : tensor<2x2x4x16xf32>
}

// -----

// The same parameter without a recorded pattern (a bias, any values): the
// float mask stays.
// CHECK-LABEL: func.func @unrecorded
// CHECK: %[[M:.+]] = kiln.parameter "bias"
// CHECK: kiln.attention %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %[[M]] {scale
func.func @unrecorded(%q: tensor<2x2x4x16xf32>, %k: tensor<2x2x4x16xf32>, %v: tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32> {
  %mask = kiln.parameter "bias" trainable : tensor<2x1x4x4xf32>
  %qk = kiln.matmul %q, %k {transpose_b} : (tensor<2x2x4x16xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x4xf32>
  %scores = kiln.add %qk, %mask : (tensor<2x2x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x2x4x4xf32>
  %p = kiln.softmax %scores {axis = 3 : i64} : tensor<2x2x4x4xf32>
  %o = kiln.matmul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x16xf32>) -> tensor<2x2x4x16xf32>
  return %o : tensor<2x2x4x16xf32>
}

// -----

// A non-splat i1 constant, lower triangular, selecting 0 or -inf: causal.
// CHECK-LABEL: func.func @bool_constant
// CHECK: kiln.attention %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}} {causal, scale = 1.000000e+00 : f64}
func.func @bool_constant(%q: tensor<1x2x3x16xf32>, %k: tensor<1x2x3x16xf32>, %v: tensor<1x2x3x16xf32>) -> tensor<1x2x3x16xf32> {
  %keep = kiln.constant dense<[[true, false, false], [true, true, false], [true, true, true]]> : tensor<3x3xi1>
  %zero = kiln.constant dense<0.0> : tensor<f32>
  %ninf = kiln.constant dense<0xFF800000> : tensor<f32>
  %mask = kiln.select %keep, %zero, %ninf : (tensor<3x3xi1>, tensor<f32>, tensor<f32>) -> tensor<3x3xf32>
  %qk = kiln.matmul %q, %k {transpose_b} : (tensor<1x2x3x16xf32>, tensor<1x2x3x16xf32>) -> tensor<1x2x3x3xf32>
  %scores = kiln.add %qk, %mask : (tensor<1x2x3x3xf32>, tensor<3x3xf32>) -> tensor<1x2x3x3xf32>
  %p = kiln.softmax %scores {axis = 3 : i64} : tensor<1x2x3x3xf32>
  %o = kiln.matmul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x16xf32>) -> tensor<1x2x3x16xf32>
  return %o : tensor<1x2x3x16xf32>
}

// -----

// An arange the importer folded to a constant (positions 0..2), compared
// key <= query: the constant is the affine function of its index, causal.
// CHECK-LABEL: func.func @arange_constant
// CHECK: kiln.attention %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}} {causal, scale = 1.000000e+00 : f64}
func.func @arange_constant(%q: tensor<1x2x3x16xf32>, %k: tensor<1x2x3x16xf32>, %v: tensor<1x2x3x16xf32>) -> tensor<1x2x3x16xf32> {
  %pos = kiln.constant dense<[0, 1, 2]> : tensor<3xi64>
  %query = kiln.unsqueeze %pos {axes = array<i64: 1>} : (tensor<3xi64>) -> tensor<3x1xi64>
  %key = kiln.unsqueeze %pos {axes = array<i64: 0>} : (tensor<3xi64>) -> tensor<1x3xi64>
  %keep = kiln.le %key, %query : (tensor<1x3xi64>, tensor<3x1xi64>) -> tensor<3x3xi1>
  %zero = kiln.constant dense<0.0> : tensor<f32>
  %ninf = kiln.constant dense<0xFF800000> : tensor<f32>
  %mask = kiln.select %keep, %zero, %ninf : (tensor<3x3xi1>, tensor<f32>, tensor<f32>) -> tensor<3x3xf32>
  %qk = kiln.matmul %q, %k {transpose_b} : (tensor<1x2x3x16xf32>, tensor<1x2x3x16xf32>) -> tensor<1x2x3x3xf32>
  %scores = kiln.add %qk, %mask : (tensor<1x2x3x3xf32>, tensor<3x3xf32>) -> tensor<1x2x3x3xf32>
  %p = kiln.softmax %scores {axis = 3 : i64} : tensor<1x2x3x3xf32>
  %o = kiln.matmul %p, %v : (tensor<1x2x3x3xf32>, tensor<1x2x3x16xf32>) -> tensor<1x2x3x16xf32>
  return %o : tensor<1x2x3x16xf32>
}
