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
// FP32-LABEL: func.func @embedding
// CHECK: %[[E:.+]] = kiln.gather %{{.+}}, %arg0 {axis = 0 : i64} : (tensor<100x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
// CHECK: %[[C:.+]] = kiln.cast %[[E]] : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
// CHECK: kiln.mul %[[C]], %[[C]]
func.func @embedding(%ids: tensor<2x4xi64>) -> tensor<2x4x8xf32> {
  %w = kiln.parameter "embed.weight" trainable : tensor<100x8xf32>
  %e = kiln.gather %w, %ids {axis = 0 : i64} : (tensor<100x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %m = kiln.mul %e, %e : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %m : tensor<2x4x8xf32>
}

// Index arithmetic stays fp32: RoPE's angles from integer positions and a
// small inv_freq constant (kept fp32, not stored low), their cos, and the
// cast to bf16 only where the activations read them (as transformers'
// rotary embedding computes with autocast off). bf16 would hold position
// 2001 as 2000. A parameter no index arithmetic reads is stored low.
// CHECK-LABEL: func.func @rope
// CHECK: %[[F:.+]] = kiln.parameter "inv_freq" : tensor<1x4x1xf32>
// CHECK: %[[P:.+]] = kiln.cast %arg0 : tensor<1x1x16xi64> -> tensor<1x1x16xf32>
// CHECK: %[[A:.+]] = kiln.matmul %[[F]], %[[P]] : (tensor<1x4x1xf32>, tensor<1x1x16xf32>) -> tensor<1x4x16xf32>
// CHECK: %[[C:.+]] = kiln.cos %[[A]] : tensor<1x4x16xf32>
// CHECK: %[[CL:.+]] = kiln.cast %[[C]] : tensor<1x4x16xf32> -> tensor<1x4x16xbf16>
// CHECK: kiln.mul %{{.+}}, %[[CL]] : (tensor<1x4x16xbf16>, tensor<1x4x16xbf16>) -> tensor<1x4x16xbf16>
// CHECK: kiln.parameter "big" : tensor<1x4x16xbf16>
func.func @rope(%pos: tensor<1x1x16xi64>, %x: tensor<1x4x16xf32>) -> tensor<1x4x16xf32> {
  %f = kiln.parameter "inv_freq" : tensor<1x4x1xf32>
  %p = kiln.cast %pos : tensor<1x1x16xi64> -> tensor<1x1x16xf32>
  %a = kiln.matmul %f, %p : (tensor<1x4x1xf32>, tensor<1x1x16xf32>) -> tensor<1x4x16xf32>
  %c = kiln.cos %a : tensor<1x4x16xf32>
  %y = kiln.mul %x, %c : (tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
  %w = kiln.parameter "big" : tensor<1x4x16xf32>
  %z = kiln.add %y, %w : (tensor<1x4x16xf32>, tensor<1x4x16xf32>) -> tensor<1x4x16xf32>
  return %z : tensor<1x4x16xf32>
}
