// In-place concatenations whose part a loop or row kernel reads too
// (docs/design/lora-k-concat.md): kiln-lower-to-step keeps x in the
// columns of [x | t] and marks the reader's input `kiln.in_row_strides`;
// the reader loads its vectors (or scalars) at the rows' stride. The
// kernels compile with NVRTC.
// RUN: rm -rf %t && kiln-opt %s --kiln-fuse --kiln-lower-to-step -o %t.mlir
// RUN: FileCheck %s --check-prefix=STEP < %t.mlir
// RUN: kiln compile %t.mlir --emit=cuda -o %t
// RUN: FileCheck %s --check-prefix=LOOP < %t/loopread_k1_mul.cu
// RUN: FileCheck %s --check-prefix=ROW < %t/rowread_k1_softmax_add.cu
// RUN: cat %t/scalarread_k1_*.cu | FileCheck %s --check-prefix=SCALAR

// STEP: kiln_kernel.kernel @loopread_k0_silu <loop> {{.*}} {kiln.out_row_strides = array<i64: 72>}
// STEP: kiln_kernel.kernel @loopread_k1_mul <loop> {{.*}} {kiln.in_row_strides = array<i64: 72, 0>}
// STEP-LABEL: func.func @loopread
// STEP: %[[C:.+]] = kiln_kernel.alloc : !kiln_kernel.buffer<tensor<?x?x72xbf16, #kiln.dims<[n, s]>>>
// STEP: %[[X:.+]] = kiln_kernel.view %[[C]] {offset = #kiln.expr<0>, row_stride = #kiln.expr<72>}
// STEP: kiln_kernel.launch @loopread_k0_silu ins(%{{.+}} : {{.*}}) outs(%[[X]] : {{.*}})
// STEP-NOT: {{_k[0-9]+_concat}}
// STEP-NOT: {{_k[0-9]+_columns}}
// STEP: kiln_kernel.launch @loopread_k1_mul ins(%[[X]], %{{.+}} : {{.*}})
// LOOP: reinterpret_cast<const uint4 *>(in0 + ((int64_t)((unsigned)(chunk * 8) / 64u) * 72 + (unsigned)(chunk * 8) % 64u))[0];
// LOOP: reinterpret_cast<const uint4 *>(in1)[chunk];
func.func @loopread(%x: tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, %a: tensor<8x64xbf16>, %w: tensor<72x64xbf16>) -> tensor<?x?x64xbf16, #kiln.dims<[n, s]>> attributes {kiln.lora_k_concat} {
  %h = kiln.silu %x : tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  %t = kiln.matmul %h, %a {transpose_b} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<8x64xbf16>) -> tensor<?x?x8xbf16, #kiln.dims<[n, s]>>
  %c = kiln.concat %h, %t {axis = 2 : i64} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<?x?x8xbf16, #kiln.dims<[n, s]>>) -> tensor<?x?x72xbf16, #kiln.dims<[n, s]>>
  %y = kiln.matmul %c, %w : (tensor<?x?x72xbf16, #kiln.dims<[n, s]>>, tensor<72x64xbf16>) -> tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  %z = kiln.mul %h, %y : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<?x?x64xbf16, #kiln.dims<[n, s]>>) -> tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  return %z : tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
}

// A row kernel (the norms' gradients in a LoRA step): its row's vectors
// start at row * 72.
// STEP: kiln_kernel.kernel @rowread_k1_softmax_add <row> {{.*}} {kiln.in_row_strides = array<i64: 72, 0>}
// STEP-LABEL: func.func @rowread
// STEP-NOT: {{_k[0-9]+_concat}}
// STEP-NOT: {{_k[0-9]+_columns}}
// ROW: reinterpret_cast<const uint4 *>(in0 + row * 72 + chunk * 8)[0];
// ROW: reinterpret_cast<const uint4 *>(in1)[row * 8 + chunk];
func.func @rowread(%x: tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, %a: tensor<8x64xbf16>, %w: tensor<72x64xbf16>) -> tensor<?x?x64xbf16, #kiln.dims<[n, s]>> attributes {kiln.lora_k_concat} {
  %h = kiln.silu %x : tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  %t = kiln.matmul %h, %a {transpose_b} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<8x64xbf16>) -> tensor<?x?x8xbf16, #kiln.dims<[n, s]>>
  %c = kiln.concat %h, %t {axis = 2 : i64} : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<?x?x8xbf16, #kiln.dims<[n, s]>>) -> tensor<?x?x72xbf16, #kiln.dims<[n, s]>>
  %y = kiln.matmul %c, %w : (tensor<?x?x72xbf16, #kiln.dims<[n, s]>>, tensor<72x64xbf16>) -> tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  %z = kiln.add %h, %y : (tensor<?x?x64xbf16, #kiln.dims<[n, s]>>, tensor<?x?x64xbf16, #kiln.dims<[n, s]>>) -> tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  %r = kiln.softmax %z {axis = 2 : i64} : tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
  return %r : tensor<?x?x64xbf16, #kiln.dims<[n, s]>>
}

// A scalar loop kernel (a transpose reads across rows): each element at
// its row's offset.
// STEP: kiln_kernel.kernel @scalarread_k1_{{[a-z_]+}} <loop> {{.*}} {kiln.in_row_strides = array<i64: 72>}
// SCALAR: in0[((int64_t)((unsigned)({{.+}}) / 64u) * 72 + (unsigned)({{.+}}) % 64u)]
func.func @scalarread(%x: tensor<4x16x64xbf16>, %a: tensor<8x64xbf16>, %w: tensor<72x64xbf16>) -> (tensor<4x16x64xbf16>, tensor<4x64x16xbf16>) attributes {kiln.lora_k_concat} {
  %h = kiln.silu %x : tensor<4x16x64xbf16>
  %t = kiln.matmul %h, %a {transpose_b} : (tensor<4x16x64xbf16>, tensor<8x64xbf16>) -> tensor<4x16x8xbf16>
  %c = kiln.concat %h, %t {axis = 2 : i64} : (tensor<4x16x64xbf16>, tensor<4x16x8xbf16>) -> tensor<4x16x72xbf16>
  %y = kiln.matmul %c, %w : (tensor<4x16x72xbf16>, tensor<72x64xbf16>) -> tensor<4x16x64xbf16>
  %ht = kiln.transpose %h {perm = array<i64: 0, 2, 1>} : (tensor<4x16x64xbf16>) -> tensor<4x64x16xbf16>
  return %y, %ht : tensor<4x16x64xbf16>, tensor<4x64x16xbf16>
}
