// RUN: kiln-opt %s --split-input-file --kiln-attention-layout=through-elementwise=true | FileCheck %s
// RUN: kiln-opt %s --split-input-file --kiln-attention-layout | FileCheck %s --check-prefix=OFF

// Forward: v and the output move in [B, S, H, D]; q and k, produced
// head-major (RoPE after the transpose), stay so.
// CHECK-LABEL: func.func @forward
// CHECK-NOT: kiln.transpose
// CHECK: %[[O:.*]] = kiln.attention %arg0, %arg1, %arg2 {causal, seq_major = array<i1: false, false, true, true>} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32>
// CHECK-NOT: kiln.transpose
// CHECK: return %[[O]]
func.func @forward(%q: tensor<2x4x8x16xf32>, %k: tensor<2x4x8x16xf32>, %v: tensor<2x8x4x16xf32>) -> tensor<2x8x4x16xf32> {
  %vt = kiln.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %o = kiln.attention %q, %k, %vt {causal} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %ot = kiln.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  return %ot : tensor<2x8x4x16xf32>
}

// -----

// The forward's output also feeds attention_grad's `out`: that use reads it
// through an inserted transpose, which folds into the gradient op; dO and dV
// fold too; dQ, returned head-major, keeps the layout of q.
// CHECK-LABEL: func.func @joint
// CHECK: %[[O:.*]] = kiln.attention %arg0, %arg0, %arg1 {causal, seq_major = array<i1: false, false, true, true>}
// CHECK-NOT: kiln.transpose
// CHECK: %{{.*}}, %{{.*}}, %[[DV:.*]] = kiln.attention_grad %arg0, %arg0, %arg1 grad %arg2 out %[[O]] {causal, seq_major = array<i1: false, false, true, true, true, false, false, true>} : ({{.*}}) -> (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x8x4x16xbf16>)
// CHECK-NOT: kiln.transpose
// CHECK: return %[[O]], %{{.*}}, %[[DV]]
func.func @joint(%q: tensor<2x4x8x16xbf16>, %v: tensor<2x8x4x16xbf16>, %dy: tensor<2x8x4x16xbf16>) -> (tensor<2x8x4x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x8x4x16xbf16>) {
  %vt = kiln.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xbf16>) -> tensor<2x4x8x16xbf16>
  %o = kiln.attention %q, %q, %vt {causal} : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>) -> tensor<2x4x8x16xbf16>
  %ot = kiln.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xbf16>) -> tensor<2x8x4x16xbf16>
  %dyt = kiln.transpose %dy {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xbf16>) -> tensor<2x4x8x16xbf16>
  %dq, %dk, %dv = kiln.attention_grad %q, %q, %vt grad %dyt out %o {causal} : (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>) -> (tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x4x8x16xbf16>)
  %dvt = kiln.transpose %dv {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xbf16>) -> tensor<2x8x4x16xbf16>
  return %ot, %dq, %dvt : tensor<2x8x4x16xbf16>, tensor<2x4x8x16xbf16>, tensor<2x8x4x16xbf16>
}

// -----

// A result that is also read head-major keeps one transpose for that user;
// other permutations are not folded.
// CHECK-LABEL: func.func @mixed_users
// CHECK: %[[O:.*]] = kiln.attention %arg0, %arg0, %arg0 {seq_major = array<i1: false, false, false, true>}
// CHECK: %[[BACK:.*]] = kiln.transpose %[[O]] {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
// CHECK: kiln.transpose %[[BACK]] {perm = array<i64: 0, 1, 3, 2>}
// CHECK: return %[[O]]
func.func @mixed_users(%q: tensor<2x4x8x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x4x16x8xf32>) {
  %o = kiln.attention %q, %q, %q : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %ot = kiln.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  %other = kiln.transpose %o {perm = array<i64: 0, 1, 3, 2>} : (tensor<2x4x8x16xf32>) -> tensor<2x4x16x8xf32>
  return %ot, %other : tensor<2x8x4x16xf32>, tensor<2x4x16x8xf32>
}

// -----

