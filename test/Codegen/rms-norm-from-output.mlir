// The row kernels of kiln-norm-grad-from-output: the forward stores each
// row's rstd once (lane 0 of the row's warp) besides the normalized output;
// the gradient reads rstd per row and xhat = output * (1 / divisor) per
// element (the reciprocal hoisted out of the row loop),
// never the norm's input. Both compile with NVRTC.
// RUN: rm -rf %t && kiln-opt %s --kiln-fuse --kiln-lower-to-step -o %t.mlir
// RUN: kiln compile %t.mlir --emit=cuda -o %t
// RUN: FileCheck %s --check-prefix=FWD < %t/fwd_k0_rms_norm_with_rstd_cast.cu
// RUN: FileCheck %s --check-prefix=BWD < %t/bwd_k0_rms_norm_grad_from_output.cu

// FWD: //   out0: [n] <- kiln.rms_norm_with_rstd
// FWD: const float rstd = rsqrtf(ms + 1.000000000e-05f);
// FWD-NEXT: if (tr == 0) {
// FWD-NEXT: out0[row] = (float)(rstd);
// FWD: const float {{v[0-9]+}} = {{v[0-9]+}} * rstd * 1.000000000e+00f;
func.func @fwd(%x: tensor<?x64xf32, #kiln.dims<[n]>>) -> (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?xf32, #kiln.dims<[n]>>) {
  %w = kiln.constant dense<1.0> : tensor<64xf32>
  %y, %r = kiln.rms_norm_with_rstd %x, %w {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>) -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?xf32, #kiln.dims<[n]>>)
  %yb = kiln.cast %y : tensor<?x64xf32, #kiln.dims<[n]>> -> tensor<?x64xbf16, #kiln.dims<[n]>>
  return %yb, %r : tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?xf32, #kiln.dims<[n]>>
}

// BWD: const __nv_bfloat16 *__restrict__ in0,
// BWD: const float rstd = {{v[0-9]+}};
// BWD: mgx += {{v[0-9]+}} * 1.000000000e+00f * ({{v[0-9]+}} * (1.0f / {{v[0-9]+}}));
// BWD: const float xhat{{[0-9]+}} = ({{v[0-9]+}} * (1.0f / {{v[0-9]+}}));
// BWD: rstd * ({{v[0-9]+}} * 1.000000000e+00f - xhat{{[0-9]+}} * mgx)
func.func @bwd(%h: tensor<?x64xbf16, #kiln.dims<[n]>>, %gamma: tensor<64xbf16>, %r: tensor<?xf32, #kiln.dims<[n]>>, %dy: tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<?x64xf32, #kiln.dims<[n]>> {
  %w = kiln.constant dense<1.0> : tensor<64xf32>
  %dx, %dw = kiln.rms_norm_grad_from_output %h, %gamma, %w, %r, %dy {axis = 1 : i64} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64xbf16>, tensor<64xf32>, tensor<?xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64xf32>)
  return %dx : tensor<?x64xf32, #kiln.dims<[n]>>
}
