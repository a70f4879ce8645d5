// RUN: kiln-opt %s --canonicalize --split-input-file | FileCheck %s

// Equal constants are uniqued and unused ones go away.
// CHECK-LABEL: func.func @constant(
// CHECK-NEXT: %[[C:.+]] = kiln.constant dense<2.000000e+00> : tensor<4xf32>
// CHECK-NEXT: return %[[C]], %[[C]]
func.func @constant() -> (tensor<4xf32>, tensor<4xf32>) {
  %0 = kiln.constant dense<2.0> : tensor<4xf32>
  %1 = kiln.constant dense<2.0> : tensor<4xf32>
  %2 = kiln.constant dense<3.0> : tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// CHECK-LABEL: func.func @add_zero(
// CHECK-SAME: %[[X:.+]]: tensor<?x64xf32, #kiln.dims<[seq]>>, %[[I:.+]]: tensor<4xi32>)
// CHECK-NOT: kiln.add
// CHECK: return %[[X]], %[[X]], %[[I]]
func.func @add_zero(%x: tensor<?x64xf32, #kiln.dims<[seq]>>, %i: tensor<4xi32>)
    -> (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<4xi32>) {
  %zero = kiln.constant dense<0.0> : tensor<64xf32>
  %izero = kiln.constant dense<0> : tensor<i32>
  %0 = kiln.add %x, %zero : (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<64xf32>) -> tensor<?x64xf32, #kiln.dims<[seq]>>
  // Zero on the left folds too (add commutes).
  %1 = kiln.add %zero, %x : (tensor<64xf32>, tensor<?x64xf32, #kiln.dims<[seq]>>) -> tensor<?x64xf32, #kiln.dims<[seq]>>
  %2 = kiln.add %i, %izero : (tensor<4xi32>, tensor<i32>) -> tensor<4xi32>
  return %0, %1, %2 : tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<4xi32>
}

// -----

// Adding zero that broadcasts x to a larger shape is not the identity, and
// neither is a zero that is not a splat or a constant that is not zero.
// CHECK-LABEL: func.func @add_zero_negative(
// CHECK-SAME: %[[X:.+]]: tensor<4xf32>)
// CHECK-DAG: %[[Z:.+]] = kiln.constant dense<0.000000e+00> : tensor<2x4xf32>
// CHECK-DAG: %[[NZ:.+]] = kiln.constant dense<[0.000000e+00, 1.000000e+00, 0.000000e+00, 0.000000e+00]> : tensor<4xf32>
// CHECK-DAG: %[[ONE:.+]] = kiln.constant dense<1.000000e+00> : tensor<4xf32>
// CHECK: %[[A:.+]] = kiln.add %[[X]], %[[Z]]
// CHECK: %[[B:.+]] = kiln.add %[[X]], %[[NZ]]
// CHECK: %[[C:.+]] = kiln.add %[[X]], %[[ONE]]
// CHECK: return %[[A]], %[[B]], %[[C]]
func.func @add_zero_negative(%x: tensor<4xf32>) -> (tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %zero = kiln.constant dense<0.0> : tensor<2x4xf32>
  %nz = kiln.constant dense<[0.0, 1.0, 0.0, 0.0]> : tensor<4xf32>
  %one = kiln.constant dense<1.0> : tensor<4xf32>
  %0 = kiln.add %x, %zero : (tensor<4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %1 = kiln.add %x, %nz : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %2 = kiln.add %x, %one : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %0, %1, %2 : tensor<2x4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// x - 0 folds; 0 - x is a negation and stays.
// CHECK-LABEL: func.func @sub_zero(
// CHECK-SAME: %[[X:.+]]: tensor<?xi64, #kiln.dims<[seq]>>)
// CHECK: %[[Z:.+]] = kiln.constant dense<0> : tensor<i64>
// CHECK: %[[N:.+]] = kiln.sub %[[Z]], %[[X]]
// CHECK: return %[[X]], %[[N]]
func.func @sub_zero(%x: tensor<?xi64, #kiln.dims<[seq]>>) -> (tensor<?xi64, #kiln.dims<[seq]>>, tensor<?xi64, #kiln.dims<[seq]>>) {
  %zero = kiln.constant dense<0> : tensor<i64>
  %0 = kiln.sub %x, %zero : (tensor<?xi64, #kiln.dims<[seq]>>, tensor<i64>) -> tensor<?xi64, #kiln.dims<[seq]>>
  %1 = kiln.sub %zero, %x : (tensor<i64>, tensor<?xi64, #kiln.dims<[seq]>>) -> tensor<?xi64, #kiln.dims<[seq]>>
  return %0, %1 : tensor<?xi64, #kiln.dims<[seq]>>, tensor<?xi64, #kiln.dims<[seq]>>
}

// -----

// CHECK-LABEL: func.func @mul_one(
// CHECK-SAME: %[[X:.+]]: tensor<?x?xbf16, #kiln.dims<[batch, seq]>>)
// CHECK-NOT: kiln.mul
// CHECK: return %[[X]], %[[X]]
func.func @mul_one(%x: tensor<?x?xbf16, #kiln.dims<[batch, seq]>>) -> (tensor<?x?xbf16, #kiln.dims<[batch, seq]>>, tensor<?x?xbf16, #kiln.dims<[batch, seq]>>) {
  %one = kiln.constant dense<1.0> : tensor<1x1xbf16>
  %0 = kiln.mul %x, %one : (tensor<?x?xbf16, #kiln.dims<[batch, seq]>>, tensor<1x1xbf16>) -> tensor<?x?xbf16, #kiln.dims<[batch, seq]>>
  %1 = kiln.mul %one, %x : (tensor<1x1xbf16>, tensor<?x?xbf16, #kiln.dims<[batch, seq]>>) -> tensor<?x?xbf16, #kiln.dims<[batch, seq]>>
  return %0, %1 : tensor<?x?xbf16, #kiln.dims<[batch, seq]>>, tensor<?x?xbf16, #kiln.dims<[batch, seq]>>
}

// -----

// Multiplying by zero or two is no identity.
// CHECK-LABEL: func.func @mul_negative(
// CHECK-SAME: %[[X:.+]]: tensor<4xf32>)
// CHECK: %[[A:.+]] = kiln.mul %[[X]], %{{.+}}
// CHECK: %[[B:.+]] = kiln.mul %[[X]], %{{.+}}
// CHECK: return %[[A]], %[[B]]
func.func @mul_negative(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %zero = kiln.constant dense<0.0> : tensor<f32>
  %two = kiln.constant dense<2.0> : tensor<f32>
  %0 = kiln.mul %x, %zero : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %1 = kiln.mul %x, %two : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  return %0, %1 : tensor<4xf32>, tensor<4xf32>
}

// -----

// x / 1 folds; 1 / x is a reciprocal and stays.
// CHECK-LABEL: func.func @div_one(
// CHECK-SAME: %[[X:.+]]: tensor<?xf32, #kiln.dims<[seq]>>)
// CHECK: %[[ONE:.+]] = kiln.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[R:.+]] = kiln.div %[[ONE]], %[[X]]
// CHECK: return %[[X]], %[[R]]
func.func @div_one(%x: tensor<?xf32, #kiln.dims<[seq]>>) -> (tensor<?xf32, #kiln.dims<[seq]>>, tensor<?xf32, #kiln.dims<[seq]>>) {
  %one = kiln.constant dense<1.0> : tensor<f32>
  %0 = kiln.div %x, %one : (tensor<?xf32, #kiln.dims<[seq]>>, tensor<f32>) -> tensor<?xf32, #kiln.dims<[seq]>>
  %1 = kiln.div %one, %x : (tensor<f32>, tensor<?xf32, #kiln.dims<[seq]>>) -> tensor<?xf32, #kiln.dims<[seq]>>
  return %0, %1 : tensor<?xf32, #kiln.dims<[seq]>>, tensor<?xf32, #kiln.dims<[seq]>>
}

// -----

// Integer division by one folds too.
// CHECK-LABEL: func.func @div_one_int(
// CHECK-SAME: %[[X:.+]]: tensor<4xi32>)
// CHECK-NOT: kiln.div
// CHECK: return %[[X]]
func.func @div_one_int(%x: tensor<4xi32>) -> tensor<4xi32> {
  %one = kiln.constant dense<1> : tensor<4xi32>
  %0 = kiln.div %x, %one : (tensor<4xi32>, tensor<4xi32>) -> tensor<4xi32>
  return %0 : tensor<4xi32>
}

// -----

// The declared result knows a dim x does not: folding would change the type.
// CHECK-LABEL: func.func @add_zero_refined_result(
// CHECK: %[[R:.+]] = kiln.add
// CHECK: return %[[R]]
func.func @add_zero_refined_result(%x: tensor<?xf32>) -> tensor<?xf32, #kiln.dims<[seq]>> {
  %zero = kiln.constant dense<0.0> : tensor<f32>
  %0 = kiln.add %x, %zero : (tensor<?xf32>, tensor<f32>) -> tensor<?xf32, #kiln.dims<[seq]>>
  return %0 : tensor<?xf32, #kiln.dims<[seq]>>
}

// -----

// CHECK-LABEL: func.func @cast(
// CHECK-SAME: %[[X:.+]]: tensor<?xf32, #kiln.dims<[seq]>>)
// CHECK: %[[H:.+]] = kiln.cast %[[X]] : tensor<?xf32, #kiln.dims<[seq]>> -> tensor<?xf16, #kiln.dims<[seq]>>
// CHECK: return %[[X]], %[[H]]
func.func @cast(%x: tensor<?xf32, #kiln.dims<[seq]>>) -> (tensor<?xf32, #kiln.dims<[seq]>>, tensor<?xf16, #kiln.dims<[seq]>>) {
  %0 = kiln.cast %x : tensor<?xf32, #kiln.dims<[seq]>> -> tensor<?xf32, #kiln.dims<[seq]>>
  %1 = kiln.cast %x : tensor<?xf32, #kiln.dims<[seq]>> -> tensor<?xf16, #kiln.dims<[seq]>>
  return %0, %1 : tensor<?xf32, #kiln.dims<[seq]>>, tensor<?xf16, #kiln.dims<[seq]>>
}

// -----

// A cast that only names an unknown dim is kept: the type changes.
// CHECK-LABEL: func.func @cast_refines(
// CHECK: %[[R:.+]] = kiln.cast
// CHECK: return %[[R]]
func.func @cast_refines(%x: tensor<?xf32>) -> tensor<?xf32, #kiln.dims<[seq]>> {
  %0 = kiln.cast %x : tensor<?xf32> -> tensor<?xf32, #kiln.dims<[seq]>>
  return %0 : tensor<?xf32, #kiln.dims<[seq]>>
}

// -----

// CHECK-LABEL: func.func @reshape(
// CHECK-SAME: %[[X:.+]]: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>)
// CHECK: %[[F:.+]] = kiln.reshape %[[X]] : tensor<?x?x64xf32, #kiln.dims<[batch, seq]>> -> tensor<?x64xf32, #kiln.dims<[batch*seq]>>
// CHECK: return %[[X]], %[[F]]
func.func @reshape(%x: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x64xf32, #kiln.dims<[batch*seq]>>) {
  %0 = kiln.reshape %x : tensor<?x?x64xf32, #kiln.dims<[batch, seq]>> -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  %1 = kiln.reshape %x : tensor<?x?x64xf32, #kiln.dims<[batch, seq]>> -> tensor<?x64xf32, #kiln.dims<[batch*seq]>>
  return %0, %1 : tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x64xf32, #kiln.dims<[batch*seq]>>
}

// -----

// CHECK-LABEL: func.func @transpose(
// CHECK-SAME: %[[X:.+]]: tensor<?x?xf32, #kiln.dims<[batch, seq]>>)
// CHECK: %[[T:.+]] = kiln.transpose %[[X]] {perm = array<i64: 1, 0>}
// CHECK: return %[[X]], %[[T]]
func.func @transpose(%x: tensor<?x?xf32, #kiln.dims<[batch, seq]>>) -> (tensor<?x?xf32, #kiln.dims<[batch, seq]>>, tensor<?x?xf32, #kiln.dims<[seq, batch]>>) {
  %0 = kiln.transpose %x {perm = array<i64: 0, 1>} : (tensor<?x?xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?xf32, #kiln.dims<[batch, seq]>>
  %1 = kiln.transpose %x {perm = array<i64: 1, 0>} : (tensor<?x?xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?xf32, #kiln.dims<[seq, batch]>>
  return %0, %1 : tensor<?x?xf32, #kiln.dims<[batch, seq]>>, tensor<?x?xf32, #kiln.dims<[seq, batch]>>
}

// -----

// An identity permutation whose declared result refines an unknown dim is
// kept: replacing it with x would change the value's type.
// CHECK-LABEL: func.func @transpose_refines(
// CHECK: %[[T:.+]] = kiln.transpose
// CHECK: return %[[T]]
func.func @transpose_refines(%x: tensor<?x4xf32>) -> tensor<?x4xf32, #kiln.dims<[seq]>> {
  %0 = kiln.transpose %x {perm = array<i64: 0, 1>} : (tensor<?x4xf32>) -> tensor<?x4xf32, #kiln.dims<[seq]>>
  return %0 : tensor<?x4xf32, #kiln.dims<[seq]>>
}

// -----

// CHECK-LABEL: func.func @slice(
// CHECK-SAME: %[[X:.+]]: tensor<?x64xf32, #kiln.dims<[seq]>>, %[[S:.+]]: tensor<10xf32>)
// CHECK: %[[A:.+]] = kiln.slice %[[X]] {starts = #kiln.dims<[1, 0]>
// CHECK: %[[B:.+]] = kiln.slice %[[S]] {starts = #kiln.dims<[9]>, steps = array<i64: -1>}
// CHECK: return %[[X]], %[[A]], %[[B]]
func.func @slice(%x: tensor<?x64xf32, #kiln.dims<[seq]>>, %s: tensor<10xf32>)
    -> (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<?x64xf32, #kiln.dims<[seq - 1]>>, tensor<10xf32>) {
  // The full slice folds away.
  %0 = kiln.slice %x {starts = #kiln.dims<[0, 0]>, steps = array<i64: 1, 1>} : tensor<?x64xf32, #kiln.dims<[seq]>> -> tensor<?x64xf32, #kiln.dims<[seq]>>
  %1 = kiln.slice %x {starts = #kiln.dims<[1, 0]>, steps = array<i64: 1, 1>} : tensor<?x64xf32, #kiln.dims<[seq]>> -> tensor<?x64xf32, #kiln.dims<[seq - 1]>>
  // Same type, but reversed: not the identity.
  %2 = kiln.slice %s {starts = #kiln.dims<[9]>, steps = array<i64: -1>} : tensor<10xf32> -> tensor<10xf32>
  return %0, %1, %2 : tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<?x64xf32, #kiln.dims<[seq - 1]>>, tensor<10xf32>
}

// -----

// CHECK-LABEL: func.func @concat(
// CHECK-SAME: %[[X:.+]]: tensor<?x64xf32, #kiln.dims<[seq]>>)
// CHECK: %[[C:.+]] = kiln.concat %[[X]], %[[X]] {axis = 0 : i64}
// CHECK: return %[[X]], %[[C]]
func.func @concat(%x: tensor<?x64xf32, #kiln.dims<[seq]>>) -> (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<?x64xf32, #kiln.dims<[2*seq]>>) {
  %0 = kiln.concat %x {axis = 0 : i64} : (tensor<?x64xf32, #kiln.dims<[seq]>>) -> tensor<?x64xf32, #kiln.dims<[seq]>>
  %1 = kiln.concat %x, %x {axis = 0 : i64} : (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<?x64xf32, #kiln.dims<[seq]>>) -> tensor<?x64xf32, #kiln.dims<[2*seq]>>
  return %0, %1 : tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<?x64xf32, #kiln.dims<[2*seq]>>
}

// -----

// A single input whose declared result refines an unknown dim is kept.
// CHECK-LABEL: func.func @concat_refines(
// CHECK: %[[C:.+]] = kiln.concat
// CHECK: return %[[C]]
func.func @concat_refines(%x: tensor<?xf32>) -> tensor<?xf32, #kiln.dims<[seq]>> {
  %0 = kiln.concat %x {axis = 0 : i64} : (tensor<?xf32>) -> tensor<?xf32, #kiln.dims<[seq]>>
  return %0 : tensor<?xf32, #kiln.dims<[seq]>>
}

// -----

// CHECK-LABEL: func.func @expand(
// CHECK-SAME: %[[X:.+]]: tensor<1x?xf32, #kiln.dims<[seq]>>)
// CHECK: %[[E:.+]] = kiln.expand %[[X]] : tensor<1x?xf32, #kiln.dims<[seq]>> -> tensor<?x?xf32, #kiln.dims<[batch, seq]>>
// CHECK: return %[[X]], %[[E]]
func.func @expand(%x: tensor<1x?xf32, #kiln.dims<[seq]>>) -> (tensor<1x?xf32, #kiln.dims<[seq]>>, tensor<?x?xf32, #kiln.dims<[batch, seq]>>) {
  %0 = kiln.expand %x : tensor<1x?xf32, #kiln.dims<[seq]>> -> tensor<1x?xf32, #kiln.dims<[seq]>>
  %1 = kiln.expand %x : tensor<1x?xf32, #kiln.dims<[seq]>> -> tensor<?x?xf32, #kiln.dims<[batch, seq]>>
  return %0, %1 : tensor<1x?xf32, #kiln.dims<[seq]>>, tensor<?x?xf32, #kiln.dims<[batch, seq]>>
}

// -----

// CHECK-LABEL: func.func @squeeze_unsqueeze(
// CHECK-SAME: %[[X:.+]]: tensor<?x1xf32, #kiln.dims<[seq]>>)
// CHECK: %[[S:.+]] = kiln.squeeze %[[X]] {axes = array<i64: 1>}
// CHECK: %[[U:.+]] = kiln.unsqueeze %[[X]] {axes = array<i64: 0>}
// CHECK: return %[[X]], %[[X]], %[[S]], %[[U]]
func.func @squeeze_unsqueeze(%x: tensor<?x1xf32, #kiln.dims<[seq]>>)
    -> (tensor<?x1xf32, #kiln.dims<[seq]>>, tensor<?x1xf32, #kiln.dims<[seq]>>, tensor<?xf32, #kiln.dims<[seq]>>, tensor<1x?x1xf32, #kiln.dims<[seq]>>) {
  %0 = kiln.squeeze %x {axes = array<i64>} : (tensor<?x1xf32, #kiln.dims<[seq]>>) -> tensor<?x1xf32, #kiln.dims<[seq]>>
  %1 = kiln.unsqueeze %x {axes = array<i64>} : (tensor<?x1xf32, #kiln.dims<[seq]>>) -> tensor<?x1xf32, #kiln.dims<[seq]>>
  %2 = kiln.squeeze %x {axes = array<i64: 1>} : (tensor<?x1xf32, #kiln.dims<[seq]>>) -> tensor<?xf32, #kiln.dims<[seq]>>
  %3 = kiln.unsqueeze %x {axes = array<i64: 0>} : (tensor<?x1xf32, #kiln.dims<[seq]>>) -> tensor<1x?x1xf32, #kiln.dims<[seq]>>
  return %0, %1, %2, %3 : tensor<?x1xf32, #kiln.dims<[seq]>>, tensor<?x1xf32, #kiln.dims<[seq]>>, tensor<?xf32, #kiln.dims<[seq]>>, tensor<1x?x1xf32, #kiln.dims<[seq]>>
}

// -----

// Empty axes with a refined declared result keep the op (the type changes).
// CHECK-LABEL: func.func @squeeze_unsqueeze_refines(
// CHECK: %[[S:.+]] = kiln.squeeze
// CHECK: %[[U:.+]] = kiln.unsqueeze
// CHECK: return %[[S]], %[[U]]
func.func @squeeze_unsqueeze_refines(%x: tensor<?xf32>) -> (tensor<?xf32, #kiln.dims<[seq]>>, tensor<?xf32, #kiln.dims<[seq]>>) {
  %0 = kiln.squeeze %x {axes = array<i64>} : (tensor<?xf32>) -> tensor<?xf32, #kiln.dims<[seq]>>
  %1 = kiln.unsqueeze %x {axes = array<i64>} : (tensor<?xf32>) -> tensor<?xf32, #kiln.dims<[seq]>>
  return %0, %1 : tensor<?xf32, #kiln.dims<[seq]>>, tensor<?xf32, #kiln.dims<[seq]>>
}

// -----

// The gradients of slices are their pieces padded with zeros; their sum is
// the concatenation of the pieces that are not zero (RoPE's rotate-half
// backward: concat(0, a) + concat(b, 0) -> concat(b, a)). A pair with no
// zero, or pieces of different sizes, keeps the add.
// CHECK-LABEL: func.func @add_zero_padded_concats(
// CHECK-SAME: %[[A:[^:]+]]: tensor<?x32xbf16, #kiln.dims<[s]>>, %[[B:[^:]+]]: tensor<?x32xbf16, #kiln.dims<[s]>>, %[[C:[^:]+]]: tensor<?x16xbf16
// CHECK: %[[CAT:.+]] = kiln.concat %[[B]], %[[A]] {axis = 1 : i64}
// CHECK-NOT: kiln.add
// CHECK: %[[L:.+]] = kiln.concat %[[A]], %[[B]]
// CHECK: %[[R:.+]] = kiln.concat %[[B]], %[[A]]
// CHECK: kiln.add %[[L]], %[[R]]
// CHECK: kiln.add
// CHECK: return %[[CAT]]
func.func @add_zero_padded_concats(%a: tensor<?x32xbf16, #kiln.dims<[s]>>, %b: tensor<?x32xbf16, #kiln.dims<[s]>>, %c: tensor<?x16xbf16, #kiln.dims<[s]>>)
    -> (tensor<?x64xbf16, #kiln.dims<[s]>>, tensor<?x64xbf16, #kiln.dims<[s]>>, tensor<?x64xbf16, #kiln.dims<[s]>>) {
  %z = kiln.constant dense<0.0> : tensor<1x32xbf16>
  %zero = kiln.expand %z : tensor<1x32xbf16> -> tensor<?x32xbf16, #kiln.dims<[s]>>
  %lhs = kiln.concat %zero, %a {axis = 1 : i64} : (tensor<?x32xbf16, #kiln.dims<[s]>>, tensor<?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x64xbf16, #kiln.dims<[s]>>
  %rhs = kiln.concat %b, %zero {axis = 1 : i64} : (tensor<?x32xbf16, #kiln.dims<[s]>>, tensor<?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x64xbf16, #kiln.dims<[s]>>
  %0 = kiln.add %lhs, %rhs : (tensor<?x64xbf16, #kiln.dims<[s]>>, tensor<?x64xbf16, #kiln.dims<[s]>>) -> tensor<?x64xbf16, #kiln.dims<[s]>>
  %l1 = kiln.concat %a, %b {axis = 1 : i64} : (tensor<?x32xbf16, #kiln.dims<[s]>>, tensor<?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x64xbf16, #kiln.dims<[s]>>
  %r1 = kiln.concat %b, %a {axis = 1 : i64} : (tensor<?x32xbf16, #kiln.dims<[s]>>, tensor<?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x64xbf16, #kiln.dims<[s]>>
  %1 = kiln.add %l1, %r1 : (tensor<?x64xbf16, #kiln.dims<[s]>>, tensor<?x64xbf16, #kiln.dims<[s]>>) -> tensor<?x64xbf16, #kiln.dims<[s]>>
  %z16 = kiln.constant dense<0.0> : tensor<1x16xbf16>
  %zero16 = kiln.expand %z16 : tensor<1x16xbf16> -> tensor<?x16xbf16, #kiln.dims<[s]>>
  %l2 = kiln.concat %zero16, %c, %a {axis = 1 : i64} : (tensor<?x16xbf16, #kiln.dims<[s]>>, tensor<?x16xbf16, #kiln.dims<[s]>>, tensor<?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x64xbf16, #kiln.dims<[s]>>
  %r2 = kiln.concat %b, %zero {axis = 1 : i64} : (tensor<?x32xbf16, #kiln.dims<[s]>>, tensor<?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x64xbf16, #kiln.dims<[s]>>
  %2 = kiln.add %l2, %r2 : (tensor<?x64xbf16, #kiln.dims<[s]>>, tensor<?x64xbf16, #kiln.dims<[s]>>) -> tensor<?x64xbf16, #kiln.dims<[s]>>
  return %0, %1, %2 : tensor<?x64xbf16, #kiln.dims<[s]>>, tensor<?x64xbf16, #kiln.dims<[s]>>, tensor<?x64xbf16, #kiln.dims<[s]>>
}
