// RUN: kiln-opt %s --split-input-file --kiln-fuse --kiln-lower-to-step | FileCheck %s

// Padded frozen weights (docs/design/lora-k-concat.md, piece 4): W [64, 176]
// read as [W ; s B^T] (forward) and [W | A^T] (input gradient) gets one
// persistent [64 + 16, 176 + 16] buffer. The forward GEMM reads its first
// 176 columns (ldb 192), the input gradient's GEMM its first 64 rows
// (packed: a row of 192 is its width); no kernel copies W, the adapter
// blocks are written into the rows below (offset 64 * 192) and the
// columns beside (offset 176).
// CHECK: kiln_kernel.kernel @padded_k{{[0-9]+}}_adapter_block <loop> symbols [] attributes {kiln.out_row_strides = array<i64: 192>} {
// CHECK-NEXT: ^bb0(%{{.+}}: tensor<176x16xf32>):
// CHECK-NOT: kiln.concat
// CHECK: kiln_kernel.yield %{{.+}} : tensor<16x176xbf16>
// CHECK: kiln_kernel.kernel @padded_k{{[0-9]+}}_adapter_block <loop> symbols [] attributes {kiln.out_row_strides = array<i64: 192>} {
// CHECK-NEXT: ^bb0(%{{.+}}: tensor<16x64xbf16>):
// CHECK-NEXT: kiln.transpose
// CHECK-NEXT: kiln_kernel.yield %{{.+}} : tensor<64x16xbf16>
// CHECK-LABEL: func.func @padded
// CHECK: %[[W:.+]] = kiln_kernel.weight "m.up_proj.weight" {padded_from = array<i64: 64, 176>} : !kiln_kernel.buffer<tensor<80x192xbf16>>
// CHECK: %[[BT:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<12288>, row_stride = #kiln.expr<192>} : !kiln_kernel.buffer<tensor<80x192xbf16>> -> !kiln_kernel.buffer<tensor<16x176xbf16>>
// CHECK: kiln_kernel.launch @padded_k{{[0-9]+}}_adapter_block ins(%arg4 : {{.*}}) outs(%[[BT]] : {{.*}})
// CHECK: %[[WB:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<0>, row_stride = #kiln.expr<192>} : !kiln_kernel.buffer<tensor<80x192xbf16>> -> !kiln_kernel.buffer<tensor<80x176xbf16>>
// CHECK: kiln_kernel.gemm %{{.+}}, %[[WB]] -> %{{.+}} m = #kiln.expr<n> n = #kiln.expr<176> k = #kiln.expr<80> {{.*}} {lds = #kiln.dims<[80, 192, 176]>}
// CHECK: %[[AT:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<176>, row_stride = #kiln.expr<192>} : !kiln_kernel.buffer<tensor<80x192xbf16>> -> !kiln_kernel.buffer<tensor<64x16xbf16>>
// CHECK: kiln_kernel.launch @padded_k{{[0-9]+}}_adapter_block ins(%{{.+}} : {{.*}}) outs(%[[AT]] : {{.*}})
// CHECK: %[[WA:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<0>} : !kiln_kernel.buffer<tensor<80x192xbf16>> -> !kiln_kernel.buffer<tensor<64x192xbf16>>
// CHECK: kiln_kernel.gemm %{{.+}}, %[[WA]] -> %{{.+}} m = #kiln.expr<n> n = #kiln.expr<64> k = #kiln.expr<192> {{.*}} {trans_b}
func.func @padded(%x: tensor<?x64xbf16, #kiln.dims<[n]>>, %dy: tensor<?x176xbf16, #kiln.dims<[n]>>, %dt: tensor<?x16xbf16, #kiln.dims<[n]>>,
                  %a: tensor<16x64xf32> {kiln.param = "m.up_proj.lora_A.weight"},
                  %b: tensor<176x16xf32> {kiln.param = "m.up_proj.lora_B.weight"})
    -> (tensor<?x176xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) attributes {kiln.lora_k_concat} {
  %ab = kiln.cast %a : tensor<16x64xf32> -> tensor<16x64xbf16>
  %bb = kiln.cast %b : tensor<176x16xf32> -> tensor<176x16xbf16>
  %bt = kiln.transpose %bb {perm = array<i64: 1, 0>} : (tensor<176x16xbf16>) -> tensor<16x176xbf16>
  %t = kiln.matmul %x, %ab {transpose_b} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<16x64xbf16>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
  %w = kiln.parameter "m.up_proj.weight" : tensor<64x176xbf16>
  %xt = kiln.concat %x, %t {axis = 1 : i64} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>) -> tensor<?x80xbf16, #kiln.dims<[n]>>
  %wb = kiln.concat %w, %bt {axis = 0 : i64} : (tensor<64x176xbf16>, tensor<16x176xbf16>) -> tensor<80x176xbf16>
  %y = kiln.matmul %xt, %wb : (tensor<?x80xbf16, #kiln.dims<[n]>>, tensor<80x176xbf16>) -> tensor<?x176xbf16, #kiln.dims<[n]>>
  %at = kiln.transpose %ab {perm = array<i64: 1, 0>} : (tensor<16x64xbf16>) -> tensor<64x16xbf16>
  %wa = kiln.concat %w, %at {axis = 1 : i64} : (tensor<64x176xbf16>, tensor<64x16xbf16>) -> tensor<64x192xbf16>
  %dyt = kiln.concat %dy, %dt {axis = 1 : i64} : (tensor<?x176xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>) -> tensor<?x192xbf16, #kiln.dims<[n]>>
  %dx = kiln.matmul %dyt, %wa {transpose_b} : (tensor<?x192xbf16, #kiln.dims<[n]>>, tensor<64x192xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  return %y, %dx : tensor<?x176xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>
}

// -----

// A weight with adapter rows only (k of q/k/v: the group's input gradient
// joins q's product): the rows below W are packed, and a GEMM that reads W
// alone takes the top block.
// CHECK-LABEL: func.func @rows_only
// CHECK: %[[W:.+]] = kiln_kernel.weight "m.k_proj.weight" {padded_from = array<i64: 64, 32>} : !kiln_kernel.buffer<tensor<72x32xbf16>>
// CHECK: %[[TOP:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<0>} : !kiln_kernel.buffer<tensor<72x32xbf16>> -> !kiln_kernel.buffer<tensor<64x32xbf16>>
// CHECK: %[[B:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<2048>} : !kiln_kernel.buffer<tensor<72x32xbf16>> -> !kiln_kernel.buffer<tensor<8x32xbf16>>
// CHECK: kiln_kernel.launch @rows_only_k{{[0-9]+}}_adapter_block ins(%arg2 : {{.*}}) outs(%[[B]] : {{.*}})
// CHECK: %[[WB:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<0>} : !kiln_kernel.buffer<tensor<72x32xbf16>> -> !kiln_kernel.buffer<tensor<72x32xbf16>>
// CHECK: kiln_kernel.gemm %{{.+}}, %[[WB]] -> %{{.+}} m = #kiln.expr<n> n = #kiln.expr<32> k = #kiln.expr<72>
// CHECK: kiln_kernel.gemm %arg3, %[[TOP]] -> %{{.+}} m = #kiln.expr<n> n = #kiln.expr<64> k = #kiln.expr<32> {{.*}} {trans_b}
func.func @rows_only(%x: tensor<?x64xbf16, #kiln.dims<[n]>>, %t: tensor<?x8xbf16, #kiln.dims<[n]>>,
                     %b: tensor<32x8xf32> {kiln.param = "m.k_proj.lora_B.weight"}, %dy: tensor<?x32xbf16, #kiln.dims<[n]>>)
    -> (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) attributes {kiln.lora_k_concat} {
  %w = kiln.parameter "m.k_proj.weight" : tensor<64x32xbf16>
  %bb = kiln.cast %b : tensor<32x8xf32> -> tensor<32x8xbf16>
  %bt = kiln.transpose %bb {perm = array<i64: 1, 0>} : (tensor<32x8xbf16>) -> tensor<8x32xbf16>
  %xt = kiln.concat %x, %t {axis = 1 : i64} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x8xbf16, #kiln.dims<[n]>>) -> tensor<?x72xbf16, #kiln.dims<[n]>>
  %wb = kiln.concat %w, %bt {axis = 0 : i64} : (tensor<64x32xbf16>, tensor<8x32xbf16>) -> tensor<72x32xbf16>
  %y = kiln.matmul %xt, %wb : (tensor<?x72xbf16, #kiln.dims<[n]>>, tensor<72x32xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %dx = kiln.matmul %dy, %w {transpose_b} : (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<64x32xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  return %y, %dx : tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>
}

// -----

// A frozen weight that a kernel also reads (here scaled and returned) is
// not padded: the concatenation stays a copy kernel of its own buffer.
// CHECK-LABEL: func.func @read_by_kernel
// CHECK-NOT: padded_from
// CHECK: kiln_kernel.launch @read_by_kernel_k{{[0-9]+}}_{{.*}}concat
func.func @read_by_kernel(%x: tensor<?x72xbf16, #kiln.dims<[n]>>, %bt: tensor<8x32xbf16>, %s: tensor<bf16>)
    -> (tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<64x32xbf16>) attributes {kiln.lora_k_concat} {
  %w = kiln.parameter "m.v_proj.weight" : tensor<64x32xbf16>
  %wb = kiln.concat %w, %bt {axis = 0 : i64} : (tensor<64x32xbf16>, tensor<8x32xbf16>) -> tensor<72x32xbf16>
  %y = kiln.matmul %x, %wb : (tensor<?x72xbf16, #kiln.dims<[n]>>, tensor<72x32xbf16>) -> tensor<?x32xbf16, #kiln.dims<[n]>>
  %ws = kiln.mul %w, %s : (tensor<64x32xbf16>, tensor<bf16>) -> tensor<64x32xbf16>
  return %y, %ws : tensor<?x32xbf16, #kiln.dims<[n]>>, tensor<64x32xbf16>
}

// -----

// Two layers' A^T blocks of one shape: one adapter_block kernel writes
// both (one output per block, each at its weight's padded row stride), at
// the first block's place, where both adapters exist.
// CHECK: kiln_kernel.kernel @two_layers_k{{[0-9]+}}_adapter_block <loop> symbols [] attributes {kiln.out_row_strides = array<i64: 192, 192>} {
// CHECK-NEXT: ^bb0(%{{.+}}: tensor<16x64xf32>, %{{.+}}: tensor<16x64xf32>):
// CHECK: kiln_kernel.yield %{{.+}}, %{{.+}} : tensor<64x16xbf16>, tensor<64x16xbf16>
// CHECK-LABEL: func.func @two_layers
// CHECK: %[[W0:.+]] = kiln_kernel.weight "l0.up_proj.weight"
// CHECK: %[[C0:.+]] = kiln_kernel.view %[[W0]] {offset = #kiln.expr<176>, row_stride = #kiln.expr<192>}
// CHECK: %[[W1:.+]] = kiln_kernel.weight "l1.up_proj.weight"
// CHECK: %[[C1:.+]] = kiln_kernel.view %[[W1]] {offset = #kiln.expr<176>, row_stride = #kiln.expr<192>}
// CHECK: kiln_kernel.launch @two_layers_k{{[0-9]+}}_adapter_block ins(%{{.+}}, %{{.+}} : {{.*}}) outs(%[[C0]], %[[C1]] : {{.*}})
// CHECK-NOT: _adapter_block
// CHECK: return
func.func @two_layers(%dy: tensor<?x176xbf16, #kiln.dims<[n]>>, %dt: tensor<?x16xbf16, #kiln.dims<[n]>>,
                      %a0: tensor<16x64xf32> {kiln.param = "l0.up_proj.lora_A.weight"},
                      %a1: tensor<16x64xf32> {kiln.param = "l1.up_proj.lora_A.weight"})
    -> (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) attributes {kiln.lora_k_concat} {
  %ab0 = kiln.cast %a0 : tensor<16x64xf32> -> tensor<16x64xbf16>
  %ab1 = kiln.cast %a1 : tensor<16x64xf32> -> tensor<16x64xbf16>
  %dyt = kiln.concat %dy, %dt {axis = 1 : i64} : (tensor<?x176xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>) -> tensor<?x192xbf16, #kiln.dims<[n]>>
  %w0 = kiln.parameter "l0.up_proj.weight" : tensor<64x176xbf16>
  %at0 = kiln.transpose %ab0 {perm = array<i64: 1, 0>} : (tensor<16x64xbf16>) -> tensor<64x16xbf16>
  %wa0 = kiln.concat %w0, %at0 {axis = 1 : i64} : (tensor<64x176xbf16>, tensor<64x16xbf16>) -> tensor<64x192xbf16>
  %dx0 = kiln.matmul %dyt, %wa0 {transpose_b} : (tensor<?x192xbf16, #kiln.dims<[n]>>, tensor<64x192xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %w1 = kiln.parameter "l1.up_proj.weight" : tensor<64x176xbf16>
  %at1 = kiln.transpose %ab1 {perm = array<i64: 1, 0>} : (tensor<16x64xbf16>) -> tensor<64x16xbf16>
  %wa1 = kiln.concat %w1, %at1 {axis = 1 : i64} : (tensor<64x176xbf16>, tensor<64x16xbf16>) -> tensor<64x192xbf16>
  %dx1 = kiln.matmul %dyt, %wa1 {transpose_b} : (tensor<?x192xbf16, #kiln.dims<[n]>>, tensor<64x192xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  return %dx0, %dx1 : tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>
}

// -----

// A group (kiln-lora-k-concat group-frozen): q, k and v's frozen weights
// side by side, [Wq | Wk | Wv | A^T] read by one input-gradient GEMM, each
// member's [W ; s B^T] by its forward GEMM. One persistent [64 + 8, 96 + 8]
// buffer holds all three (members at columns 0, 64, 80); each forward
// reads its columns at the buffer's row stride, each adapter's rows lie
// below its member, A^T beside all of them.
// CHECK-LABEL: func.func @group
// CHECK: %[[W:.+]] = kiln_kernel.weight "q.weight" {member_axis = 1 : i64, member_sizes = array<i64: 64, 16, 16>, members = ["q.weight", "k.weight", "v.weight"], padded_from = array<i64: 64, 96>} : !kiln_kernel.buffer<tensor<72x104xbf16>>
// CHECK-DAG: kiln_kernel.view %[[W]] {offset = #kiln.expr<6656>, row_stride = #kiln.expr<104>} : {{.*}} -> !kiln_kernel.buffer<tensor<8x64xbf16>>
// CHECK-DAG: kiln_kernel.view %[[W]] {offset = #kiln.expr<6720>, row_stride = #kiln.expr<104>} : {{.*}} -> !kiln_kernel.buffer<tensor<8x16xbf16>>
// CHECK-DAG: kiln_kernel.view %[[W]] {offset = #kiln.expr<6736>, row_stride = #kiln.expr<104>} : {{.*}} -> !kiln_kernel.buffer<tensor<8x16xbf16>>
// CHECK-DAG: %[[WK:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<64>, row_stride = #kiln.expr<104>} : {{.*}} -> !kiln_kernel.buffer<tensor<72x16xbf16>>
// CHECK-DAG: %[[AT:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<96>, row_stride = #kiln.expr<104>} : {{.*}} -> !kiln_kernel.buffer<tensor<64x8xbf16>>
// CHECK-DAG: kiln_kernel.gemm %{{.+}}, %[[WK]] -> %{{.+}} m = #kiln.expr<n> n = #kiln.expr<16> k = #kiln.expr<72> {{.*}} {lds = #kiln.dims<[72, 104, 16]>}
// CHECK-DAG: %[[WA:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<0>} : !kiln_kernel.buffer<tensor<72x104xbf16>> -> !kiln_kernel.buffer<tensor<64x104xbf16>>
// CHECK-DAG: kiln_kernel.gemm %{{.+}}, %[[WA]] -> %{{.+}} m = #kiln.expr<n> n = #kiln.expr<64> k = #kiln.expr<104> {{.*}} {trans_b}
// CHECK-NOT: kiln.concat %{{.+}}, %{{.+}}, %{{.+}}, %{{.+}} {axis = 1 : i64} : (tensor<64x64xbf16>
func.func @group(%x: tensor<?x64xbf16, #kiln.dims<[n]>>, %t: tensor<?x8xbf16, #kiln.dims<[n]>>,
                 %dq: tensor<?x64xbf16, #kiln.dims<[n]>>, %dk: tensor<?x16xbf16, #kiln.dims<[n]>>,
                 %dv: tensor<?x16xbf16, #kiln.dims<[n]>>, %dt: tensor<?x8xbf16, #kiln.dims<[n]>>,
                 %a: tensor<8x64xbf16>, %bqt: tensor<8x64xbf16>, %bkt: tensor<8x16xbf16>, %bvt: tensor<8x16xbf16>)
    -> (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) attributes {kiln.lora_k_concat} {
  %wq = kiln.parameter "q.weight" : tensor<64x64xbf16>
  %xt = kiln.concat %x, %t {axis = 1 : i64} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x8xbf16, #kiln.dims<[n]>>) -> tensor<?x72xbf16, #kiln.dims<[n]>>
  %wqb = kiln.concat %wq, %bqt {axis = 0 : i64} : (tensor<64x64xbf16>, tensor<8x64xbf16>) -> tensor<72x64xbf16>
  %yq = kiln.matmul %xt, %wqb : (tensor<?x72xbf16, #kiln.dims<[n]>>, tensor<72x64xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %wk = kiln.parameter "k.weight" : tensor<64x16xbf16>
  %wkb = kiln.concat %wk, %bkt {axis = 0 : i64} : (tensor<64x16xbf16>, tensor<8x16xbf16>) -> tensor<72x16xbf16>
  %yk = kiln.matmul %xt, %wkb : (tensor<?x72xbf16, #kiln.dims<[n]>>, tensor<72x16xbf16>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
  %wv = kiln.parameter "v.weight" : tensor<64x16xbf16>
  %wvb = kiln.concat %wv, %bvt {axis = 0 : i64} : (tensor<64x16xbf16>, tensor<8x16xbf16>) -> tensor<72x16xbf16>
  %yv = kiln.matmul %xt, %wvb : (tensor<?x72xbf16, #kiln.dims<[n]>>, tensor<72x16xbf16>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
  %at = kiln.transpose %a {perm = array<i64: 1, 0>} : (tensor<8x64xbf16>) -> tensor<64x8xbf16>
  %wa = kiln.concat %wq, %wk, %wv, %at {axis = 1 : i64} : (tensor<64x64xbf16>, tensor<64x16xbf16>, tensor<64x16xbf16>, tensor<64x8xbf16>) -> tensor<64x104xbf16>
  %dyt = kiln.concat %dq, %dk, %dv, %dt {axis = 1 : i64} : (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x8xbf16, #kiln.dims<[n]>>) -> tensor<?x104xbf16, #kiln.dims<[n]>>
  %dx = kiln.matmul %dyt, %wa {transpose_b} : (tensor<?x104xbf16, #kiln.dims<[n]>>, tensor<64x104xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  return %yq, %yk, %yv, %dx : tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>
}

// -----

// The group's merged forward (kiln-lora-k-concat group-frozen): [Wq Wk Wv ;
// Yq Yk Yv] is the group buffer's first 96 columns, its rows block below
// all three members (one adapter-block output at offset 64 * 104).
// CHECK-LABEL: func.func @group_forward
// CHECK: %[[W:.+]] = kiln_kernel.weight "q.weight" {member_axis = 1 : i64, member_sizes = array<i64: 64, 16, 16>, members = ["q.weight", "k.weight", "v.weight"], padded_from = array<i64: 64, 96>} : !kiln_kernel.buffer<tensor<72x104xbf16>>
// CHECK: %[[Y:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<6656>, row_stride = #kiln.expr<104>} : {{.*}} -> !kiln_kernel.buffer<tensor<8x96xbf16>>
// CHECK: kiln_kernel.launch @group_forward_k{{[0-9]+}}_adapter_block ins({{.*}}) outs(%[[Y]] : {{.*}})
// CHECK: %[[WY:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<0>, row_stride = #kiln.expr<104>} : {{.*}} -> !kiln_kernel.buffer<tensor<72x96xbf16>>
// CHECK: kiln_kernel.gemm %{{.+}}, %[[WY]] -> %{{.+}} m = #kiln.expr<n> n = #kiln.expr<96> k = #kiln.expr<72> {{.*}} {lds = #kiln.dims<[72, 104, 96]>}
// CHECK: kiln_kernel.gemm %{{.+}}, %{{.+}} -> %{{.+}} m = #kiln.expr<n> n = #kiln.expr<64> k = #kiln.expr<104> {{.*}} {trans_b}
func.func @group_forward(%xt: tensor<?x72xbf16, #kiln.dims<[n]>>, %dyt: tensor<?x104xbf16, #kiln.dims<[n]>>,
                         %a: tensor<8x64xbf16>, %bqt: tensor<8x64xbf16>, %bkt: tensor<8x16xbf16>, %bvt: tensor<8x16xbf16>)
    -> (tensor<?x96xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) attributes {kiln.lora_k_concat} {
  %wq = kiln.parameter "q.weight" : tensor<64x64xbf16>
  %wk = kiln.parameter "k.weight" : tensor<64x16xbf16>
  %wv = kiln.parameter "v.weight" : tensor<64x16xbf16>
  %w = kiln.concat %wq, %wk, %wv {axis = 1 : i64} : (tensor<64x64xbf16>, tensor<64x16xbf16>, tensor<64x16xbf16>) -> tensor<64x96xbf16>
  %y = kiln.concat %bqt, %bkt, %bvt {axis = 1 : i64} : (tensor<8x64xbf16>, tensor<8x16xbf16>, tensor<8x16xbf16>) -> tensor<8x96xbf16>
  %wy = kiln.concat %w, %y {axis = 0 : i64} : (tensor<64x96xbf16>, tensor<8x96xbf16>) -> tensor<72x96xbf16>
  %qkv = kiln.matmul %xt, %wy : (tensor<?x72xbf16, #kiln.dims<[n]>>, tensor<72x96xbf16>) -> tensor<?x96xbf16, #kiln.dims<[n]>>
  %wq2 = kiln.parameter "q.weight" : tensor<64x64xbf16>
  %wk2 = kiln.parameter "k.weight" : tensor<64x16xbf16>
  %wv2 = kiln.parameter "v.weight" : tensor<64x16xbf16>
  %at = kiln.transpose %a {perm = array<i64: 1, 0>} : (tensor<8x64xbf16>) -> tensor<64x8xbf16>
  %wa = kiln.concat %wq2, %wk2, %wv2, %at {axis = 1 : i64} : (tensor<64x64xbf16>, tensor<64x16xbf16>, tensor<64x16xbf16>, tensor<64x8xbf16>) -> tensor<64x104xbf16>
  %dx = kiln.matmul %dyt, %wa {transpose_b} : (tensor<?x104xbf16, #kiln.dims<[n]>>, tensor<64x104xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  return %qkv, %dx : tensor<?x96xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>
}

// -----

// A group of weights stored [out, in] (transpose_b): the members stand one
// above the other (rows 0, 64, 80), each adapter's columns beside its rows,
// A below all of them (row 96), and the input gradient reads the first 64
// columns of all 104 rows.
// CHECK-LABEL: func.func @group0
// CHECK: %[[W:.+]] = kiln_kernel.weight "q.weight" {member_axis = 0 : i64, member_sizes = array<i64: 64, 16, 16>, members = ["q.weight", "k.weight", "v.weight"], padded_from = array<i64: 96, 64>} : !kiln_kernel.buffer<tensor<104x72xbf16>>
// CHECK: kiln_kernel.view %[[W]] {offset = #kiln.expr<64>, row_stride = #kiln.expr<72>} : {{.*}} -> !kiln_kernel.buffer<tensor<64x8xbf16>>
// CHECK: kiln_kernel.view %[[W]] {offset = #kiln.expr<4672>, row_stride = #kiln.expr<72>} : {{.*}} -> !kiln_kernel.buffer<tensor<16x8xbf16>>
// CHECK: %[[K:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<4608>} : {{.*}} -> !kiln_kernel.buffer<tensor<16x72xbf16>>
// CHECK: kiln_kernel.gemm %{{.+}}, %[[K]] -> %{{.+}} m = #kiln.expr<n> n = #kiln.expr<16> k = #kiln.expr<72> {{.*}} {trans_b}
// CHECK: kiln_kernel.view %[[W]] {offset = #kiln.expr<6912>, row_stride = #kiln.expr<72>} : {{.*}} -> !kiln_kernel.buffer<tensor<8x64xbf16>>
// CHECK: %[[WA:.+]] = kiln_kernel.view %[[W]] {offset = #kiln.expr<0>, row_stride = #kiln.expr<72>} : {{.*}} -> !kiln_kernel.buffer<tensor<104x64xbf16>>
// CHECK: kiln_kernel.gemm %{{.+}}, %[[WA]] -> %{{.+}} m = #kiln.expr<n> n = #kiln.expr<64> k = #kiln.expr<104> {{.*}} {lds = #kiln.dims<[104, 72, 64]>}
func.func @group0(%xt: tensor<?x72xbf16, #kiln.dims<[n]>>, %dyt: tensor<?x104xbf16, #kiln.dims<[n]>>,
                  %a: tensor<8x64xbf16>, %bq: tensor<64x8xbf16>, %bk: tensor<16x8xbf16>, %bv: tensor<16x8xbf16>)
    -> (tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>) attributes {kiln.lora_k_concat} {
  %wq = kiln.parameter "q.weight" : tensor<64x64xbf16>
  %fq = kiln.concat %wq, %bq {axis = 1 : i64} : (tensor<64x64xbf16>, tensor<64x8xbf16>) -> tensor<64x72xbf16>
  %q = kiln.matmul %xt, %fq {transpose_b} : (tensor<?x72xbf16, #kiln.dims<[n]>>, tensor<64x72xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  %wk = kiln.parameter "k.weight" : tensor<16x64xbf16>
  %fk = kiln.concat %wk, %bk {axis = 1 : i64} : (tensor<16x64xbf16>, tensor<16x8xbf16>) -> tensor<16x72xbf16>
  %k = kiln.matmul %xt, %fk {transpose_b} : (tensor<?x72xbf16, #kiln.dims<[n]>>, tensor<16x72xbf16>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
  %wq2 = kiln.parameter "q.weight" : tensor<64x64xbf16>
  %wk2 = kiln.parameter "k.weight" : tensor<16x64xbf16>
  %wv2 = kiln.parameter "v.weight" : tensor<16x64xbf16>
  %wa = kiln.concat %wq2, %wk2, %wv2, %a {axis = 0 : i64} : (tensor<64x64xbf16>, tensor<16x64xbf16>, tensor<16x64xbf16>, tensor<8x64xbf16>) -> tensor<104x64xbf16>
  %dx = kiln.matmul %dyt, %wa : (tensor<?x104xbf16, #kiln.dims<[n]>>, tensor<104x64xbf16>) -> tensor<?x64xbf16, #kiln.dims<[n]>>
  return %q, %k, %dx : tensor<?x64xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x64xbf16, #kiln.dims<[n]>>
}
