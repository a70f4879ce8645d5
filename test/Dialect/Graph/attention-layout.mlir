// RUN: kiln-opt %s --split-input-file --kiln-attention-layout | FileCheck %s

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
