// RUN: kiln-opt %s --kiln-fuse-linear-cross-entropy | FileCheck %s
// RUN: kiln-opt %s '--kiln-fuse-linear-cross-entropy=chunk-tokens=16' | FileCheck %s --check-prefix=CHUNK
// RUN: kiln-opt %s --kiln-fuse-linear-cross-entropy --kiln-autodiff --canonicalize | FileCheck %s --check-prefix=GRAD
// RUN: not kiln-opt %s '--kiln-fuse-linear-cross-entropy=chunk-tokens=-1' 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: kiln-opt %s '--kiln-fuse-linear-cross-entropy=bf16-logits=true' --kiln-autodiff --canonicalize | FileCheck %s --check-prefix=BF16

// The folded [H, V] head of a bf16 step: matmul, reshape, cast, loss.
// CHECK-LABEL: func.func @head_bf16
// CHECK: %[[H:.+]] = kiln.reshape %arg0 : tensor<?x?x64xbf16, #kiln.dims<[batch, seq]>> -> tensor<?x64xbf16, #kiln.dims<[batch*seq]>>
// CHECK: %[[L:.+]] = kiln.linear_cross_entropy %[[H]], %{{.+}}, %arg1 {chunk_tokens = 4096 : i64}
// CHECK-SAME: (tensor<?x64xbf16, #kiln.dims<[batch*seq]>>, tensor<64x256xbf16>, tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<f32>
// CHECK-NOT: kiln.matmul
// CHECK-NOT: kiln.cross_entropy
// CHECK: return %[[L]]
// CHUNK-LABEL: func.func @head_bf16
// CHUNK: kiln.linear_cross_entropy {{.*}} {chunk_tokens = 16 : i64}

