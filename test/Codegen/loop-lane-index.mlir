// A vectorized loop kernel's lanes share every index but the innermost:
// the symbolic divisions happen once per chunk (in 32 bits), and a reshape that only
// splits trailing dims ([B, S, H*D] <- [B, S, H, D]) keeps the shared
// leading indices instead of re-splitting the flat offset by S.
// RUN: rm -rf %t && kiln-opt %s --kiln-fuse --kiln-lower-to-step -o %t.mlir
// RUN: kiln compile %t.mlir --emit=cuda --arch=none -o %t
// RUN: cat %t/heads_k0_*.cu | FileCheck %s

// CHECK: 8 elements per thread, moved with vector accesses
// CHECK: const int64_t base = chunk * 8;
// CHECK: % (unsigned)([[S:sym_s|s]]);
// CHECK: for (int lane = 0; lane < 8; ++lane) {
// CHECK-NEXT: const int64_t flat = base + lane;
// The lane body splits only the chunk's lane-invariant index, by the
// constant head dim; the lane is added to the innermost index after.
// CHECK-NOT: [[S]]);
// CHECK: unsigned [[R:r[0-9]+]] = (unsigned)(ix{{[0-9]+}});
// CHECK-NEXT: const int64_t [[D:ix[0-9]+]] = [[R]] % 64u;
// The lanes read 8 consecutive elements of a row (64 is a multiple of 8)
// from an aligned start: lane 0 loads them as one vector for all.
// CHECK: if (lane == 0) *reinterpret_cast<uint4 *>([[C:in0_c[0-9]+]]) = *reinterpret_cast<const uint4 *>(in0 + ({{.*}} * 64 + [[D]]));
// CHECK-NEXT: const float {{v[0-9]+}} = __bfloat162float([[C]][lane]);
// CHECK-NOT: % (unsigned)([[S]])
// CHECK-NOT: /= (unsigned)([[S]])
// CHECK: out0_v[lane] =
// CHECK: reinterpret_cast<uint4 *>(out0)[chunk]
func.func @heads(%x: tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x256xbf16, #kiln.dims<[b, s]>> {
  %0 = kiln.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>>
  %1 = kiln.reshape %0 : tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>> -> tensor<?x?x256xbf16, #kiln.dims<[b, s]>>
  return %1 : tensor<?x?x256xbf16, #kiln.dims<[b, s]>>
}
