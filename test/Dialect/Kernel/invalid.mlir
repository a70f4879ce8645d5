// RUN: kiln-opt %s --split-input-file --verify-diagnostics

func.func @yield_mismatch(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{yields}}
  %0 = kiln_kernel.fusion <loop>(%x) : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<8xf32>):
    %e = kiln.cast %a : tensor<8xf32> -> tensor<8xbf16>
    kiln_kernel.yield %e : tensor<8xbf16>
  }
  return %0 : tensor<8xf32>
}

// -----

func.func @arg_mismatch(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{block argument type}}
  %0 = kiln_kernel.fusion <loop>(%x) : (tensor<8xf32>) -> tensor<8xf32> {
  ^bb0(%a: tensor<4xf32>):
    kiln_kernel.yield %x : tensor<8xf32>
  }
  return %0 : tensor<8xf32>
}

// -----

func.func @view_count(%a: !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>>) {
  // expected-error @+1 {{changes the element count: [n, 64] -> [n, 32]}}
  %v = kiln_kernel.view %a : !kiln_kernel.buffer<tensor<?x64xf32, #kiln.dims<[n]>>> -> !kiln_kernel.buffer<tensor<?x32xf32, #kiln.dims<[n]>>>
  return
}

// -----

func.func @view_type(%a: !kiln_kernel.buffer<tensor<64xf32>>) {
  // expected-error @+1 {{changes the element type}}
  %v = kiln_kernel.view %a : !kiln_kernel.buffer<tensor<64xf32>> -> !kiln_kernel.buffer<tensor<64xi32>>
  return
}

// -----

func.func @gemm_int(%a: !kiln_kernel.buffer<tensor<4x4xi32>>, %c: !kiln_kernel.buffer<tensor<4x4xf32>>) {
  // expected-error @+1 {{supports f32, bf16 and f16 buffers}}
  kiln_kernel.gemm %a, %a -> %c m = #kiln.expr<4> n = #kiln.expr<4> k = #kiln.expr<4> batch = #kiln.expr<1> strides = #kiln.dims<[0, 0, 0]> epilogue <none> compute f32 : !kiln_kernel.buffer<tensor<4x4xi32>>, !kiln_kernel.buffer<tensor<4x4xi32>> -> !kiln_kernel.buffer<tensor<4x4xf32>>
  return
}

// -----

func.func @gemm_strides(%a: !kiln_kernel.buffer<tensor<4x4xf32>>) {
  // expected-error @+1 {{needs three batch strides}}
  kiln_kernel.gemm %a, %a -> %a m = #kiln.expr<4> n = #kiln.expr<4> k = #kiln.expr<4> batch = #kiln.expr<1> strides = #kiln.dims<[0, 0]> epilogue <none> compute f32 : !kiln_kernel.buffer<tensor<4x4xf32>>, !kiln_kernel.buffer<tensor<4x4xf32>> -> !kiln_kernel.buffer<tensor<4x4xf32>>
  return
}

// -----

func.func @gemm_lds_count(%a: !kiln_kernel.buffer<tensor<4x4xf32>>) {
  // expected-error @+1 {{needs three leading dimensions}}
  kiln_kernel.gemm %a, %a -> %a m = #kiln.expr<4> n = #kiln.expr<4> k = #kiln.expr<4> batch = #kiln.expr<1> strides = #kiln.dims<[0, 0, 0]> epilogue <none> compute f32 {lds = #kiln.dims<[4, 4]>} : !kiln_kernel.buffer<tensor<4x4xf32>>, !kiln_kernel.buffer<tensor<4x4xf32>> -> !kiln_kernel.buffer<tensor<4x4xf32>>
  return
}

// -----

// B is stored n x k = 4 x 2 with trans_b: a row stride of 1 overlaps its rows.
func.func @gemm_lds_narrow(%a: !kiln_kernel.buffer<tensor<4x8xf32>>, %b: !kiln_kernel.buffer<tensor<4x2xf32>>, %c: !kiln_kernel.buffer<tensor<4x4xf32>>) {
  // expected-error @+1 {{leading dimension b = 1 is less than the matrix's width 2}}
  kiln_kernel.gemm %a, %b -> %c m = #kiln.expr<4> n = #kiln.expr<4> k = #kiln.expr<2> batch = #kiln.expr<1> strides = #kiln.dims<[0, 0, 0]> epilogue <none> compute f32 {trans_b, lds = #kiln.dims<[8, 1, 4]>} : !kiln_kernel.buffer<tensor<4x8xf32>>, !kiln_kernel.buffer<tensor<4x2xf32>> -> !kiln_kernel.buffer<tensor<4x4xf32>>
  return
}

// -----

func.func @view_stride_narrow(%a: !kiln_kernel.buffer<tensor<4x8xf32>>) {
  // expected-error @+1 {{row stride 2 is less than the width 4}}
  %v = kiln_kernel.view %a {row_stride = #kiln.expr<2>} : !kiln_kernel.buffer<tensor<4x8xf32>> -> !kiln_kernel.buffer<tensor<4x4xf32>>
  return
}

// -----

// Columns 6..9 of a 4 x 8 buffer: the last row's block ends at 3 * 8 + 6 + 4 = 34 > 32.
func.func @view_past_end(%a: !kiln_kernel.buffer<tensor<4x8xf32>>) {
  // expected-error @+1 {{reaches 2 elements past the end of its source}}
  %v = kiln_kernel.view %a {offset = #kiln.expr<6>, row_stride = #kiln.expr<8>} : !kiln_kernel.buffer<tensor<4x8xf32>> -> !kiln_kernel.buffer<tensor<4x4xf32>>
  return
}

// -----

func.func @view_negative_offset(%a: !kiln_kernel.buffer<tensor<4x8xf32>>) {
  // expected-error @+1 {{has a negative offset}}
  %v = kiln_kernel.view %a {offset = #kiln.expr<-1>, row_stride = #kiln.expr<8>} : !kiln_kernel.buffer<tensor<4x8xf32>> -> !kiln_kernel.buffer<tensor<4x4xf32>>
  return
}
