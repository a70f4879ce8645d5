// RUN: kiln-opt %s '--kiln-specialize-symbols=values=batch=4' | FileCheck %s
// RUN: not kiln-opt %s '--kiln-specialize-symbols=values=batch=x' 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK-LABEL: func.func @pin
// CHECK-SAME: (%{{.+}}: tensor<4x?xf32, #kiln.dims<[seq]>>) -> tensor<?xf32, #kiln.dims<[4*seq]>>
// CHECK: kiln.reshape %{{.+}} : tensor<4x?xf32, #kiln.dims<[seq]>> -> tensor<?xf32, #kiln.dims<[4*seq]>>
// CHECK: kiln.slice %{{.+}} {starts = #kiln.dims<[4*seq - 2]>
// BAD: --static needs symbol=positive integer, got 'batch=x'
func.func @pin(%x: tensor<?x?xf32, #kiln.dims<[batch, seq]>>) -> tensor<?xf32, #kiln.dims<[batch*seq]>> {
  %0 = kiln.reshape %x : tensor<?x?xf32, #kiln.dims<[batch, seq]>> -> tensor<?xf32, #kiln.dims<[batch*seq]>>
  %1 = kiln.slice %0 {starts = #kiln.dims<[batch*seq - 2]>, steps = array<i64: 1>} : tensor<?xf32, #kiln.dims<[batch*seq]>> -> tensor<2xf32>
  return %0 : tensor<?xf32, #kiln.dims<[batch*seq]>>
}
