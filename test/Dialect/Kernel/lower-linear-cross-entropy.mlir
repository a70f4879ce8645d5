// RUN: kiln-opt %s --split-input-file --kiln-fuse --kiln-lower-to-step | FileCheck %s

// The fused LM head stays one op, outside every kernel: its buffers, one
// fp32 chunk [chunk_tokens, V], the per-row stats [N + 1] and, for a bf16
// weight gradient, an fp32 accumulator.
// CHECK-LABEL: func.func @head_bf16
// CHECK-DAG: %[[L:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<f32>>
// CHECK-DAG: %[[DH:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x64xbf16, #kiln.dims<[n]>>>
// CHECK-DAG: %[[DW:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<64x256xbf16>>
// CHECK-DAG: %[[ACC:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<64x256xf32>>
// CHECK-DAG: %[[C:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<16x256xf32>>
// CHECK-DAG: %[[S:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?xf32, #kiln.dims<[n + 1]>>>
// CHECK: kiln_kernel.linear_cross_entropy %arg0, %arg1, %arg2 grad %arg3 -> %[[L]] hidden_grad %[[DH]] weight_grad %[[DW]] chunk %[[C]] stats %[[S]] weight_accum %[[ACC]] {chunk_tokens = 16 : i64, ignore_index = -100 : i64, softcap = 0.000000e+00 : f64}
// CHECK-NOT: kiln_kernel.launch
// CHECK: return %[[L]], %[[DH]], %[[DW]]
func.func @head_bf16(%h: tensor<?x64xbf16, #kiln.dims<[n]>>, %w: tensor<64x256xbf16>,
                     %y: tensor<?xi64, #kiln.dims<[n]>>, %g: tensor<f32>)
    -> (tensor<f32>, tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x256xbf16>) {
  %r:3 = kiln.linear_cross_entropy_grad %h, %w, %y, %g {chunk_tokens = 16 : i64}
      : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x256xbf16>, tensor<?xi64, #kiln.dims<[n]>>, tensor<f32>)
      -> (tensor<f32>, tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x256xbf16>)
  return %r#0, %r#1, %r#2 : tensor<f32>, tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x256xbf16>
}

// -----

// bf16_logits: the chunk is bf16 (the gradient overwrites it element for
// element); stats and the accumulator stay fp32.
// CHECK-LABEL: func.func @head_bf16_logits
// CHECK-DAG: %[[ACC:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<64x256xf32>>
// CHECK-DAG: %[[C:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<16x256xbf16>>
// CHECK-DAG: %[[S:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?xf32, #kiln.dims<[n + 1]>>>
// CHECK: kiln_kernel.linear_cross_entropy {{.+}} chunk %[[C]] stats %[[S]] weight_accum %[[ACC]]
func.func @head_bf16_logits(%h: tensor<?x64xbf16, #kiln.dims<[n]>>, %w: tensor<64x256xbf16>,
                            %y: tensor<?xi64, #kiln.dims<[n]>>, %g: tensor<f32>)
    -> (tensor<f32>, tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x256xbf16>) {
  %r:3 = kiln.linear_cross_entropy_grad %h, %w, %y, %g {bf16_logits, chunk_tokens = 16 : i64}
      : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x256xbf16>, tensor<?xi64, #kiln.dims<[n]>>, tensor<f32>)
      -> (tensor<f32>, tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x256xbf16>)
  return %r#0, %r#1, %r#2 : tensor<f32>, tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x256xbf16>
}

// -----

// A frozen tied head [V, H] with a soft-cap: no weight gradient, no
// accumulator; the forward-only op has no grad.
// CHECK-LABEL: func.func @frozen_tied
// CHECK: kiln_kernel.linear_cross_entropy %arg0, %arg1, %arg2 grad %arg3 -> %{{.+}} hidden_grad %{{.+}} chunk %{{.+}} stats %{{.+}} {chunk_tokens = 8 : i64, ignore_index = -100 : i64, softcap = 3.000000e+01 : f64, transpose_weight}
// CHECK: kiln_kernel.linear_cross_entropy %arg0, %arg1, %arg2 -> %{{.+}} chunk %{{.+}} stats %{{.+}} {chunk_tokens = 8
func.func @frozen_tied(%h: tensor<?x64xf32, #kiln.dims<[n]>>, %e: tensor<256x64xf32>,
                       %y: tensor<?xi64, #kiln.dims<[n]>>, %g: tensor<f32>)
    -> (tensor<f32>, tensor<?x64xf32, #kiln.dims<[n]>>, tensor<f32>) {
  %r:2 = kiln.linear_cross_entropy_grad %h, %e, %y, %g {chunk_tokens = 8 : i64, softcap = 30.0 : f64, transpose_weight}
      : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<256x64xf32>, tensor<?xi64, #kiln.dims<[n]>>, tensor<f32>)
      -> (tensor<f32>, tensor<?x64xf32, #kiln.dims<[n]>>)
  %l = kiln.linear_cross_entropy %h, %e, %y {chunk_tokens = 8 : i64, softcap = 30.0 : f64, transpose_weight}
      : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<256x64xf32>, tensor<?xi64, #kiln.dims<[n]>>) -> tensor<f32>
  return %r#0, %r#1, %l : tensor<f32>, tensor<?x64xf32, #kiln.dims<[n]>>, tensor<f32>
}
