// Malformed IR: a located diagnostic and a non-zero exit.
// RUN: not kiln-opt %s 2>&1 | FileCheck %s

// CHECK: malformed.mlir:6:{{[0-9]+}}: error:
func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
  %0 = kiln.exp %x : tensor<4xi32>
  return %0 : tensor<4xf32>
}
