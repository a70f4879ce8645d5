// RUN: kiln-opt %s --split-input-file --kiln-lora-k-concat=group-frozen=true | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-lora-k-concat | FileCheck %s --check-prefix=OFF

// q/k/v's input gradient: dq Wq^T + dk Wk^T + dv Wv^T + dT A. With
// group-frozen every frozen product joins the adapter's: one GEMM over
// [dq | dk | dv | dT], the weights side by side in program order.
// CHECK-LABEL: func.func @qkv_input_gradient
// CHECK: %[[L:.+]] = kiln.concat %arg0, %arg1, %arg2, %arg3 {axis = 1 : i64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x16xf32, #kiln.dims<[n]>>, tensor<?x16xf32, #kiln.dims<[n]>>, tensor<?x24xf32, #kiln.dims<[n]>>) -> tensor<?x120xf32, #kiln.dims<[n]>>
// CHECK-DAG: %[[WQ:.+]] = kiln.parameter "wq"
// CHECK-DAG: %[[WK:.+]] = kiln.parameter "wk"
// CHECK-DAG: %[[WV:.+]] = kiln.parameter "wv"
// CHECK: %[[AT:.+]] = kiln.transpose %arg4
// CHECK: %[[R:.+]] = kiln.concat %[[WQ]], %[[WK]], %[[WV]], %[[AT]] {axis = 1 : i64} : (tensor<48x64xf32>, tensor<48x16xf32>, tensor<48x16xf32>, tensor<48x24xf32>) -> tensor<48x120xf32>
// CHECK: %[[D:.+]] = kiln.matmul %[[L]], %[[R]] {transpose_b} : (tensor<?x120xf32, #kiln.dims<[n]>>, tensor<48x120xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
// CHECK-NOT: kiln.add
// CHECK: return %[[D]]
// Off (the default): only q's product takes the adapter's; k and v stay.
// OFF-LABEL: func.func @qkv_input_gradient
// OFF: kiln.concat %arg0, %arg3 {axis = 1 : i64}
// OFF-COUNT-2: kiln.add
func.func @qkv_input_gradient(%dq: tensor<?x64xf32, #kiln.dims<[n]>>, %dk: tensor<?x16xf32, #kiln.dims<[n]>>,
                              %dv: tensor<?x16xf32, #kiln.dims<[n]>>, %dt: tensor<?x24xf32, #kiln.dims<[n]>>,
                              %a: tensor<24x48xf32> {kiln.param = "m.q_proj.lora_A.weight"}) -> tensor<?x48xf32, #kiln.dims<[n]>> {
  %wq = kiln.parameter "wq" : tensor<48x64xf32>
  %wk = kiln.parameter "wk" : tensor<48x16xf32>
  %wv = kiln.parameter "wv" : tensor<48x16xf32>
  %pq = kiln.matmul %dq, %wq {transpose_b} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<48x64xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %pk = kiln.matmul %dk, %wk {transpose_b} : (tensor<?x16xf32, #kiln.dims<[n]>>, tensor<48x16xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %s1 = kiln.add %pq, %pk : (tensor<?x48xf32, #kiln.dims<[n]>>, tensor<?x48xf32, #kiln.dims<[n]>>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %pv = kiln.matmul %dv, %wv {transpose_b} : (tensor<?x16xf32, #kiln.dims<[n]>>, tensor<48x16xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %s2 = kiln.add %s1, %pv : (tensor<?x48xf32, #kiln.dims<[n]>>, tensor<?x48xf32, #kiln.dims<[n]>>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %pt = kiln.matmul %dt, %a : (tensor<?x24xf32, #kiln.dims<[n]>>, tensor<24x48xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %s3 = kiln.add %s2, %pt : (tensor<?x48xf32, #kiln.dims<[n]>>, tensor<?x48xf32, #kiln.dims<[n]>>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  return %s3 : tensor<?x48xf32, #kiln.dims<[n]>>
}

// -----

