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

// -----

// torch.onnx.export(dynamo=True) of F.scaled_dot_product_attention(...,
// is_causal=True): sqrt(scale) on q and on k^T (0.5 * 0.5 here), k^T as
// reshape-transpose-reshape, and the causal mask built from trilu(ones) with
// the dtype's lowest value: one causal attention, no mask operand.
// CHECK-LABEL: func.func @attention_exported_causal
// CHECK-SAME: (%[[Q:.+]]: tensor<?x2x?x16xbf16, {{.+}}>, %[[K:.+]]: tensor<?x2x?x16xbf16, {{.+}}>, %[[V:.+]]: tensor<?x2x?x16xbf16, {{.+}}>)
// CHECK: %[[A:.+]] = kiln.attention %[[Q]], %[[K]], %[[V]] {causal, scale = 2.500000e-01 : f64}
// CHECK-NEXT: return %[[A]]
func.func @attention_exported_causal(%q: tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, %k: tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, %v: tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>) -> tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>> {
  %one = kiln.constant dense<1.0> : tensor<f32>
  %zero = kiln.constant dense<0.0> : tensor<f32>
  %lowest = kiln.constant dense<-3.389530e+38> : tensor<bf16>
  %keep = kiln.constant dense<0.0> : tensor<bf16>
  %half = kiln.constant dense<0.5> : tensor<1xbf16>
  %ones = kiln.expand %one : tensor<f32> -> tensor<?x?xf32, #kiln.dims<[s, s]>>
  %lower = kiln.trilu %ones : tensor<?x?xf32, #kiln.dims<[s, s]>>
  %above = kiln.eq %lower, %zero : (tensor<?x?xf32, #kiln.dims<[s, s]>>, tensor<f32>) -> tensor<?x?xi1, #kiln.dims<[s, s]>>
  %mask = kiln.select %above, %lowest, %keep : (tensor<?x?xi1, #kiln.dims<[s, s]>>, tensor<bf16>, tensor<bf16>) -> tensor<?x?xbf16, #kiln.dims<[s, s]>>
  %k3 = kiln.reshape %k : tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>> -> tensor<?x?x16xbf16, #kiln.dims<[2*b, s]>>
  %kt3 = kiln.transpose %k3 {perm = array<i64: 0, 2, 1>} : (tensor<?x?x16xbf16, #kiln.dims<[2*b, s]>>) -> tensor<?x16x?xbf16, #kiln.dims<[2*b, s]>>
  %kt = kiln.reshape %kt3 : tensor<?x16x?xbf16, #kiln.dims<[2*b, s]>> -> tensor<?x2x16x?xbf16, #kiln.dims<[b, s]>>
  %qs = kiln.mul %q, %half : (tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, tensor<1xbf16>) -> tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>
  %kts = kiln.mul %kt, %half : (tensor<?x2x16x?xbf16, #kiln.dims<[b, s]>>, tensor<1xbf16>) -> tensor<?x2x16x?xbf16, #kiln.dims<[b, s]>>
  %qk = kiln.matmul %qs, %kts : (tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x16x?xbf16, #kiln.dims<[b, s]>>) -> tensor<?x2x?x?xbf16, #kiln.dims<[b, s, s]>>
  %scores = kiln.add %qk, %mask : (tensor<?x2x?x?xbf16, #kiln.dims<[b, s, s]>>, tensor<?x?xbf16, #kiln.dims<[s, s]>>) -> tensor<?x2x?x?xbf16, #kiln.dims<[b, s, s]>>
  %p = kiln.softmax %scores {axis = 3 : i64} : tensor<?x2x?x?xbf16, #kiln.dims<[b, s, s]>>
  %o = kiln.matmul %p, %v : (tensor<?x2x?x?xbf16, #kiln.dims<[b, s, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>) -> tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>
  return %o : tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>
}

// -----

// The upper triangle (trilu upper) masks j < i, not causal: it stays a mask.
// CHECK-LABEL: func.func @attention_upper_mask
// CHECK: kiln.attention %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {scale = 1.000000e+00 : f64}
func.func @attention_upper_mask(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32> {
  %one = kiln.constant dense<1.0> : tensor<f32>
  %zero = kiln.constant dense<0.0> : tensor<f32>
  %lowest = kiln.constant dense<-3.4e+38> : tensor<f32>
  %ones = kiln.expand %one : tensor<f32> -> tensor<8x8xf32>
  %upper = kiln.trilu %ones {upper} : tensor<8x8xf32>
  %drop = kiln.eq %upper, %zero : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xi1>
  %mask = kiln.select %drop, %lowest, %zero : (tensor<8x8xi1>, tensor<f32>, tensor<f32>) -> tensor<8x8xf32>
  %qk = kiln.matmul %q, %k {transpose_b} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x8xf32>
  %scores = kiln.add %qk, %mask : (tensor<1x2x8x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8x8xf32>
  %p = kiln.softmax %scores {axis = 3 : i64} : tensor<1x2x8x8xf32>
  %o = kiln.matmul %p, %v : (tensor<1x2x8x8xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  return %o : tensor<1x2x8x16xf32>
}
