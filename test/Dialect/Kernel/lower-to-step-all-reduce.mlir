// kiln-lower-to-step of the data-parallel all-reduces: in place on a
// gradient only the all-reduce reads, into a fresh buffer when the backward
// reads it on, and a wait on the bucket's buffers right before the first
// reader of a result (the optimizer kernel; the return for the loss).
// RUN: kiln-opt %s '--kiln-train-step-pipeline=data-parallel=0.0002 optimizer=sgd' --kiln-kernel-pipeline | FileCheck %s

// dp = dh2 is also what dw1 is computed from: its all-reduce is out of
// place. dw2 and dw1 are GEMM outputs nothing else reads: in place.
// CHECK-LABEL: func.func @mlp
// CHECK: %[[DW2:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<16x4xf32>>
// CHECK-NEXT: kiln_kernel.gemm %{{.+}}, %{{.+}} -> %[[DW2]]
// CHECK-NEXT: kiln_kernel.all_reduce ins(%[[DW2]] : {{.+}}) outs(%[[DW2]] : {{.+}}) bucket 0
// CHECK: %[[DP:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<4x16xf32>>
// CHECK-NEXT: kiln_kernel.launch @{{.+}} outs(%[[DP]] :
// CHECK-NEXT: %[[DPR:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<4x16xf32>>
// CHECK-NEXT: kiln_kernel.all_reduce ins(%[[DP]] : {{.+}}) outs(%[[DPR]] : {{.+}}) bucket 1
// CHECK-NEXT: %[[DW1:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<8x16xf32>>
// CHECK-NEXT: kiln_kernel.gemm %arg0, %[[DP]] -> %[[DW1]]
// CHECK-NEXT: kiln_kernel.all_reduce ins(%[[DW1]] : {{.+}}) outs(%[[DW1]] : {{.+}}) bucket 2
// CHECK-NEXT: kiln_kernel.all_reduce ins(%[[L:[^ ]+]] : {{.+}}) outs(%[[L]] : {{.+}}) bucket 3 {loss}
// CHECK-NEXT: kiln_kernel.all_reduce_wait %[[DW2]] bucket 0
// CHECK-NEXT: kiln_kernel.all_reduce_wait %[[DP]], %[[DPR]] bucket 1
// CHECK-NEXT: kiln_kernel.all_reduce_wait %[[DW1]] bucket 2
// CHECK-NOT: all_reduce
// CHECK: kiln_kernel.launch @{{.+}} ins(%arg{{[0-9]+}}, %[[DW1]], %arg1, %[[DPR]], %arg2, %[[DW2]], %arg3
// CHECK-NEXT: kiln_kernel.all_reduce_wait %[[L]] bucket 3
// CHECK-NEXT: return %[[L]],
func.func @mlp(%x: tensor<4x8xf32>) -> tensor<f32> {
  %w1 = kiln.parameter "w1" trainable : tensor<8x16xf32>
  %p = kiln.parameter "p" trainable : tensor<4x16xf32>
  %w2 = kiln.parameter "w2" trainable : tensor<16x4xf32>
  %h = kiln.matmul %x, %w1 : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %h2 = kiln.add %h, %p : (tensor<4x16xf32>, tensor<4x16xf32>) -> tensor<4x16xf32>
  %a = kiln.relu %h2 : tensor<4x16xf32>
  %y = kiln.matmul %a, %w2 : (tensor<4x16xf32>, tensor<16x4xf32>) -> tensor<4x4xf32>
  %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<4x4xf32>) -> tensor<f32>
  return %l : tensor<f32>
}
