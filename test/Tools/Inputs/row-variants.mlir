// Three row-kernel layouts (lib/Codegen/RowKernel.cpp): 64 f32 columns, a
// warp per row; 2048, a block per row (vectorized); 1001 (no 4-vector
// split), the scalar template.
func.func @main(%x: tensor<?x64xf32, #kiln.dims<[n]>> {kiln.name = "x"},
                %labels: tensor<?xi64, #kiln.dims<[n]>> {kiln.name = "labels"})
    -> (tensor<f32> {kiln.name = "loss"}) {
  %g = kiln.parameter "g" trainable : tensor<64xf32>
  %w = kiln.parameter "w" trainable : tensor<64x2048xf32>
  %g2 = kiln.parameter "g2" trainable : tensor<2048xf32>
  %w2 = kiln.parameter "w2" trainable : tensor<2048x1001xf32>
  %n = kiln.rms_norm %x, %g {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %h = kiln.matmul %n, %w : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x2048xf32>) -> tensor<?x2048xf32, #kiln.dims<[n]>>
  %m = kiln.rms_norm %h, %g2 {axis = 1 : i64, epsilon = 1.0e-6 : f64} : (tensor<?x2048xf32, #kiln.dims<[n]>>, tensor<2048xf32>) -> tensor<?x2048xf32, #kiln.dims<[n]>>
  %logits = kiln.matmul %m, %w2 : (tensor<?x2048xf32, #kiln.dims<[n]>>, tensor<2048x1001xf32>) -> tensor<?x1001xf32, #kiln.dims<[n]>>
  %loss = kiln.cross_entropy %logits, %labels : (tensor<?x1001xf32, #kiln.dims<[n]>>, tensor<?xi64, #kiln.dims<[n]>>) -> tensor<f32>
  return %loss : tensor<f32>
}
