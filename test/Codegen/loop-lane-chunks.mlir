// A vectorized loop kernel's lanes read consecutive elements of an input
// as one aligned vector: lane 0 loads it into registers every lane reads.
// A concatenation whose boundaries are multiples of the vector width
// branches on the chunk's aligned index (every lane takes the same input),
// and a slice at an aligned start keeps the lane index aligned: the
// rotate-half RoPE reads x, cos and sin as 16-byte vectors. When every
// side of such a concatenation loads the same vector types in the same
// order, one load per position reads the side's address (`c ? a : b`)
// before the branches, so a warp whose threads take different sides
// issues one load, not one per side. Sides that load unalike keep their
// own loads. A boundary inside a chunk keeps the per-lane branch and
// scalar reads. RoPE spelled on halves (cos and sin of D/2, the halves
// rotated and concatenated, as the bench's export in [B, S, H, D]) reads
// the second half at `32 + (i - 32)`: printed as `i`, that is the
// element's own vector, and the sides' remaining loads merge. A reshape
// that merges the lane's dim into a wider one (v's [B, S, 8, 64] read from
// the columns of a merged q/k/v projection) keeps the lane index aligned:
// one vector load per chunk, not one scalar load per lane.
// RUN: rm -rf %t && kiln-opt %s --kiln-fuse --kiln-lower-to-step -o %t.mlir
// RUN: kiln compile %t.mlir --emit=cuda --arch=none -o %t
// RUN: cat %t/rope_k0_*.cu | FileCheck %s --check-prefix=ROPE
// RUN: cat %t/ragged_k0_*.cu | FileCheck %s --check-prefix=RAGGED
// RUN: cat %t/unalike_k0_*.cu | FileCheck %s --check-prefix=UNALIKE
// RUN: cat %t/halves_k0_*.cu | FileCheck %s --check-prefix=HALVES
// RUN: cat %t/merged_columns_k0_*.cu | FileCheck %s --check-prefix=MERGED

