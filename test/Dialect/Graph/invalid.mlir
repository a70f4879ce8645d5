// RUN: kiln-opt %s --split-input-file --verify-diagnostics

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

// expected-error @+1 {{#kiln.dims has 1 entries but the shape has 2 dynamic dims}}
func.func @dims_count(%a: tensor<?x?xf32, #kiln.dims<[seq]>>)

// -----

// expected-error @+1 {{#kiln.dims has 1 entries but the shape has 0 dynamic dims}}
func.func @dims_count_static(%a: tensor<4xf32, #kiln.dims<[seq]>>)

// -----

// expected-error @+1 {{#kiln.dims entry is the constant 4; write it as a static size}}
func.func @dims_constant(%a: tensor<?x?xf32, #kiln.dims<[seq, 4]>>)

// -----

// An expression that cancels to a constant is a constant too.
// expected-error @+1 {{#kiln.dims entry is the constant 0; write it as a static size}}
func.func @dims_cancels(%a: tensor<?xf32, #kiln.dims<[seq - 1*seq]>>)

// -----

// expected-error @+1 {{#kiln.dims has no known entry; leave the encoding out}}
func.func @dims_all_unknown(%a: tensor<?x?xf32, #kiln.dims<[?, ?]>>)

// -----

// expected-error @+1 {{expected '+' or '-' between terms}}
func.func @expr_juxtaposed() attributes {e = #kiln.expr<seq 2>}

// -----

// expected-error @+1 {{size expression term has more than 4 factors}}
func.func @expr_degree() attributes {e = #kiln.expr<a*b*c*d*e>}

// -----

// expected-error @+1 {{expected a size expression}}
func.func @expr_empty() attributes {e = #kiln.expr<>}

// -----

// expected-error @+1 {{expected a size expression term}}
func.func @expr_trailing_plus() attributes {e = #kiln.expr<seq + >}

// -----

//===----------------------------------------------------------------------===//
// Sources
//===----------------------------------------------------------------------===//

func.func @constant_not_tensor() {
  // expected-error @+1 {{result #0 must be ranked tensor of any type values, but got 'vector<4xf32>'}}
  %0 = kiln.constant dense<1.0> : vector<4xf32>
  return
}

// -----

func.func @constant_result_type() {
  // expected-error @+2 {{'kiln.constant' op inferred type(s) 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<4xf16>'}}
  // expected-error @+1 {{'kiln.constant' op failed to infer returned types}}
  %0 = "kiln.constant"() <{value = dense<1.0> : tensor<4xf32>}> : () -> tensor<4xf16>
  return
}

// -----

func.func @parameter_unranked() {
  // expected-error @+1 {{result #0 must be ranked tensor of any type values, but got 'tensor<*xf32>'}}
  %0 = "kiln.parameter"() <{name = "w"}> : () -> tensor<*xf32>
  return
}

// -----

func.func @iota_dim() {
  // expected-error @+1 {{iota dim 2 is out of range for rank 2}}
  %0 = kiln.iota {dim = 2 : i64} : tensor<?x4xi64, #kiln.dims<[seq]>>
  return
}

// -----

func.func @iota_bool() {
  // expected-error @+1 {{'kiln.iota' op result #0 must be ranked tensor of}}
  %0 = kiln.iota {dim = 0 : i64} : tensor<4xi1>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Elementwise unary
//===----------------------------------------------------------------------===//

func.func @neg_bool(%x: tensor<4xi1>) {
  // expected-error @+1 {{'kiln.neg' op operand #0 must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float or 8-bit signless integer or 16-bit signless integer or 32-bit signless integer or 64-bit signless integer values, but got 'tensor<4xi1>'}}
  %0 = kiln.neg %x : tensor<4xi1>
  return
}

// -----

func.func @abs_unsigned(%x: tensor<4xui8>) {
  // expected-error @+1 {{'kiln.abs' op operand #0 must be ranked tensor of}}
  %0 = kiln.abs %x : tensor<4xui8>
  return
}

// -----

func.func @exp_int(%x: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.exp' op operand #0 must be ranked tensor of 16-bit float or bfloat16 type or 32-bit float or 64-bit float values, but got 'tensor<4xi32>'}}
  %0 = kiln.exp %x : tensor<4xi32>
  return
}

// -----

func.func @log_int(%x: tensor<?xi64, #kiln.dims<[seq]>>) {
  // expected-error @+1 {{'kiln.log' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.log %x : tensor<?xi64, #kiln.dims<[seq]>>
  return
}

// -----

func.func @sqrt_int(%x: tensor<4xi8>) {
  // expected-error @+1 {{'kiln.sqrt' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.sqrt %x : tensor<4xi8>
  return
}

// -----

func.func @rsqrt_int(%x: tensor<4xi16>) {
  // expected-error @+1 {{'kiln.rsqrt' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.rsqrt %x : tensor<4xi16>
  return
}

// -----

func.func @reciprocal_int(%x: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.reciprocal' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.reciprocal %x : tensor<4xi32>
  return
}

// -----

func.func @tanh_int(%x: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.tanh' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.tanh %x : tensor<4xi32>
  return
}

// -----

func.func @sigmoid_int(%x: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.sigmoid' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.sigmoid %x : tensor<4xi32>
  return
}

// -----

func.func @silu_int(%x: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.silu' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.silu %x : tensor<4xi32>
  return
}

// -----

func.func @relu_int(%x: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.relu' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.relu %x : tensor<4xi32>
  return
}

// -----

func.func @erf_int(%x: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.erf' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.erf %x : tensor<4xi32>
  return
}

// -----

func.func @sin_int(%x: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.sin' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.sin %x : tensor<4xi32>
  return
}

// -----

func.func @cos_int(%x: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.cos' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.cos %x : tensor<4xi32>
  return
}

// -----

func.func @not_float(%x: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.not' op operand #0 must be ranked tensor of 1-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = kiln.not %x : tensor<4xf32>
  return
}

// -----

func.func @exp_result_type(%x: tensor<?xf32, #kiln.dims<[seq]>>) {
  // expected-error @+1 {{'kiln.exp' op requires the same encoding for all operands and results}}
  %0 = "kiln.exp"(%x) : (tensor<?xf32, #kiln.dims<[seq]>>) -> tensor<?xf32, #kiln.dims<[batch]>>
  return
}

// -----

func.func @stop_gradient_result_type(%x: tensor<4xi64>) {
  // expected-error @+1 {{'kiln.stop_gradient' op requires the same type for all operands and results}}
  %0 = "kiln.stop_gradient"(%x) : (tensor<4xi64>) -> tensor<4xi32>
  return
}

// -----

func.func @gelu_int(%x: tensor<4xi32>) {
  // expected-error @+1 {{'kiln.gelu' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.gelu %x : tensor<4xi32>
  return
}

// -----

func.func @gelu_approximation(%x: tensor<4xf32>) {
  // expected-error @+2 {{expected ::kiln::GeluApproximation to be one of: none, tanh}}
  // expected-error @+1 {{failed to parse Kiln_GeluApproximationAttr parameter 'value'}}
  %0 = kiln.gelu %x {approximate = #kiln.gelu<erf>} : tensor<4xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Elementwise binary
//===----------------------------------------------------------------------===//

func.func @add_broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+2 {{dims 3 and 4 do not broadcast}}
  // expected-error @+1 {{'kiln.add' op failed to infer returned types}}
  %0 = kiln.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return
}

// -----

// Symbolic dims elsewhere do not hide a static clash.
func.func @sub_broadcast_symbolic(%a: tensor<?x3xf32, #kiln.dims<[seq]>>, %b: tensor<?x4xf32, #kiln.dims<[seq]>>) {
  // expected-error @+2 {{dims 3 and 4 do not broadcast}}
  // expected-error @+1 {{'kiln.sub' op failed to infer returned types}}
  %0 = kiln.sub %a, %b : (tensor<?x3xf32, #kiln.dims<[seq]>>, tensor<?x4xf32, #kiln.dims<[seq]>>) -> tensor<?x4xf32, #kiln.dims<[seq]>>
  return
}

// -----

func.func @mul_element_types(%a: tensor<4xf32>, %b: tensor<4xf16>) {
  // expected-error @+2 {{operand element types differ: 'f32' vs 'f16'}}
  // expected-error @+1 {{'kiln.mul' op failed to infer returned types}}
  %0 = kiln.mul %a, %b : (tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return
}

// -----

func.func @div_result_shape(%a: tensor<4xf32>, %b: tensor<f32>) {
  // expected-error @+2 {{'kiln.div' op inferred type(s) 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<5xf32>'}}
  // expected-error @+1 {{'kiln.div' op failed to infer returned types}}
  %0 = kiln.div %a, %b : (tensor<4xf32>, tensor<f32>) -> tensor<5xf32>
  return
}

// -----

func.func @pow_bool(%a: tensor<4xi1>) {
  // expected-error @+1 {{'kiln.pow' op operand #0 must be ranked tensor of}}
  %0 = kiln.pow %a, %a : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  return
}

// -----

// A symbolic result dim must be the inferred one, not another symbol.
func.func @max_result_symbol(%a: tensor<?xf32, #kiln.dims<[seq]>>) {
  // expected-error @+2 {{'kiln.max' op inferred type(s) 'tensor<?xf32, #kiln.dims<[seq]>>' are incompatible with return type(s) of operation 'tensor<?xf32, #kiln.dims<[seq + 1]>>'}}
  // expected-error @+1 {{'kiln.max' op failed to infer returned types}}
  %0 = kiln.max %a, %a : (tensor<?xf32, #kiln.dims<[seq]>>, tensor<?xf32, #kiln.dims<[seq]>>) -> tensor<?xf32, #kiln.dims<[seq + 1]>>
  return
}

// -----

func.func @min_result_element(%a: tensor<4xf32>) {
  // expected-error @+2 {{'kiln.min' op inferred type(s) 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<4xf64>'}}
  // expected-error @+1 {{'kiln.min' op failed to infer returned types}}
  %0 = kiln.min %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf64>
  return
}

// -----

// Comparisons produce i1.
func.func @eq_result_element(%a: tensor<4xi64>) {
  // expected-error @+2 {{'kiln.eq' op inferred type(s) 'tensor<4xi1>' are incompatible with return type(s) of operation 'tensor<4xi64>'}}
  // expected-error @+1 {{'kiln.eq' op failed to infer returned types}}
  %0 = kiln.eq %a, %a : (tensor<4xi64>, tensor<4xi64>) -> tensor<4xi64>
  return
}

// -----

func.func @ne_element_types(%a: tensor<4xi64>, %b: tensor<4xi32>) {
  // expected-error @+2 {{operand element types differ: 'i64' vs 'i32'}}
  // expected-error @+1 {{'kiln.ne' op failed to infer returned types}}
  %0 = kiln.ne %a, %b : (tensor<4xi64>, tensor<4xi32>) -> tensor<4xi1>
  return
}

// -----

func.func @lt_broadcast(%a: tensor<2xf32>, %b: tensor<3xf32>) {
  // expected-error @+2 {{dims 2 and 3 do not broadcast}}
  // expected-error @+1 {{'kiln.lt' op failed to infer returned types}}
  %0 = kiln.lt %a, %b : (tensor<2xf32>, tensor<3xf32>) -> tensor<3xi1>
  return
}

// -----

func.func @le_unranked(%a: tensor<*xf32>) {
  // expected-error @+1 {{'kiln.le' op operand #0 must be ranked tensor of any type values, but got 'tensor<*xf32>'}}
  %0 = kiln.le %a, %a : (tensor<*xf32>, tensor<*xf32>) -> tensor<*xi1>
  return
}

// -----

func.func @gt_result_rank(%a: tensor<4xf32>) {
  // expected-error @+2 {{'kiln.gt' op inferred type(s) 'tensor<4xi1>' are incompatible with return type(s) of operation 'tensor<1x4xi1>'}}
  // expected-error @+1 {{'kiln.gt' op failed to infer returned types}}
  %0 = kiln.gt %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<1x4xi1>
  return
}

// -----

func.func @ge_broadcast(%a: tensor<2x1xf32>, %b: tensor<3x5xf32>) {
  // expected-error @+2 {{dims 2 and 3 do not broadcast}}
  // expected-error @+1 {{'kiln.ge' op failed to infer returned types}}
  %0 = kiln.ge %a, %b : (tensor<2x1xf32>, tensor<3x5xf32>) -> tensor<3x5xi1>
  return
}

// -----

func.func @and_float(%a: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.and' op operand #0 must be ranked tensor of 1-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = kiln.and %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @or_int(%a: tensor<4xi1>, %b: tensor<4xi8>) {
  // expected-error @+1 {{'kiln.or' op operand #1 must be ranked tensor of 1-bit signless integer values, but got 'tensor<4xi8>'}}
  %0 = kiln.or %a, %b : (tensor<4xi1>, tensor<4xi8>) -> tensor<4xi1>
  return
}

// -----

func.func @xor_broadcast(%a: tensor<4xi1>, %b: tensor<5xi1>) {
  // expected-error @+2 {{dims 4 and 5 do not broadcast}}
  // expected-error @+1 {{'kiln.xor' op failed to infer returned types}}
  %0 = kiln.xor %a, %b : (tensor<4xi1>, tensor<5xi1>) -> tensor<5xi1>
  return
}

// -----

func.func @select_condition(%c: tensor<4xf32>, %x: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.select' op operand #0 must be ranked tensor of 1-bit signless integer values, but got 'tensor<4xf32>'}}
  %0 = kiln.select %c, %x, %x : (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @select_branches(%c: tensor<4xi1>, %x: tensor<4xf32>, %y: tensor<4xf16>) {
  // expected-error @+2 {{select branches have different element types: 'f32' vs 'f16'}}
  // expected-error @+1 {{'kiln.select' op failed to infer returned types}}
  %0 = kiln.select %c, %x, %y : (tensor<4xi1>, tensor<4xf32>, tensor<4xf16>) -> tensor<4xf32>
  return
}

// -----

// The condition takes part in the broadcast.
func.func @select_condition_broadcast(%c: tensor<3xi1>, %x: tensor<2x4xf32>) {
  // expected-error @+2 {{dims 3 and 4 do not broadcast}}
  // expected-error @+1 {{'kiln.select' op failed to infer returned types}}
  %0 = kiln.select %c, %x, %x : (tensor<3xi1>, tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return
}

// -----

func.func @cast_static_shape(%x: tensor<4xi64>) {
  // expected-error @+1 {{'kiln.cast' op all non-scalar operands/results must have the same shape and base type}}
  %0 = kiln.cast %x : tensor<4xi64> -> tensor<8xf32>
  return
}

// -----

func.func @cast_symbolic_shape(%x: tensor<?xi64, #kiln.dims<[seq]>>) {
  // expected-error @+1 {{'kiln.cast' op changes the shape from [seq] to [batch]; cast only converts the element type}}
  %0 = kiln.cast %x : tensor<?xi64, #kiln.dims<[seq]>> -> tensor<?xf32, #kiln.dims<[batch]>>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Contractions, reductions, normalizations
//===----------------------------------------------------------------------===//

func.func @matmul_contraction(%x: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, %w: tensor<128x32xf32>) {
  // expected-error @+2 {{matmul contraction dim: expected 64 but got 32}}
  // expected-error @+1 {{'kiln.matmul' op failed to infer returned types}}
  %0 = kiln.matmul %x, %w {transpose_b} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<128x32xf32>) -> tensor<?x?x128xf32, #kiln.dims<[batch, seq]>>
  return
}

// -----

// Without transpose_b the same weight contracts over 128.
func.func @matmul_missing_transpose(%x: tensor<8x64xf32>, %w: tensor<128x64xf32>) {
  // expected-error @+2 {{matmul contraction dim: expected 64 but got 128}}
  // expected-error @+1 {{'kiln.matmul' op failed to infer returned types}}
  %0 = kiln.matmul %x, %w : (tensor<8x64xf32>, tensor<128x64xf32>) -> tensor<8x64xf32>
  return
}

// -----

func.func @matmul_rank(%x: tensor<64xf32>, %w: tensor<64x8xf32>) {
  // expected-error @+2 {{matmul operands need rank >= 2, got 1 and 2}}
  // expected-error @+1 {{'kiln.matmul' op failed to infer returned types}}
  %0 = kiln.matmul %x, %w : (tensor<64xf32>, tensor<64x8xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @matmul_batch(%x: tensor<2x4x8xf32>, %y: tensor<3x8x4xf32>) {
  // expected-error @+2 {{dims 2 and 3 do not broadcast}}
  // expected-error @+1 {{'kiln.matmul' op failed to infer returned types}}
  %0 = kiln.matmul %x, %y : (tensor<2x4x8xf32>, tensor<3x8x4xf32>) -> tensor<3x4x4xf32>
  return
}

// -----

func.func @matmul_element_types(%x: tensor<4x8xf32>, %y: tensor<8x4xbf16>) {
  // expected-error @+2 {{matmul element types differ: 'f32' vs 'bf16'}}
  // expected-error @+1 {{'kiln.matmul' op failed to infer returned types}}
  %0 = kiln.matmul %x, %y : (tensor<4x8xf32>, tensor<8x4xbf16>) -> tensor<4x4xf32>
  return
}

// -----

func.func @matmul_int(%x: tensor<4x8xi32>) {
  // expected-error @+1 {{'kiln.matmul' op operand #0 must be ranked tensor of 16-bit float}}
  %0 = kiln.matmul %x, %x {transpose_b} : (tensor<4x8xi32>, tensor<4x8xi32>) -> tensor<4x4xi32>
  return
}

// -----

func.func @reduce_sum_axis(%x: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) {
  // expected-error @+2 {{reduction axis 3 is out of range for rank 3}}
  // expected-error @+1 {{'kiln.reduce_sum' op failed to infer returned types}}
  %0 = kiln.reduce_sum %x {axes = array<i64: 3>} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  return
}

// -----

func.func @reduce_mean_axes_order(%x: tensor<2x3x4xf32>) {
  // expected-error @+2 {{reduction axis must be strictly increasing without repeats}}
  // expected-error @+1 {{'kiln.reduce_mean' op failed to infer returned types}}
  %0 = kiln.reduce_mean %x {axes = array<i64: 2, 1>} : (tensor<2x3x4xf32>) -> tensor<2xf32>
  return
}

// -----

func.func @reduce_max_no_axes(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{reduction needs at least one axis}}
  // expected-error @+1 {{'kiln.reduce_max' op failed to infer returned types}}
  %0 = kiln.reduce_max %x {axes = array<i64>} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return
}

// -----

// keepdim keeps the reduced dim as 1.
func.func @reduce_sum_keepdim(%x: tensor<?x64xf32, #kiln.dims<[seq]>>) {
  // expected-error @+2 {{'kiln.reduce_sum' op inferred type(s) 'tensor<?x1xf32, #kiln.dims<[seq]>>' are incompatible with return type(s) of operation 'tensor<?xf32, #kiln.dims<[seq]>>'}}
  // expected-error @+1 {{'kiln.reduce_sum' op failed to infer returned types}}
  %0 = kiln.reduce_sum %x {axes = array<i64: 1>, keepdim} : (tensor<?x64xf32, #kiln.dims<[seq]>>) -> tensor<?xf32, #kiln.dims<[seq]>>
  return
}

// -----

func.func @softmax_axis(%x: tensor<?x?xf32, #kiln.dims<[batch, seq]>>) {
  // expected-error @+1 {{axis 2 is out of range for rank 2}}
  %0 = kiln.softmax %x {axis = 2 : i64} : tensor<?x?xf32, #kiln.dims<[batch, seq]>>
  return
}

// -----

func.func @softmax_missing_axis(%x: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.softmax' op requires attribute 'axis'}}
  %0 = kiln.softmax %x : tensor<4xf32>
  return
}

// -----

func.func @log_softmax_negative_axis(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{axis -1 is out of range for rank 2}}
  %0 = kiln.log_softmax %x {axis = -1 : i64} : tensor<2x3xf32>
  return
}

// -----

func.func @log_softmax_result_type(%x: tensor<2x3xf32>) {
  // expected-error @+1 {{'kiln.log_softmax' op requires the same type for all operands and results}}
  %0 = "kiln.log_softmax"(%x) <{axis = 1 : i64}> : (tensor<2x3xf32>) -> tensor<2x3xf16>
  return
}

// -----

func.func @layer_norm_weight_rank(%x: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, %w: tensor<8x8xf32>) {
  // expected-error @+2 {{weight must have rank 1 (dims [axis, rank)), got 2}}
  // expected-error @+1 {{'kiln.layer_norm' op failed to infer returned types}}
  %0 = kiln.layer_norm %x, %w {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<8x8xf32>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  return
}

// -----

func.func @layer_norm_bias_dim(%x: tensor<?x64xf32, #kiln.dims<[seq]>>, %w: tensor<64xf32>, %b: tensor<32xf32>) {
  // expected-error @+2 {{bias dim: expected 64 but got 32}}
  // expected-error @+1 {{'kiln.layer_norm' op failed to infer returned types}}
  %0 = kiln.layer_norm %x, %w, %b {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<?x64xf32, #kiln.dims<[seq]>>, tensor<64xf32>, tensor<32xf32>) -> tensor<?x64xf32, #kiln.dims<[seq]>>
  return
}

// -----

func.func @layer_norm_axis(%x: tensor<4x64xf32>, %w: tensor<64xf32>) {
  // expected-error @+2 {{layer_norm axis 2 is out of range for rank 2}}
  // expected-error @+1 {{'kiln.layer_norm' op failed to infer returned types}}
  %0 = kiln.layer_norm %x, %w {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x64xf32>, tensor<64xf32>) -> tensor<4x64xf32>
  return
}

// -----

func.func @layer_norm_weight_element(%x: tensor<4x64xbf16>, %w: tensor<64xf32>) {
  // expected-error @+2 {{weight element type 'f32' differs from the input's 'bf16'}}
  // expected-error @+1 {{'kiln.layer_norm' op failed to infer returned types}}
  %0 = kiln.layer_norm %x, %w {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x64xbf16>, tensor<64xf32>) -> tensor<4x64xbf16>
  return
}

// -----

func.func @rms_norm_weight_dim(%x: tensor<?x?x64xf16, #kiln.dims<[batch, seq]>>, %w: tensor<128xf16>) {
  // expected-error @+2 {{weight dim: expected 64 but got 128}}
  // expected-error @+1 {{'kiln.rms_norm' op failed to infer returned types}}
  %0 = kiln.rms_norm %x, %w {axis = 2 : i64, epsilon = 1.0e-5 : f64} : (tensor<?x?x64xf16, #kiln.dims<[batch, seq]>>, tensor<128xf16>) -> tensor<?x?x64xf16, #kiln.dims<[batch, seq]>>
  return
}

// -----

func.func @rms_norm_weight_element(%x: tensor<4x64xf16>, %w: tensor<64xf32>) {
  // expected-error @+2 {{weight element type 'f32' differs from the input's 'f16'}}
  // expected-error @+1 {{'kiln.rms_norm' op failed to infer returned types}}
  %0 = kiln.rms_norm %x, %w {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x64xf16>, tensor<64xf32>) -> tensor<4x64xf16>
  return
}

// -----

func.func @cumsum_axis(%x: tensor<?x?xi64, #kiln.dims<[batch, seq]>>) {
  // expected-error @+1 {{cumsum axis 2 is out of range for rank 2}}
  %0 = kiln.cumsum %x {axis = 2 : i64} : tensor<?x?xi64, #kiln.dims<[batch, seq]>>
  return
}

// -----

func.func @cumsum_bool(%x: tensor<4xi1>) {
  // expected-error @+1 {{'kiln.cumsum' op operand #0 must be ranked tensor of}}
  %0 = kiln.cumsum %x {axis = 0 : i64} : tensor<4xi1>
  return
}

// -----

func.func @trilu_rank(%x: tensor<?xf32, #kiln.dims<[seq]>>) {
  // expected-error @+1 {{'kiln.trilu' op needs rank >= 2, got 1}}
  %0 = kiln.trilu %x {upper} : tensor<?xf32, #kiln.dims<[seq]>>
  return
}

// -----

func.func @cross_entropy_ranks(%l: tensor<?x?x32000xf32, #kiln.dims<[batch, seq]>>, %y: tensor<?xi64, #kiln.dims<[batch]>>) {
  // expected-error @+2 {{cross_entropy takes logits [N, C] and labels [N], got ranks 3 and 1}}
  // expected-error @+1 {{'kiln.cross_entropy' op failed to infer returned types}}
  %0 = kiln.cross_entropy %l, %y : (tensor<?x?x32000xf32, #kiln.dims<[batch, seq]>>, tensor<?xi64, #kiln.dims<[batch]>>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_rows(%l: tensor<8x10xf32>, %y: tensor<4xi64>) {
  // expected-error @+2 {{labels dim 0: expected 8 but got 4}}
  // expected-error @+1 {{'kiln.cross_entropy' op failed to infer returned types}}
  %0 = kiln.cross_entropy %l, %y : (tensor<8x10xf32>, tensor<4xi64>) -> tensor<f32>
  return
}

// -----

// Without a reduction the loss stays per row.
func.func @cross_entropy_none_scalar(%l: tensor<?x10xf32, #kiln.dims<[n]>>, %y: tensor<?xi64, #kiln.dims<[n]>>) {
  // expected-error @+2 {{'kiln.cross_entropy' op inferred type(s) 'tensor<?xf32, #kiln.dims<[n]>>' are incompatible with return type(s) of operation 'tensor<f32>'}}
  // expected-error @+1 {{'kiln.cross_entropy' op failed to infer returned types}}
  %0 = kiln.cross_entropy %l, %y {reduction = #kiln.reduction<none>} : (tensor<?x10xf32, #kiln.dims<[n]>>, tensor<?xi64, #kiln.dims<[n]>>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_float_labels(%l: tensor<8x10xf32>, %y: tensor<8xf32>) {
  // expected-error @+1 {{'kiln.cross_entropy' op operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<8xf32>'}}
  %0 = kiln.cross_entropy %l, %y {reduction = #kiln.reduction<sum>} : (tensor<8x10xf32>, tensor<8xf32>) -> tensor<f32>
  return
}

// -----

func.func @attention_heads(%q: tensor<?x6x?x64xf32, #kiln.dims<[batch, seq]>>, %kv: tensor<?x4x?x64xf32, #kiln.dims<[batch, seq]>>) {
  // expected-error @+2 {{query heads 6 are not a multiple of key/value heads 4}}
  // expected-error @+1 {{'kiln.attention' op failed to infer returned types}}
  %0 = kiln.attention %q, %kv, %kv {causal} : (tensor<?x6x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x4x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x4x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x6x?x64xf32, #kiln.dims<[batch, seq]>>
  return
}

// -----

func.func @attention_rank(%q: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) {
  // expected-error @+2 {{attention takes rank-4 [batch, heads, seq, head_dim] query/key/value}}
  // expected-error @+1 {{'kiln.attention' op failed to infer returned types}}
  %0 = kiln.attention %q, %q, %q : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
  return
}

// -----

func.func @attention_head_dim(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x32xf32>) {
  // expected-error @+2 {{key head_dim: expected 64 but got 32}}
  // expected-error @+1 {{'kiln.attention' op failed to infer returned types}}
  %0 = kiln.attention %q, %k, %k : (tensor<1x8x16x64xf32>, tensor<1x8x16x32xf32>, tensor<1x8x16x32xf32>) -> tensor<1x8x16x32xf32>
  return
}

// -----

func.func @attention_value_seq(%q: tensor<1x8x16x64xf32>, %k: tensor<1x8x16x64xf32>, %v: tensor<1x8x12x64xf32>) {
  // expected-error @+2 {{value seq: expected 16 but got 12}}
  // expected-error @+1 {{'kiln.attention' op failed to infer returned types}}
  %0 = kiln.attention %q, %k, %v : (tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x12x64xf32>) -> tensor<1x8x16x64xf32>
  return
}

// -----

func.func @attention_mask_element(%q: tensor<1x8x16x64xf32>, %m: tensor<16x16xi32>) {
  // expected-error @+2 {{attention mask must be i1 or float, got 'i32'}}
  // expected-error @+1 {{'kiln.attention' op failed to infer returned types}}
  %0 = kiln.attention %q, %q, %q, %m : (tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<16x16xi32>) -> tensor<1x8x16x64xf32>
  return
}

// -----

func.func @attention_mask_dim(%q: tensor<?x8x16x64xf32, #kiln.dims<[batch]>>, %m: tensor<?x1x16x8xi1, #kiln.dims<[batch]>>) {
  // expected-error @+2 {{attention mask dim 3 of size 8 does not broadcast to the scores dim 16}}
  // expected-error @+1 {{'kiln.attention' op failed to infer returned types}}
  %0 = kiln.attention %q, %q, %q, %m : (tensor<?x8x16x64xf32, #kiln.dims<[batch]>>, tensor<?x8x16x64xf32, #kiln.dims<[batch]>>, tensor<?x8x16x64xf32, #kiln.dims<[batch]>>, tensor<?x1x16x8xi1, #kiln.dims<[batch]>>) -> tensor<?x8x16x64xf32, #kiln.dims<[batch]>>
  return
}

// -----

// The mask broadcasts to the scores, not the other way: a decoding step has
// one query row, so a mask with 4 rows does not fit.
func.func @attention_mask_widens(%q: tensor<1x8x1x64xf32>, %kv: tensor<1x8x16x64xf32>, %m: tensor<1x1x4x16xf32>) {
  // expected-error @+2 {{attention mask dim 2 of size 4 does not broadcast to the scores dim 1}}
  // expected-error @+1 {{'kiln.attention' op failed to infer returned types}}
  %0 = kiln.attention %q, %kv, %kv, %m : (tensor<1x8x1x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x1x4x16xf32>) -> tensor<1x8x1x64xf32>
  return
}

// -----

func.func @attention_mask_rank(%q: tensor<1x8x16x64xf32>, %m: tensor<2x1x8x16x16xi1>) {
  // expected-error @+2 {{attention mask rank 5 is above the rank 4 of the scores}}
  // expected-error @+1 {{'kiln.attention' op failed to infer returned types}}
  %0 = kiln.attention %q, %q, %q, %m : (tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<2x1x8x16x16xi1>) -> tensor<1x8x16x64xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Indexing
//===----------------------------------------------------------------------===//

func.func @gather_axis(%d: tensor<32000x768xf32>, %i: tensor<?x?xi64, #kiln.dims<[batch, seq]>>) {
  // expected-error @+2 {{gather axis 2 is out of range for rank 2}}
  // expected-error @+1 {{'kiln.gather' op failed to infer returned types}}
  %0 = kiln.gather %d, %i {axis = 2 : i64} : (tensor<32000x768xf32>, tensor<?x?xi64, #kiln.dims<[batch, seq]>>) -> tensor<?x?x768xf32, #kiln.dims<[batch, seq]>>
  return
}

// -----

func.func @gather_float_indices(%d: tensor<10x4xf32>, %i: tensor<3xf32>) {
  // expected-error @+1 {{'kiln.gather' op operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values, but got 'tensor<3xf32>'}}
  %0 = kiln.gather %d, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<3xf32>) -> tensor<3x4xf32>
  return
}

// -----

func.func @gather_result(%d: tensor<10x4xf32>, %i: tensor<3xi32>) {
  // expected-error @+2 {{'kiln.gather' op inferred type(s) 'tensor<3x4xf32>' are incompatible with return type(s) of operation 'tensor<4x3xf32>'}}
  // expected-error @+1 {{'kiln.gather' op failed to infer returned types}}
  %0 = kiln.gather %d, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<3xi32>) -> tensor<4x3xf32>
  return
}

// -----

func.func @gather_elements_rank(%d: tensor<?x32000xf32, #kiln.dims<[n]>>, %i: tensor<?xi64, #kiln.dims<[n]>>) {
  // expected-error @+2 {{gather_elements needs data and indices of equal rank, got 2 and 1}}
  // expected-error @+1 {{'kiln.gather_elements' op failed to infer returned types}}
  %0 = kiln.gather_elements %d, %i {axis = 1 : i64} : (tensor<?x32000xf32, #kiln.dims<[n]>>, tensor<?xi64, #kiln.dims<[n]>>) -> tensor<?xf32, #kiln.dims<[n]>>
  return
}

// -----

func.func @gather_elements_axis(%d: tensor<4x5xf32>, %i: tensor<4x1xi64>) {
  // expected-error @+2 {{gather_elements axis -1 is out of range for rank 2}}
  // expected-error @+1 {{'kiln.gather_elements' op failed to infer returned types}}
  %0 = kiln.gather_elements %d, %i {axis = -1 : i64} : (tensor<4x5xf32>, tensor<4x1xi64>) -> tensor<4x1xf32>
  return
}

// -----

func.func @gather_nd_depth(%d: tensor<?x?xf32, #kiln.dims<[batch, seq]>>, %i: tensor<5x3xi64>) {
  // expected-error @+2 {{gather_nd index depth 3 must be in [1, 2]}}
  // expected-error @+1 {{'kiln.gather_nd' op failed to infer returned types}}
  %0 = kiln.gather_nd %d, %i : (tensor<?x?xf32, #kiln.dims<[batch, seq]>>, tensor<5x3xi64>) -> tensor<5xf32>
  return
}

// -----

// batch_dims leave fewer data dims to index.
func.func @gather_nd_depth_batch(%d: tensor<4x6x8xf32>, %i: tensor<4x3x3xi64>) {
  // expected-error @+2 {{gather_nd index depth 3 must be in [1, 2]}}
  // expected-error @+1 {{'kiln.gather_nd' op failed to infer returned types}}
  %0 = kiln.gather_nd %d, %i {batch_dims = 1 : i64} : (tensor<4x6x8xf32>, tensor<4x3x3xi64>) -> tensor<4x3xf32>
  return
}

// -----

func.func @gather_nd_dynamic_depth(%d: tensor<4x6xf32>, %i: tensor<5x?xi64, #kiln.dims<[k]>>) {
  // expected-error @+2 {{gather_nd index depth (last indices dim) must be static}}
  // expected-error @+1 {{'kiln.gather_nd' op failed to infer returned types}}
  %0 = kiln.gather_nd %d, %i : (tensor<4x6xf32>, tensor<5x?xi64, #kiln.dims<[k]>>) -> tensor<5xf32>
  return
}

// -----

func.func @gather_nd_batch_dims(%d: tensor<4x6xf32>, %i: tensor<4x1xi64>) {
  // expected-error @+2 {{gather_nd batch_dims 2 must be below the ranks of data (2) and indices (2)}}
  // expected-error @+1 {{'kiln.gather_nd' op failed to infer returned types}}
  %0 = kiln.gather_nd %d, %i {batch_dims = 2 : i64} : (tensor<4x6xf32>, tensor<4x1xi64>) -> tensor<4xf32>
  return
}

// -----

func.func @gather_nd_batch_dim_size(%d: tensor<4x6xf32>, %i: tensor<3x1xi64>) {
  // expected-error @+2 {{gather_nd batch dim: expected 4 but got 3}}
  // expected-error @+1 {{'kiln.gather_nd' op failed to infer returned types}}
  %0 = kiln.gather_nd %d, %i {batch_dims = 1 : i64} : (tensor<4x6xf32>, tensor<3x1xi64>) -> tensor<3xf32>
  return
}

// -----

func.func @scatter_add_updates_dim(%d: tensor<32000x768xf32>, %i: tensor<?x?xi64, #kiln.dims<[batch, seq]>>, %u: tensor<?x?x512xf32, #kiln.dims<[batch, seq]>>) {
  // expected-error @+2 {{scatter_add updates dim: expected 768 but got 512}}
  // expected-error @+1 {{'kiln.scatter_add' op failed to infer returned types}}
  %0 = kiln.scatter_add %d, %i, %u {axis = 0 : i64} : (tensor<32000x768xf32>, tensor<?x?xi64, #kiln.dims<[batch, seq]>>, tensor<?x?x512xf32, #kiln.dims<[batch, seq]>>) -> tensor<32000x768xf32>
  return
}

// -----

func.func @scatter_add_updates_rank(%d: tensor<32000x768xf32>, %i: tensor<?x?xi64, #kiln.dims<[batch, seq]>>, %u: tensor<?x768xf32, #kiln.dims<[batch]>>) {
  // expected-error @+2 {{scatter_add updates must have rank 3, got 2}}
  // expected-error @+1 {{'kiln.scatter_add' op failed to infer returned types}}
  %0 = kiln.scatter_add %d, %i, %u {axis = 0 : i64} : (tensor<32000x768xf32>, tensor<?x?xi64, #kiln.dims<[batch, seq]>>, tensor<?x768xf32, #kiln.dims<[batch]>>) -> tensor<32000x768xf32>
  return
}

// -----

func.func @scatter_add_element(%d: tensor<10x4xf32>, %i: tensor<3xi64>, %u: tensor<3x4xf16>) {
  // expected-error @+2 {{scatter_add updates element type 'f16' differs from dest 'f32'}}
  // expected-error @+1 {{'kiln.scatter_add' op failed to infer returned types}}
  %0 = kiln.scatter_add %d, %i, %u {axis = 0 : i64} : (tensor<10x4xf32>, tensor<3xi64>, tensor<3x4xf16>) -> tensor<10x4xf32>
  return
}

// -----

func.func @scatter_add_axis(%d: tensor<10x4xf32>, %i: tensor<3xi64>, %u: tensor<3x4xf32>) {
  // expected-error @+2 {{scatter_add axis 2 is out of range for rank 2}}
  // expected-error @+1 {{'kiln.scatter_add' op failed to infer returned types}}
  %0 = kiln.scatter_add %d, %i, %u {axis = 2 : i64} : (tensor<10x4xf32>, tensor<3xi64>, tensor<3x4xf32>) -> tensor<10x4xf32>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Shape manipulation
//===----------------------------------------------------------------------===//

func.func @reshape_count(%x: tensor<2x3x4xf32>) {
  // expected-error @+1 {{'kiln.reshape' op changes the element count from 24 to 25}}
  %0 = kiln.reshape %x : tensor<2x3x4xf32> -> tensor<5x5xf32>
  return
}

// -----

func.func @reshape_symbolic_count(%x: tensor<?x2xf32, #kiln.dims<[seq]>>) {
  // expected-error @+1 {{'kiln.reshape' op changes the element count from 2*seq to 2*seq + 2}}
  %0 = kiln.reshape %x : tensor<?x2xf32, #kiln.dims<[seq]>> -> tensor<?xf32, #kiln.dims<[2*seq + 2]>>
  return
}

// -----

func.func @reshape_element(%x: tensor<?x64xf32, #kiln.dims<[seq]>>) {
  // expected-error @+1 {{'kiln.reshape' op changes the element type}}
  %0 = kiln.reshape %x : tensor<?x64xf32, #kiln.dims<[seq]>> -> tensor<?x64xf16, #kiln.dims<[seq]>>
  return
}

// -----

func.func @transpose_perm(%x: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) {
  // expected-error @+2 {{transpose perm is not a permutation of [0, 3)}}
  // expected-error @+1 {{'kiln.transpose' op failed to infer returned types}}
  %0 = kiln.transpose %x {perm = array<i64: 0, 1, 1>} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?x?xf32>
  return
}

// -----

func.func @transpose_perm_range(%x: tensor<2x3xf32>) {
  // expected-error @+2 {{transpose perm is not a permutation of [0, 2)}}
  // expected-error @+1 {{'kiln.transpose' op failed to infer returned types}}
  %0 = kiln.transpose %x {perm = array<i64: 2, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return
}

// -----

func.func @transpose_perm_size(%x: tensor<2x3x4xf32>) {
  // expected-error @+2 {{transpose perm has 2 entries for rank 3}}
  // expected-error @+1 {{'kiln.transpose' op failed to infer returned types}}
  %0 = kiln.transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3x4xf32>) -> tensor<3x2x4xf32>
  return
}

// -----

func.func @transpose_result(%x: tensor<?x?xf32, #kiln.dims<[batch, seq]>>) {
  // expected-error @+2 {{'kiln.transpose' op inferred type(s) 'tensor<?x?xf32, #kiln.dims<[seq, batch]>>' are incompatible with return type(s) of operation 'tensor<?x?xf32, #kiln.dims<[batch, seq]>>'}}
  // expected-error @+1 {{'kiln.transpose' op failed to infer returned types}}
  %0 = kiln.transpose %x {perm = array<i64: 1, 0>} : (tensor<?x?xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?xf32, #kiln.dims<[batch, seq]>>
  return
}

// -----

func.func @slice_rank(%x: tensor<?x64xf32, #kiln.dims<[seq]>>) {
  // expected-error @+1 {{'kiln.slice' op result must have the input's rank and element type}}
  %0 = kiln.slice %x {starts = #kiln.dims<[0, 0]>, steps = array<i64: 1, 1>} : tensor<?x64xf32, #kiln.dims<[seq]>> -> tensor<64xf32>
  return
}

// -----

func.func @slice_starts_count(%x: tensor<?x64xf32, #kiln.dims<[seq]>>) {
  // expected-error @+1 {{'kiln.slice' op needs one start and one step per dim (rank 2)}}
  %0 = kiln.slice %x {starts = #kiln.dims<[1]>, steps = array<i64: 1, 1>} : tensor<?x64xf32, #kiln.dims<[seq]>> -> tensor<?x64xf32, #kiln.dims<[seq - 1]>>
  return
}

// -----

func.func @slice_unknown_start(%x: tensor<?x64xf32, #kiln.dims<[seq]>>) {
  // expected-error @+1 {{'kiln.slice' op start of dim 0 is unknown}}
  %0 = kiln.slice %x {starts = #kiln.dims<[?, 0]>, steps = array<i64: 1, 1>} : tensor<?x64xf32, #kiln.dims<[seq]>> -> tensor<?x64xf32>
  return
}

// -----

func.func @slice_zero_step(%x: tensor<10xf32>) {
  // expected-error @+1 {{'kiln.slice' op step of dim 0 is 0}}
  %0 = kiln.slice %x {starts = #kiln.dims<[0]>, steps = array<i64: 0>} : tensor<10xf32> -> tensor<10xf32>
  return
}

// -----

func.func @slice_out_of_bounds(%x: tensor<10xf32>) {
  // expected-error @+1 {{'kiln.slice' op dim 0 reads indices 8 to 11 of a dim of size 10}}
  %0 = kiln.slice %x {starts = #kiln.dims<[8]>, steps = array<i64: 1>} : tensor<10xf32> -> tensor<4xf32>
  return
}

// -----

func.func @slice_backwards_out_of_bounds(%x: tensor<10xf32>) {
  // expected-error @+1 {{'kiln.slice' op dim 0 reads indices 3 to -3 of a dim of size 10}}
  %0 = kiln.slice %x {starts = #kiln.dims<[3]>, steps = array<i64: -2>} : tensor<10xf32> -> tensor<4xf32>
  return
}

// -----

func.func @concat_dim(%a: tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, %b: tensor<?x1x32xf32, #kiln.dims<[batch]>>) {
  // expected-error @+2 {{concat input dim: expected 64 but got 32}}
  // expected-error @+1 {{'kiln.concat' op failed to infer returned types}}
  %0 = kiln.concat %a, %b {axis = 1 : i64} : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<?x1x32xf32, #kiln.dims<[batch]>>) -> tensor<?x?x64xf32, #kiln.dims<[batch, seq + 1]>>
  return
}

// -----

func.func @concat_axis(%a: tensor<4xf32>) {
  // expected-error @+2 {{concat axis 1 is out of range for rank 1}}
  // expected-error @+1 {{'kiln.concat' op failed to infer returned types}}
  %0 = kiln.concat %a, %a {axis = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @concat_rank(%a: tensor<4xf32>, %b: tensor<1x4xf32>) {
  // expected-error @+2 {{concat inputs differ in rank or element type}}
  // expected-error @+1 {{'kiln.concat' op failed to infer returned types}}
  %0 = kiln.concat %a, %b {axis = 0 : i64} : (tensor<4xf32>, tensor<1x4xf32>) -> tensor<8xf32>
  return
}

// -----

// seq and seq + 1 differ whatever seq is.
func.func @concat_symbolic_dim(%a: tensor<?x4xf32, #kiln.dims<[seq]>>, %b: tensor<?x4xf32, #kiln.dims<[seq + 1]>>) {
  // expected-error @+2 {{concat input dim: expected seq but got seq + 1}}
  // expected-error @+1 {{'kiln.concat' op failed to infer returned types}}
  %0 = kiln.concat %a, %b {axis = 1 : i64} : (tensor<?x4xf32, #kiln.dims<[seq]>>, tensor<?x4xf32, #kiln.dims<[seq + 1]>>) -> tensor<?x8xf32, #kiln.dims<[seq]>>
  return
}

// -----

// The result dim is the symbolic sum of the pieces.
func.func @concat_symbolic_sum(%a: tensor<?xf32, #kiln.dims<[seq]>>, %b: tensor<1xf32>) {
  // expected-error @+2 {{'kiln.concat' op inferred type(s) 'tensor<?xf32, #kiln.dims<[seq + 1]>>' are incompatible with return type(s) of operation 'tensor<?xf32, #kiln.dims<[seq + 2]>>'}}
  // expected-error @+1 {{'kiln.concat' op failed to infer returned types}}
  %0 = kiln.concat %a, %b {axis = 0 : i64} : (tensor<?xf32, #kiln.dims<[seq]>>, tensor<1xf32>) -> tensor<?xf32, #kiln.dims<[seq + 2]>>
  return
}

// -----

func.func @concat_empty() {
  // expected-error @+2 {{concat needs at least one input}}
  // expected-error @+1 {{'kiln.concat' op failed to infer returned types}}
  %0 = "kiln.concat"() <{axis = 0 : i64}> : () -> tensor<4xf32>
  return
}

// -----

func.func @split_sum(%x: tensor<?x12xf32, #kiln.dims<[seq]>>) {
  // expected-error @+1 {{'kiln.split' op pieces add up to 10 along axis 1, input has 12}}
  %0:2 = kiln.split %x {axis = 1 : i64} : (tensor<?x12xf32, #kiln.dims<[seq]>>) -> (tensor<?x4xf32, #kiln.dims<[seq]>>, tensor<?x6xf32, #kiln.dims<[seq]>>)
  return
}

// -----

func.func @split_symbolic_sum(%x: tensor<?xf32, #kiln.dims<[2*seq + 1]>>) {
  // expected-error @+1 {{'kiln.split' op pieces add up to 2*seq along axis 0, input has 2*seq + 1}}
  %0:2 = kiln.split %x {axis = 0 : i64} : (tensor<?xf32, #kiln.dims<[2*seq + 1]>>) -> (tensor<?xf32, #kiln.dims<[seq]>>, tensor<?xf32, #kiln.dims<[seq]>>)
  return
}

// -----

func.func @split_other_dim(%x: tensor<3x12xf32>) {
  // expected-error @+1 {{'kiln.split' op result dim 0 is 4, expected 3}}
  %0:2 = kiln.split %x {axis = 1 : i64} : (tensor<3x12xf32>) -> (tensor<4x6xf32>, tensor<3x6xf32>)
  return
}

// -----

func.func @split_element(%x: tensor<12xf32>) {
  // expected-error @+1 {{'kiln.split' op result 'tensor<6xf16>' differs in rank or element type}}
  %0:2 = kiln.split %x {axis = 0 : i64} : (tensor<12xf32>) -> (tensor<6xf32>, tensor<6xf16>)
  return
}

// -----

func.func @split_axis(%x: tensor<12xf32>) {
  // expected-error @+1 {{split axis 1 is out of range for rank 1}}
  %0:2 = kiln.split %x {axis = 1 : i64} : (tensor<12xf32>) -> (tensor<6xf32>, tensor<6xf32>)
  return
}

// -----

func.func @split_no_results(%x: tensor<12xf32>) {
  // expected-error @+1 {{'kiln.split' op needs at least one result}}
  kiln.split %x {axis = 0 : i64} : (tensor<12xf32>) -> ()
  return
}

// -----

func.func @expand_incompatible(%x: tensor<1x3xf32>) {
  // expected-error @+1 {{'kiln.expand' op cannot broadcast dim 1 of size 3 to 4}}
  %0 = kiln.expand %x : tensor<1x3xf32> -> tensor<?x4xf32, #kiln.dims<[batch]>>
  return
}

// -----

func.func @expand_rank(%x: tensor<2x1x3xf32>) {
  // expected-error @+1 {{'kiln.expand' op cannot lower the rank from 3 to 2}}
  %0 = kiln.expand %x : tensor<2x1x3xf32> -> tensor<2x3xf32>
  return
}

// -----

func.func @expand_element(%x: tensor<1x3xf32>) {
  // expected-error @+1 {{'kiln.expand' op changes the element type}}
  %0 = kiln.expand %x : tensor<1x3xf32> -> tensor<2x3xf16>
  return
}

// -----

func.func @squeeze_not_one(%x: tensor<?x4x?xf32, #kiln.dims<[batch, seq]>>) {
  // expected-error @+2 {{squeeze axis 1 has size 4, not 1}}
  // expected-error @+1 {{'kiln.squeeze' op failed to infer returned types}}
  %0 = kiln.squeeze %x {axes = array<i64: 1>} : (tensor<?x4x?xf32, #kiln.dims<[batch, seq]>>) -> tensor<?x?xf32, #kiln.dims<[batch, seq]>>
  return
}

// -----

func.func @squeeze_axis(%x: tensor<2x1xf32>) {
  // expected-error @+2 {{squeeze axis 2 is out of range for rank 2}}
  // expected-error @+1 {{'kiln.squeeze' op failed to infer returned types}}
  %0 = kiln.squeeze %x {axes = array<i64: 2>} : (tensor<2x1xf32>) -> tensor<2x1xf32>
  return
}

// -----

func.func @unsqueeze_axis(%x: tensor<?x?xi64, #kiln.dims<[batch, seq]>>) {
  // expected-error @+2 {{unsqueeze axis 4 is out of range for rank 4}}
  // expected-error @+1 {{'kiln.unsqueeze' op failed to infer returned types}}
  %0 = kiln.unsqueeze %x {axes = array<i64: 1, 4>} : (tensor<?x?xi64, #kiln.dims<[batch, seq]>>) -> tensor<?x1x?x1xi64, #kiln.dims<[batch, seq]>>
  return
}

// -----

func.func @unsqueeze_repeat(%x: tensor<4xf32>) {
  // expected-error @+2 {{unsqueeze axis must be strictly increasing without repeats}}
  // expected-error @+1 {{'kiln.unsqueeze' op failed to infer returned types}}
  %0 = kiln.unsqueeze %x {axes = array<i64: 0, 0>} : (tensor<4xf32>) -> tensor<1x1x4xf32>
  return
}

// -----

func.func @pad_negative(%x: tensor<?x8xf32, #kiln.dims<[seq]>>) {
  // expected-error @+2 {{pad amounts must be non-negative}}
  // expected-error @+1 {{'kiln.pad' op failed to infer returned types}}
  %0 = kiln.pad %x {pads = array<i64: 0, -1, 0, 0>} : (tensor<?x8xf32, #kiln.dims<[seq]>>) -> tensor<?x7xf32, #kiln.dims<[seq]>>
  return
}

// -----

func.func @pad_count(%x: tensor<4x8xf32>) {
  // expected-error @+2 {{pad needs 2 * rank = 4 pads, got 2}}
  // expected-error @+1 {{'kiln.pad' op failed to infer returned types}}
  %0 = kiln.pad %x {pads = array<i64: 1, 1>} : (tensor<4x8xf32>) -> tensor<6x8xf32>
  return
}

// -----

func.func @pad_result(%x: tensor<?x8xf32, #kiln.dims<[seq]>>) {
  // expected-error @+2 {{'kiln.pad' op inferred type(s) 'tensor<?x8xf32, #kiln.dims<[seq + 3]>>' are incompatible with return type(s) of operation 'tensor<?x8xf32, #kiln.dims<[seq + 1]>>'}}
  // expected-error @+1 {{'kiln.pad' op failed to infer returned types}}
  %0 = kiln.pad %x {pads = array<i64: 1, 0, 2, 0>} : (tensor<?x8xf32, #kiln.dims<[seq]>>) -> tensor<?x8xf32, #kiln.dims<[seq + 1]>>
  return
}

// -----

//===----------------------------------------------------------------------===//
// Unmapped ONNX nodes
//===----------------------------------------------------------------------===//

func.func @opaque_missing_domain(%x: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.opaque' op requires attribute 'domain'}}
  %0 = kiln.opaque "Foo"(%x) {node_name = "n", onnx_attributes = {}} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @opaque_attributes(%x: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.opaque' op attribute 'onnx_attributes' failed to satisfy constraint: dictionary of named attribute values}}
  %0 = kiln.opaque "Foo"(%x) {domain = "", node_name = "n", onnx_attributes = [1, 2]} : (tensor<4xf32>) -> tensor<4xf32>
  return
}

// -----

func.func @softmax_grad_axis(%y: tensor<4x8xf32>) {
  // expected-error @+1 {{softmax_grad axis 2 is out of range for rank 2}}
  %0 = kiln.softmax_grad %y, %y {axis = 2 : i64} : tensor<4x8xf32>
  return
}

// -----

func.func @log_softmax_grad_axis(%y: tensor<4x8xf32>) {
  // expected-error @+1 {{log_softmax_grad axis -1 is out of range for rank 2}}
  %0 = kiln.log_softmax_grad %y, %y {axis = -1 : i64} : tensor<4x8xf32>
  return
}

// -----

func.func @layer_norm_grad_weight(%x: tensor<4x8xf32>, %w: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.layer_norm_grad' op weight must have the normalized dims}}
  %0:3 = kiln.layer_norm_grad %x, %w, %x {axis = 0 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<4xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @rms_norm_grad_types(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %d: tensor<4x8xf16>) {
  // expected-error @+1 {{'kiln.rms_norm_grad' op grad must have the input's type}}
  %0:2 = kiln.rms_norm_grad %x, %w, %d {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf16>) -> (tensor<4x8xf32>, tensor<8xf32>)
  return
}

// -----

func.func @attention_grad_types(%q: tensor<1x2x4x8xf32>, %do: tensor<1x2x4x8xf32>) {
  // expected-error @+1 {{'kiln.attention_grad' op gradients must have the types of query, key and value}}
  %0:3 = kiln.attention_grad %q, %q, %q grad %do : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>)
  return
}

// -----

func.func @cross_entropy_grad_loss(%l: tensor<4x8xf32>, %y: tensor<4xi64>, %g: tensor<4xf32>) {
  // expected-error @+1 {{'kiln.cross_entropy_grad' op grad must have the loss's type}}
  %0 = kiln.cross_entropy_grad %l, %y, %g : (tensor<4x8xf32>, tensor<4xi64>, tensor<4xf32>) -> tensor<4x8xf32>
  return
}

// -----

func.func @dropout_p(%x: tensor<4xf32>, %seed: tensor<i64>) {
  // expected-error @+1 {{'kiln.dropout' op p must be in [0, 1), got 1}}
  %0 = kiln.dropout %x, %seed {p = 1.0 : f64, stream = 0 : i64} : tensor<4xf32>, tensor<i64>
  return
}

// -----

func.func @dropout_seed_type(%x: tensor<4xf32>, %seed: tensor<2xi64>) {
  // expected-error @+1 {{'kiln.dropout' op operand #1 must be 0D tensor of 64-bit signless integer values}}
  %0 = kiln.dropout %x, %seed {p = 0.5 : f64, stream = 0 : i64} : tensor<4xf32>, tensor<2xi64>
  return
}

// -----

func.func @random_uniform_bounds(%seed: tensor<i64>) {
  // expected-error @+1 {{'kiln.random_uniform' op needs low < high}}
  %0 = kiln.random_uniform %seed {low = 1.0 : f64, high = 1.0 : f64, stream = 0 : i64} : tensor<i64> -> tensor<4xf32>
  return
}

// -----

func.func @nf4_quantize_dynamic(%w: tensor<?x8xf32>) {
  // expected-error @+2 {{nf4_quantize needs a static shape (weights)}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = kiln.nf4_quantize %w : tensor<?x8xf32> -> tensor<4xui8>, tensor<1xf32>
  return
}

// -----

func.func @nf4_quantize_block(%w: tensor<4x8xf32>) {
  // expected-error @+2 {{nf4_quantize block_size must be even and > 0}}
  // expected-error @+1 {{failed to infer returned types}}
  %0:2 = kiln.nf4_quantize %w {block_size = 7 : i64} : tensor<4x8xf32> -> tensor<16xui8>, tensor<5xf32>
  return
}

// -----

func.func @nf4_dequantize_codes(%c: tensor<15xui8>, %s: tensor<1xf32>) {
  // expected-error @+1 {{'kiln.nf4_dequantize' op expects 16 code bytes for 32 elements, got 15}}
  %0 = kiln.nf4_dequantize %c, %s : tensor<15xui8>, tensor<1xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @nf4_dequantize_absmax(%c: tensor<16xui8>, %s: tensor<2xf32>) {
  // expected-error @+1 {{'kiln.nf4_dequantize' op expects 1 absmax values (blocks of 64), got 2}}
  %0 = kiln.nf4_dequantize %c, %s : tensor<16xui8>, tensor<2xf32> -> tensor<4x8xf32>
  return
}

// -----

func.func @dequantize_8bit_blocks(%c: tensor<300xui8>, %s: tensor<1xf32>) {
  // expected-error @+2 {{dequantize_blockwise_8bit expects 2 absmax values for 300 codes in blocks of 256, got 1}}
  // expected-error @+1 {{failed to infer returned types}}
  %0 = kiln.dequantize_blockwise_8bit %c, %s : tensor<300xui8>, tensor<1xf32> -> tensor<300xf32>
  return
}

// -----

func.func @attention_seq_major_count(%q: tensor<1x8x16x64xf32>) {
  // expected-error @+2 {{attention seq_major has 3 entries, expected 4 (query, key, value, result)}}
  // expected-error @+1 {{'kiln.attention' op failed to infer returned types}}
  %0 = kiln.attention %q, %q, %q {seq_major = array<i1: false, false, true>} : (tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>) -> tensor<1x8x16x64xf32>
  return
}

// -----

// A seq-major value gradient must be the [B, S, H, D] of v's [B, H, S, D].
func.func @attention_grad_seq_major_type(%q: tensor<1x8x16x64xf32>) {
  // expected-error @+1 {{gradients must have the types of query, key and value}}
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %q grad %q {seq_major = array<i1: false, false, false, false, false, false, false, true>} : (tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>) -> (tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>, tensor<1x8x16x64xf32>)
  return
}

// -----

// bf16 logits are the rounding of a bf16 head's matmul: not for fp32.
func.func @linear_cross_entropy_bf16_logits_f32(%h: tensor<8x64xf32>, %w: tensor<64x256xf32>, %y: tensor<8xi64>) {
  // expected-error @+1 {{bf16_logits needs bf16 hidden states and weight, got 'f32'}}
  %l = kiln.linear_cross_entropy %h, %w, %y {bf16_logits, chunk_tokens = 8 : i64} : (tensor<8x64xf32>, tensor<64x256xf32>, tensor<8xi64>) -> tensor<f32>
  return
}
