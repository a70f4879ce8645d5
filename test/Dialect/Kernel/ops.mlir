// RUN: kiln-opt %s | kiln-opt | FileCheck %s
// RUN: kiln-opt %s --mlir-print-op-generic | kiln-opt | FileCheck %s

// CHECK-LABEL: kiln_kernel.kernel @k0 <row> symbols ["n"]
// CHECK: kiln.softmax
// CHECK: kiln_kernel.yield
kiln_kernel.kernel @k0 <row> symbols ["n"] {
^bb0(%x: tensor<?x64xf32, #kiln.dims<[n]>>):
  %y = kiln.softmax %x {axis = 1 : i64} : tensor<?x64xf32, #kiln.dims<[n]>>
  kiln_kernel.yield %y : tensor<?x64xf32, #kiln.dims<[n]>>
}

// CHECK-LABEL: func.func @step
// CHECK: %[[W:.+]] = kiln_kernel.weight "w" : !kiln_kernel.buffer<tensor<64x64xbf16>>
// CHECK: %[[C:.+]] = kiln_kernel.constant dense<1.000000e+00> : tensor<f32> : !kiln_kernel.buffer<tensor<f32>>
// CHECK: %[[A:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x64xbf16, #kiln.dims<[n]>>>
// CHECK: kiln_kernel.gemm %{{.+}}, %[[W]] -> %[[A]] m = #kiln.expr<n> n = #kiln.expr<64> k = #kiln.expr<64> batch = #kiln.expr<1> strides = #kiln.dims<[0, 0, 0]> epilogue <none> compute f32 {trans_b}
// CHECK: %[[V:.+]] = kiln_kernel.view %[[A]] : !kiln_kernel.buffer<tensor<?x64xbf16, #kiln.dims<[n]>>> -> !kiln_kernel.buffer<tensor<?x4x16xbf16, #kiln.dims<[n]>>>
// CHECK: kiln_kernel.fill %{{.+}}, 0.000000e+00
// CHECK: kiln_kernel.copy %{{.+}} -> %{{.+}}
// CHECK: kiln_kernel.launch @k0 ins(%{{.+}} : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>) outs(%{{.+}} : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>) items = #kiln.expr<n> per 1 block 256 shared #kiln.expr<0>
func.func @step(%x: !kiln_kernel.buffer<tensor<?x64xbf16, #kiln.dims<[n]>>>, %f: !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>) -> !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>> {
  %w = kiln_kernel.weight "w" : !kiln_kernel.buffer<tensor<64x64xbf16>>
  %c = kiln_kernel.constant dense<1.0> : tensor<f32> : !kiln_kernel.buffer<tensor<f32>>
  %a = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x64xbf16, #kiln.dims<[n]>>>
  kiln_kernel.gemm %x, %w -> %a m = #kiln.expr<n> n = #kiln.expr<64> k = #kiln.expr<64> batch = #kiln.expr<1> strides = #kiln.dims<[0, 0, 0]> epilogue <none> compute f32 {trans_b} : !kiln_kernel.buffer<tensor<?x64xbf16, #kiln.dims<[n]>>>, !kiln_kernel.buffer<tensor<64x64xbf16>> -> !kiln_kernel.buffer<tensor<?x64xbf16, #kiln.dims<[n]>>>
  %v = kiln_kernel.view %a : !kiln_kernel.buffer<tensor<?x64xbf16, #kiln.dims<[n]>>> -> !kiln_kernel.buffer<tensor<?x4x16xbf16, #kiln.dims<[n]>>>
  %o = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>
  kiln_kernel.fill %o, 0.0 : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>
  kiln_kernel.copy %f -> %o : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>> -> !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>
  kiln_kernel.launch @k0 ins(%f : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>) outs(%o : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>) items = #kiln.expr<n> per 1 block 256 shared #kiln.expr<0>
  return %o : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>
}

// CHECK-LABEL: func.func @fused
// CHECK: kiln_kernel.fusion <loop>(%{{.+}}) : (tensor<8xf32>) -> tensor<8xf32>
func.func @fused(%x: tensor<8xf32>) -> tensor<8xf32> {
  %0 = kiln_kernel.fusion <loop>(%x) : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>):
    %e = kiln.exp %a : tensor<8xf32>
    kiln_kernel.yield %e : tensor<8xf32>
  }
  return %0 : tensor<8xf32>
}

// A K-concatenated LoRA GEMM: t = x A^T written beside x in [x | t] (ldc),
// then [x | t] against [W ; B] as one GEMM.
// CHECK-LABEL: func.func @columns
// CHECK: %[[X:.+]] = kiln_kernel.view %[[XT:.+]] {offset = #kiln.expr<0>, row_stride = #kiln.expr<72>} : !kiln_kernel.buffer<tensor<?x72xbf16, #kiln.dims<[n]>>> -> !kiln_kernel.buffer<tensor<?x64xbf16, #kiln.dims<[n]>>>
// CHECK: %[[T:.+]] = kiln_kernel.view %[[XT]] {offset = #kiln.expr<64>, row_stride = #kiln.expr<72>}
// CHECK: kiln_kernel.gemm %[[X]], %{{.+}} -> %[[T]] {{.*}} {lds = #kiln.dims<[72, 64, 72]>, trans_b}
func.func @columns(%a: !kiln_kernel.buffer<tensor<8x64xbf16>>, %w: !kiln_kernel.buffer<tensor<72x32xbf16>>) {
  %xt = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x72xbf16, #kiln.dims<[n]>>>
  %x = kiln_kernel.view %xt {offset = #kiln.expr<0>, row_stride = #kiln.expr<72>} : !kiln_kernel.buffer<tensor<?x72xbf16, #kiln.dims<[n]>>> -> !kiln_kernel.buffer<tensor<?x64xbf16, #kiln.dims<[n]>>>
  %t = kiln_kernel.view %xt {offset = #kiln.expr<64>, row_stride = #kiln.expr<72>} : !kiln_kernel.buffer<tensor<?x72xbf16, #kiln.dims<[n]>>> -> !kiln_kernel.buffer<tensor<?x8xbf16, #kiln.dims<[n]>>>
  kiln_kernel.gemm %x, %a -> %t m = #kiln.expr<n> n = #kiln.expr<8> k = #kiln.expr<64> batch = #kiln.expr<1> strides = #kiln.dims<[0, 0, 0]> epilogue <none> compute f32 {trans_b, lds = #kiln.dims<[72, 64, 72]>} : !kiln_kernel.buffer<tensor<?x64xbf16, #kiln.dims<[n]>>>, !kiln_kernel.buffer<tensor<8x64xbf16>> -> !kiln_kernel.buffer<tensor<?x8xbf16, #kiln.dims<[n]>>>
  %y = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x32xbf16, #kiln.dims<[n]>>>
  kiln_kernel.gemm %xt, %w -> %y m = #kiln.expr<n> n = #kiln.expr<32> k = #kiln.expr<72> batch = #kiln.expr<1> strides = #kiln.dims<[0, 0, 0]> epilogue <none> compute f32 : !kiln_kernel.buffer<tensor<?x72xbf16, #kiln.dims<[n]>>>, !kiln_kernel.buffer<tensor<72x32xbf16>> -> !kiln_kernel.buffer<tensor<?x32xbf16, #kiln.dims<[n]>>>
  return
}
