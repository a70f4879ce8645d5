// RUN: kiln-opt %s --split-input-file --kiln-raise-composites | FileCheck %s

// CHECK-LABEL: func.func @silu
// CHECK-SAME: (%[[X:.+]]: tensor
// CHECK: %[[Y:.+]] = kiln.silu %[[X]]
// CHECK: return %[[Y]]
func.func @silu(%x: tensor<?x8xf32, #kiln.dims<[n]>>) -> tensor<?x8xf32, #kiln.dims<[n]>> {
  %s = kiln.sigmoid %x : tensor<?x8xf32, #kiln.dims<[n]>>
  %y = kiln.mul %s, %x : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<?x8xf32, #kiln.dims<[n]>>) -> tensor<?x8xf32, #kiln.dims<[n]>>
  return %y : tensor<?x8xf32, #kiln.dims<[n]>>
}

// -----

// x * sigmoid(y) is not SiLU.
// CHECK-LABEL: func.func @not_silu
// CHECK: kiln.sigmoid
// CHECK: kiln.mul
// CHECK-NOT: kiln.silu
func.func @not_silu(%x: tensor<8xf32>, %y: tensor<8xf32>) -> tensor<8xf32> {
  %s = kiln.sigmoid %y : tensor<8xf32>
  %z = kiln.mul %x, %s : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %z : tensor<8xf32>
}

// -----

