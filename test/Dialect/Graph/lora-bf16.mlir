// RUN: kiln-opt %s '--kiln-lora=rank=4 alpha=8 targets=^l1\.' | FileCheck %s

// Adapters of a bf16 weight are fp32 masters (PEFT's autocast_adapter_dtype):
// the input widens to fp32 for the adapter path and its output narrows back
// before the sum. With bf16 adapters AdamW's small updates round away.
// CHECK-LABEL: func.func @bf16_weight
// CHECK: %[[Y:.*]] = kiln.matmul %arg0, %{{.*}} {transpose_b} : {{.*}} -> tensor<2x64xbf16>
// CHECK: kiln.parameter "l1.lora_A.weight" trainable {{.*}} : tensor<4x32xf32>
// CHECK: kiln.parameter "l1.lora_B.weight" trainable {{.*}} : tensor<64x4xf32>
// CHECK: %[[X:.*]] = kiln.cast %arg0 : tensor<2x32xbf16> -> tensor<2x32xf32>
// CHECK: kiln.matmul %[[X]], %{{.*}} {transpose_b} : {{.*}} -> tensor<2x4xf32>
// CHECK: %[[S:.*]] = kiln.mul
// CHECK: %[[N:.*]] = kiln.cast %[[S]] : tensor<2x64xf32> -> tensor<2x64xbf16>
// CHECK: kiln.add %[[Y]], %[[N]]
// The init program makes fp32 adapters too.
// CHECK-LABEL: func.func @kiln_init
// CHECK: -> (tensor<4x32xf32> {kiln.param = "l1.lora_A.weight"}, tensor<64x4xf32> {kiln.param = "l1.lora_B.weight"})
func.func @bf16_weight(%x: tensor<2x32xbf16>) -> tensor<2x64xbf16> {
  %w = kiln.parameter "l1.weight" trainable : tensor<64x32xbf16>
  %y = kiln.matmul %x, %w {transpose_b} : (tensor<2x32xbf16>, tensor<64x32xbf16>) -> tensor<2x64xbf16>
  return %y : tensor<2x64xbf16>
}