// Left out of the group: a trainable weight, a weight read through a cast
// and a product in the other orientation.
// Only q's product takes the adapter's.
// CHECK-LABEL: func.func @not_joined
// CHECK: %[[L:.+]] = kiln.concat %arg0, %arg3 {axis = 1 : i64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x24xf32, #kiln.dims<[n]>>)
// CHECK: kiln.concat %{{.+}}, %{{.+}} {axis = 1 : i64} : (tensor<48x64xf32>, tensor<48x24xf32>) -> tensor<48x88xf32>
// CHECK-COUNT-3: kiln.add
func.func @not_joined(%dq: tensor<?x64xf32, #kiln.dims<[n]>>, %dk: tensor<?x16xf32, #kiln.dims<[n]>>,
                      %dw: tensor<?x16xf32, #kiln.dims<[n]>>, %dt: tensor<?x24xf32, #kiln.dims<[n]>>,
                      %a: tensor<24x48xf32> {kiln.param = "m.q_proj.lora_A.weight"}) -> tensor<?x48xf32, #kiln.dims<[n]>> {
  %wq = kiln.parameter "wq" : tensor<48x64xf32>
  %wt = kiln.parameter "wt" trainable : tensor<48x16xf32>
  %wb = kiln.parameter "wb" : tensor<48x16xbf16>
  %wc = kiln.cast %wb : tensor<48x16xbf16> -> tensor<48x16xf32>
  %wn = kiln.parameter "wn" : tensor<16x48xf32>
  %pq = kiln.matmul %dq, %wq {transpose_b} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<48x64xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %p1 = kiln.matmul %dk, %wt {transpose_b} : (tensor<?x16xf32, #kiln.dims<[n]>>, tensor<48x16xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %s1 = kiln.add %pq, %p1 : (tensor<?x48xf32, #kiln.dims<[n]>>, tensor<?x48xf32, #kiln.dims<[n]>>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %p2 = kiln.matmul %dk, %wc {transpose_b} : (tensor<?x16xf32, #kiln.dims<[n]>>, tensor<48x16xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %s2 = kiln.add %s1, %p2 : (tensor<?x48xf32, #kiln.dims<[n]>>, tensor<?x48xf32, #kiln.dims<[n]>>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %p3 = kiln.matmul %dw, %wn : (tensor<?x16xf32, #kiln.dims<[n]>>, tensor<16x48xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %s3 = kiln.add %s2, %p3 : (tensor<?x48xf32, #kiln.dims<[n]>>, tensor<?x48xf32, #kiln.dims<[n]>>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %pt = kiln.matmul %dt, %a : (tensor<?x24xf32, #kiln.dims<[n]>>, tensor<24x48xf32>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  %s4 = kiln.add %s3, %pt : (tensor<?x48xf32, #kiln.dims<[n]>>, tensor<?x48xf32, #kiln.dims<[n]>>) -> tensor<?x48xf32, #kiln.dims<[n]>>
  return %s4 : tensor<?x48xf32, #kiln.dims<[n]>>
}

// -----

