// RUN: kiln-opt %s --split-input-file --kiln-lora-k-concat | FileCheck %s

// Forward: x W + s (t B^T), W stored [in, out] (the exporter's pre-transposed
// weight), B padded to the group's rank: [x | t] [W ; s B^T], one GEMM.
// CHECK-LABEL: func.func @forward
// CHECK-SAME: attributes {kiln.lora_k_concat}
// CHECK: %[[T:.+]] = kiln.matmul %arg0, %arg2 {transpose_b}
// CHECK: %[[XT:.+]] = kiln.concat %arg0, %[[T]] {axis = 1 : i64} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>) -> tensor<?x80xbf16, #kiln.dims<[n]>>
// CHECK: %[[BT:.+]] = kiln.transpose %arg3 {perm = array<i64: 1, 0>} : (tensor<176x16xbf16>) -> tensor<16x176xbf16>
// CHECK: %[[BS:.+]] = kiln.mul %[[BT]], %arg4
// CHECK: %[[WB:.+]] = kiln.concat %arg1, %[[BS]] {axis = 0 : i64} : (tensor<64x176xbf16>, tensor<16x176xbf16>) -> tensor<80x176xbf16>
// CHECK: %[[Z:.+]] = kiln.matmul %[[XT]], %[[WB]] : (tensor<?x80xbf16, #kiln.dims<[n]>>, tensor<80x176xbf16>) -> tensor<?x176xbf16, #kiln.dims<[n]>>
// CHECK-NOT: kiln.add
// CHECK: return %[[Z]]
func.func @forward(%x: tensor<?x64xbf16, #kiln.dims<[n]>>, %w: tensor<64x176xbf16>,
                   %a: tensor<16x64xbf16> {kiln.param = "m.up_proj.lora_A.weight"},
                   %b: tensor<176x16xbf16> {kiln.param = "m.up_proj.lora_B.weight"},
                   %s: tensor<bf16>) -> tensor<?x176xbf16, #kiln.dims<[n]>> {
  %y = kiln.matmul %x, %w : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x176xbf16>) -> tensor<?x176xbf16, #kiln.dims<[n]>>
  %t = kiln.matmul %x, %a {transpose_b} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<16x64xbf16>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
  %u = kiln.matmul %t, %b {transpose_b} : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<176x16xbf16>) -> tensor<?x176xbf16, #kiln.dims<[n]>>
  %v = kiln.mul %u, %s : (tensor<?x176xbf16, #kiln.dims<[n]>>, tensor<bf16>) -> tensor<?x176xbf16, #kiln.dims<[n]>>
  %z = kiln.add %y, %v : (tensor<?x176xbf16, #kiln.dims<[n]>>, tensor<?x176xbf16, #kiln.dims<[n]>>) -> tensor<?x176xbf16, #kiln.dims<[n]>>
  return %z : tensor<?x176xbf16, #kiln.dims<[n]>>
}

// -----

// Two adapters of a group read one [x | t]; a weight stored [out, in]
// (transpose_b) takes the adapter's columns beside it.
// CHECK-LABEL: func.func @group
// CHECK: %[[T:.+]] = kiln.matmul %arg0, %arg3 {transpose_b}
// CHECK: %[[XT:.+]] = kiln.concat %arg0, %[[T]] {axis = 1 : i64}
// CHECK-NOT: kiln.concat %arg0
// CHECK: %[[W1:.+]] = kiln.concat %arg1, %arg4 {axis = 1 : i64} : (tensor<32x64xf32>, tensor<32x8xf32>) -> tensor<32x72xf32>
// CHECK: kiln.matmul %[[XT]], %[[W1]] {transpose_b}
// CHECK: %[[W2:.+]] = kiln.concat %arg2, %arg5 {axis = 1 : i64} : (tensor<16x64xf32>, tensor<16x8xf32>) -> tensor<16x72xf32>
// CHECK: kiln.matmul %[[XT]], %[[W2]] {transpose_b}
// CHECK-NOT: kiln.add
func.func @group(%x: tensor<?x64xf32, #kiln.dims<[n]>>, %wq: tensor<32x64xf32>, %wk: tensor<16x64xf32>,
                 %a: tensor<8x64xf32> {kiln.param = "m.qk.lora_A.weight"},
                 %bq: tensor<32x8xf32> {kiln.param = "m.q_proj.lora_B.weight"},
                 %bk: tensor<16x8xf32> {kiln.param = "m.k_proj.lora_B.weight"})
    -> (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x16xf32, #kiln.dims<[n]>>) {
  %t = kiln.matmul %x, %a {transpose_b} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<8x64xf32>) -> tensor<?x8xf32, #kiln.dims<[n]>>
  %yq = kiln.matmul %x, %wq {transpose_b} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<32x64xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %uq = kiln.matmul %t, %bq {transpose_b} : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<32x8xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %zq = kiln.add %yq, %uq : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %yk = kiln.matmul %x, %wk {transpose_b} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<16x64xf32>) -> tensor<?x16xf32, #kiln.dims<[n]>>
  %uk = kiln.matmul %t, %bk {transpose_b} : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<16x8xf32>) -> tensor<?x16xf32, #kiln.dims<[n]>>
  %zk = kiln.add %uk, %yk : (tensor<?x16xf32, #kiln.dims<[n]>>, tensor<?x16xf32, #kiln.dims<[n]>>) -> tensor<?x16xf32, #kiln.dims<[n]>>
  return %zq, %zk : tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x16xf32, #kiln.dims<[n]>>
}

