// RUN: kiln-opt %s --kiln-quantize-nf4 | FileCheck %s
// RUN: kiln-opt %s --kiln-quantize-nf4=block-size=32 | FileCheck %s --check-prefix=B32
// RUN: kiln-opt %s '--kiln-quantize-nf4=skip=q_proj' | FileCheck %s --check-prefix=SKIP
// RUN: kiln-opt %s --kiln-quantize-nf4=double-quant=true | FileCheck %s --check-prefix=DQ
// RUN: not kiln-opt %s --kiln-quantize-nf4=block-size=3 2>&1 | FileCheck %s --check-prefix=BAD

// A pre-transposed [in, out] weight: blocks run over the [out, in]
// transpose; the matmul reads the dequantized [out, in] weight with its
// transpose flag toggled, so that no kernel writes a transposed copy.
// CHECK-LABEL: func.func @linear
// CHECK: %[[C:.*]] = kiln.parameter "val_95.nf4_codes" {kiln.init = "nf4_quantize(val_95)"} : tensor<64xui8>
// CHECK: %[[S:.*]] = kiln.parameter "val_95.nf4_absmax" {kiln.init = "nf4_quantize(val_95)"} : tensor<2xf32>
// CHECK: %[[D:.*]] = kiln.nf4_dequantize %[[C]], %[[S]] : tensor<64xui8>, tensor<2xf32> -> tensor<8x16xf32>
// CHECK-NOT: kiln.transpose %[[D]]
// CHECK: kiln.matmul %arg0, %[[D]] {transpose_b} : (tensor<2x16xf32>, tensor<8x16xf32>) -> tensor<2x8xf32>
// PyTorch layout (transpose_b): no transposes.
// CHECK: %[[C2:.*]] = kiln.parameter "l2.weight.nf4_codes"
// CHECK: %[[D2:.*]] = kiln.nf4_dequantize %[[C2]], %{{.*}} : tensor<60xui8>, tensor<2xf32> -> tensor<10x12xf32>
// CHECK: kiln.matmul %{{.*}}, %[[D2]] {transpose_b}
// Trainable weights and weights with other uses (a tied embedding) stay.
// CHECK: kiln.parameter "train.weight" trainable : tensor<8x8xf32>
// CHECK: kiln.parameter "tied.weight" : tensor<12x8xf32>
// CHECK-LABEL: func.func @kiln_init
// CHECK-SAME: -> (tensor<64xui8> {kiln.param = "val_95.nf4_codes"}, tensor<2xf32> {kiln.param = "val_95.nf4_absmax"}, tensor<60xui8> {kiln.param = "l2.weight.nf4_codes"}, tensor<2xf32> {kiln.param = "l2.weight.nf4_absmax"})
// CHECK: %[[W:.*]] = kiln.parameter "val_95" {kiln.source_name = "model.q_proj.weight"} : tensor<16x8xf32>
// CHECK: %[[WT:.*]] = kiln.transpose %[[W]] {perm = array<i64: 1, 0>}
// CHECK: kiln.nf4_quantize %[[WT]] : tensor<8x16xf32> -> tensor<64xui8>, tensor<2xf32>
// CHECK: %[[W2:.*]] = kiln.parameter "l2.weight" : tensor<10x12xf32>
// CHECK: kiln.nf4_quantize %[[W2]]

// B32: kiln.parameter "val_95.nf4_absmax" {{.*}} : tensor<4xf32>
// B32: kiln.nf4_dequantize {{.*}} {block_size = 32 : i64}

// SKIP: kiln.parameter "val_95" {kiln.source_name
// SKIP: kiln.parameter "l2.weight.nf4_codes"

// Double quantization: the absmax values come back from 8-bit codes, one
// scale per 256 and their mean.
// DQ-LABEL: func.func @linear
// DQ: %[[C:.*]] = kiln.parameter "val_95.nf4_codes"
// DQ: %[[Q:.*]] = kiln.parameter "val_95.nf4_absmax_codes" {{.*}} : tensor<2xui8>
// DQ: %[[S:.*]] = kiln.parameter "val_95.nf4_absmax_scale" {{.*}} : tensor<1xf32>
// DQ: %[[O:.*]] = kiln.parameter "val_95.nf4_absmax_offset" {{.*}} : tensor<f32>
// DQ: %[[R:.*]] = kiln.dequantize_blockwise_8bit %[[Q]], %[[S]] : tensor<2xui8>, tensor<1xf32> -> tensor<2xf32>
// DQ: %[[A:.*]] = kiln.add %[[R]], %[[O]]
// DQ: kiln.nf4_dequantize %[[C]], %[[A]]
// DQ-LABEL: func.func @kiln_init
// DQ: %[[CODES:.*]], %[[ABSMAX:.*]] = kiln.nf4_quantize
// DQ: %[[MEAN:.*]] = kiln.reduce_mean %[[ABSMAX]] {axes = array<i64: 0>}
// DQ: %[[CENTRED:.*]] = kiln.sub %[[ABSMAX]], %[[MEAN]]
// DQ: kiln.quantize_blockwise_8bit %[[CENTRED]] : tensor<2xf32> -> tensor<2xui8>, tensor<1xf32>

// BAD: error: NF4 block size must be even and positive, got 3

func.func @linear(%x: tensor<2x16xf32>, %ids: tensor<2xi64>, %h: tensor<2x12xf32>) -> (tensor<2x8xf32>, tensor<2x10xf32>, tensor<2x8xf32>, tensor<2x12xf32>) {
  %w = kiln.parameter "val_95" {kiln.source_name = "model.q_proj.weight"} : tensor<16x8xf32>
  %q = kiln.matmul %x, %w : (tensor<2x16xf32>, tensor<16x8xf32>) -> tensor<2x8xf32>
  %w2 = kiln.parameter "l2.weight" : tensor<10x12xf32>
  %y = kiln.matmul %h, %w2 {transpose_b} : (tensor<2x12xf32>, tensor<10x12xf32>) -> tensor<2x10xf32>
  %wt = kiln.parameter "train.weight" trainable : tensor<8x8xf32>
  %t = kiln.matmul %q, %wt : (tensor<2x8xf32>, tensor<8x8xf32>) -> tensor<2x8xf32>
  %e = kiln.parameter "tied.weight" : tensor<12x8xf32>
  %emb = kiln.gather %e, %ids {axis = 0 : i64} : (tensor<12x8xf32>, tensor<2xi64>) -> tensor<2x8xf32>
  %l = kiln.matmul %emb, %e {transpose_b} : (tensor<2x8xf32>, tensor<12x8xf32>) -> tensor<2x12xf32>
  return %q, %y, %t, %l : tensor<2x8xf32>, tensor<2x10xf32>, tensor<2x8xf32>, tensor<2x12xf32>
}
