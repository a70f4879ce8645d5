// RUN: kiln-opt %s --split-input-file --kiln-raise-composites | FileCheck %s
// Masks as transformers builds them and the dynamo exporter writes them:
// positions compared over iota, broadcast, select(keep, 0, -inf) added to
// the scores, and the softmax guarded by select(is_nan(p), 0, p). The mask
// analysis (MaskAnalysis.cpp) proves what the mask computes.

// key <= query over arange: causal, no mask operand, the guard dropped.
// CHECK-LABEL: func.func @hf_causal
// CHECK: kiln.attention %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}} {causal, scale = 2.500000e-01 : f64}
// CHECK-NOT: is_nan
// CHECK-NOT: kiln.softmax
func.func @hf_causal(%q: tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, %k: tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, %v: tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>) -> tensor<?x2x?x16xf32, #kiln.dims<[b, s]>> {
  %zero = kiln.constant dense<0.0> : tensor<f32>
  %ninf = kiln.constant dense<0xFF800000> : tensor<f32>
  %pos = kiln.iota {dim = 0 : i64} : tensor<?xi64, #kiln.dims<[s]>>
  %row = kiln.unsqueeze %pos {axes = array<i64: 0>} : (tensor<?xi64, #kiln.dims<[s]>>) -> tensor<1x?xi64, #kiln.dims<[s]>>
  %query = kiln.unsqueeze %row {axes = array<i64: 2>} : (tensor<1x?xi64, #kiln.dims<[s]>>) -> tensor<1x?x1xi64, #kiln.dims<[s]>>
  %key = kiln.unsqueeze %row {axes = array<i64: 1>} : (tensor<1x?xi64, #kiln.dims<[s]>>) -> tensor<1x1x?xi64, #kiln.dims<[s]>>
  %le = kiln.le %key, %query : (tensor<1x1x?xi64, #kiln.dims<[s]>>, tensor<1x?x1xi64, #kiln.dims<[s]>>) -> tensor<1x?x?xi1, #kiln.dims<[s, s]>>
  %keep = kiln.expand %le : tensor<1x?x?xi1, #kiln.dims<[s, s]>> -> tensor<?x1x?x?xi1, #kiln.dims<[b, s, s]>>
  %mask = kiln.select %keep, %zero, %ninf : (tensor<?x1x?x?xi1, #kiln.dims<[b, s, s]>>, tensor<f32>, tensor<f32>) -> tensor<?x1x?x?xf32, #kiln.dims<[b, s, s]>>
  %qk = kiln.matmul %q, %k {transpose_b} : (tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>) -> tensor<?x2x?x?xf32, #kiln.dims<[b, s, s]>>
  %c = kiln.constant dense<0.25> : tensor<f32>
  %scaled = kiln.mul %qk, %c : (tensor<?x2x?x?xf32, #kiln.dims<[b, s, s]>>, tensor<f32>) -> tensor<?x2x?x?xf32, #kiln.dims<[b, s, s]>>
  %scores = kiln.add %scaled, %mask : (tensor<?x2x?x?xf32, #kiln.dims<[b, s, s]>>, tensor<?x1x?x?xf32, #kiln.dims<[b, s, s]>>) -> tensor<?x2x?x?xf32, #kiln.dims<[b, s, s]>>
  %p = kiln.softmax %scores {axis = 3 : i64} : tensor<?x2x?x?xf32, #kiln.dims<[b, s, s]>>
  %nan = kiln.is_nan %p : tensor<?x2x?x?xf32, #kiln.dims<[b, s, s]>>
  %safe = kiln.select %nan, %zero, %p : (tensor<?x2x?x?xi1, #kiln.dims<[b, s, s]>>, tensor<f32>, tensor<?x2x?x?xf32, #kiln.dims<[b, s, s]>>) -> tensor<?x2x?x?xf32, #kiln.dims<[b, s, s]>>
  %o = kiln.matmul %safe, %v : (tensor<?x2x?x?xf32, #kiln.dims<[b, s, s]>>, tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>) -> tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>
  return %o : tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>
}

// -----

// A sliding window (key > query - 4) is not causal alone: the i1
// condition is the mask operand (no float S x S mask), and the guard of
// fully masked rows stays, on the attention's output. Its key <= query
// conjunct makes the op `causal` (CausalFromMask), and the mask keeps only
// the other conjunct, key > query - 4.
// CHECK-LABEL: func.func @sliding_window
// CHECK-NOT: kiln.and
// CHECK: %[[KEEP:.+]] = kiln.gt
// CHECK-NOT: kiln.and
// CHECK: %[[O:.+]] = kiln.attention %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %[[KEEP]] {causal, scale = 1.000000e+00 : f64}
// CHECK: %[[NAN:.+]] = kiln.is_nan %[[O]]
// CHECK: kiln.select %[[NAN]], %{{.+}}, %[[O]]
func.func @sliding_window(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32> {
  %zero = kiln.constant dense<0.0> : tensor<f32>
  %ninf = kiln.constant dense<0xFF800000> : tensor<f32>
  %w = kiln.constant dense<4> : tensor<i64>
  %pos = kiln.iota {dim = 0 : i64} : tensor<8xi64>
  %query = kiln.unsqueeze %pos {axes = array<i64: 1>} : (tensor<8xi64>) -> tensor<8x1xi64>
  %key = kiln.unsqueeze %pos {axes = array<i64: 0>} : (tensor<8xi64>) -> tensor<1x8xi64>
  %causal = kiln.le %key, %query : (tensor<1x8xi64>, tensor<8x1xi64>) -> tensor<8x8xi1>
  %low = kiln.sub %query, %w : (tensor<8x1xi64>, tensor<i64>) -> tensor<8x1xi64>
  %near = kiln.gt %key, %low : (tensor<1x8xi64>, tensor<8x1xi64>) -> tensor<8x8xi1>
  %keep = kiln.and %causal, %near : (tensor<8x8xi1>, tensor<8x8xi1>) -> tensor<8x8xi1>
  %mask = kiln.select %keep, %zero, %ninf : (tensor<8x8xi1>, tensor<f32>, tensor<f32>) -> tensor<8x8xf32>
  %qk = kiln.matmul %q, %k {transpose_b} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x8xf32>
  %scores = kiln.add %qk, %mask : (tensor<1x2x8x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8x8xf32>
  %p = kiln.softmax %scores {axis = 3 : i64} : tensor<1x2x8x8xf32>
  %nan = kiln.is_nan %p : tensor<1x2x8x8xf32>
  %safe = kiln.select %nan, %zero, %p : (tensor<1x2x8x8xi1>, tensor<f32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  %o = kiln.matmul %safe, %v : (tensor<1x2x8x8xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  return %o : tensor<1x2x8x16xf32>
}

// -----

// BERT without a padding mask: position >= 0 holds everywhere, no mask.
// CHECK-LABEL: func.func @all_true
// CHECK: kiln.attention %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}} {scale = 1.000000e+00 : f64}
// CHECK-NOT: is_nan
func.func @all_true(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32> {
  %zero = kiln.constant dense<0.0> : tensor<f32>
  %ninf = kiln.constant dense<0xFF800000> : tensor<f32>
  %z = kiln.constant dense<0> : tensor<i64>
  %pos = kiln.iota {dim = 0 : i64} : tensor<8xi64>
  %col = kiln.unsqueeze %pos {axes = array<i64: 1>} : (tensor<8xi64>) -> tensor<8x1xi64>
  %ge = kiln.ge %col, %z : (tensor<8x1xi64>, tensor<i64>) -> tensor<8x1xi1>
  %keep = kiln.expand %ge : tensor<8x1xi1> -> tensor<8x8xi1>
  %mask = kiln.select %keep, %zero, %ninf : (tensor<8x8xi1>, tensor<f32>, tensor<f32>) -> tensor<8x8xf32>
  %qk = kiln.matmul %q, %k {transpose_b} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x8xf32>
  %scores = kiln.add %qk, %mask : (tensor<1x2x8x8xf32>, tensor<8x8xf32>) -> tensor<1x2x8x8xf32>
  %p = kiln.softmax %scores {axis = 3 : i64} : tensor<1x2x8x8xf32>
  %nan = kiln.is_nan %p : tensor<1x2x8x8xf32>
  %safe = kiln.select %nan, %zero, %p : (tensor<1x2x8x8xi1>, tensor<f32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  %o = kiln.matmul %safe, %v : (tensor<1x2x8x8xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  return %o : tensor<1x2x8x16xf32>
}

// -----

// A mask from data (a padding mask input) stays a mask operand.
// CHECK-LABEL: func.func @data_mask
// CHECK: kiln.attention %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %arg3 {scale = 1.000000e+00 : f64}
// CHECK: kiln.is_nan
func.func @data_mask(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>, %keep: tensor<1x1x8x8xi1>) -> tensor<1x2x8x16xf32> {
  %zero = kiln.constant dense<0.0> : tensor<f32>
  %ninf = kiln.constant dense<0xFF800000> : tensor<f32>
  %mask = kiln.select %keep, %zero, %ninf : (tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) -> tensor<1x1x8x8xf32>
  %qk = kiln.matmul %q, %k {transpose_b} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x8xf32>
  %scores = kiln.add %qk, %mask : (tensor<1x2x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<1x2x8x8xf32>
  %p = kiln.softmax %scores {axis = 3 : i64} : tensor<1x2x8x8xf32>
  %nan = kiln.is_nan %p : tensor<1x2x8x8xf32>
  %safe = kiln.select %nan, %zero, %p : (tensor<1x2x8x8xi1>, tensor<f32>, tensor<1x2x8x8xf32>) -> tensor<1x2x8x8xf32>
  %o = kiln.matmul %safe, %v : (tensor<1x2x8x8xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  return %o : tensor<1x2x8x16xf32>
}

// -----

// The legacy exporter writes k^T as transpose(0, 2, 3, 1) of k [B, L, H, D]
// (the head transpose folded in): the key is its (0, 2, 1, 3) transpose.
// CHECK-LABEL: func.func @legacy_key_transpose
// CHECK: %[[K:.+]] = kiln.transpose %arg1 {perm = array<i64: 0, 2, 1, 3>}
// CHECK: kiln.attention %arg0, %[[K]], %arg2 {scale = 2.500000e-01 : f64}
func.func @legacy_key_transpose(%q: tensor<1x2x8x16xf32>, %k: tensor<1x8x2x16xf32>, %v: tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32> {
  %half = kiln.constant dense<0.5> : tensor<f32>
  %kt = kiln.transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<1x8x2x16xf32>) -> tensor<1x2x16x8xf32>
  %qs = kiln.mul %q, %half : (tensor<1x2x8x16xf32>, tensor<f32>) -> tensor<1x2x8x16xf32>
  %kts = kiln.mul %kt, %half : (tensor<1x2x16x8xf32>, tensor<f32>) -> tensor<1x2x16x8xf32>
  %qk = kiln.matmul %qs, %kts : (tensor<1x2x8x16xf32>, tensor<1x2x16x8xf32>) -> tensor<1x2x8x8xf32>
  %p = kiln.softmax %qk {axis = 3 : i64} : tensor<1x2x8x8xf32>
  %o = kiln.matmul %p, %v : (tensor<1x2x8x8xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  return %o : tensor<1x2x8x16xf32>
}

// -----

// A finite lowest (torch.finfo.min) without the NaN guard: a fully dropped
// row is uniform there, not NaN, so the float mask stays as it is.
// CHECK-LABEL: func.func @finite_lowest_unguarded
// CHECK: %[[M:.+]] = kiln.select
// CHECK: kiln.attention %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %[[M]] {scale = 1.000000e+00 : f64} : {{.*}}tensor<1x1x8x8xf32>
func.func @finite_lowest_unguarded(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>, %keep: tensor<1x1x8x8xi1>) -> tensor<1x2x8x16xf32> {
  %zero = kiln.constant dense<0.0> : tensor<f32>
  %lowest = kiln.constant dense<-3.40282347E+38> : tensor<f32>
  %mask = kiln.select %keep, %zero, %lowest : (tensor<1x1x8x8xi1>, tensor<f32>, tensor<f32>) -> tensor<1x1x8x8xf32>
  %qk = kiln.matmul %q, %k {transpose_b} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x8xf32>
  %scores = kiln.add %qk, %mask : (tensor<1x2x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<1x2x8x8xf32>
  %p = kiln.softmax %scores {axis = 3 : i64} : tensor<1x2x8x8xf32>
  %o = kiln.matmul %p, %v : (tensor<1x2x8x8xf32>, tensor<1x2x8x16xf32>) -> tensor<1x2x8x16xf32>
  return %o : tensor<1x2x8x16xf32>
}

// -----

// Packed documents (transformers' find_packed_sequence_indices: ids from a
// cumsum of the data, key <= query and the same id): `causal` by its
// key <= query conjunct, and the same-id test alone as the mask.
// CHECK-LABEL: func.func @packed_documents
// CHECK: %[[KEEP:.+]] = kiln.eq
// CHECK-NOT: kiln.and
// CHECK: kiln.attention %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %[[KEEP]] {causal, scale = 1.000000e+00 : f64}
func.func @packed_documents(%q: tensor<2x2x8x16xf32>, %k: tensor<2x2x8x16xf32>, %v: tensor<2x2x8x16xf32>, %doc: tensor<2x8xi64>) -> tensor<2x2x8x16xf32> {
  %pos = kiln.iota {dim = 0 : i64} : tensor<8xi64>
  %query = kiln.unsqueeze %pos {axes = array<i64: 1>} : (tensor<8xi64>) -> tensor<8x1xi64>
  %key = kiln.unsqueeze %pos {axes = array<i64: 0>} : (tensor<8xi64>) -> tensor<1x8xi64>
  %causal = kiln.le %key, %query : (tensor<1x8xi64>, tensor<8x1xi64>) -> tensor<8x8xi1>
  %dq = kiln.unsqueeze %doc {axes = array<i64: 1, 3>} : (tensor<2x8xi64>) -> tensor<2x1x8x1xi64>
  %dk = kiln.unsqueeze %doc {axes = array<i64: 1, 2>} : (tensor<2x8xi64>) -> tensor<2x1x1x8xi64>
  %same = kiln.eq %dq, %dk : (tensor<2x1x8x1xi64>, tensor<2x1x1x8xi64>) -> tensor<2x1x8x8xi1>
  %keep = kiln.and %causal, %same : (tensor<8x8xi1>, tensor<2x1x8x8xi1>) -> tensor<2x1x8x8xi1>
  %o = kiln.attention %q, %k, %v, %keep {scale = 1.0 : f64} : (tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x2x8x16xf32>, tensor<2x1x8x8xi1>) -> tensor<2x2x8x16xf32>
  return %o : tensor<2x2x8x16xf32>
}

// -----

// key <= query in a mask broadcast along the keys (its key dim is 1)
// proves nothing about the op's keys: no `causal`. Nor does a mask from
// data alone, or key >= query.
// CHECK-LABEL: func.func @not_causal
// CHECK: kiln.attention %arg0, %arg1, %arg2, %{{[0-9]+}} {scale = 1.000000e+00 : f64}
// CHECK: kiln.attention %arg0, %arg1, %arg2, %arg3 {scale = 1.000000e+00 : f64}
// CHECK: kiln.attention %arg0, %arg1, %arg2, %{{[0-9]+}} {scale = 1.000000e+00 : f64}
func.func @not_causal(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>, %data: tensor<1x1x8x8xi1>) -> (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) {
  %pos = kiln.iota {dim = 0 : i64} : tensor<8xi64>
  %query = kiln.unsqueeze %pos {axes = array<i64: 1>} : (tensor<8xi64>) -> tensor<8x1xi64>
  %one = kiln.iota {dim = 0 : i64} : tensor<1xi64>
  %key1 = kiln.unsqueeze %one {axes = array<i64: 0>} : (tensor<1xi64>) -> tensor<1x1xi64>
  %narrow = kiln.le %key1, %query : (tensor<1x1xi64>, tensor<8x1xi64>) -> tensor<8x1xi1>
  %a = kiln.attention %q, %k, %v, %narrow {scale = 1.0 : f64} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<8x1xi1>) -> tensor<1x2x8x16xf32>
  %b = kiln.attention %q, %k, %v, %data {scale = 1.0 : f64} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x1x8x8xi1>) -> tensor<1x2x8x16xf32>
  %key = kiln.unsqueeze %pos {axes = array<i64: 0>} : (tensor<8xi64>) -> tensor<1x8xi64>
  %after = kiln.ge %key, %query : (tensor<1x8xi64>, tensor<8x1xi64>) -> tensor<8x8xi1>
  %c = kiln.attention %q, %k, %v, %after {scale = 1.0 : f64} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<8x8xi1>) -> tensor<1x2x8x16xf32>
  return %a, %b, %c : tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>
}

// -----

// A window that keeps everything but the causal part (key >= 0 and
// key <= query): causal, no mask left.
// CHECK-LABEL: func.func @causal_and_all
// CHECK: kiln.attention %arg0, %arg1, %arg2 {causal, scale = 1.000000e+00 : f64}
func.func @causal_and_all(%q: tensor<1x2x8x16xf32>, %k: tensor<1x2x8x16xf32>, %v: tensor<1x2x8x16xf32>, %data: tensor<1x1x8x8xi1>) -> tensor<1x2x8x16xf32> {
  %pos = kiln.iota {dim = 0 : i64} : tensor<8xi64>
  %query = kiln.unsqueeze %pos {axes = array<i64: 1>} : (tensor<8xi64>) -> tensor<8x1xi64>
  %key = kiln.unsqueeze %pos {axes = array<i64: 0>} : (tensor<8xi64>) -> tensor<1x8xi64>
  %causal = kiln.le %key, %query : (tensor<1x8xi64>, tensor<8x1xi64>) -> tensor<8x8xi1>
  %z = kiln.constant dense<0> : tensor<i64>
  %nonneg = kiln.ge %key, %z : (tensor<1x8xi64>, tensor<i64>) -> tensor<1x8xi1>
  %all = kiln.expand %nonneg : tensor<1x8xi1> -> tensor<8x8xi1>
  %keep = kiln.and %all, %causal : (tensor<8x8xi1>, tensor<8x8xi1>) -> tensor<8x8xi1>
  %o = kiln.attention %q, %k, %v, %keep {scale = 1.0 : f64} : (tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<8x8xi1>) -> tensor<1x2x8x16xf32>
  return %o : tensor<1x2x8x16xf32>
}
