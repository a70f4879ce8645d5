// RUN: kiln-opt %s --split-input-file --kiln-lora-concat | FileCheck %s

// q/k/v adapters on one input: one down projection over the concatenated
// A (casts included), each adapter reading its columns of the product.
// CHECK-LABEL: func.func @qkv
// CHECK-DAG: %[[AQ:.+]] = kiln.cast %[[PQ:.+]] : tensor<4x32xf32> -> tensor<4x32xbf16>
// CHECK-DAG: %[[AK:.+]] = kiln.cast %{{.+}} : tensor<4x32xf32> -> tensor<4x32xbf16>
// CHECK-DAG: %[[AV:.+]] = kiln.cast %{{.+}} : tensor<2x32xf32> -> tensor<2x32xbf16>
// CHECK: %[[CAT:.+]] = kiln.concat %[[AQ]], %[[AK]], %[[AV]] {axis = 0 : i64} : {{.*}} -> tensor<10x32xbf16>
// CHECK: %[[D:.+]] = kiln.matmul %arg0, %[[CAT]] {transpose_b} : {{.*}} -> tensor<?x10xbf16, #kiln.dims<[n]>>
// CHECK: %[[DQ:.+]] = kiln.slice %[[D]] {starts = #kiln.dims<[0, 0]>, steps = array<i64: 1, 1>} : {{.*}} -> tensor<?x4xbf16, #kiln.dims<[n]>>
// CHECK: kiln.matmul %[[DQ]], %{{.+}} {transpose_b}
// CHECK: %[[DK:.+]] = kiln.slice %[[D]] {starts = #kiln.dims<[0, 4]>, steps = array<i64: 1, 1>} : {{.*}} -> tensor<?x4xbf16, #kiln.dims<[n]>>
// CHECK: kiln.matmul %[[DK]], %{{.+}} {transpose_b}
// CHECK: %[[DV:.+]] = kiln.slice %[[D]] {starts = #kiln.dims<[0, 8]>, steps = array<i64: 1, 1>} : {{.*}} -> tensor<?x2xbf16, #kiln.dims<[n]>>
// CHECK: kiln.matmul %[[DV]], %{{.+}} {transpose_b}
// CHECK-NOT: kiln.matmul
// CHECK: return
func.func @qkv(%x: tensor<?x32xbf16, #kiln.dims<[n]>>) -> (tensor<?x8xbf16, #kiln.dims<[n]>>, tensor<?x8xbf16, #kiln.dims<[n]>>, tensor<?x8xbf16, #kiln.dims<[n]>>) {
  %pq = kiln.parameter "q.lora_A.weight" trainable : tensor<4x32xf32>
  %aq = kiln.cast %pq : tensor<4x32xf32> -> tensor<4x32xbf16>
  %bq = kiln.parameter "q.lora_B.weight" trainable : tensor<8x4xbf16>
  %tq = kiln.matmul %x, %aq {transpose_b} : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<4x32xbf16>) -> tensor<?x4xbf16, #kiln.dims<[n]>>
  %uq = kiln.matmul %tq, %bq {transpose_b} : (tensor<?x4xbf16, #kiln.dims<[n]>>, tensor<8x4xbf16>) -> tensor<?x8xbf16, #kiln.dims<[n]>>
  %pk = kiln.parameter "k.lora_A.weight" trainable : tensor<4x32xf32>
  %ak = kiln.cast %pk : tensor<4x32xf32> -> tensor<4x32xbf16>
  %bk = kiln.parameter "k.lora_B.weight" trainable : tensor<8x4xbf16>
  %tk = kiln.matmul %x, %ak {transpose_b} : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<4x32xbf16>) -> tensor<?x4xbf16, #kiln.dims<[n]>>
  %uk = kiln.matmul %tk, %bk {transpose_b} : (tensor<?x4xbf16, #kiln.dims<[n]>>, tensor<8x4xbf16>) -> tensor<?x8xbf16, #kiln.dims<[n]>>
  %pv = kiln.parameter "v.lora_A.weight" trainable : tensor<2x32xf32>
  %av = kiln.cast %pv : tensor<2x32xf32> -> tensor<2x32xbf16>
  %bv = kiln.parameter "v.lora_B.weight" trainable : tensor<8x2xbf16>
  %tv = kiln.matmul %x, %av {transpose_b} : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<2x32xbf16>) -> tensor<?x2xbf16, #kiln.dims<[n]>>
  %uv = kiln.matmul %tv, %bv {transpose_b} : (tensor<?x2xbf16, #kiln.dims<[n]>>, tensor<8x2xbf16>) -> tensor<?x8xbf16, #kiln.dims<[n]>>
  return %uq, %uk, %uv : tensor<?x8xbf16, #kiln.dims<[n]>>, tensor<?x8xbf16, #kiln.dims<[n]>>, tensor<?x8xbf16, #kiln.dims<[n]>>
}

