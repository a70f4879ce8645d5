//===- Passes.td - Graph dialect passes --------------------*- tablegen -*-===//

#ifndef KILN_GRAPH_PASSES_TD
#define KILN_GRAPH_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Import cleanup
//===----------------------------------------------------------------------===//

def RaiseCompositesPass : Pass<"kiln-raise-composites", "::mlir::func::FuncOp"> {
  let summary = "Recognize RMSNorm, SiLU and eager attention spelled as primitives";
  let description = [{
    Exporters decompose the ops Kiln treats as units. This pass rebuilds them
    so autodiff uses their fused-friendly gradients and fusion sees them
    whole. Anything that does not match exactly is left as it is, which is
    still correct.

    - `x * sigmoid(x)` becomes `kiln.silu`.
    - `x * reciprocal(sqrt(mean(x^2, trailing dims) + eps))` (or `rsqrt`),
      optionally times a weight, becomes `kiln.rms_norm`.
    - `softmax(q k^T * scale + mask) v` over rank-4 tensors becomes
      `kiln.attention`; a grouped-query `repeat_kv` expansion of k and v
      (unsqueeze, expand, reshape) is dropped because the op reads kv heads
      directly.

    Before:
    ```mlir
    %s = kiln.sigmoid %x : tensor<?x176xf32, #kiln.dims<[n]>>
    %y = kiln.mul %x, %s : (tensor<?x176xf32, #kiln.dims<[n]>>,
        tensor<?x176xf32, #kiln.dims<[n]>>) -> tensor<?x176xf32, #kiln.dims<[n]>>
    %p = kiln.pow %h, %two : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<f32>)
        -> tensor<?x64xf32, #kiln.dims<[n]>>
    %m = kiln.reduce_mean %p {axes = array<i64: 1>, keepdim}
        : (tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<?x1xf32, #kiln.dims<[n]>>
    %v = kiln.add %m, %eps : (tensor<?x1xf32, #kiln.dims<[n]>>, tensor<f32>)
        -> tensor<?x1xf32, #kiln.dims<[n]>>
    %r = kiln.rsqrt %v : tensor<?x1xf32, #kiln.dims<[n]>>
    %z = kiln.mul %h, %r : (tensor<?x64xf32, #kiln.dims<[n]>>,
        tensor<?x1xf32, #kiln.dims<[n]>>) -> tensor<?x64xf32, #kiln.dims<[n]>>
    %o = kiln.mul %w, %z : (tensor<64xf32>, tensor<?x64xf32, #kiln.dims<[n]>>)
        -> tensor<?x64xf32, #kiln.dims<[n]>>
    ```
    After:
    ```mlir
    %y = kiln.silu %x : tensor<?x176xf32, #kiln.dims<[n]>>
    %o = kiln.rms_norm %h, %w {axis = 1 : i64, epsilon = 9.9999999747524271E-7 : f64}
        : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>)
        -> tensor<?x64xf32, #kiln.dims<[n]>>
    ```
  }];
  let dependentDialects = ["::kiln::GraphDialect"];
}

#endif // KILN_GRAPH_PASSES_TD