// The Llama spelling: pow, mean, add eps, sqrt, reciprocal, times weight.
// CHECK-LABEL: func.func @rms_norm_weighted
// CHECK-SAME: (%[[X:[^:]+]]: tensor<?x?x64xf32, #kiln.dims<[b, s]>>, %[[W:[^:]+]]: tensor<64xf32>)
// CHECK: %[[N:.+]] = kiln.rms_norm %[[X]], %[[W]] {axis = 2 : i64, epsilon = 9.99{{[0-9]+}}E-7 : f64}
// CHECK-NOT: kiln.pow
// CHECK: return %[[N]]
func.func @rms_norm_weighted(%x: tensor<?x?x64xf32, #kiln.dims<[b, s]>>, %w: tensor<64xf32>) -> tensor<?x?x64xf32, #kiln.dims<[b, s]>> {
  %two = kiln.constant dense<2.0> : tensor<f32>
  %eps = kiln.constant dense<1.0e-6> : tensor<f32>
  %p = kiln.pow %x, %two : (tensor<?x?x64xf32, #kiln.dims<[b, s]>>, tensor<f32>) -> tensor<?x?x64xf32, #kiln.dims<[b, s]>>
  %m = kiln.reduce_mean %p {axes = array<i64: 2>, keepdim} : (tensor<?x?x64xf32, #kiln.dims<[b, s]>>) -> tensor<?x?x1xf32, #kiln.dims<[b, s]>>
  %v = kiln.add %m, %eps : (tensor<?x?x1xf32, #kiln.dims<[b, s]>>, tensor<f32>) -> tensor<?x?x1xf32, #kiln.dims<[b, s]>>
  %r = kiln.sqrt %v : tensor<?x?x1xf32, #kiln.dims<[b, s]>>
  %i = kiln.reciprocal %r : tensor<?x?x1xf32, #kiln.dims<[b, s]>>
  %n = kiln.mul %x, %i : (tensor<?x?x64xf32, #kiln.dims<[b, s]>>, tensor<?x?x1xf32, #kiln.dims<[b, s]>>) -> tensor<?x?x64xf32, #kiln.dims<[b, s]>>
  %o = kiln.mul %w, %n : (tensor<64xf32>, tensor<?x?x64xf32, #kiln.dims<[b, s]>>) -> tensor<?x?x64xf32, #kiln.dims<[b, s]>>
  return %o : tensor<?x?x64xf32, #kiln.dims<[b, s]>>
}

// -----

// rsqrt spelling, no weight: the weight is ones.
// CHECK-LABEL: func.func @rms_norm_unweighted
// CHECK: %[[ONES:.+]] = kiln.constant dense<1.000000e+00> : tensor<16xf32>
// CHECK: kiln.rms_norm %{{.+}}, %[[ONES]] {axis = 1 : i64
func.func @rms_norm_unweighted(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %eps = kiln.constant dense<1.0e-5> : tensor<f32>
  %p = kiln.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = kiln.reduce_mean %p {axes = array<i64: 1>, keepdim} : (tensor<4x16xf32>) -> tensor<4x1xf32>
  %v = kiln.add %eps, %m : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %r = kiln.rsqrt %v : tensor<4x1xf32>
  %n = kiln.mul %r, %x : (tensor<4x1xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  return %n : tensor<4x16xf32>
}

// -----

// Mean over a leading axis is not an RMSNorm over trailing dims.
// CHECK-LABEL: func.func @not_rms_norm
// CHECK-NOT: kiln.rms_norm
func.func @not_rms_norm(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %eps = kiln.constant dense<1.0e-5> : tensor<f32>
  %p = kiln.mul %x, %x : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %m = kiln.reduce_mean %p {axes = array<i64: 0>, keepdim} : (tensor<4x16xf32>) -> tensor<1x16xf32>
  %v = kiln.add %m, %eps : (tensor<1x16xf32>, tensor<f32>) -> tensor<1x16xf32>
  %r = kiln.rsqrt %v : tensor<1x16xf32>
  %n = kiln.mul %x, %r : (tensor<4x16xf32>, tensor<1x16xf32>) -> tensor<4x16xf32>
  return %n : tensor<4x16xf32>
}

// -----

// Eager grouped-query attention: k/v repeated from 2 to 4 heads, scaled
// scores plus a float mask, softmax, times v.
// CHECK-LABEL: func.func @attention_gqa
// CHECK-SAME: (%[[Q:[^:]+]]: tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>, %[[K:[^:]+]]: tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, %[[V:[^:]+]]: tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, %[[M:[^:]+]]: tensor
// CHECK: %[[A:.+]] = kiln.attention %[[Q]], %[[K]], %[[V]], %[[M]] {scale = 2.500000e-01 : f64}
// CHECK-NOT: kiln.softmax
// CHECK: return %[[A]]
func.func @attention_gqa(%q: tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>, %k: tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, %v: tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, %mask: tensor<?x1x?x?xf32, #kiln.dims<[b, s, s]>>) -> tensor<?x4x?x16xf32, #kiln.dims<[b, s]>> {
  %scale = kiln.constant dense<0.25> : tensor<f32>
  %ku = kiln.unsqueeze %k {axes = array<i64: 2>} : (tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>) -> tensor<?x2x1x?x16xf32, #kiln.dims<[b, s]>>
  %ke = kiln.expand %ku : tensor<?x2x1x?x16xf32, #kiln.dims<[b, s]>> -> tensor<?x2x2x?x16xf32, #kiln.dims<[b, s]>>
  %kr = kiln.reshape %ke : tensor<?x2x2x?x16xf32, #kiln.dims<[b, s]>> -> tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>
  %vu = kiln.unsqueeze %v {axes = array<i64: 2>} : (tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>) -> tensor<?x2x1x?x16xf32, #kiln.dims<[b, s]>>
  %ve = kiln.expand %vu : tensor<?x2x1x?x16xf32, #kiln.dims<[b, s]>> -> tensor<?x2x2x?x16xf32, #kiln.dims<[b, s]>>
  %vr = kiln.reshape %ve : tensor<?x2x2x?x16xf32, #kiln.dims<[b, s]>> -> tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>
  %kt = kiln.transpose %kr {perm = array<i64: 0, 1, 3, 2>} : (tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>) -> tensor<?x4x16x?xf32, #kiln.dims<[b, s]>>
  %qk = kiln.matmul %q, %kt : (tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>, tensor<?x4x16x?xf32, #kiln.dims<[b, s]>>) -> tensor<?x4x?x?xf32, #kiln.dims<[b, s, s]>>
  %sc = kiln.mul %qk, %scale : (tensor<?x4x?x?xf32, #kiln.dims<[b, s, s]>>, tensor<f32>) -> tensor<?x4x?x?xf32, #kiln.dims<[b, s, s]>>
  %ad = kiln.add %sc, %mask : (tensor<?x4x?x?xf32, #kiln.dims<[b, s, s]>>, tensor<?x1x?x?xf32, #kiln.dims<[b, s, s]>>) -> tensor<?x4x?x?xf32, #kiln.dims<[b, s, s]>>
  %p = kiln.softmax %ad {axis = 3 : i64} : tensor<?x4x?x?xf32, #kiln.dims<[b, s, s]>>
  %o = kiln.matmul %p, %vr : (tensor<?x4x?x?xf32, #kiln.dims<[b, s, s]>>, tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>) -> tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>
  return %o : tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>
}

// -----

// Softmax over the wrong axis is not attention.
// CHECK-LABEL: func.func @not_attention
// CHECK-NOT: kiln.attention
func.func @not_attention(%q: tensor<1x2x8x4xf32>, %k: tensor<1x2x8x4xf32>, %v: tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32> {
  %qk = kiln.matmul %q, %k {transpose_b} : (tensor<1x2x8x4xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x8xf32>
  %p = kiln.softmax %qk {axis = 2 : i64} : tensor<1x2x8x8xf32>
  %o = kiln.matmul %p, %v : (tensor<1x2x8x8xf32>, tensor<1x2x8x4xf32>) -> tensor<1x2x8x4xf32>
  return %o : tensor<1x2x8x4xf32>
}
