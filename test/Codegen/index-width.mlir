// Generated kernels split flat element offsets in 32-bit unsigned
// arithmetic (every symbolic element count is guarded below INT32_MAX by
// kiln-shape-guards); a constant shape of more than 2^32 elements keeps
// 64-bit division.
// RUN: rm -rf %t && kiln-opt %s --kiln-fuse --kiln-lower-to-step -o %t.mlir
// RUN: kiln compile %t.mlir --emit=cuda --arch=none -o %t
// RUN: cat %t/small_k0_*.cu | FileCheck %s --check-prefix=SMALL
// RUN: cat %t/big_k0_*.cu | FileCheck %s --check-prefix=BIG

// SMALL: unsigned [[R:r[0-9]+]] = (unsigned)(
// SMALL: = [[R]] % 8u;
// SMALL: = [[R]] % (unsigned)(sym_b);
// SMALL: [[R]] /= (unsigned)(sym_b);
func.func @small(%x: tensor<?x?x8xf32, #kiln.dims<[b, s]>>) -> tensor<?x?x8xf32, #kiln.dims<[s, b]>> {
  %y = kiln.transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<?x?x8xf32, #kiln.dims<[b, s]>>) -> tensor<?x?x8xf32, #kiln.dims<[s, b]>>
  return %y : tensor<?x?x8xf32, #kiln.dims<[s, b]>>
}

// BIG: int64_t [[R:r[0-9]+]] = {{.+}};
// BIG-NOT: unsigned
// BIG: = [[R]] % 65540;
func.func @big(%x: tensor<65540x65536xf32>) -> tensor<65536x65540xf32> {
  %y = kiln.transpose %x {perm = array<i64: 1, 0>} : (tensor<65540x65536xf32>) -> tensor<65536x65540xf32>
  return %y : tensor<65536x65540xf32>
}