// The train step: one gradient op yields the loss, the forward op is gone.
// GRAD-LABEL: func.func @head_bf16
// GRAD-NOT: kiln.linear_cross_entropy %
// GRAD: %[[L:[^,]+]], %{{[^,]+}}, %{{[^ ]+}} = kiln.linear_cross_entropy_grad
// GRAD-SAME: -> (tensor<f32>, tensor<?x64xbf16, #kiln.dims<[batch*seq]>>, tensor<64x256xbf16>)
// GRAD: return %[[L]],
// bf16-logits: the bf16 matmul's logits stay bf16 in the chunk, on the
// gradient op too (autodiff copies the attribute).
// BF16-LABEL: func.func @head_bf16
// BF16: kiln.linear_cross_entropy_grad {{.+}} {bf16_logits, chunk_tokens = 4096 : i64}
func.func @head_bf16(%h: tensor<?x?x64xbf16, #kiln.dims<[batch, seq]>>,
                     %y: tensor<?xi64, #kiln.dims<[batch*seq]>>)
    -> (tensor<f32> {kiln.name = "loss"}) {
  %w = kiln.parameter "lm_head.weight" trainable : tensor<64x256xf32>
  %wl = kiln.cast %w : tensor<64x256xf32> -> tensor<64x256xbf16>
  %l = kiln.matmul %h, %wl : (tensor<?x?x64xbf16, #kiln.dims<[batch, seq]>>, tensor<64x256xbf16>)
      -> tensor<?x?x256xbf16, #kiln.dims<[batch, seq]>>
  %r = kiln.reshape %l : tensor<?x?x256xbf16, #kiln.dims<[batch, seq]>> -> tensor<?x256xbf16, #kiln.dims<[batch*seq]>>
  %f = kiln.cast %r : tensor<?x256xbf16, #kiln.dims<[batch*seq]>> -> tensor<?x256xf32, #kiln.dims<[batch*seq]>>
  %loss = kiln.cross_entropy %f, %y : (tensor<?x256xf32, #kiln.dims<[batch*seq]>>,
      tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<f32>
  return %loss : tensor<f32>
}

// An exporter's `logits.float()` under bf16 compute: casts f32 -> bf16 ->
// reshape -> f32 on the way to the loss.
// CHECK-LABEL: func.func @float_casts
// CHECK: kiln.linear_cross_entropy
// CHECK-NOT: kiln.cast %{{.+}} : tensor<?x?x256
func.func @float_casts(%h: tensor<?x?x64xbf16, #kiln.dims<[batch, seq]>>,
                       %y: tensor<?xi64, #kiln.dims<[batch*seq]>>) -> (tensor<f32> {kiln.name = "loss"}) {
  %w = kiln.parameter "lm_head.weight" : tensor<64x256xbf16>
  %l = kiln.matmul %h, %w : (tensor<?x?x64xbf16, #kiln.dims<[batch, seq]>>, tensor<64x256xbf16>)
      -> tensor<?x?x256xbf16, #kiln.dims<[batch, seq]>>
  %a = kiln.cast %l : tensor<?x?x256xbf16, #kiln.dims<[batch, seq]>> -> tensor<?x?x256xf32, #kiln.dims<[batch, seq]>>
  %b = kiln.cast %a : tensor<?x?x256xf32, #kiln.dims<[batch, seq]>> -> tensor<?x?x256xbf16, #kiln.dims<[batch, seq]>>
  %r = kiln.reshape %b : tensor<?x?x256xbf16, #kiln.dims<[batch, seq]>> -> tensor<?x256xbf16, #kiln.dims<[batch*seq]>>
  %f = kiln.cast %r : tensor<?x256xbf16, #kiln.dims<[batch*seq]>> -> tensor<?x256xf32, #kiln.dims<[batch*seq]>>
  %loss = kiln.cross_entropy %f, %y : (tensor<?x256xf32, #kiln.dims<[batch*seq]>>,
      tensor<?xi64, #kiln.dims<[batch*seq]>>) -> tensor<f32>
  return %loss : tensor<f32>
}

// A tied embedding [V, H] through a transpose, a Gemma 2 soft-cap, and a
// frozen head: the weight keeps its layout (transpose_weight), the cap is
// an attribute, and the gradient op has no weight_grad result.
// CHECK-LABEL: func.func @tied_softcap
// CHECK: kiln.linear_cross_entropy %{{.+}}, %{{.+}}, %arg1 {chunk_tokens = 4096 : i64, ignore_index = 7 : i64, softcap = 3.000000e+01 : f64, transpose_weight}
// CHECK-SAME: (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<256x64xf32>, tensor<?xi64, #kiln.dims<[n]>>) -> tensor<f32>
// CHECK-NOT: kiln.tanh
// GRAD-LABEL: func.func @tied_softcap
// GRAD: kiln.linear_cross_entropy_grad
// GRAD-SAME: -> (tensor<f32>, tensor<?x64xf32, #kiln.dims<[n]>>)
// An fp32 head keeps fp32 logits under bf16-logits.
// BF16-LABEL: func.func @tied_softcap
// BF16-NOT: bf16_logits
// BF16: kiln.linear_cross_entropy_grad
// BF16-NOT: bf16_logits
// BF16-LABEL: func.func @refused
func.func @tied_softcap(%h: tensor<?x64xf32, #kiln.dims<[n]>>, %y: tensor<?xi64, #kiln.dims<[n]>>)
    -> (tensor<f32> {kiln.name = "loss"}) {
  %e = kiln.parameter "embed.weight" : tensor<256x64xf32>
  %g = kiln.parameter "norm.weight" trainable : tensor<64xf32>
  %c = kiln.constant dense<30.0> : tensor<f32>
  %x = kiln.mul %h, %g : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %et = kiln.transpose %e {perm = array<i64: 1, 0>} : (tensor<256x64xf32>) -> tensor<64x256xf32>
  %l = kiln.matmul %x, %et : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x256xf32>) -> tensor<?x256xf32, #kiln.dims<[n]>>
  %d = kiln.div %l, %c : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<f32>) -> tensor<?x256xf32, #kiln.dims<[n]>>
  %t = kiln.tanh %d : tensor<?x256xf32, #kiln.dims<[n]>>
  %s = kiln.mul %t, %c : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<f32>) -> tensor<?x256xf32, #kiln.dims<[n]>>
  %loss = kiln.cross_entropy %s, %y {ignore_index = 7 : i64} : (tensor<?x256xf32, #kiln.dims<[n]>>,
      tensor<?xi64, #kiln.dims<[n]>>) -> tensor<f32>
  return %loss : tensor<f32>
}

// Refused: logits used twice, a sum reduction, an add after the matmul
// (a LoRA adapter on the head), a reshape that moves the vocabulary.
// CHECK-LABEL: func.func @refused
// CHECK-NOT: linear_cross_entropy
// CHECK: kiln.cross_entropy
// CHECK: kiln.cross_entropy
// CHECK: kiln.cross_entropy
// CHECK: kiln.cross_entropy
// CHECK-NOT: linear_cross_entropy
// CHECK: return
func.func @refused(%h: tensor<8x64xf32>, %y: tensor<8xi64>, %b: tensor<8x256xf32>, %b2: tensor<2x8xi64>)
    -> (tensor<f32>, tensor<8x256xf32>, tensor<f32>, tensor<f32>, tensor<f32>) {
  %w = kiln.parameter "w" trainable : tensor<64x256xf32>
  %l = kiln.matmul %h, %w : (tensor<8x64xf32>, tensor<64x256xf32>) -> tensor<8x256xf32>
  %a = kiln.cross_entropy %l, %y : (tensor<8x256xf32>, tensor<8xi64>) -> tensor<f32>
  %l2 = kiln.matmul %h, %w : (tensor<8x64xf32>, tensor<64x256xf32>) -> tensor<8x256xf32>
  %s = kiln.cross_entropy %l2, %y {reduction = #kiln.reduction<sum>} : (tensor<8x256xf32>, tensor<8xi64>) -> tensor<f32>
  %l3 = kiln.matmul %h, %w : (tensor<8x64xf32>, tensor<64x256xf32>) -> tensor<8x256xf32>
  %z = kiln.add %l3, %b : (tensor<8x256xf32>, tensor<8x256xf32>) -> tensor<8x256xf32>
  %c = kiln.cross_entropy %z, %y : (tensor<8x256xf32>, tensor<8xi64>) -> tensor<f32>
  %l4 = kiln.matmul %h, %w : (tensor<8x64xf32>, tensor<64x256xf32>) -> tensor<8x256xf32>
  %m = kiln.reshape %l4 : tensor<8x256xf32> -> tensor<16x128xf32>
  %y2 = kiln.reshape %b2 : tensor<2x8xi64> -> tensor<16xi64>
  %d = kiln.cross_entropy %m, %y2 : (tensor<16x128xf32>, tensor<16xi64>) -> tensor<f32>
  return %a, %l, %s, %c, %d : tensor<f32>, tensor<8x256xf32>, tensor<f32>, tensor<f32>, tensor<f32>
}

// BAD: chunk-tokens must be >= 0, got -1