// ROPE: 8 elements per thread, moved with vector accesses
// ROPE: const int64_t [[D:ix[0-9]+]] = r0 % 64u;
// ROPE: *reinterpret_cast<uint4 *>(in0_v) = reinterpret_cast<const uint4 *>(in0)[chunk];
// ROPE: __align__(16) __nv_bfloat16 {{in1_c[0-9]+}}[8];
// ROPE: for (int lane = 0; lane < 8; ++lane) {
// ROPE: if (lane == 0) *reinterpret_cast<uint4 *>({{in1_c[0-9]+}}) = *reinterpret_cast<const uint4 *>(in1 + ({{.*}} * 64 + [[D]]));
// ROPE: if (lane == 0) *reinterpret_cast<uint4 *>([[C:in0_c[0-9]+]]) = *reinterpret_cast<const uint4 *>(([[D]] < 32) ? (in0 + ({{.*}} * 64 + ((32 + [[D]])))) : (in0 + ({{.*}} * 64 + (([[D]] - 32)))));
// ROPE-NEXT: if ([[D]] < 32) {
// ROPE-NEXT: [[C]][lane]
// ROPE: else {
// ROPE-NEXT: [[C]][lane]
// ROPE: if (lane == 0) *reinterpret_cast<uint4 *>({{in2_c[0-9]+}}) = *reinterpret_cast<const uint4 *>(in2 + ({{.*}} * 64 + [[D]]));
// ROPE-NOT: in0[
// ROPE-NOT: in1[
// ROPE-NOT: in2[
// ROPE: reinterpret_cast<uint4 *>(out0)[chunk]
func.func @rope(%x: tensor<?x?x64xbf16, #kiln.dims<[b, s]>>, %cos: tensor<?x64xbf16, #kiln.dims<[s]>>,
                %sin: tensor<?x64xbf16, #kiln.dims<[s]>>) -> tensor<?x?x64xbf16, #kiln.dims<[b, s]>> {
  %lo = kiln.slice %x {starts = #kiln.dims<[0, 0, 0]>, steps = array<i64: 1, 1, 1>} : tensor<?x?x64xbf16, #kiln.dims<[b, s]>> -> tensor<?x?x32xbf16, #kiln.dims<[b, s]>>
  %hi = kiln.slice %x {starts = #kiln.dims<[0, 0, 32]>, steps = array<i64: 1, 1, 1>} : tensor<?x?x64xbf16, #kiln.dims<[b, s]>> -> tensor<?x?x32xbf16, #kiln.dims<[b, s]>>
  %neg = kiln.neg %hi : tensor<?x?x32xbf16, #kiln.dims<[b, s]>>
  %rot = kiln.concat %neg, %lo {axis = 2 : i64} : (tensor<?x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x?x32xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x64xbf16, #kiln.dims<[b, s]>>
  %a = kiln.mul %x, %cos : (tensor<?x?x64xbf16, #kiln.dims<[b, s]>>, tensor<?x64xbf16, #kiln.dims<[s]>>) -> tensor<?x?x64xbf16, #kiln.dims<[b, s]>>
  %b = kiln.mul %rot, %sin : (tensor<?x?x64xbf16, #kiln.dims<[b, s]>>, tensor<?x64xbf16, #kiln.dims<[s]>>) -> tensor<?x?x64xbf16, #kiln.dims<[b, s]>>
  %y = kiln.add %a, %b : (tensor<?x?x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x64xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x64xbf16, #kiln.dims<[b, s]>>
  return %y : tensor<?x?x64xbf16, #kiln.dims<[b, s]>>
}

// RAGGED: 8 elements per thread, moved with vector accesses
// RAGGED: for (int lane = 0; lane < 8; ++lane) {
// RAGGED: if (([[I:ix[0-9]+]] + lane) < 4) {
// RAGGED-NOT: lane == 0
// RAGGED: in0[
// RAGGED: in1[
func.func @ragged(%a: tensor<?x4xbf16, #kiln.dims<[n]>>, %b: tensor<?x12xbf16, #kiln.dims<[n]>>) -> tensor<?x16xbf16, #kiln.dims<[n]>> {
  %y = kiln.concat %a, %b {axis = 1 : i64} : (tensor<?x4xbf16, #kiln.dims<[n]>>, tensor<?x12xbf16, #kiln.dims<[n]>>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
  return %y : tensor<?x16xbf16, #kiln.dims<[n]>>
}

// UNALIKE: for (int lane = 0; lane < 4; ++lane) {
// UNALIKE-NOT: ?
// UNALIKE: if (ix{{[0-9]+}} < 8) {
// UNALIKE-NEXT: if (lane == 0) *reinterpret_cast<uint2 *>({{in[0-9]_c[0-9]+}}) = *reinterpret_cast<const uint2 *>(in{{[0-9]}} + (
// UNALIKE: else {
// UNALIKE-NEXT: if (lane == 0) *reinterpret_cast<uint4 *>({{in[0-9]_c[0-9]+}}) = *reinterpret_cast<const uint4 *>(in{{[0-9]}} + (
func.func @unalike(%s: tensor<?x16xbf16, #kiln.dims<[n]>>, %a: tensor<?x8xbf16, #kiln.dims<[n]>>, %b: tensor<?x8xf32, #kiln.dims<[n]>>) -> tensor<?x16xbf16, #kiln.dims<[n]>> {
  %c = kiln.cast %b : tensor<?x8xf32, #kiln.dims<[n]>> -> tensor<?x8xbf16, #kiln.dims<[n]>>
  %cat = kiln.concat %a, %c {axis = 1 : i64} : (tensor<?x8xbf16, #kiln.dims<[n]>>, tensor<?x8xbf16, #kiln.dims<[n]>>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
  %y = kiln.mul %s, %cat : (tensor<?x16xbf16, #kiln.dims<[n]>>, tensor<?x16xbf16, #kiln.dims<[n]>>) -> tensor<?x16xbf16, #kiln.dims<[n]>>
  return %y : tensor<?x16xbf16, #kiln.dims<[n]>>
}

// HALVES: *reinterpret_cast<uint4 *>(in0_v) = reinterpret_cast<const uint4 *>(in0)[chunk];
// HALVES: for (int lane = 0; lane < 8; ++lane) {
// HALVES-COUNT-3: if (lane == 0) *reinterpret_cast<uint4 *>({{in[0-9]_c[0-9]+}}) = *reinterpret_cast<const uint4 *>(({{ix[0-9]+}} < 32) ?
// HALVES-NEXT: if ({{ix[0-9]+}} < 32) {
// HALVES-NEXT: __bfloat162float(in0_v[lane])
// HALVES: else {
// HALVES-NEXT: __bfloat162float(in0_v[lane])
// HALVES-NOT: - 32)))
// HALVES: reinterpret_cast<uint4 *>(out0)[chunk]
func.func @halves(%x: tensor<?x?x64xbf16, #kiln.dims<[b, s]>>, %cos: tensor<?x32xbf16, #kiln.dims<[s]>>,
                  %sin: tensor<?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x?x64xbf16, #kiln.dims<[b, s]>> {
  %lo = kiln.slice %x {starts = #kiln.dims<[0, 0, 0]>, steps = array<i64: 1, 1, 1>} : tensor<?x?x64xbf16, #kiln.dims<[b, s]>> -> tensor<?x?x32xbf16, #kiln.dims<[b, s]>>
  %hi = kiln.slice %x {starts = #kiln.dims<[0, 0, 32]>, steps = array<i64: 1, 1, 1>} : tensor<?x?x64xbf16, #kiln.dims<[b, s]>> -> tensor<?x?x32xbf16, #kiln.dims<[b, s]>>
  %lc = kiln.mul %lo, %cos : (tensor<?x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x?x32xbf16, #kiln.dims<[b, s]>>
  %hs = kiln.mul %hi, %sin : (tensor<?x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x?x32xbf16, #kiln.dims<[b, s]>>
  %first = kiln.sub %lc, %hs : (tensor<?x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x?x32xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x32xbf16, #kiln.dims<[b, s]>>
  %hc = kiln.mul %hi, %cos : (tensor<?x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x?x32xbf16, #kiln.dims<[b, s]>>
  %ls = kiln.mul %lo, %sin : (tensor<?x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x32xbf16, #kiln.dims<[s]>>) -> tensor<?x?x32xbf16, #kiln.dims<[b, s]>>
  %second = kiln.add %hc, %ls : (tensor<?x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x?x32xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x32xbf16, #kiln.dims<[b, s]>>
  %y = kiln.concat %first, %second {axis = 2 : i64} : (tensor<?x?x32xbf16, #kiln.dims<[b, s]>>, tensor<?x?x32xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x64xbf16, #kiln.dims<[b, s]>>
  return %y : tensor<?x?x64xbf16, #kiln.dims<[b, s]>>
}

// MERGED: 4 elements per thread, moved with vector accesses
// MERGED: if (lane == 0) *reinterpret_cast<uint2 *>([[C:in0_c[0-9]+]]) = *reinterpret_cast<const uint2 *>(in0 + ({{.*}} * 96 + ((80 + {{.*}} * 8 + {{ix[0-9]+}}))));
// MERGED-NOT: in0[
func.func @merged_columns(%qkv: tensor<?x96xbf16, #kiln.dims<[n]>>) -> tensor<?x2x8xf32, #kiln.dims<[n]>> {
  %v = kiln.slice %qkv {starts = #kiln.dims<[0, 80]>, steps = array<i64: 1, 1>} : tensor<?x96xbf16, #kiln.dims<[n]>> -> tensor<?x16xbf16, #kiln.dims<[n]>>
  %r = kiln.reshape %v : tensor<?x16xbf16, #kiln.dims<[n]>> -> tensor<?x2x8xbf16, #kiln.dims<[n]>>
  %c = kiln.cast %r : tensor<?x2x8xbf16, #kiln.dims<[n]>> -> tensor<?x2x8xf32, #kiln.dims<[n]>>
  return %c : tensor<?x2x8xf32, #kiln.dims<[n]>>
}
