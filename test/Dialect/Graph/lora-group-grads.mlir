// RUN: kiln-opt %s --split-input-file --kiln-lora-group-grads | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-lora-group-grads=all-groups=true | FileCheck %s --check-prefix=ALL

// q/k/v after group-frozen: [dq | dk | dv | dT] with dT the sum of the
// three scaled adapter products and each scaled piece's dB summed over the
// batch. One dT product over [dq | dk | dv] against the stacked padded Bs,
// one dB product whose row blocks replace the three; the concatenation
// reads [dq | dk | dv] itself.
// CHECK-LABEL: func.func @qkv
// CHECK: %[[P:.+]] = kiln.concat %arg0, %arg1, %arg2 {axis = 2 : i64} : ({{.*}}) -> tensor<?x?x96xbf16, #kiln.dims<[b, s]>>
// CHECK: %[[SP:.+]] = kiln.mul %[[P]], %arg7
// CHECK: %[[R:.+]] = kiln.concat %arg3, %arg4, %arg5 {axis = 0 : i64} : (tensor<64x24xbf16>, tensor<16x24xbf16>, tensor<16x24xbf16>) -> tensor<96x24xbf16>
// CHECK: %[[DT:.+]] = kiln.matmul %[[SP]], %[[R]] : (tensor<?x?x96xbf16, #kiln.dims<[b, s]>>, tensor<96x24xbf16>) -> tensor<?x?x24xbf16, #kiln.dims<[b, s]>>
// CHECK: %[[B:.+]] = kiln.matmul %[[SP]], %arg6 {transpose_a}
// CHECK: %[[BS:.+]] = kiln.reduce_sum %[[B]] {axes = array<i64: 0>} : (tensor<?x96x24xbf16, #kiln.dims<[b]>>) -> tensor<96x24xbf16>
// CHECK-DAG: %[[BQ:.+]] = kiln.slice %[[BS]] {starts = #kiln.dims<[0, 0]>, {{.*}}} : tensor<96x24xbf16> -> tensor<64x24xbf16>
// CHECK-DAG: %[[BK:.+]] = kiln.slice %[[BS]] {starts = #kiln.dims<[64, 0]>, {{.*}}} : tensor<96x24xbf16> -> tensor<16x24xbf16>
// CHECK-DAG: %[[BV:.+]] = kiln.slice %[[BS]] {starts = #kiln.dims<[80, 0]>, {{.*}}} : tensor<96x24xbf16> -> tensor<16x24xbf16>
// CHECK: %[[L:.+]] = kiln.concat %[[P]], %[[DT]] {axis = 2 : i64} : (tensor<?x?x96xbf16, #kiln.dims<[b, s]>>, tensor<?x?x24xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x120xbf16, #kiln.dims<[b, s]>>
// CHECK-NOT: kiln.add
// CHECK: return %[[L]], %[[DT]], %[[BQ]], %[[BK]], %[[BV]]
func.func @qkv(%dq: tensor<?x?x64xbf16, #kiln.dims<[b, s]>>, %dk: tensor<?x?x16xbf16, #kiln.dims<[b, s]>>,
               %dv: tensor<?x?x16xbf16, #kiln.dims<[b, s]>>, %rq: tensor<64x24xbf16>, %rk: tensor<16x24xbf16>,
               %rv: tensor<16x24xbf16>, %t: tensor<?x?x24xbf16, #kiln.dims<[b, s]>>, %s: tensor<bf16>)
    -> (tensor<?x?x120xbf16, #kiln.dims<[b, s]>>, tensor<?x?x24xbf16, #kiln.dims<[b, s]>>, tensor<64x24xbf16>, tensor<16x24xbf16>, tensor<16x24xbf16>) {
  %sv = kiln.mul %dv, %s : (tensor<?x?x16xbf16, #kiln.dims<[b, s]>>, tensor<bf16>) -> tensor<?x?x16xbf16, #kiln.dims<[b, s]>>
  %tv = kiln.matmul %sv, %rv : (tensor<?x?x16xbf16, #kiln.dims<[b, s]>>, tensor<16x24xbf16>) -> tensor<?x?x24xbf16, #kiln.dims<[b, s]>>
  %pv = kiln.matmul %sv, %t {transpose_a} : (tensor<?x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x?x24xbf16, #kiln.dims<[b, s]>>) -> tensor<?x16x24xbf16, #kiln.dims<[b]>>
  %bv = kiln.reduce_sum %pv {axes = array<i64: 0>} : (tensor<?x16x24xbf16, #kiln.dims<[b]>>) -> tensor<16x24xbf16>
  %sk = kiln.mul %dk, %s : (tensor<?x?x16xbf16, #kiln.dims<[b, s]>>, tensor<bf16>) -> tensor<?x?x16xbf16, #kiln.dims<[b, s]>>
  %tk = kiln.matmul %sk, %rk : (tensor<?x?x16xbf16, #kiln.dims<[b, s]>>, tensor<16x24xbf16>) -> tensor<?x?x24xbf16, #kiln.dims<[b, s]>>
  %pk = kiln.matmul %sk, %t {transpose_a} : (tensor<?x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x?x24xbf16, #kiln.dims<[b, s]>>) -> tensor<?x16x24xbf16, #kiln.dims<[b]>>
  %bk = kiln.reduce_sum %pk {axes = array<i64: 0>} : (tensor<?x16x24xbf16, #kiln.dims<[b]>>) -> tensor<16x24xbf16>
  %a1 = kiln.add %tv, %tk : (tensor<?x?x24xbf16, #kiln.dims<[b, s]>>, tensor<?x?x24xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x24xbf16, #kiln.dims<[b, s]>>
  %sq = kiln.mul %dq, %s : (tensor<?x?x64xbf16, #kiln.dims<[b, s]>>, tensor<bf16>) -> tensor<?x?x64xbf16, #kiln.dims<[b, s]>>
  %tq = kiln.matmul %sq, %rq : (tensor<?x?x64xbf16, #kiln.dims<[b, s]>>, tensor<64x24xbf16>) -> tensor<?x?x24xbf16, #kiln.dims<[b, s]>>
  %pq = kiln.matmul %sq, %t {transpose_a} : (tensor<?x?x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x24xbf16, #kiln.dims<[b, s]>>) -> tensor<?x64x24xbf16, #kiln.dims<[b]>>
  %bq = kiln.reduce_sum %pq {axes = array<i64: 0>} : (tensor<?x64x24xbf16, #kiln.dims<[b]>>) -> tensor<64x24xbf16>
  %dt = kiln.add %a1, %tq : (tensor<?x?x24xbf16, #kiln.dims<[b, s]>>, tensor<?x?x24xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x24xbf16, #kiln.dims<[b, s]>>
  %l = kiln.concat %dq, %dk, %dv, %dt {axis = 2 : i64} : (tensor<?x?x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x?x24xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x120xbf16, #kiln.dims<[b, s]>>
  return %l, %dt, %bq, %bk, %bv : tensor<?x?x120xbf16, #kiln.dims<[b, s]>>, tensor<?x?x24xbf16, #kiln.dims<[b, s]>>, tensor<64x24xbf16>, tensor<16x24xbf16>, tensor<16x24xbf16>
}

// -----

// gate/up: both pieces wider than 1024, left alone unless all-groups; no
// scale and unbatched dB products.
// CHECK-LABEL: func.func @wide
// CHECK-COUNT-2: kiln.add
// ALL-LABEL: func.func @wide
// ALL: %[[P:.+]] = kiln.concat %arg0, %arg1 {axis = 1 : i64} : (tensor<?x2048xbf16, #kiln.dims<[n]>>, tensor<?x2048xbf16, #kiln.dims<[n]>>) -> tensor<?x4096xbf16, #kiln.dims<[n]>>
// ALL: %[[R:.+]] = kiln.concat %arg2, %arg3 {axis = 0 : i64}
// ALL: %[[DT:.+]] = kiln.matmul %[[P]], %[[R]]
// ALL: %[[B:.+]] = kiln.matmul %[[P]], %arg4 {transpose_a} : (tensor<?x4096xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) -> tensor<4096x32xbf16>
// ALL-DAG: kiln.slice %[[B]] {starts = #kiln.dims<[0, 0]>, {{.*}}} : tensor<4096x32xbf16> -> tensor<2048x32xbf16>
// ALL-DAG: kiln.slice %[[B]] {starts = #kiln.dims<[2048, 0]>, {{.*}}} : tensor<4096x32xbf16> -> tensor<2048x32xbf16>
// ALL: kiln.concat %[[P]], %[[DT]] {axis = 1 : i64}
// The sum's other reader adds to the merged product.
// ALL: kiln.add %[[DT]], %arg5
func.func @wide(%dg: tensor<?x2048xbf16, #kiln.dims<[n]>>, %du: tensor<?x2048xbf16, #kiln.dims<[n]>>,
                %rg: tensor<2048x32xbf16>, %ru: tensor<2048x32xbf16>, %t: tensor<?x32xbf16, #kiln.dims<[n]>>, %e: tensor<?x32xbf16, #kiln.dims<[n]>>)
    -> (tensor<?x4128xbf16, #kiln.dims<[n]>>, tensor<2048x32xbf16>, tensor<2048x32xbf16>) {
  %tg = kiln.matmul %dg, %rg : (tensor<?x2048xbf16, #kiln.dims<[n]>>, tensor<2048x32xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %bg = kiln.matmul %dg, %t {transpose_a} : (tensor<?x2048xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) -> tensor<2048x32xbf16>
  %tu = kiln.matmul %du, %ru : (tensor<?x2048xbf16, #kiln.dims<[n]>>, tensor<2048x32xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %bu = kiln.matmul %du, %t {transpose_a} : (tensor<?x2048xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) -> tensor<2048x32xbf16>
  %a = kiln.add %tg, %tu : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %dt = kiln.add %a, %e : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %l = kiln.concat %dg, %du, %a {axis = 1 : i64} : (tensor<?x2048xbf16, #kiln.dims<[n]>>, tensor<?x2048xbf16, #kiln.dims<[n]>>, tensor<?x32xbf16, #kiln.dims<[n]>>) -> tensor<?x4128xbf16, #kiln.dims<[n]>>
  return %l, %bg, %bu : tensor<?x4128xbf16, #kiln.dims<[n]>>, tensor<2048x32xbf16>, tensor<2048x32xbf16>
}

// -----

// Left alone: the pieces' scales differ, and a term reads no piece.
// CHECK-LABEL: func.func @not_grouped
// CHECK-COUNT-2: kiln.add
// CHECK-NOT: kiln.concat %arg0, %arg1 {axis = 1
func.func @not_grouped(%dq: tensor<?x64xbf16, #kiln.dims<[n]>>, %dk: tensor<?x16xbf16, #kiln.dims<[n]>>,
                       %rq: tensor<64x24xbf16>, %rk: tensor<16x24xbf16>, %s1: tensor<bf16>, %s2: tensor<bf16>,
                       %x: tensor<?x16xbf16, #kiln.dims<[n]>>)
    -> (tensor<?x104xbf16, #kiln.dims<[n]>>, tensor<?x104xbf16, #kiln.dims<[n]>>) {
  %sq = kiln.mul %dq, %s1 : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<bf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %tq = kiln.matmul %sq, %rq : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<64x24xbf16>) -> tensor<?x24xbf16, #kiln.dims<[n]>>
  %sk = kiln.mul %dk, %s2 : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<bf16>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
  %tk = kiln.matmul %sk, %rk : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<16x24xbf16>) -> tensor<?x24xbf16, #kiln.dims<[n]>>
  %dt = kiln.add %tq, %tk : (tensor<?x24xbf16, #kiln.dims<[n]>>, tensor<?x24xbf16, #kiln.dims<[n]>>) -> tensor<?x24xbf16, #kiln.dims<[n]>>
  %l = kiln.concat %dq, %dk, %dt {axis = 1 : i64} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x24xbf16, #kiln.dims<[n]>>) -> tensor<?x104xbf16, #kiln.dims<[n]>>
  %tx = kiln.matmul %x, %rk : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<16x24xbf16>) -> tensor<?x24xbf16, #kiln.dims<[n]>>
  %d2 = kiln.add %tq, %tx : (tensor<?x24xbf16, #kiln.dims<[n]>>, tensor<?x24xbf16, #kiln.dims<[n]>>) -> tensor<?x24xbf16, #kiln.dims<[n]>>
  %l2 = kiln.concat %dq, %dk, %d2 {axis = 1 : i64} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x24xbf16, #kiln.dims<[n]>>) -> tensor<?x104xbf16, #kiln.dims<[n]>>
  return %l, %l2 : tensor<?x104xbf16, #kiln.dims<[n]>>, tensor<?x104xbf16, #kiln.dims<[n]>>
}
