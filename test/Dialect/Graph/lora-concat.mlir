// RUN: kiln-opt %s --split-input-file --kiln-lora-concat | FileCheck %s

// q/k/v adapters on one input: one down projection over the concatenated
// A (casts included); each up projection reads the whole product against its
// B padded with zero columns, so no slice of the product is copied.
// CHECK-LABEL: func.func @qkv
// CHECK-DAG: %[[AQ:.+]] = kiln.cast %{{.+}} : tensor<4x32xf32> -> tensor<4x32xbf16>
// CHECK-DAG: %[[AK:.+]] = kiln.cast %{{.+}} : tensor<4x32xf32> -> tensor<4x32xbf16>
// CHECK-DAG: %[[AV:.+]] = kiln.cast %{{.+}} : tensor<2x32xf32> -> tensor<2x32xbf16>
// CHECK: %[[CAT:.+]] = kiln.concat %[[AQ]], %[[AK]], %[[AV]] {axis = 0 : i64} : {{.*}} -> tensor<10x32xbf16>
// CHECK: %[[D:.+]] = kiln.matmul %arg0, %[[CAT]] {transpose_b} : {{.*}} -> tensor<?x10xbf16, #kiln.dims<[n]>>
// CHECK: %[[BQ:.+]] = kiln.pad %{{.+}} {pads = array<i64: 0, 0, 0, 6>{{.*}} : (tensor<8x4xbf16>) -> tensor<8x10xbf16>
// CHECK: kiln.matmul %[[D]], %[[BQ]] {transpose_b} : {{.*}} -> tensor<?x8xbf16, #kiln.dims<[n]>>
// CHECK: %[[BK:.+]] = kiln.pad %{{.+}} {pads = array<i64: 0, 4, 0, 2>{{.*}} : (tensor<8x4xbf16>) -> tensor<8x10xbf16>
// CHECK: kiln.matmul %[[D]], %[[BK]] {transpose_b}
// CHECK: %[[BV:.+]] = kiln.pad %{{.+}} {pads = array<i64: 0, 8, 0, 0>{{.*}} : (tensor<8x2xbf16>) -> tensor<8x10xbf16>
// CHECK: kiln.matmul %[[D]], %[[BV]] {transpose_b}
// CHECK-NOT: kiln.matmul
// CHECK-NOT: kiln.slice
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
// a bf16 layer cast it each); a down projection read otherwise than by its
// up projection gets its columns as a slice. An adapter with its own
// dropout reads another value and a plain weight is no adapter: both keep
// their projections.
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

// -----

// The fp32 adapter path of a bf16 layer under --precision=bf16 reads
// cast(cast(x)) (bf16 -> f32 -> bf16, exact): the adapters read x itself,
// one per group, and the casts are gone.
// CHECK-LABEL: func.func @round_trip
// CHECK-NOT: kiln.cast %arg0
// CHECK: %[[CAT:.+]] = kiln.concat
// CHECK: kiln.matmul %arg0, %[[CAT]] {transpose_b} : {{.*}} -> tensor<?x8xbf16, #kiln.dims<[n]>>
// CHECK-NOT: kiln.cast %arg0
// A narrowing round trip (f32 -> bf16 -> f32) rounds: it stays.
// CHECK: %[[N:.+]] = kiln.cast %arg1 : {{.*}} -> tensor<?x32xbf16, #kiln.dims<[n]>>
// CHECK: %[[W:.+]] = kiln.cast %[[N]]
// CHECK: kiln.matmul %[[W]], %{{.+}} {transpose_b}
func.func @round_trip(%x: tensor<?x32xbf16, #kiln.dims<[n]>>, %y: tensor<?x32xf32, #kiln.dims<[n]>>) -> (tensor<?x4xbf16, #kiln.dims<[n]>>, tensor<?x4xbf16, #kiln.dims<[n]>>, tensor<?x4xf32, #kiln.dims<[n]>>) {
  %p1 = kiln.parameter "a.lora_A.weight" trainable : tensor<4x32xbf16>
  %w1 = kiln.cast %x : tensor<?x32xbf16, #kiln.dims<[n]>> -> tensor<?x32xf32, #kiln.dims<[n]>>
  %n1 = kiln.cast %w1 : tensor<?x32xf32, #kiln.dims<[n]>> -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %t1 = kiln.matmul %n1, %p1 {transpose_b} : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<4x32xbf16>) -> tensor<?x4xbf16, #kiln.dims<[n]>>
  %p2 = kiln.parameter "b.lora_A.weight" trainable : tensor<4x32xbf16>
  %w2 = kiln.cast %x : tensor<?x32xbf16, #kiln.dims<[n]>> -> tensor<?x32xf32, #kiln.dims<[n]>>
  %n2 = kiln.cast %w2 : tensor<?x32xf32, #kiln.dims<[n]>> -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %t2 = kiln.matmul %n2, %p2 {transpose_b} : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<4x32xbf16>) -> tensor<?x4xbf16, #kiln.dims<[n]>>
  %p3 = kiln.parameter "c.lora_A.weight" trainable : tensor<4x32xf32>
  %n3 = kiln.cast %y : tensor<?x32xf32, #kiln.dims<[n]>> -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %w3 = kiln.cast %n3 : tensor<?x32xbf16, #kiln.dims<[n]>> -> tensor<?x32xf32, #kiln.dims<[n]>>
  %t3 = kiln.matmul %w3, %p3 {transpose_b} : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<4x32xf32>) -> tensor<?x4xf32, #kiln.dims<[n]>>
  return %t1, %t2, %t3 : tensor<?x4xbf16, #kiln.dims<[n]>>, tensor<?x4xbf16, #kiln.dims<[n]>>, tensor<?x4xf32, #kiln.dims<[n]>>
}
