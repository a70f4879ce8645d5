// RUN: kiln-opt %s '--kiln-lora=rank=4 alpha=8 targets=^l1\.' | FileCheck %s
// RUN: kiln-opt %s '--kiln-lora=rank=4 alpha=8 targets=^l1\.' | FileCheck %s --check-prefix=ATTR
// The settings PEFT's adapter_config.json needs travel on the module.
// ATTR: module attributes {kiln.lora = {alpha = 8.000000e+00 : f64, dropout = 0.000000e+00 : f64, rank = 4 : i64}}
// RUN: kiln-opt %s '--kiln-lora=rank=2 alpha=2 dropout=0.1 targets=^l[12]\.' | FileCheck %s --check-prefix=DROP
// RUN: kiln-opt %s '--kiln-lora=rank=2 targets=^l[12]\. skip=^l2' | FileCheck %s --check-prefix=SKIP
// RUN: kiln-opt %s --kiln-lora=rank=2 | FileCheck %s --check-prefix=DEFAULT
// RUN: not kiln-opt %s '--kiln-lora=targets=^nothing$' 2>&1 | FileCheck %s --check-prefix=NOMATCH
// RUN: not kiln-opt %s '--kiln-lora=targets=(' 2>&1 | FileCheck %s --check-prefix=BADREGEX
// RUN: not kiln-opt %s '--kiln-lora=rank=0' 2>&1 | FileCheck %s --check-prefix=BADRANK

// PyTorch layout [out, in] with transpose_b (legacy Gemm): adapters
// A [r, in] and B [out, r]; the base weight stops training; every former
// use of the matmul reads the sum.
// CHECK-LABEL: func.func @gemm_layout
// CHECK: %[[W:.*]] = kiln.parameter "l1.weight" : tensor<64x32xf32>
// CHECK: %[[Y:.*]] = kiln.matmul %arg0, %[[W]] {transpose_b}
// CHECK: %[[A:.*]] = kiln.parameter "l1.lora_A.weight" trainable {kiln.init = "kaiming_uniform(a=sqrt(5))"} : tensor<4x32xf32>
// CHECK: %[[B:.*]] = kiln.parameter "l1.lora_B.weight" trainable {kiln.init = "zeros"} : tensor<64x4xf32>
// CHECK: %[[T:.*]] = kiln.matmul %arg0, %[[A]] {transpose_b} : {{.*}} -> tensor<?x4xf32
// CHECK: %[[U:.*]] = kiln.matmul %[[T]], %[[B]] {transpose_b} : {{.*}} -> tensor<?x64xf32
// CHECK: %[[S:.*]] = kiln.constant dense<2.000000e+00> : tensor<f32>
// CHECK: %[[V:.*]] = kiln.mul %[[U]], %[[S]]
// CHECK: %[[Z:.*]] = kiln.add %[[Y]], %[[V]]
// CHECK: kiln.relu %[[Z]]
// The init program: A ~ U(-1/sqrt(32), 1/sqrt(32)) from the seed, B = 0.
// CHECK-LABEL: func.func @kiln_init
// CHECK-SAME: %[[SEED:.*]]: tensor<i64> {kiln.name = "init_seed", kiln.rng_seed}
// CHECK-SAME: {kiln.param = "l1.lora_A.weight"}
// CHECK-SAME: {kiln.param = "l1.lora_B.weight"}
// CHECK: kiln.random_uniform %[[SEED]] {high = 0.17677669529663687 : f64, low = -0.17677669529663687 : f64, stream = 0 : i64} : tensor<i64> -> tensor<4x32xf32>
// CHECK: kiln.constant dense<0.000000e+00> : tensor<f32>

// DROP-LABEL: func.func @gemm_layout
// DROP-SAME: %[[SEED:arg[0-9]+]]: tensor<i64> {kiln.name = "dropout_seed", kiln.rng_seed}
// DROP: kiln.dropout %arg0, %[[SEED]] {p = 1.000000e-01 : f64, stream = 0 : i64}
// DROP: kiln.dropout %{{.*}}, %[[SEED]] {p = 1.000000e-01 : f64, stream = 1 : i64}
// Only functions with adapters take a seed.
// DROP-LABEL: func.func @pretransposed
// DROP-NOT: rng_seed
// DROP-LABEL: func.func @kiln_init

// SKIP: "l1.lora_A.weight"
// SKIP-NOT: "l2.lora_A.weight"
// SKIP-LABEL: func.func @pretransposed

// The default targets find q_proj through the exporter's folded_from name
// of a pre-transposed [in, out] weight, and through the ONNX node scope of
// a generated initializer name; l1/l2 match no default target.
// DEFAULT-LABEL: func.func @gemm_layout
// DEFAULT-NOT: lora
// DEFAULT-LABEL: func.func @pretransposed
// DEFAULT: kiln.parameter "model.layers.0.self_attn.q_proj.lora_A.weight" trainable {{.*}} : tensor<2x16xf32>
// DEFAULT: kiln.parameter "model.layers.0.self_attn.q_proj.lora_B.weight" trainable {{.*}} : tensor<8x2xf32>
// DEFAULT: kiln.parameter "model.layers.0.mlp.up_proj.lora_A.weight" trainable {{.*}} : tensor<2x16xf32>
// DEFAULT: kiln.parameter "model.layers.0.mlp.up_proj.lora_B.weight" trainable {{.*}} : tensor<24x2xf32>

// NOMATCH: error: LoRA: no linear layer's weight matches targets '^nothing$' (linear weights: l1.weight, l2.weight, model.layers.0.self_attn.q_proj.weight, model.layers.0.mlp.up_proj.weight)
// BADREGEX: error: invalid LoRA regex
// BADRANK: error: LoRA needs r > 0, alpha > 0 and 0 <= dropout < 1

func.func @gemm_layout(%x: tensor<?x32xf32, #kiln.dims<[batch]>>) -> tensor<?x10xf32, #kiln.dims<[batch]>> {
  %w1 = kiln.parameter "l1.weight" trainable : tensor<64x32xf32>
  %h = kiln.matmul %x, %w1 {transpose_b} : (tensor<?x32xf32, #kiln.dims<[batch]>>, tensor<64x32xf32>) -> tensor<?x64xf32, #kiln.dims<[batch]>>
  %r = kiln.relu %h : tensor<?x64xf32, #kiln.dims<[batch]>>
  %w2 = kiln.parameter "l2.weight" trainable : tensor<10x64xf32>
  %y = kiln.matmul %r, %w2 {transpose_b} : (tensor<?x64xf32, #kiln.dims<[batch]>>, tensor<10x64xf32>) -> tensor<?x10xf32, #kiln.dims<[batch]>>
  return %y : tensor<?x10xf32, #kiln.dims<[batch]>>
}

func.func @pretransposed(%x: tensor<2x16xf32>) -> (tensor<2x8xf32>, tensor<2x24xf32>) {
  %wq = kiln.parameter "val_95" trainable {kiln.source_name = "model.layers.0.self_attn.q_proj.weight"} : tensor<16x8xf32>
  %q = kiln.matmul %x, %wq : (tensor<2x16xf32>, tensor<16x8xf32>) -> tensor<2x8xf32>
  %wu = kiln.parameter "onnx::MatMul_7" trainable : tensor<16x24xf32> loc("/model/layers.0/mlp/up_proj/MatMul")
  %u = kiln.matmul %x, %wu : (tensor<2x16xf32>, tensor<16x24xf32>) -> tensor<2x24xf32> loc("/model/layers.0/mlp/up_proj/MatMul")
  return %q, %u : tensor<2x8xf32>, tensor<2x24xf32>
}
