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