// -----

// The input gradient of a group: dy_q W_q^T + dy_k W_k^T + dT A. The
// adapter's product joins the frozen one with the larger k (q's):
// [dy_q | dT] [W_q | A^T]^T, and the sum keeps the other term.
// CHECK-LABEL: func.func @input_gradient
// CHECK: %[[L:.+]] = kiln.concat %arg0, %arg2 {axis = 1 : i64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x8xf32, #kiln.dims<[n]>>) -> tensor<?x72xf32, #kiln.dims<[n]>>
// CHECK: %[[K:.+]] = kiln.matmul %arg1, %arg4 {transpose_b}
// CHECK: %[[AT:.+]] = kiln.transpose %arg5 {perm = array<i64: 1, 0>} : (tensor<8x48xf32>) -> tensor<48x8xf32>
// CHECK: %[[R:.+]] = kiln.concat %arg3, %[[AT]] {axis = 1 : i64} : (tensor<48x64xf32>, tensor<48x8xf32>) -> tensor<48x72xf32>
// CHECK: %[[Q:.+]] = kiln.matmul %[[L]], %[[R]] {transpose_b} : (tensor<?x72xf32, #kiln.dims<[n]>>, tensor<48x72xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
// CHECK: %[[S:.+]] = kiln.add %[[Q]], %[[K]]
// CHECK: return %[[S]]
func.func @input_gradient(%dyq: tensor<?x64xf32, #kiln.dims<[n]>>, %dyk: tensor<?x16xf32, #kiln.dims<[n]>>,
                          %dt: tensor<?x8xf32, #kiln.dims<[n]>>, %wq: tensor<48x64xf32>, %wk: tensor<48x16xf32>,
                          %a: tensor<8x48xf32> {kiln.param = "m.q_proj.lora_A.weight"}) -> tensor<?x48xf32, #kiln.dims<[n]>> {
  %dq = kiln.matmul %dyq, %wq {transpose_b} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<48x64xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %dk = kiln.matmul %dyk, %wk {transpose_b} : (tensor<?x16xf32, #kiln.dims<[n]>>, tensor<48x16xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %s1 = kiln.add %dq, %dk : (tensor<?x48xf32, #kiln.dims<[n]>>, tensor<?x48xf32, #kiln.dims<[n]>>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %dl = kiln.matmul %dt, %a : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<8x48xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %s2 = kiln.add %s1, %dl : (tensor<?x48xf32, #kiln.dims<[n]>>, tensor<?x48xf32, #kiln.dims<[n]>>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  return %s2 : tensor<?x48xf32, #kiln.dims<[n]>>
}

// -----

// Left alone: two frozen products (no adapter), an adapter product with no
// wider frozen partner, and a frozen term used twice.
// CHECK-LABEL: func.func @unchanged
// CHECK-NOT: kiln.lora_k_concat
// CHECK-NOT: kiln.concat
// CHECK: kiln.add
// CHECK: kiln.add
// CHECK: kiln.add
func.func @unchanged(%x: tensor<?x64xf32, #kiln.dims<[n]>>, %w1: tensor<64x32xf32>, %w2: tensor<64x32xf32>,
                     %t: tensor<?x8xf32, #kiln.dims<[n]>>, %v: tensor<?x64xf32, #kiln.dims<[n]>>,
                     %b: tensor<32x8xf32> {kiln.param = "m.o_proj.lora_B.weight"})
    -> (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>) {
  %p1 = kiln.matmul %x, %w1 : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %p2 = kiln.matmul %v, %w2 : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %s1 = kiln.add %p1, %p2 : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %u1 = kiln.matmul %t, %b {transpose_b} : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<32x8xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %u2 = kiln.matmul %t, %b {transpose_b} : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<32x8xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %s2 = kiln.add %u1, %u2 : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %p3 = kiln.matmul %x, %w1 : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x32xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %u3 = kiln.matmul %t, %b {transpose_b} : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<32x8xf32>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  %s3 = kiln.add %p3, %u3 : (tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>) -> tensor<?x32xf32, #kiln.dims<[n]>>
  return %s1, %s2, %s3, %p3 : tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>, tensor<?x32xf32, #kiln.dims<[n]>>
}
