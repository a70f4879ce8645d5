// Every graph op and attribute round-trips through the custom and the generic
// form.
// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

// Expressions print canonically: sorted terms, merged coefficients.
// CHECK-LABEL: func.func @sym_expr_attrs(
// CHECK-SAME: a = #kiln.expr<batch*seq>
// CHECK-SAME: b = #kiln.expr<2*seq + 1>
// CHECK-SAME: c = #kiln.expr<seq - 1>
// CHECK-SAME: d = #kiln.expr<batch - 1*seq>
// CHECK-SAME: e = #kiln.expr<-3*seq>
// CHECK-SAME: f = #kiln.expr<64>
// CHECK-SAME: g = #kiln.expr<0>
// CHECK-SAME: h = #kiln.expr<batch*seq*seq + 4*batch - 7>
func.func @sym_expr_attrs() attributes {
    a = #kiln.expr<seq*batch>, b = #kiln.expr<1 + seq + seq>,
    c = #kiln.expr<seq - 1>, d = #kiln.expr<batch - 1*seq>,
    e = #kiln.expr<-3*seq>, f = #kiln.expr<64>, g = #kiln.expr<seq - 1*seq>,
    h = #kiln.expr<-7 + 4*batch + seq*batch*seq>} {
  return
}

// CHECK-LABEL: func.func @dims_attrs(
// CHECK-SAME: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
// CHECK-SAME: tensor<?x64xf32, #kiln.dims<[batch*seq]>>
// CHECK-SAME: tensor<?x?xf32, #kiln.dims<[batch, ?]>>
// CHECK-SAME: tensor<?x2x?xi64, #kiln.dims<[?, 2*seq + 1]>>
// CHECK-SAME: d = #kiln.dims<[seq - 1, ?]>
func.func @dims_attrs(%a: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>,
                      %b: tensor<?x64xf32, #kiln.dims<[seq*batch]>>,
                      %c: tensor<?x?xf32, #kiln.dims<[batch, ?]>>,
                      %d: tensor<?x2x?xi64, #kiln.dims<[?, 1 + 2*seq]>>)
    attributes {d = #kiln.dims<[seq - 1, ?]>} {
  return
}

//===----------------------------------------------------------------------===//
// Sources
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @sources(
func.func @sources() -> (tensor<2x3xf32>, tensor<4xi64>, tensor<64x32xf32>,
                         tensor<?x?xi64, #kiln.dims<[batch, seq]>>,
                         tensor<?xf32, #kiln.dims<[seq]>>) {
  // CHECK: %[[C:.+]] = kiln.constant dense<1.000000e+00> : tensor<2x3xf32>
  %c = kiln.constant dense<1.0> : tensor<2x3xf32>
  // CHECK: %[[I:.+]] = kiln.constant dense<[0, 1, 2, 3]> : tensor<4xi64>
  %i = kiln.constant dense<[0, 1, 2, 3]> : tensor<4xi64>
  // CHECK: %[[W:.+]] = kiln.parameter "l1.weight" trainable : tensor<64x32xf32>
  %w = kiln.parameter "l1.weight" trainable : tensor<64x32xf32>
  // CHECK: %[[P:.+]] = kiln.parameter "rope.cache" : tensor<?xf32, #kiln.dims<[seq]>>
  %p = kiln.parameter "rope.cache" : tensor<?xf32, #kiln.dims<[seq]>>
  // CHECK: %[[IOTA:.+]] = kiln.iota {dim = 1 : i64} : tensor<?x?xi64, #kiln.dims<[batch, seq]>>
  %iota = kiln.iota {dim = 1 : i64} : tensor<?x?xi64, #kiln.dims<[batch, seq]>>
  // CHECK: return %[[C]], %[[I]], %[[W]], %[[IOTA]], %[[P]]
  return %c, %i, %w, %iota, %p : tensor<2x3xf32>, tensor<4xi64>, tensor<64x32xf32>,
      tensor<?x?xi64, #kiln.dims<[batch, seq]>>, tensor<?xf32, #kiln.dims<[seq]>>
}

//===----------------------------------------------------------------------===//
// Elementwise unary
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @unary(
// CHECK-SAME: %[[X:.+]]: tensor<?x64xf32, #kiln.dims<[batch*seq]>>, %[[I:.+]]: tensor<4xi32>, %[[B:.+]]: tensor<?xi1, #kiln.dims<[seq]>>)
func.func @unary(%x: tensor<?x64xf32, #kiln.dims<[batch*seq]>>,
                 %i: tensor<4xi32>, %b: tensor<?xi1, #kiln.dims<[seq]>>) {
  // CHECK: kiln.neg %[[X]] : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  %0 = kiln.neg %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.neg %[[I]] : tensor<4xi32>
  %1 = kiln.neg %i : tensor<4xi32>
  // CHECK: kiln.abs %[[X]] : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  %2 = kiln.abs %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.abs %[[I]] : tensor<4xi32>
  %3 = kiln.abs %i : tensor<4xi32>
  // CHECK: kiln.exp %[[X]] : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  %4 = kiln.exp %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.log %[[X]]
  %5 = kiln.log %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.sqrt %[[X]]
  %6 = kiln.sqrt %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.rsqrt %[[X]]
  %7 = kiln.rsqrt %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.reciprocal %[[X]]
  %8 = kiln.reciprocal %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.tanh %[[X]]
  %9 = kiln.tanh %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.sigmoid %[[X]]
  %10 = kiln.sigmoid %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.silu %[[X]]
  %11 = kiln.silu %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.relu %[[X]]
  %12 = kiln.relu %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.erf %[[X]]
  %13 = kiln.erf %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.sin %[[X]]
  %14 = kiln.sin %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.cos %[[X]]
  %15 = kiln.cos %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.not %[[B]] : tensor<?xi1, #kiln.dims<[seq]>>
  %16 = kiln.not %b : tensor<?xi1, #kiln.dims<[seq]>>
  // CHECK: kiln.stop_gradient %[[I]] : tensor<4xi32>
  %17 = kiln.stop_gradient %i : tensor<4xi32>
  // CHECK: kiln.stop_gradient %[[X]] : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  %18 = kiln.stop_gradient %x : tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  return
}

// The default approximation is elided.
// CHECK-LABEL: func.func @gelu(
// CHECK-SAME: %[[X:.+]]: tensor<?x?xbf16, #kiln.dims<[batch, seq]>>)
func.func @gelu(%x: tensor<?x?xbf16, #kiln.dims<[batch, seq]>>) {
  // CHECK: kiln.gelu %[[X]] : tensor<?x?xbf16, #kiln.dims<[batch, seq]>>
  %0 = kiln.gelu %x : tensor<?x?xbf16, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.gelu %[[X]] : tensor<?x?xbf16, #kiln.dims<[batch, seq]>>
  %1 = kiln.gelu %x {approximate = #kiln.gelu<none>} : tensor<?x?xbf16, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.gelu %[[X]] {approximate = #kiln.gelu<tanh>} : tensor<?x?xbf16, #kiln.dims<[batch, seq]>>
  %2 = kiln.gelu %x {approximate = #kiln.gelu<tanh>} : tensor<?x?xbf16, #kiln.dims<[batch, seq]>>
  return
}

//===----------------------------------------------------------------------===//
// Elementwise binary
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @arith(
// CHECK-SAME: %[[A:.+]]: tensor<?x1x64xf32, #kiln.dims<[batch]>>, %[[B:.+]]: tensor<?x64xf32, #kiln.dims<[seq]>>, %[[S:.+]]: tensor<f32>)
func.func @arith(%a: tensor<?x1x64xf32, #kiln.dims<[batch]>>,
                 %b: tensor<?x64xf32, #kiln.dims<[seq]>>, %s: tensor<f32>) {
  // CHECK: kiln.add %[[A]], %[[B]] : (tensor<?x1x64xf32, #kiln.dims<[batch]>>, tensor<?x64xf32, #kiln.dims<[seq]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  %0 = kiln.add %a, %b : (tensor<?x1x64xf32, #kiln.dims<[batch]>>, tensor<?x64xf32, #kiln.dims<[seq]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.sub %[[B]], %[[S]] : (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<f32>) -> tensor<?x64xf32, #kiln.dims<[seq]>>
  %1 = kiln.sub %b, %s : (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<f32>) -> tensor<?x64xf32, #kiln.dims<[seq]>>
  // CHECK: kiln.mul %[[S]], %[[A]] : (tensor<f32>, tensor<?x1x64xf32, #kiln.dims<[batch]>>) -> tensor<?x1x64xf32, #kiln.dims<[batch]>>
  %2 = kiln.mul %s, %a : (tensor<f32>, tensor<?x1x64xf32, #kiln.dims<[batch]>>) -> tensor<?x1x64xf32, #kiln.dims<[batch]>>
  // CHECK: kiln.div %[[B]], %[[B]] : (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<?x64xf32, #kiln.dims<[seq]>>) -> tensor<?x64xf32, #kiln.dims<[seq]>>
  %3 = kiln.div %b, %b : (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<?x64xf32, #kiln.dims<[seq]>>) -> tensor<?x64xf32, #kiln.dims<[seq]>>
  // CHECK: kiln.pow %[[B]], %[[S]]
  %4 = kiln.pow %b, %s : (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<f32>) -> tensor<?x64xf32, #kiln.dims<[seq]>>
  // CHECK: kiln.max %[[B]], %[[S]]
  %5 = kiln.max %b, %s : (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<f32>) -> tensor<?x64xf32, #kiln.dims<[seq]>>
  // CHECK: kiln.min %[[B]], %[[S]]
  %6 = kiln.min %b, %s : (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<f32>) -> tensor<?x64xf32, #kiln.dims<[seq]>>
  return
}

// Integer arithmetic, and a declared result that still has an unknown dim
// (shape propagation refines it later).
// CHECK-LABEL: func.func @arith_int(
// CHECK-SAME: %[[A:.+]]: tensor<?x4xi64, #kiln.dims<[seq]>>, %[[B:.+]]: tensor<1x4xi64>)
func.func @arith_int(%a: tensor<?x4xi64, #kiln.dims<[seq]>>, %b: tensor<1x4xi64>) {
  // CHECK: kiln.add %[[A]], %[[B]] : (tensor<?x4xi64, #kiln.dims<[seq]>>, tensor<1x4xi64>) -> tensor<?x4xi64>
  %0 = kiln.add %a, %b : (tensor<?x4xi64, #kiln.dims<[seq]>>, tensor<1x4xi64>) -> tensor<?x4xi64>
  // CHECK: kiln.div %[[A]], %[[B]] : (tensor<?x4xi64, #kiln.dims<[seq]>>, tensor<1x4xi64>) -> tensor<?x4xi64, #kiln.dims<[seq]>>
  %1 = kiln.div %a, %b : (tensor<?x4xi64, #kiln.dims<[seq]>>, tensor<1x4xi64>) -> tensor<?x4xi64, #kiln.dims<[seq]>>
  return
}

// CHECK-LABEL: func.func @compare(
// CHECK-SAME: %[[A:.+]]: tensor<?x?xi64, #kiln.dims<[batch, seq]>>, %[[B:.+]]: tensor<i64>, %[[F:.+]]: tensor<8xf16>)
func.func @compare(%a: tensor<?x?xi64, #kiln.dims<[batch, seq]>>, %b: tensor<i64>,
                   %f: tensor<8xf16>) {
  // CHECK: kiln.eq %[[A]], %[[B]] : (tensor<?x?xi64, #kiln.dims<[batch, seq]>>, tensor<i64>) -> tensor<?x?xi1, #kiln.dims<[batch, seq]>>
  %0 = kiln.eq %a, %b : (tensor<?x?xi64, #kiln.dims<[batch, seq]>>, tensor<i64>) -> tensor<?x?xi1, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.ne %[[A]], %[[B]]
  %1 = kiln.ne %a, %b : (tensor<?x?xi64, #kiln.dims<[batch, seq]>>, tensor<i64>) -> tensor<?x?xi1, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.lt %[[B]], %[[A]]
  %2 = kiln.lt %b, %a : (tensor<i64>, tensor<?x?xi64, #kiln.dims<[batch, seq]>>) -> tensor<?x?xi1, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.le %[[A]], %[[A]]
  %3 = kiln.le %a, %a : (tensor<?x?xi64, #kiln.dims<[batch, seq]>>, tensor<?x?xi64, #kiln.dims<[batch, seq]>>) -> tensor<?x?xi1, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.gt %[[F]], %[[F]] : (tensor<8xf16>, tensor<8xf16>) -> tensor<8xi1>
  %4 = kiln.gt %f, %f : (tensor<8xf16>, tensor<8xf16>) -> tensor<8xi1>
  // CHECK: kiln.ge %[[F]], %[[F]] : (tensor<8xf16>, tensor<8xf16>) -> tensor<8xi1>
  %5 = kiln.ge %f, %f : (tensor<8xf16>, tensor<8xf16>) -> tensor<8xi1>
  return
}

// CHECK-LABEL: func.func @logical(
// CHECK-SAME: %[[A:.+]]: tensor<?x1xi1, #kiln.dims<[seq]>>, %[[B:.+]]: tensor<1x?xi1, #kiln.dims<[seq]>>)
func.func @logical(%a: tensor<?x1xi1, #kiln.dims<[seq]>>, %b: tensor<1x?xi1, #kiln.dims<[seq]>>) {
  // CHECK: kiln.and %[[A]], %[[B]] : (tensor<?x1xi1, #kiln.dims<[seq]>>, tensor<1x?xi1, #kiln.dims<[seq]>>) -> tensor<?x?xi1, #kiln.dims<[seq, seq]>>
  %0 = kiln.and %a, %b : (tensor<?x1xi1, #kiln.dims<[seq]>>, tensor<1x?xi1, #kiln.dims<[seq]>>) -> tensor<?x?xi1, #kiln.dims<[seq, seq]>>
  // CHECK: kiln.or %[[A]], %[[B]]
  %1 = kiln.or %a, %b : (tensor<?x1xi1, #kiln.dims<[seq]>>, tensor<1x?xi1, #kiln.dims<[seq]>>) -> tensor<?x?xi1, #kiln.dims<[seq, seq]>>
  // CHECK: kiln.xor %[[A]], %[[B]]
  %2 = kiln.xor %a, %b : (tensor<?x1xi1, #kiln.dims<[seq]>>, tensor<1x?xi1, #kiln.dims<[seq]>>) -> tensor<?x?xi1, #kiln.dims<[seq, seq]>>
  return
}

// CHECK-LABEL: func.func @select(
// CHECK-SAME: %[[C:.+]]: tensor<1x1x?x?xi1, #kiln.dims<[seq, seq]>>, %[[X:.+]]: tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>, %[[Y:.+]]: tensor<f32>)
func.func @select(%c: tensor<1x1x?x?xi1, #kiln.dims<[seq, seq]>>,
                  %x: tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>,
                  %y: tensor<f32>) {
  // CHECK: kiln.select %[[C]], %[[X]], %[[Y]] : (tensor<1x1x?x?xi1, #kiln.dims<[seq, seq]>>, tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>, tensor<f32>) -> tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>
  %0 = kiln.select %c, %x, %y : (tensor<1x1x?x?xi1, #kiln.dims<[seq, seq]>>, tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>, tensor<f32>) -> tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>
  return
}

// CHECK-LABEL: func.func @cast(
// CHECK-SAME: %[[X:.+]]: tensor<?x?xi64, #kiln.dims<[batch, seq]>>, %[[U:.+]]: tensor<?x3xf32>)
func.func @cast(%x: tensor<?x?xi64, #kiln.dims<[batch, seq]>>, %u: tensor<?x3xf32>) {
  // CHECK: kiln.cast %[[X]] : tensor<?x?xi64, #kiln.dims<[batch, seq]>> -> tensor<?x?xf32, #kiln.dims<[batch, seq]>>
  %0 = kiln.cast %x : tensor<?x?xi64, #kiln.dims<[batch, seq]>> -> tensor<?x?xf32, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.cast %[[X]] : tensor<?x?xi64, #kiln.dims<[batch, seq]>> -> tensor<?x?xi1, #kiln.dims<[batch, seq]>>
  %1 = kiln.cast %x : tensor<?x?xi64, #kiln.dims<[batch, seq]>> -> tensor<?x?xi1, #kiln.dims<[batch, seq]>>
  // An unknown dim may be refined by the result type.
  // CHECK: kiln.cast %[[U]] : tensor<?x3xf32> -> tensor<?x3xbf16, #kiln.dims<[seq]>>
  %2 = kiln.cast %u : tensor<?x3xf32> -> tensor<?x3xbf16, #kiln.dims<[seq]>>
  return
}

//===----------------------------------------------------------------------===//
// Contractions, reductions, normalizations
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @matmul(
// CHECK-SAME: %[[X:.+]]: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, %[[W:.+]]: tensor<128x64xf32>, %[[W2:.+]]: tensor<32x128xf32>, %[[Q:.+]]: tensor<?x1x?x16xf32, #kiln.dims<[batch, seq]>>, %[[K:.+]]: tensor<8x16x?xf32, #kiln.dims<[seq]>>)
func.func @matmul(%x: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>,
                  %w: tensor<128x64xf32>, %w2: tensor<32x128xf32>,
                  %q: tensor<?x1x?x16xf32, #kiln.dims<[batch, seq]>>,
                  %k: tensor<8x16x?xf32, #kiln.dims<[seq]>>) {
  // x * W^T
  // CHECK: kiln.matmul %[[X]], %[[W]] {transpose_b} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<128x64xf32>) -> tensor<?x?x128xf32, #kiln.dims<[batch, seq]>>
  %0 = kiln.matmul %x, %w {transpose_b} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<128x64xf32>) -> tensor<?x?x128xf32, #kiln.dims<[batch, seq]>>
  // [64, 128] x [128, 64]
  // CHECK: kiln.matmul %[[W]], %[[W]] {transpose_a} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<64x64xf32>
  %1 = kiln.matmul %w, %w {transpose_a} : (tensor<128x64xf32>, tensor<128x64xf32>) -> tensor<64x64xf32>
  // [64, 128] x [128, 32]
  // CHECK: kiln.matmul %[[W]], %[[W2]] {transpose_a, transpose_b} : (tensor<128x64xf32>, tensor<32x128xf32>) -> tensor<64x32xf32>
  %2 = kiln.matmul %w, %w2 {transpose_a, transpose_b} : (tensor<128x64xf32>, tensor<32x128xf32>) -> tensor<64x32xf32>
  // Batch dims broadcast: [batch, 1] with [8].
  // CHECK: kiln.matmul %[[Q]], %[[K]] : (tensor<?x1x?x16xf32, #kiln.dims<[batch, seq]>>, tensor<8x16x?xf32, #kiln.dims<[seq]>>) -> tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>
  %3 = kiln.matmul %q, %k : (tensor<?x1x?x16xf32, #kiln.dims<[batch, seq]>>, tensor<8x16x?xf32, #kiln.dims<[seq]>>) -> tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>
  return
}

// CHECK-LABEL: func.func @reductions(
// CHECK-SAME: %[[X:.+]]: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, %[[I:.+]]: tensor<?x4xi32, #kiln.dims<[seq]>>)
func.func @reductions(%x: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>,
                      %i: tensor<?x4xi32, #kiln.dims<[seq]>>) {
  // CHECK: kiln.reduce_sum %[[X]] {axes = array<i64: 2>} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?xf32, #kiln.dims<[batch, seq]>>
  %0 = kiln.reduce_sum %x {axes = array<i64: 2>} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?xf32, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.reduce_sum %[[X]] {axes = array<i64: 0, 1>, keepdim} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<1x1x64xf32>
  %1 = kiln.reduce_sum %x {axes = array<i64: 0, 1>, keepdim} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<1x1x64xf32>
  // CHECK: kiln.reduce_mean %[[X]] {axes = array<i64: 2>, keepdim} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x1xf32, #kiln.dims<[batch, seq]>>
  %2 = kiln.reduce_mean %x {axes = array<i64: 2>, keepdim} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x1xf32, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.reduce_mean %[[X]] {axes = array<i64: 0, 1, 2>} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<f32>
  %3 = kiln.reduce_mean %x {axes = array<i64: 0, 1, 2>} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<f32>
  // CHECK: kiln.reduce_max %[[X]] {axes = array<i64: 1>} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x64xf32, #kiln.dims<[batch]>>
  %4 = kiln.reduce_max %x {axes = array<i64: 1>} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x64xf32, #kiln.dims<[batch]>>
  // CHECK: kiln.reduce_max %[[I]] {axes = array<i64: 1>, keepdim} : (tensor<?x4xi32, #kiln.dims<[seq]>>) -> tensor<?x1xi32, #kiln.dims<[seq]>>
  %5 = kiln.reduce_max %i {axes = array<i64: 1>, keepdim} : (tensor<?x4xi32, #kiln.dims<[seq]>>) -> tensor<?x1xi32, #kiln.dims<[seq]>>
  return
}

// CHECK-LABEL: func.func @softmax(
// CHECK-SAME: %[[X:.+]]: tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>)
func.func @softmax(%x: tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>) {
  // CHECK: kiln.softmax %[[X]] {axis = 3 : i64} : tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>
  %0 = kiln.softmax %x {axis = 3 : i64} : tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>
  // CHECK: kiln.log_softmax %[[X]] {axis = 1 : i64} : tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>
  %1 = kiln.log_softmax %x {axis = 1 : i64} : tensor<?x8x?x?xf32, #kiln.dims<[batch, seq, seq]>>
  return
}

// CHECK-LABEL: func.func @norms(
// CHECK-SAME: %[[X:.+]]: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, %[[W:.+]]: tensor<64xf32>, %[[B:.+]]: tensor<64xf32>, %[[W2:.+]]: tensor<?x64xf32, #kiln.dims<[seq]>>)
func.func @norms(%x: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>,
                 %w: tensor<64xf32>, %b: tensor<64xf32>,
                 %w2: tensor<?x64xf32, #kiln.dims<[seq]>>) {
  // CHECK: kiln.layer_norm %[[X]], %[[W]], %[[B]] {axis = 2 : i64, epsilon = 1.000000e-05 : f64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  %0 = kiln.layer_norm %x, %w, %b {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<64xf32>, tensor<64xf32>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.layer_norm %[[X]], %[[W]] {axis = 2 : i64, epsilon = 2.500000e-01 : f64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<64xf32>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  %1 = kiln.layer_norm %x, %w {axis = 2 : i64, epsilon = 0.25 : f64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<64xf32>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  // Normalizing over the last two dims, weight [seq, 64].
  // CHECK: kiln.layer_norm %[[X]], %[[W2]] {axis = 1 : i64, epsilon = 1.000000e-05 : f64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x64xf32, #kiln.dims<[seq]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  %2 = kiln.layer_norm %x, %w2 {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x64xf32, #kiln.dims<[seq]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.rms_norm %[[X]], %[[W]] {axis = 2 : i64, epsilon = 3.125000e-02 : f64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<64xf32>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  %3 = kiln.rms_norm %x, %w {axis = 2 : i64, epsilon = 3.125e-2 : f64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<64xf32>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  return
}

// CHECK-LABEL: func.func @scans(
// CHECK-SAME: %[[X:.+]]: tensor<?x?xi64, #kiln.dims<[batch, seq]>>, %[[M:.+]]: tensor<?x?xi1, #kiln.dims<[seq, seq]>>)
func.func @scans(%x: tensor<?x?xi64, #kiln.dims<[batch, seq]>>,
                 %m: tensor<?x?xi1, #kiln.dims<[seq, seq]>>) {
  // CHECK: kiln.cumsum %[[X]] {axis = 1 : i64} : tensor<?x?xi64, #kiln.dims<[batch, seq]>>
  %0 = kiln.cumsum %x {axis = 1 : i64} : tensor<?x?xi64, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.cumsum %[[X]] {axis = 0 : i64, exclusive, reverse} : tensor<?x?xi64, #kiln.dims<[batch, seq]>>
  %1 = kiln.cumsum %x {axis = 0 : i64, exclusive, reverse} : tensor<?x?xi64, #kiln.dims<[batch, seq]>>
  // The default diagonal is elided.
  // CHECK: kiln.trilu %[[M]] : tensor<?x?xi1, #kiln.dims<[seq, seq]>>
  %2 = kiln.trilu %m {diagonal = 0 : i64} : tensor<?x?xi1, #kiln.dims<[seq, seq]>>
  // CHECK: kiln.trilu %[[M]] {diagonal = 1 : i64, upper} : tensor<?x?xi1, #kiln.dims<[seq, seq]>>
  %3 = kiln.trilu %m {diagonal = 1 : i64, upper} : tensor<?x?xi1, #kiln.dims<[seq, seq]>>
  // CHECK: kiln.trilu %[[X]] {diagonal = -1 : i64} : tensor<?x?xi64, #kiln.dims<[batch, seq]>>
  %4 = kiln.trilu %x {diagonal = -1 : i64} : tensor<?x?xi64, #kiln.dims<[batch, seq]>>
  return
}

// CHECK-LABEL: func.func @cross_entropy(
// CHECK-SAME: %[[L:.+]]: tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, %[[Y:.+]]: tensor<?xi64, #kiln.dims<[batch*seq]>>, %[[Y32:.+]]: tensor<?xi32>)
func.func @cross_entropy(%logits: tensor<?x32000xf32, #kiln.dims<[batch*seq]>>,
                         %labels: tensor<?xi64, #kiln.dims<[batch*seq]>>,
                         %labels32: tensor<?xi32>) {
  // Defaults (mean, ignore_index -100) are elided.
  // CHECK: kiln.cross_entropy %[[L]], %[[Y]] : (tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<f32>
  %0 = kiln.cross_entropy %logits, %labels : (tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<f32>
  // CHECK: kiln.cross_entropy %[[L]], %[[Y]] : (tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<f32>
  %1 = kiln.cross_entropy %logits, %labels {ignore_index = -100 : i64, reduction = #kiln.reduction<mean>} : (tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<f32>
  // CHECK: kiln.cross_entropy %[[L]], %[[Y]] {ignore_index = 0 : i64, reduction = #kiln.reduction<sum>} : (tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<f32>
  %2 = kiln.cross_entropy %logits, %labels {ignore_index = 0 : i64, reduction = #kiln.reduction<sum>} : (tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<f32>
  // CHECK: kiln.cross_entropy %[[L]], %[[Y]] {reduction = #kiln.reduction<none>} : (tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<?xf32, #kiln.dims<[batch*seq]>>
  %3 = kiln.cross_entropy %logits, %labels {reduction = #kiln.reduction<none>} : (tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<?xf32, #kiln.dims<[batch*seq]>>
  // i32 labels whose rows are not known yet.
  // CHECK: kiln.cross_entropy %[[L]], %[[Y32]] {reduction = #kiln.reduction<none>} : (tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, tensor<?xi32>) -> tensor<?xf32, #kiln.dims<[batch*seq]>>
  %4 = kiln.cross_entropy %logits, %labels32 {reduction = #kiln.reduction<none>} : (tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, tensor<?xi32>) -> tensor<?xf32, #kiln.dims<[batch*seq]>>
  return
}

// CHECK-LABEL: func.func @attention(
// CHECK-SAME: %[[Q:.+]]: tensor<?x32x?x128xbf16, #kiln.dims<[batch, seq]>>, %[[K:.+]]: tensor<?x8x?x128xbf16, #kiln.dims<[batch, seq]>>, %[[V:.+]]: tensor<?x8x?x64xbf16, #kiln.dims<[batch, seq]>>, %[[PAD:.+]]: tensor<?x1x1x?xi1, #kiln.dims<[batch, seq]>>, %[[BIAS:.+]]: tensor<?x?xbf16, #kiln.dims<[seq, seq]>>)
func.func @attention(%q: tensor<?x32x?x128xbf16, #kiln.dims<[batch, seq]>>,
                     %k: tensor<?x8x?x128xbf16, #kiln.dims<[batch, seq]>>,
                     %v: tensor<?x8x?x64xbf16, #kiln.dims<[batch, seq]>>,
                     %pad: tensor<?x1x1x?xi1, #kiln.dims<[batch, seq]>>,
                     %bias: tensor<?x?xbf16, #kiln.dims<[seq, seq]>>) {
  // Grouped-query (32 query heads over 8 kv heads), causal, no mask; the
  // output takes v's head_dim.
  // CHECK: kiln.attention %[[Q]], %[[K]], %[[V]] {causal} : (tensor<?x32x?x128xbf16, #kiln.dims<[batch, seq]>>, tensor<?x8x?x128xbf16, #kiln.dims<[batch, seq]>>, tensor<?x8x?x64xbf16, #kiln.dims<[batch, seq]>>) -> tensor<?x32x?x64xbf16, #kiln.dims<[batch, seq]>>
  %0 = kiln.attention %q, %k, %v {causal} : (tensor<?x32x?x128xbf16, #kiln.dims<[batch, seq]>>, tensor<?x8x?x128xbf16, #kiln.dims<[batch, seq]>>, tensor<?x8x?x64xbf16, #kiln.dims<[batch, seq]>>) -> tensor<?x32x?x64xbf16, #kiln.dims<[batch, seq]>>
  // Boolean padding mask and an explicit scale.
  // CHECK: kiln.attention %[[Q]], %[[K]], %[[V]], %[[PAD]] {scale = 1.250000e-01 : f64} : (tensor<?x32x?x128xbf16, #kiln.dims<[batch, seq]>>, tensor<?x8x?x128xbf16, #kiln.dims<[batch, seq]>>, tensor<?x8x?x64xbf16, #kiln.dims<[batch, seq]>>, tensor<?x1x1x?xi1, #kiln.dims<[batch, seq]>>) -> tensor<?x32x?x64xbf16, #kiln.dims<[batch, seq]>>
  %1 = kiln.attention %q, %k, %v, %pad {scale = 0.125 : f64} : (tensor<?x32x?x128xbf16, #kiln.dims<[batch, seq]>>, tensor<?x8x?x128xbf16, #kiln.dims<[batch, seq]>>, tensor<?x8x?x64xbf16, #kiln.dims<[batch, seq]>>, tensor<?x1x1x?xi1, #kiln.dims<[batch, seq]>>) -> tensor<?x32x?x64xbf16, #kiln.dims<[batch, seq]>>
  // Additive float mask of rank 2, causal and scaled together.
  // CHECK: kiln.attention %[[Q]], %[[K]], %[[V]], %[[BIAS]] {causal, scale = 2.500000e-01 : f64}
  %2 = kiln.attention %q, %k, %v, %bias {causal, scale = 0.25 : f64} : (tensor<?x32x?x128xbf16, #kiln.dims<[batch, seq]>>, tensor<?x8x?x128xbf16, #kiln.dims<[batch, seq]>>, tensor<?x8x?x64xbf16, #kiln.dims<[batch, seq]>>, tensor<?x?xbf16, #kiln.dims<[seq, seq]>>) -> tensor<?x32x?x64xbf16, #kiln.dims<[batch, seq]>>
  return
}

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @gathers(
// CHECK-SAME: %[[E:.+]]: tensor<32000x768xf32>, %[[IDS:.+]]: tensor<?x?xi64, #kiln.dims<[batch, seq]>>, %[[X:.+]]: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, %[[I4:.+]]: tensor<4xi32>, %[[I0:.+]]: tensor<i64>)
func.func @gathers(%emb: tensor<32000x768xf32>,
                   %ids: tensor<?x?xi64, #kiln.dims<[batch, seq]>>,
                   %x: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>,
                   %i4: tensor<4xi32>, %i0: tensor<i64>) {
  // Embedding lookup: data[:0] + indices + data[1:].
  // CHECK: kiln.gather %[[E]], %[[IDS]] {axis = 0 : i64} : (tensor<32000x768xf32>, tensor<?x?xi64, #kiln.dims<[batch, seq]>>) -> tensor<?x?x768xf32, #kiln.dims<[batch, seq]>>
  %0 = kiln.gather %emb, %ids {axis = 0 : i64} : (tensor<32000x768xf32>, tensor<?x?xi64, #kiln.dims<[batch, seq]>>) -> tensor<?x?x768xf32, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.gather %[[X]], %[[I4]] {axis = 1 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<4xi32>) -> tensor<?x4x64xf32, #kiln.dims<[batch]>>
  %1 = kiln.gather %x, %i4 {axis = 1 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<4xi32>) -> tensor<?x4x64xf32, #kiln.dims<[batch]>>
  // A scalar index drops the dim.
  // CHECK: kiln.gather %[[X]], %[[I0]] {axis = 1 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<i64>) -> tensor<?x64xf32, #kiln.dims<[batch]>>
  %2 = kiln.gather %x, %i0 {axis = 1 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<i64>) -> tensor<?x64xf32, #kiln.dims<[batch]>>
  return
}

// CHECK-LABEL: func.func @gather_elements(
// CHECK-SAME: %[[D:.+]]: tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, %[[I:.+]]: tensor<?x1xi64, #kiln.dims<[batch*seq]>>)
func.func @gather_elements(%d: tensor<?x32000xf32, #kiln.dims<[batch*seq]>>,
                           %i: tensor<?x1xi64, #kiln.dims<[batch*seq]>>) {
  // CHECK: kiln.gather_elements %[[D]], %[[I]] {axis = 1 : i64} : (tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, tensor<?x1xi64, #kiln.dims<[batch*seq]>>) -> tensor<?x1xf32, #kiln.dims<[batch*seq]>>
  %0 = kiln.gather_elements %d, %i {axis = 1 : i64} : (tensor<?x32000xf32, #kiln.dims<[batch*seq]>>, tensor<?x1xi64, #kiln.dims<[batch*seq]>>) -> tensor<?x1xf32, #kiln.dims<[batch*seq]>>
  return
}

// CHECK-LABEL: func.func @gather_nd(
// CHECK-SAME: %[[D:.+]]: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, %[[I2:.+]]: tensor<5x2xi64>, %[[IB:.+]]: tensor<?x3x1xi32, #kiln.dims<[batch]>>)
func.func @gather_nd(%d: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>,
                     %i2: tensor<5x2xi64>,
                     %ib: tensor<?x3x1xi32, #kiln.dims<[batch]>>) {
  // Depth 2 indexes (batch, seq); the default batch_dims is elided.
  // CHECK: kiln.gather_nd %[[D]], %[[I2]] : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<5x2xi64>) -> tensor<5x64xf32>
  %0 = kiln.gather_nd %d, %i2 {batch_dims = 0 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<5x2xi64>) -> tensor<5x64xf32>
  // One batch dim, depth 1 indexes seq.
  // CHECK: kiln.gather_nd %[[D]], %[[IB]] {batch_dims = 1 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x3x1xi32, #kiln.dims<[batch]>>) -> tensor<?x3x64xf32, #kiln.dims<[batch]>>
  %1 = kiln.gather_nd %d, %ib {batch_dims = 1 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x3x1xi32, #kiln.dims<[batch]>>) -> tensor<?x3x64xf32, #kiln.dims<[batch]>>
  return
}

// CHECK-LABEL: func.func @scatter_add(
// CHECK-SAME: %[[D:.+]]: tensor<32000x768xf32>, %[[I:.+]]: tensor<?x?xi64, #kiln.dims<[batch, seq]>>, %[[U:.+]]: tensor<?x?x768xf32, #kiln.dims<[batch, seq]>>)
func.func @scatter_add(%d: tensor<32000x768xf32>,
                       %i: tensor<?x?xi64, #kiln.dims<[batch, seq]>>,
                       %u: tensor<?x?x768xf32, #kiln.dims<[batch, seq]>>) {
  // The embedding gradient: the transpose of gather.
  // CHECK: kiln.scatter_add %[[D]], %[[I]], %[[U]] {axis = 0 : i64} : (tensor<32000x768xf32>, tensor<?x?xi64, #kiln.dims<[batch, seq]>>, tensor<?x?x768xf32, #kiln.dims<[batch, seq]>>) -> tensor<32000x768xf32>
  %0 = kiln.scatter_add %d, %i, %u {axis = 0 : i64} : (tensor<32000x768xf32>, tensor<?x?xi64, #kiln.dims<[batch, seq]>>, tensor<?x?x768xf32, #kiln.dims<[batch, seq]>>) -> tensor<32000x768xf32>
  return
}

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @reshape(
// CHECK-SAME: %[[X:.+]]: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, %[[S:.+]]: tensor<2x3x4xi8>)
func.func @reshape(%x: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>,
                   %s: tensor<2x3x4xi8>) {
  // CHECK: %[[FLAT:.+]] = kiln.reshape %[[X]] : tensor<?x?x64xf32, #kiln.dims<[batch, seq]>> -> tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  %0 = kiln.reshape %x : tensor<?x?x64xf32, #kiln.dims<[batch, seq]>> -> tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  // CHECK: kiln.reshape %[[FLAT]] : tensor<?x64xf32, #kiln.dims<[batch*seq]>> -> tensor<?x?x8x8xf32, #kiln.dims<[batch, seq]>>
  %1 = kiln.reshape %0 : tensor<?x64xf32, #kiln.dims<[batch*seq]>> -> tensor<?x?x8x8xf32, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.reshape %[[S]] : tensor<2x3x4xi8> -> tensor<6x4xi8>
  %2 = kiln.reshape %s : tensor<2x3x4xi8> -> tensor<6x4xi8>
  // CHECK: kiln.reshape %[[S]] : tensor<2x3x4xi8> -> tensor<24xi8>
  %3 = kiln.reshape %s : tensor<2x3x4xi8> -> tensor<24xi8>
  // The new shape may still be unknown.
  // CHECK: kiln.reshape %[[X]] : tensor<?x?x64xf32, #kiln.dims<[batch, seq]>> -> tensor<?x?xf32>
  %4 = kiln.reshape %x : tensor<?x?x64xf32, #kiln.dims<[batch, seq]>> -> tensor<?x?xf32>
  return
}

// CHECK-LABEL: func.func @transpose(
// CHECK-SAME: %[[X:.+]]: tensor<?x?x8x16xf32, #kiln.dims<[batch, seq]>>)
func.func @transpose(%x: tensor<?x?x8x16xf32, #kiln.dims<[batch, seq]>>) {
  // CHECK: kiln.transpose %[[X]] {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x8x16xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x8x?x16xf32, #kiln.dims<[batch, seq]>>
  %0 = kiln.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x?x8x16xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x8x?x16xf32, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.transpose %[[X]] {perm = array<i64: 3, 1, 0, 2>} : (tensor<?x?x8x16xf32, #kiln.dims<[batch, seq]>>) -> tensor<16x?x?x8xf32, #kiln.dims<[seq, batch]>>
  %1 = kiln.transpose %x {perm = array<i64: 3, 1, 0, 2>} : (tensor<?x?x8x16xf32, #kiln.dims<[batch, seq]>>) -> tensor<16x?x?x8xf32, #kiln.dims<[seq, batch]>>
  return
}

// Starts are size expressions; the result type carries the lengths.
// CHECK-LABEL: func.func @slice(
// CHECK-SAME: %[[X:.+]]: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, %[[S:.+]]: tensor<10xi32>)
func.func @slice(%x: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>,
                 %s: tensor<10xi32>) {
  // Dropping the first token: seq - 1 rows from 1.
  // CHECK: kiln.slice %[[X]] {starts = #kiln.dims<[0, 1, 0]>, steps = array<i64: 1, 1, 1>} : tensor<?x?x64xf32, #kiln.dims<[batch, seq]>> -> tensor<?x?x32xf32, #kiln.dims<[batch, seq - 1]>>
  %0 = kiln.slice %x {starts = #kiln.dims<[0, 1, 0]>, steps = array<i64: 1, 1, 1>} : tensor<?x?x64xf32, #kiln.dims<[batch, seq]>> -> tensor<?x?x32xf32, #kiln.dims<[batch, seq - 1]>>
  // The last 4 tokens start at a symbolic index; the batch stride is 2.
  // CHECK: kiln.slice %[[X]] {starts = #kiln.dims<[0, seq - 4, 32]>, steps = array<i64: 2, 1, 1>} : tensor<?x?x64xf32, #kiln.dims<[batch, seq]>> -> tensor<?x4x32xf32>
  %1 = kiln.slice %x {starts = #kiln.dims<[0, seq - 4, 32]>, steps = array<i64: 2, 1, 1>} : tensor<?x?x64xf32, #kiln.dims<[batch, seq]>> -> tensor<?x4x32xf32>
  // Static strides: from 1 step 2 takes 5, from 9 step -1 reverses all 10.
  // CHECK: kiln.slice %[[S]] {starts = #kiln.dims<[1]>, steps = array<i64: 2>} : tensor<10xi32> -> tensor<5xi32>
  %2 = kiln.slice %s {starts = #kiln.dims<[1]>, steps = array<i64: 2>} : tensor<10xi32> -> tensor<5xi32>
  // CHECK: kiln.slice %[[S]] {starts = #kiln.dims<[9]>, steps = array<i64: -1>} : tensor<10xi32> -> tensor<10xi32>
  %3 = kiln.slice %s {starts = #kiln.dims<[9]>, steps = array<i64: -1>} : tensor<10xi32> -> tensor<10xi32>
  return
}

// CHECK-LABEL: func.func @concat(
// CHECK-SAME: %[[A:.+]]: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, %[[B:.+]]: tensor<?x1x64xf32, #kiln.dims<[batch]>>, %[[C:.+]]: tensor<?x?x64xf32, #kiln.dims<[batch, past]>>)
func.func @concat(%a: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>,
                  %b: tensor<?x1x64xf32, #kiln.dims<[batch]>>,
                  %c: tensor<?x?x64xf32, #kiln.dims<[batch, past]>>) {
  // CHECK: kiln.concat %[[A]], %[[B]] {axis = 1 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x1x64xf32, #kiln.dims<[batch]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq + 1]>>
  %0 = kiln.concat %a, %b {axis = 1 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x1x64xf32, #kiln.dims<[batch]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq + 1]>>
  // CHECK: kiln.concat %[[C]], %[[A]], %[[A]] {axis = 1 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, past]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, past + 2*seq]>>
  %1 = kiln.concat %c, %a, %a {axis = 1 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, past]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, past + 2*seq]>>
  // CHECK: kiln.concat %[[A]], %[[A]] {axis = 2 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x128xf32, #kiln.dims<[batch, seq]>>
  %2 = kiln.concat %a, %a {axis = 2 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x128xf32, #kiln.dims<[batch, seq]>>
  return
}

// CHECK-LABEL: func.func @split(
// CHECK-SAME: %[[X:.+]]: tensor<?x?x192xf32, #kiln.dims<[batch, seq]>>, %[[Y:.+]]: tensor<?x?xf32, #kiln.dims<[batch, 2*seq]>>)
func.func @split(%x: tensor<?x?x192xf32, #kiln.dims<[batch, seq]>>,
                 %y: tensor<?x?xf32, #kiln.dims<[batch, 2*seq]>>) {
  // Fused qkv projection into q, k, v.
  // CHECK: %{{.+}}:3 = kiln.split %[[X]] {axis = 2 : i64} : (tensor<?x?x192xf32, #kiln.dims<[batch, seq]>>) -> (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>)
  %0:3 = kiln.split %x {axis = 2 : i64} : (tensor<?x?x192xf32, #kiln.dims<[batch, seq]>>) -> (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>)
  // Uneven static pieces and symbolic halves.
  // CHECK: kiln.split %[[X]] {axis = 2 : i64} : (tensor<?x?x192xf32, #kiln.dims<[batch, seq]>>) -> (tensor<?x?x128xf32, #kiln.dims<[batch, seq]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>)
  %1:2 = kiln.split %x {axis = 2 : i64} : (tensor<?x?x192xf32, #kiln.dims<[batch, seq]>>) -> (tensor<?x?x128xf32, #kiln.dims<[batch, seq]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>)
  // CHECK: kiln.split %[[Y]] {axis = 1 : i64} : (tensor<?x?xf32, #kiln.dims<[batch, 2*seq]>>) -> (tensor<?x?xf32, #kiln.dims<[batch, seq]>>, tensor<?x?xf32, #kiln.dims<[batch, seq]>>)
  %2:2 = kiln.split %y {axis = 1 : i64} : (tensor<?x?xf32, #kiln.dims<[batch, 2*seq]>>) -> (tensor<?x?xf32, #kiln.dims<[batch, seq]>>, tensor<?x?xf32, #kiln.dims<[batch, seq]>>)
  return
}

// CHECK-LABEL: func.func @expand(
// CHECK-SAME: %[[X:.+]]: tensor<1x?x1xf32, #kiln.dims<[seq]>>, %[[B:.+]]: tensor<64xf32>)
func.func @expand(%x: tensor<1x?x1xf32, #kiln.dims<[seq]>>, %b: tensor<64xf32>) {
  // CHECK: kiln.expand %[[X]] : tensor<1x?x1xf32, #kiln.dims<[seq]>> -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  %0 = kiln.expand %x : tensor<1x?x1xf32, #kiln.dims<[seq]>> -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  // Raising the rank prepends dims.
  // CHECK: kiln.expand %[[B]] : tensor<64xf32> -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  %1 = kiln.expand %b : tensor<64xf32> -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  return
}

// CHECK-LABEL: func.func @squeeze_unsqueeze(
// CHECK-SAME: %[[X:.+]]: tensor<?x1x?x1xf32, #kiln.dims<[batch, seq]>>, %[[Y:.+]]: tensor<?x?xi64, #kiln.dims<[batch, seq]>>)
func.func @squeeze_unsqueeze(%x: tensor<?x1x?x1xf32, #kiln.dims<[batch, seq]>>,
                             %y: tensor<?x?xi64, #kiln.dims<[batch, seq]>>) {
  // CHECK: kiln.squeeze %[[X]] {axes = array<i64: 1, 3>} : (tensor<?x1x?x1xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?xf32, #kiln.dims<[batch, seq]>>
  %0 = kiln.squeeze %x {axes = array<i64: 1, 3>} : (tensor<?x1x?x1xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?xf32, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.squeeze %[[X]] {axes = array<i64: 3>} : (tensor<?x1x?x1xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x1x?xf32, #kiln.dims<[batch, seq]>>
  %1 = kiln.squeeze %x {axes = array<i64: 3>} : (tensor<?x1x?x1xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x1x?xf32, #kiln.dims<[batch, seq]>>
  // Axes are positions in the result.
  // CHECK: kiln.unsqueeze %[[Y]] {axes = array<i64: 1, 2>} : (tensor<?x?xi64, #kiln.dims<[batch, seq]>>) -> tensor<?x1x1x?xi64, #kiln.dims<[batch, seq]>>
  %2 = kiln.unsqueeze %y {axes = array<i64: 1, 2>} : (tensor<?x?xi64, #kiln.dims<[batch, seq]>>) -> tensor<?x1x1x?xi64, #kiln.dims<[batch, seq]>>
  // CHECK: kiln.unsqueeze %[[Y]] {axes = array<i64: 0, 3>} : (tensor<?x?xi64, #kiln.dims<[batch, seq]>>) -> tensor<1x?x?x1xi64, #kiln.dims<[batch, seq]>>
  %3 = kiln.unsqueeze %y {axes = array<i64: 0, 3>} : (tensor<?x?xi64, #kiln.dims<[batch, seq]>>) -> tensor<1x?x?x1xi64, #kiln.dims<[batch, seq]>>
  return
}

// CHECK-LABEL: func.func @pad(
// CHECK-SAME: %[[X:.+]]: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>)
func.func @pad(%x: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) {
  // The default value 0.0 is elided.
  // CHECK: kiln.pad %[[X]] {pads = array<i64: 0, 1, 0, 0, 2, 0>} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq + 3]>>
  %0 = kiln.pad %x {pads = array<i64: 0, 1, 0, 0, 2, 0>} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq + 3]>>
  // CHECK: kiln.pad %[[X]] {pads = array<i64: 0, 0, 4, 0, 0, 4>, value = -1.000000e+09 : f64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x72xf32, #kiln.dims<[batch, seq]>>
  %1 = kiln.pad %x {pads = array<i64: 0, 0, 4, 0, 0, 4>, value = -1.0e9 : f64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x72xf32, #kiln.dims<[batch, seq]>>
  return
}

//===----------------------------------------------------------------------===//
// Unmapped ONNX nodes
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @opaque(
// CHECK-SAME: %[[A:.+]]: tensor<?x4xf32, #kiln.dims<[boxes]>>, %[[B:.+]]: tensor<?xf32, #kiln.dims<[boxes]>>)
func.func @opaque(%a: tensor<?x4xf32, #kiln.dims<[boxes]>>,
                  %b: tensor<?xf32, #kiln.dims<[boxes]>>) {
  // CHECK: %[[N:.+]] = kiln.opaque "NonMaxSuppression"(%[[A]], %[[B]]) {domain = "", node_name = "nms_0", onnx_attributes = {center_point_box = 0 : i64}} : (tensor<?x4xf32, #kiln.dims<[boxes]>>, tensor<?xf32, #kiln.dims<[boxes]>>) -> tensor<?x3xi64>
  %0 = kiln.opaque "NonMaxSuppression"(%a, %b) {domain = "", node_name = "nms_0", onnx_attributes = {center_point_box = 0 : i64}} : (tensor<?x4xf32, #kiln.dims<[boxes]>>, tensor<?xf32, #kiln.dims<[boxes]>>) -> tensor<?x3xi64>
  // No inputs, several results, a custom domain.
  // CHECK: %{{.+}}:2 = kiln.opaque "Rng"() {domain = "com.example", node_name = "", onnx_attributes = {}} : () -> (tensor<2xui8>, i64)
  %1:2 = kiln.opaque "Rng"() {domain = "com.example", node_name = "", onnx_attributes = {}} : () -> (tensor<2xui8>, i64)
  // CHECK: kiln.opaque "Identity"(%[[N]])
  %2 = kiln.opaque "Identity"(%0) {domain = "", node_name = "id", onnx_attributes = {}} : (tensor<?x3xi64>) -> tensor<?x3xi64>
  return
}

//===----------------------------------------------------------------------===//
// Backward ops
//===----------------------------------------------------------------------===//

// CHECK-LABEL: func.func @backward_ops
// CHECK: kiln.softmax_grad %{{.+}}, %{{.+}} {axis = 1 : i64} : tensor<?x8xf32, #kiln.dims<[n]>>
// CHECK: kiln.log_softmax_grad %{{.+}}, %{{.+}} {axis = 1 : i64} : tensor<?x8xf32, #kiln.dims<[n]>>
// CHECK: %{{.+}}, %{{.+}}, %{{.+}} = kiln.layer_norm_grad %{{.+}}, %{{.+}}, %{{.+}} {axis = 1 : i64, epsilon = 1.000000e-05 : f64}
// CHECK: %{{.+}}, %{{.+}} = kiln.rms_norm_grad %{{.+}}, %{{.+}}, %{{.+}} {axis = 1 : i64, epsilon = 9.99{{[0-9]*}}E-7 : f64}
// CHECK: kiln.cross_entropy_grad %{{.+}}, %{{.+}}, %{{.+}} {ignore_index = -1 : i64, reduction = #kiln.reduction<sum>}
// CHECK: = kiln.attention_grad %{{.+}}, %{{.+}}, %{{.+}} mask %{{.+}} grad %{{.+}} {causal, scale = 2.500000e-01 : f64}
// CHECK: kiln.attention_grad %{{.+}}, %{{.+}}, %{{.+}} grad %{{.+}} :
func.func @backward_ops(%y: tensor<?x8xf32, #kiln.dims<[n]>>, %dy: tensor<?x8xf32, #kiln.dims<[n]>>,
                        %w: tensor<8xf32>, %labels: tensor<?xi64, #kiln.dims<[n]>>, %dl: tensor<f32>,
                        %q: tensor<2x4x6x16xf32>, %k: tensor<2x2x6x16xf32>, %v: tensor<2x2x6x16xf32>,
                        %m: tensor<6x6xi1>, %do: tensor<2x4x6x16xf32>) {
  %0 = kiln.softmax_grad %y, %dy {axis = 1 : i64} : tensor<?x8xf32, #kiln.dims<[n]>>
  %1 = kiln.log_softmax_grad %y, %dy {axis = 1 : i64} : tensor<?x8xf32, #kiln.dims<[n]>>
  %2:3 = kiln.layer_norm_grad %y, %w, %dy {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<8xf32>, tensor<?x8xf32, #kiln.dims<[n]>>) -> (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<8xf32>, tensor<8xf32>)
  %3:2 = kiln.rms_norm_grad %y, %w, %dy {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<8xf32>, tensor<?x8xf32, #kiln.dims<[n]>>) -> (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<8xf32>)
  %4 = kiln.cross_entropy_grad %y, %labels, %dl {ignore_index = -1 : i64, reduction = #kiln.reduction<sum>} : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<?xi64, #kiln.dims<[n]>>, tensor<f32>) -> tensor<?x8xf32, #kiln.dims<[n]>>
  %5:3 = kiln.attention_grad %q, %k, %v mask %m grad %do {causal, scale = 0.25 : f64} : (tensor<2x4x6x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x16xf32>, tensor<6x6xi1>, tensor<2x4x6x16xf32>) -> (tensor<2x4x6x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x16xf32>)
  %6:3 = kiln.attention_grad %q, %k, %v grad %do : (tensor<2x4x6x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x16xf32>, tensor<2x4x6x16xf32>) -> (tensor<2x4x6x16xf32>, tensor<2x2x6x16xf32>, tensor<2x2x6x16xf32>)
  return
}

// CHECK-LABEL: func.func @random_and_quant_ops
// CHECK: kiln.dropout %{{.+}}, %{{.+}} {p = 1.000000e-01 : f64, stream = 3 : i64} : tensor<?x8xf32, #kiln.dims<[n]>>, tensor<i64>
// CHECK: kiln.random_uniform %{{.+}} {high = 5.000000e-01 : f64, low = -5.000000e-01 : f64, stream = 0 : i64} : tensor<i64> -> tensor<4x8xbf16>
// CHECK: kiln.nf4_quantize %{{.+}} : tensor<10x13xf32> -> tensor<65xui8>, tensor<3xf32>
// CHECK: kiln.nf4_dequantize %{{.+}}, %{{.+}} {block_size = 32 : i64} : tensor<65xui8>, tensor<5xf32> -> tensor<10x13xbf16>
func.func @random_and_quant_ops(%x: tensor<?x8xf32, #kiln.dims<[n]>>, %seed: tensor<i64>,
                                %w: tensor<10x13xf32>, %c: tensor<65xui8>, %s: tensor<5xf32>) {
  %0 = kiln.dropout %x, %seed {p = 0.1 : f64, stream = 3 : i64} : tensor<?x8xf32, #kiln.dims<[n]>>, tensor<i64>
  %1 = kiln.random_uniform %seed {low = -0.5 : f64, high = 0.5 : f64, stream = 0 : i64} : tensor<i64> -> tensor<4x8xbf16>
  %2:2 = kiln.nf4_quantize %w : tensor<10x13xf32> -> tensor<65xui8>, tensor<3xf32>
  %3 = kiln.nf4_dequantize %c, %s {block_size = 32 : i64} : tensor<65xui8>, tensor<5xf32> -> tensor<10x13xbf16>
  return
}

// CHECK-LABEL: func.func @blockwise_8bit
// CHECK: kiln.quantize_blockwise_8bit %{{.+}} : tensor<300xf32> -> tensor<300xui8>, tensor<2xf32>
// CHECK: kiln.dequantize_blockwise_8bit %{{.+}}, %{{.+}} {block_size = 100 : i64} : tensor<300xui8>, tensor<3xf32> -> tensor<300xf32>
func.func @blockwise_8bit(%x: tensor<300xf32>, %c: tensor<300xui8>, %s: tensor<3xf32>) {
  %0:2 = kiln.quantize_blockwise_8bit %x : tensor<300xf32> -> tensor<300xui8>, tensor<2xf32>
  %1 = kiln.dequantize_blockwise_8bit %c, %s {block_size = 100 : i64} : tensor<300xui8>, tensor<3xf32> -> tensor<300xf32>
  return
}