// The group's forward: each member's K-concatenated product [x | t] [W ;
// Y] reads the same [x | t], and k and v are narrow, so the three become
// one product over [Wq Wk Wv ; Yq Yk Yv] whose column slices stand for
// them (the lowering reads it from the group's padded buffer).
// CHECK-LABEL: func.func @forward_merge
// CHECK: %[[XT:.+]] = kiln.concat %arg0, %arg1 {axis = 1 : i64}
// CHECK: %[[W:.+]] = kiln.concat %{{.+}}, %{{.+}}, %{{.+}} {axis = 1 : i64} : (tensor<64x64xf32>, tensor<64x16xf32>, tensor<64x16xf32>) -> tensor<64x96xf32>
// CHECK: %[[Y:.+]] = kiln.concat %arg6, %arg7, %arg8 {axis = 1 : i64} : (tensor<8x64xf32>, tensor<8x16xf32>, tensor<8x16xf32>) -> tensor<8x96xf32>
// CHECK: %[[WY:.+]] = kiln.concat %[[W]], %[[Y]] {axis = 0 : i64} : (tensor<64x96xf32>, tensor<8x96xf32>) -> tensor<72x96xf32>
// CHECK: %[[QKV:.+]] = kiln.matmul %[[XT]], %[[WY]] : (tensor<?x72xf32, #kiln.dims<[n]>>, tensor<72x96xf32>) -> tensor<?x96xf32, #kiln.dims<[n]>>
// CHECK: %[[Q:.+]] = kiln.slice %[[QKV]] {starts = #kiln.dims<[0, 0]>, {{.*}}} : tensor<?x96xf32, #kiln.dims<[n]>> -> tensor<?x64xf32, #kiln.dims<[n]>>
// CHECK: %[[K:.+]] = kiln.slice %[[QKV]] {starts = #kiln.dims<[0, 64]>, {{.*}}} : tensor<?x96xf32, #kiln.dims<[n]>> -> tensor<?x16xf32, #kiln.dims<[n]>>
// CHECK: %[[V:.+]] = kiln.slice %[[QKV]] {starts = #kiln.dims<[0, 80]>, {{.*}}} : tensor<?x96xf32, #kiln.dims<[n]>> -> tensor<?x16xf32, #kiln.dims<[n]>>
// CHECK: return %[[Q]], %[[K]], %[[V]]
// Without group-frozen the forward products stay apart.
// OFF-LABEL: func.func @forward_merge
// OFF-COUNT-3: kiln.matmul %{{.+}}, %{{.+}} : (tensor<?x72xf32
func.func @forward_merge(%x: tensor<?x64xf32, #kiln.dims<[n]>>, %t: tensor<?x8xf32, #kiln.dims<[n]>>,
                         %dq: tensor<?x64xf32, #kiln.dims<[n]>>, %dk: tensor<?x16xf32, #kiln.dims<[n]>>,
                         %dv: tensor<?x16xf32, #kiln.dims<[n]>>, %dt: tensor<?x8xf32, #kiln.dims<[n]>>,
                         %yq: tensor<8x64xf32>, %yk: tensor<8x16xf32>, %yv: tensor<8x16xf32>,
                         %a: tensor<8x64xf32> {kiln.param = "m.q_proj.lora_A.weight"})
    -> (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x16xf32, #kiln.dims<[n]>>, tensor<?x16xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) {
  %xt = kiln.concat %x, %t {axis = 1 : i64} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x8xf32, #kiln.dims<[n]>>) -> tensor<?x72xf32, #kiln.dims<[n]>>
  %wq = kiln.parameter "wq" : tensor<64x64xf32>
  %fq = kiln.concat %wq, %yq {axis = 0 : i64} : (tensor<64x64xf32>, tensor<8x64xf32>) -> tensor<72x64xf32>
  %q = kiln.matmul %xt, %fq : (tensor<?x72xf32, #kiln.dims<[n]>>, tensor<72x64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %wk = kiln.parameter "wk" : tensor<64x16xf32>
  %fk = kiln.concat %wk, %yk {axis = 0 : i64} : (tensor<64x16xf32>, tensor<8x16xf32>) -> tensor<72x16xf32>
  %k = kiln.matmul %xt, %fk : (tensor<?x72xf32, #kiln.dims<[n]>>, tensor<72x16xf32>) -> tensor<?x16xf32, #kiln.dims<[n]>>
  %wv = kiln.parameter "wv" : tensor<64x16xf32>
  %fv = kiln.concat %wv, %yv {axis = 0 : i64} : (tensor<64x16xf32>, tensor<8x16xf32>) -> tensor<72x16xf32>
  %v = kiln.matmul %xt, %fv : (tensor<?x72xf32, #kiln.dims<[n]>>, tensor<72x16xf32>) -> tensor<?x16xf32, #kiln.dims<[n]>>
  %wq2 = kiln.parameter "wq" : tensor<64x64xf32>
  %wk2 = kiln.parameter "wk" : tensor<64x16xf32>
  %wv2 = kiln.parameter "wv" : tensor<64x16xf32>
  %pq = kiln.matmul %dq, %wq2 {transpose_b} : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<64x64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %pk = kiln.matmul %dk, %wk2 {transpose_b} : (tensor<?x16xf32, #kiln.dims<[n]>>, tensor<64x16xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %s1 = kiln.add %pq, %pk : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %pv = kiln.matmul %dv, %wv2 {transpose_b} : (tensor<?x16xf32, #kiln.dims<[n]>>, tensor<64x16xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %s2 = kiln.add %s1, %pv : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %pt = kiln.matmul %dt, %a : (tensor<?x8xf32, #kiln.dims<[n]>>, tensor<8x64xf32>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  %s3 = kiln.add %s2, %pt : (tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>) -> tensor<?x64xf32, #kiln.dims<[n]>>
  return %q, %k, %v, %s3 : tensor<?x64xf32, #kiln.dims<[n]>>, tensor<?x16xf32, #kiln.dims<[n]>>, tensor<?x16xf32, #kiln.dims<[n]>>, tensor<?x64xf32, #kiln.dims<[n]>>
}
