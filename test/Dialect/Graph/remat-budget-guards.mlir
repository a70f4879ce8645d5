// RUN: kiln-opt %s --kiln-remat=budget=0.0115 | FileCheck %s

// Without symbols= the maxima of the range guards size the plan (here
// n <= 1024, as `kiln compile --dynamic n=1..1024` records): the same cut
// as remat-budget.mlir at n = 1024.
// CHECK-LABEL: func.func @layers
// CHECK-SAME: recomputed = 2 : i64, saved = 1 : i64
// CHECK-SAME: symbols = "n=1024"
// CHECK: kiln.matmul {{.+}} {kiln.recomputed}
func.func @layers(%x: tensor<?x256xf32, #kiln.dims<[n]>>) -> (tensor<f32>, tensor<256x1024xf32> {kiln.grad_of = "wu"})
    attributes {kiln.guards = [{expr = #kiln.expr<n>, kind = "range", min = 1 : i64, max = 1024 : i64, origin = "--dynamic n=1..1024"}]} {
  %wu = kiln.parameter "wu" trainable : tensor<256x1024xf32>
  %wd = kiln.parameter "wd" : tensor<1024x256xf32>
  %u1 = kiln.matmul %x, %wu : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<256x1024xf32>) -> tensor<?x1024xf32, #kiln.dims<[n]>>
  %v1 = kiln.tanh %u1 : tensor<?x1024xf32, #kiln.dims<[n]>>
  %x2 = kiln.matmul %v1, %wd : (tensor<?x1024xf32, #kiln.dims<[n]>>, tensor<1024x256xf32>) -> tensor<?x256xf32, #kiln.dims<[n]>>
  %u2 = kiln.matmul %x2, %wu : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<256x1024xf32>) -> tensor<?x1024xf32, #kiln.dims<[n]>>
  %v2 = kiln.tanh %u2 : tensor<?x1024xf32, #kiln.dims<[n]>>
  %x3 = kiln.matmul %v2, %wd : (tensor<?x1024xf32, #kiln.dims<[n]>>, tensor<1024x256xf32>) -> tensor<?x256xf32, #kiln.dims<[n]>>
  %l = kiln.reduce_sum %x3 {axes = array<i64: 0, 1>} : (tensor<?x256xf32, #kiln.dims<[n]>>) -> tensor<f32>
  %g2 = kiln.mul %v2, %v2 : (tensor<?x1024xf32, #kiln.dims<[n]>>, tensor<?x1024xf32, #kiln.dims<[n]>>) -> tensor<?x1024xf32, #kiln.dims<[n]>>
  %dx2 = kiln.matmul %g2, %wu {transpose_b} : (tensor<?x1024xf32, #kiln.dims<[n]>>, tensor<256x1024xf32>) -> tensor<?x256xf32, #kiln.dims<[n]>>
  %dv1 = kiln.matmul %dx2, %wd {transpose_b} : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<1024x256xf32>) -> tensor<?x1024xf32, #kiln.dims<[n]>>
  %g1 = kiln.mul %dv1, %v1 : (tensor<?x1024xf32, #kiln.dims<[n]>>, tensor<?x1024xf32, #kiln.dims<[n]>>) -> tensor<?x1024xf32, #kiln.dims<[n]>>
  %dw = kiln.matmul %x, %g1 {transpose_a} : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<?x1024xf32, #kiln.dims<[n]>>) -> tensor<256x1024xf32>
  return %l, %dw : tensor<f32>, tensor<256x1024xf32>
}
