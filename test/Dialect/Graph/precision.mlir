// RUN: kiln-opt %s --kiln-precision | FileCheck %s
// RUN: kiln-opt %s '--kiln-precision=compute=bf16 fp32-ops=matmul' | FileCheck %s --check-prefix=OVERRIDE
// RUN: kiln-opt %s '--kiln-precision=compute=fp32' | FileCheck %s --check-prefix=FP32

// CHECK-LABEL: func.func @mixed
// CHECK-SAME: -> tensor<4x8xf32>
// CHECK-DAG: %[[XL:.+]] = kiln.cast %arg0 : tensor<4x8xf32> -> tensor<4x8xbf16>
// CHECK-DAG: %[[W:.+]] = kiln.parameter "w" trainable : tensor<8x8xf32>
// CHECK-DAG: %[[WL:.+]] = kiln.cast %[[W]] : tensor<8x8xf32> -> tensor<8x8xbf16>
// CHECK-DAG: %[[F:.+]] = kiln.parameter "f" : tensor<8x8xbf16>
// CHECK: %[[H:.+]] = kiln.matmul %[[XL]], %[[WL]] : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
// CHECK: %[[Y:.+]] = kiln.matmul %[[H]], %[[F]] : (tensor<4x8xbf16>, tensor<8x8xbf16>) -> tensor<4x8xbf16>
// CHECK: %[[YF:.+]] = kiln.cast %[[Y]] : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK: %[[P:.+]] = kiln.softmax %[[YF]] {axis = 1 : i64} : tensor<4x8xf32>
// CHECK: return %[[P]]

// The override list replaces the default one: matmul in fp32, softmax low.
// OVERRIDE-LABEL: func.func @mixed
// OVERRIDE: kiln.matmul {{.*}} -> tensor<4x8xf32>
// OVERRIDE: kiln.softmax {{.*}} : tensor<4x8xbf16>

// FP32-LABEL: func.func @mixed
// FP32-NOT: kiln.cast
func.func @mixed(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %w = kiln.parameter "w" trainable : tensor<8x8xf32>
  %f = kiln.parameter "f" : tensor<8x8xf32>
  %h = kiln.matmul %x, %w : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %y = kiln.matmul %h, %f : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %p = kiln.softmax %y {axis = 1 : i64} : tensor<4x8xf32>
  return %p : tensor<4x8xf32>
}

// A gather keeps its table's precision: the fp32 master embedding is not
// cast whole; the gathered rows are cast where a bf16 op reads them (and
// the gradient, a scatter-add, accumulates in fp32).
// CHECK-LABEL: func.func @embedding
// CHECK: %[[E:.+]] = kiln.gather %{{.+}}, %arg0 {axis = 0 : i64} : (tensor<100x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
// CHECK: %[[C:.+]] = kiln.cast %[[E]] : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
// CHECK: kiln.mul %[[C]], %[[C]]
func.func @embedding(%ids: tensor<2x4xi64>) -> tensor<2x4x8xf32> {
  %w = kiln.parameter "embed.weight" trainable : tensor<100x8xf32>
  %e = kiln.gather %w, %ids {axis = 0 : i64} : (tensor<100x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %m = kiln.mul %e, %e : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %m : tensor<2x4x8xf32>
}
