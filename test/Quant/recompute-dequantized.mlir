// RUN: kiln-opt --split-input-file --kiln-recompute-dequantized %s | FileCheck %s

// The backward's input-gradient matmul reads the dequantized weight: it gets
// its own dequantize + transpose, so the forward copy dies in the forward.
// CHECK-LABEL: func.func @qlora
// CHECK-SAME: kiln.recomputed_dequantized = 1 : i64
// CHECK: %[[W:.+]] = kiln.nf4_dequantize %[[C:[0-9]+]], %[[S:[0-9]+]] :
// CHECK-NEXT: %[[WT:.+]] = kiln.transpose %[[W]]
// CHECK-NEXT: %[[Y:.+]] = kiln.matmul %arg0, %[[WT]]
// CHECK: %[[W2:.+]] = kiln.nf4_dequantize %[[C]], %[[S]] {kiln.recomputed}
// CHECK-NEXT: %[[WT2:.+]] = kiln.transpose %[[W2]] {kiln.recomputed
// CHECK-NEXT: kiln.matmul %arg1, %[[WT2]] {transpose_b}
// CHECK-NOT: kiln.nf4_dequantize
func.func @qlora(%x: tensor<8x64xbf16>, %dy: tensor<8x64xbf16>) -> (tensor<bf16>, tensor<8x64xbf16>) {
  %codes = kiln.parameter "w.nf4_codes" : tensor<2048xui8>
  %absmax = kiln.parameter "w.nf4_absmax" : tensor<64xf32>
  %w = kiln.nf4_dequantize %codes, %absmax : tensor<2048xui8>, tensor<64xf32> -> tensor<64x64xbf16>
  %wt = kiln.transpose %w {perm = array<i64: 1, 0>} : (tensor<64x64xbf16>) -> tensor<64x64xbf16>
  %y = kiln.matmul %x, %wt : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
  %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<8x64xbf16>) -> tensor<bf16>
  %dx = kiln.matmul %dy, %wt {transpose_b} : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
  return %l, %dx : tensor<bf16>, tensor<8x64xbf16>
}

// -----

// Double quantization: the absmax is itself dequantized and offset by its
// mean (kiln.add) before the NF4 dequantize reads it. The whole chain derives
// from stored codes alone, so it is recomputed, and the forward's weight dies
// in the forward (before: the add stopped the chain and the bf16 weight was
// kept for the backward).
// CHECK-LABEL: func.func @double_quant
// CHECK-SAME: kiln.recomputed_dequantized = 1 : i64
// CHECK: %[[R:.+]] = kiln.dequantize_blockwise_8bit %[[Q:[0-9]+]], %[[S:[0-9]+]] :
// CHECK-NEXT: %[[A:.+]] = kiln.add %[[R]], %[[O:[0-9]+]] :
// CHECK-NEXT: %[[W:.+]] = kiln.nf4_dequantize %[[C:[0-9]+]], %[[A]] :
// CHECK-NEXT: kiln.matmul %arg0, %[[W]] {transpose_b}
// CHECK: %[[R2:.+]] = kiln.dequantize_blockwise_8bit %[[Q]], %[[S]] {kiln.recomputed}
// CHECK-NEXT: %[[A2:.+]] = kiln.add %[[R2]], %[[O]] {kiln.recomputed}
// CHECK-NEXT: %[[W2:.+]] = kiln.nf4_dequantize %[[C]], %[[A2]] {kiln.recomputed}
// CHECK-NEXT: kiln.matmul %arg1, %[[W2]] :
// CHECK-NOT: kiln.nf4_dequantize
func.func @double_quant(%x: tensor<8x64xbf16>, %dy: tensor<8x64xbf16>) -> (tensor<bf16>, tensor<8x64xbf16>) {
  %codes = kiln.parameter "w.nf4_codes" : tensor<2048xui8>
  %q = kiln.parameter "w.nf4_absmax_codes" : tensor<64xui8>
  %s = kiln.parameter "w.nf4_absmax_scale" : tensor<1xf32>
  %o = kiln.parameter "w.nf4_absmax_offset" : tensor<f32>
  %r = kiln.dequantize_blockwise_8bit %q, %s : tensor<64xui8>, tensor<1xf32> -> tensor<64xf32>
  %absmax = kiln.add %r, %o : (tensor<64xf32>, tensor<f32>) -> tensor<64xf32>
  %w = kiln.nf4_dequantize %codes, %absmax : tensor<2048xui8>, tensor<64xf32> -> tensor<64x64xbf16>
  %y = kiln.matmul %x, %w {transpose_b} : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
  %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<8x64xbf16>) -> tensor<bf16>
  %dx = kiln.matmul %dy, %w : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
  return %l, %dx : tensor<bf16>, tensor<8x64xbf16>
}

// -----

// Plain bf16 weights are parameters, always at hand: nothing changes.
// CHECK-LABEL: func.func @lora
// CHECK-NOT: kiln.recomputed
func.func @lora(%x: tensor<8x64xbf16>, %dy: tensor<8x64xbf16>) -> (tensor<bf16>, tensor<8x64xbf16>) {
  %w = kiln.parameter "w" : tensor<64x64xbf16>
  %y = kiln.matmul %x, %w {transpose_b} : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
  %l = kiln.reduce_sum %y {axes = array<i64: 0, 1>} : (tensor<8x64xbf16>) -> tensor<bf16>
  %dx = kiln.matmul %dy, %w : (tensor<8x64xbf16>, tensor<64x64xbf16>) -> tensor<8x64xbf16>
  return %l, %dx : tensor<bf16>, tensor<8x64xbf16>
}