// RoPE between q's transpose and attention (through-elementwise=true): the
// rotation runs in [B, S, H, D], its cos and sin reshaped to [1, S, 1, D/2];
// q and k (the same value here) become seq-major. The gradient side: dQ's
// rotation back, ending in a transpose to [B, S, H, D], runs on the
// seq-major dQ.
// CHECK-LABEL: func.func @rope
// CHECK-NOT: kiln.transpose
// CHECK: %[[C:.*]] = kiln.reshape %arg1 : tensor<1x1x8x8xf32> -> tensor<1x8x1x8xf32>
// CHECK: kiln.mul %{{.*}}, %[[C]] : (tensor<2x8x4x8xf32>, tensor<1x8x1x8xf32>) -> tensor<2x8x4x8xf32>
// CHECK: %[[R:.*]] = kiln.concat %{{.*}}, %{{.*}} {axis = 3 : i64} : (tensor<2x8x4x8xf32>, tensor<2x8x4x8xf32>) -> tensor<2x8x4x16xf32>
// CHECK: %[[O:.*]] = kiln.attention %[[R]], %[[R]], %arg3 {causal, seq_major = array<i1: true, true, true, true>}
// CHECK: %[[DQ:.*]], %{{.*}}, %{{.*}} = kiln.attention_grad %[[R]], %[[R]], %arg3 grad %arg4 out %[[O]] {causal, seq_major = array<i1: true, true, true, true, true, true, false, false>}
// CHECK: %[[D0:.*]] = kiln.slice %[[DQ]] {starts = #kiln.dims<[0, 0, 0, 0]>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x8x4x16xf32> -> tensor<2x8x4x8xf32>
// CHECK-NOT: kiln.transpose
// CHECK: return %[[O]], %{{.*}}
func.func @rope(%x: tensor<2x8x4x16xf32>, %cos: tensor<1x1x8x8xf32>, %sin: tensor<1x1x8x8xf32>, %v: tensor<2x8x4x16xf32>, %dy: tensor<2x8x4x16xf32>) -> (tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>) {
  %t = kiln.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %a = kiln.slice %t {starts = #kiln.dims<[0, 0, 0, 0]>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x4x8x16xf32> -> tensor<2x4x8x8xf32>
  %b = kiln.slice %t {starts = #kiln.dims<[0, 0, 0, 8]>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x4x8x16xf32> -> tensor<2x4x8x8xf32>
  %ac = kiln.mul %a, %cos : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %bs = kiln.mul %b, %sin : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %lo = kiln.sub %ac, %bs : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  %r = kiln.concat %lo, %b {axis = 3 : i64} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x16xf32>
  %vt = kiln.transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %o = kiln.attention %r, %r, %vt {causal} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %ot = kiln.transpose %o {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  %dyt = kiln.transpose %dy {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %dq, %dk, %dv = kiln.attention_grad %r, %r, %vt grad %dyt out %o {causal} : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>)
  %d0 = kiln.slice %dq {starts = #kiln.dims<[0, 0, 0, 0]>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x4x8x16xf32> -> tensor<2x4x8x8xf32>
  %d1 = kiln.slice %dq {starts = #kiln.dims<[0, 0, 0, 8]>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x4x8x16xf32> -> tensor<2x4x8x8xf32>
  %d0c = kiln.mul %d0, %cos : (tensor<2x4x8x8xf32>, tensor<1x1x8x8xf32>) -> tensor<2x4x8x8xf32>
  %d1n = kiln.neg %d1 : tensor<2x4x8x8xf32>
  %dr = kiln.concat %d0c, %d1n {axis = 3 : i64} : (tensor<2x4x8x8xf32>, tensor<2x4x8x8xf32>) -> tensor<2x4x8x16xf32>
  %drt = kiln.transpose %dr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x8x16xf32>) -> tensor<2x8x4x16xf32>
  return %ot, %drt : tensor<2x8x4x16xf32>, tensor<2x8x4x16xf32>
}

// -----

// A group member with a user outside (here a return) keeps the layout; a
// broadcast input with both head and sequence extents too; without
// through-elementwise (the default) nothing moves.
// CHECK-LABEL: func.func @rope_kept
// CHECK: kiln.transpose %arg0
// CHECK-NOT: seq_major
// CHECK-LABEL: func.func @rope_full_broadcast
// CHECK: kiln.transpose %arg0
// CHECK-NOT: seq_major
// CHECK: return
// OFF-LABEL: func.func @rope(
// OFF: kiln.transpose %arg0
// OFF: kiln.attention {{.*}}seq_major = array<i1: false, false, true, true>
// OFF: kiln.attention_grad
// OFF: kiln.transpose
// OFF-LABEL: func.func @rope_full_broadcast
func.func @rope_kept(%x: tensor<2x8x4x16xf32>, %cos: tensor<1x1x8x16xf32>) -> (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) {
  %t = kiln.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %r = kiln.mul %t, %cos : (tensor<2x4x8x16xf32>, tensor<1x1x8x16xf32>) -> tensor<2x4x8x16xf32>
  %o = kiln.attention %r, %r, %r : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o, %r : tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>
}
func.func @rope_full_broadcast(%x: tensor<2x8x4x16xf32>, %w: tensor<1x4x8x16xf32>) -> tensor<2x4x8x16xf32> {
  %t = kiln.transpose %x {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x8x4x16xf32>) -> tensor<2x4x8x16xf32>
  %r = kiln.mul %t, %w : (tensor<2x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  %o = kiln.attention %r, %r, %r : (tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x8x16xf32>
  return %o : tensor<2x4x8x16xf32>
}