// -----

// Inputs seen through casts of one value are one input (fp32 adapters of
// a bf16 layer cast it each); an adapter with its own dropout reads another
// value and a plain weight is no adapter: both keep their projections.
// CHECK-LABEL: func.func @casts_and_others
// CHECK: %[[X32:.+]] = kiln.cast %arg0 : tensor<?x32xbf16, #kiln.dims<[n]>> -> tensor<?x32xf32, #kiln.dims<[n]>>
// CHECK: %[[CAT:.+]] = kiln.concat %{{.+}}, %{{.+}} {axis = 0 : i64} : (tensor<4x32xf32>, tensor<4x32xf32>) -> tensor<8x32xf32>
// CHECK: kiln.matmul %[[X32]], %[[CAT]] {transpose_b} : {{.*}} -> tensor<?x8xf32, #kiln.dims<[n]>>
// CHECK-COUNT-2: kiln.slice
// CHECK: kiln.dropout
// CHECK: kiln.matmul %{{.+}}, %{{.+}} {transpose_b} : {{.*}} -> tensor<?x4xf32, #kiln.dims<[n]>>
// CHECK: kiln.matmul %arg0, %{{.+}} {transpose_b} : {{.*}} -> tensor<?x4xbf16, #kiln.dims<[n]>>
func.func @casts_and_others(%x: tensor<?x32xbf16, #kiln.dims<[n]>>, %seed: tensor<i64>) -> (tensor<?x4xf32, #kiln.dims<[n]>>, tensor<?x4xf32, #kiln.dims<[n]>>, tensor<?x4xf32, #kiln.dims<[n]>>, tensor<?x4xbf16, #kiln.dims<[n]>>) {
  %x1 = kiln.cast %x : tensor<?x32xbf16, #kiln.dims<[n]>> -> tensor<?x32xf32, #kiln.dims<[n]>>
  %p1 = kiln.parameter "a.lora_A.weight" trainable : tensor<4x32xf32>
  %t1 = kiln.matmul %x1, %p1 {transpose_b} : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<4x32xf32>) -> tensor<?x4xf32, #kiln.dims<[n]>>
  %x2 = kiln.cast %x : tensor<?x32xbf16, #kiln.dims<[n]>> -> tensor<?x32xf32, #kiln.dims<[n]>>
  %p2 = kiln.parameter "b.lora_A.weight" trainable : tensor<4x32xf32>
  %t2 = kiln.matmul %x2, %p2 {transpose_b} : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<4x32xf32>) -> tensor<?x4xf32, #kiln.dims<[n]>>
  %x3 = kiln.cast %x : tensor<?x32xbf16, #kiln.dims<[n]>> -> tensor<?x32xf32, #kiln.dims<[n]>>
  %d3 = kiln.dropout %x3, %seed {p = 1.000000e-01 : f64, stream = 2 : i64} : tensor<?x32xf32, #kiln.dims<[n]>>, tensor<i64>
  %p3 = kiln.parameter "c.lora_A.weight" trainable : tensor<4x32xf32>
  %t3 = kiln.matmul %d3, %p3 {transpose_b} : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<4x32xf32>) -> tensor<?x4xf32, #kiln.dims<[n]>>
  %w = kiln.parameter "d.weight" : tensor<4x32xbf16>
  %t4 = kiln.matmul %x, %w {transpose_b} : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<4x32xbf16>) -> tensor<?x4xbf16, #kiln.dims<[n]>>
  return %t1, %t2, %t3, %t4 : tensor<?x4xf32, #kiln.dims<[n]>>, tensor<?x4xf32, #kiln.dims<[n]>>, tensor<?x4xf32, #kiln.dims<[n]>>, tensor<?x4xbf16, #kiln.dims<[n]>>
}
