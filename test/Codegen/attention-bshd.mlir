// kiln-attention-layout's seq_major operands ([B, S, H, D], docs/passes.md)
// in the generated attention kernels: the tiled kernels get each tensor's
// (batch, head, seq) strides (a seq-major one's rows H D apart, heads D
// apart), the stores and dK/dV atomics index each result in its own layout,
// and the scalar (fp32) template reads and writes [b, i, h, d] where a
// tensor is seq-major. The launches' roles list the seq-major ones, and
// NVRTC compiles every kernel for both CI archs.
// RUN: rm -rf %t && kiln-opt %s --kiln-fuse --kiln-lower-to-step -o %t.mlir
// RUN: FileCheck %s --check-prefix=ROLES < %t.mlir
// RUN: kiln compile %t.mlir --emit=cuda --arch=none -o %t
// RUN: FileCheck %s --check-prefix=FWD < %t/fwd_k0_attention.cu
// RUN: FileCheck %s --check-prefix=BWD < %t/bwd_k0_attention_grad.cu
// RUN: FileCheck %s --check-prefix=SCALAR < %t/fwd32_k0_attention.cu
// RUN: FileCheck %s --check-prefix=SCALARGRAD < %t/bwd32_k0_attention_grad.cu
// RUN: kiln compile %t.mlir --emit=cuda --arch=sm_80,sm_90 --kernel-cache=%t/cache -o %t

// v [B, L, Hkv, D] and the output [B, S, H, D]; q and k dense.
// ROLES: kiln_kernel.launch @fwd_k0_attention {{.*}}seq_major = ["v", "o"]
// FWD: auto storeO = [&](int64_t b, int64_t h, int64_t i, int64_t d, float x) { out0[((b * sym_s + i) * 4 + h) * 64 + d] = __float2bfloat16(x); };
// FWD: kiln_flash::forward<__nv_bfloat16, 64>(in0, kiln_flash::Strides{256*sym_s, 64*sym_s, 64}, in1, kiln_flash::Strides{128*sym_s, 64*sym_s, 64}, in2, kiln_flash::Strides{128*sym_s, 64, 128}, sym_b, 4, 2, sym_s, sym_s, 1.250000000e-01f, true, mask, storeO, kiln_flash_smem);
func.func @fwd(%q: tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>>, %k: tensor<?x2x?x64xbf16, #kiln.dims<[b, s]>>, %v: tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>> {
  %0 = kiln.attention %q, %k, %v {causal, seq_major = array<i1: false, false, true, true>} : (tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>) -> tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>>
  return %0 : tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>>
}

// Every tensor of the backward seq-major: q, k, v, dO read at a stride of
// H D (Hkv D), dQ stored and dK/dV accumulated at [b, j, hk, d].
// ROLES: kiln_kernel.launch @bwd_k0_attention_grad {{.*}}seq_major = ["q", "k", "v", "o", "do", "dq", "dk", "dv"]
// BWD: auto storeDQ = [&](int64_t b, int64_t h, int64_t i, int64_t d, float x) { out0[((b * sym_s + i) * 4 + h) * 64 + d] = __float2bfloat16(x); };
// BWD: auto addDK = [&](int64_t b, int64_t h, int64_t i, int64_t d, float4 x) { kiln_flash::atomicAdd4(&out1[((b * sym_s + i) * 2 + h) * 64 + d], x); };
// BWD: auto addDV = [&](int64_t b, int64_t h, int64_t i, int64_t d, float4 x) { kiln_flash::atomicAdd4(&out2[((b * sym_s + i) * 2 + h) * 64 + d], x); };
// BWD: kiln_flash::backward<__nv_bfloat16, 64>(in0, kiln_flash::Strides{256*sym_s, 64, 256}, in1, kiln_flash::Strides{128*sym_s, 64, 128}, in2, kiln_flash::Strides{128*sym_s, 64, 128}, in3, kiln_flash::Strides{256*sym_s, 64, 256}, sym_b, 4, 2, sym_s, sym_s, 1.250000000e-01f, true, mask,
func.func @bwd(%q: tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>>, %k: tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>, %v: tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>, %dy: tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>>, %o: tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>>) -> (tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>) {
  %0:3 = kiln.attention_grad %q, %k, %v grad %dy out %o {causal, seq_major = array<i1: true, true, true, true, true, true, true, true>} : (tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>>) -> (tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>)
  return %0#0, %0#1, %0#2 : tensor<?x?x4x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>, tensor<?x?x2x64xbf16, #kiln.dims<[b, s]>>
}

// fp32: the score row template; v read at [b, j, hk, e], the output
// written at [b, i, h, e]; the key's sequence (dim 2 of a dense k) sizes
// the score row.
// SCALAR: const int64_t group = 4 / 2; // query heads per kv head
// SCALAR: for (int64_t j = threadIdx.x; j < sym_s; j += blockDim.x)
// SCALAR: in1[((b * 2 + hk) * sym_s + j) * 16 + d]
// SCALAR: in2[((b * sym_s + j) * 2 + hk) * 16 + e]
// SCALAR: out0[((b * sym_s + i) * 4 + h) * 16 + e] =
func.func @fwd32(%q: tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>, %k: tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, %v: tensor<?x?x2x16xf32, #kiln.dims<[b, s]>>) -> tensor<?x?x4x16xf32, #kiln.dims<[b, s]>> {
  %0 = kiln.attention %q, %k, %v {causal, seq_major = array<i1: false, false, true, true>} : (tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>, tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, tensor<?x?x2x16xf32, #kiln.dims<[b, s]>>) -> tensor<?x?x4x16xf32, #kiln.dims<[b, s]>>
  return %0 : tensor<?x?x4x16xf32, #kiln.dims<[b, s]>>
}

// The fp32 gradient with a seq-major key (its sequence is dim 1: the
// launch's shared memory holds two rows of L = s floats) and dK.
// LAUNCH32: kiln_kernel.launch @bwd32_k0_attention_grad {{.*}} shared #kiln.expr<8*s>
// SCALARGRAD: in1[((b * sym_s + j) * 2 + hk) * 16 + d]
// SCALARGRAD: kiln_atomic_add(&out1[((b * sym_s + j) * 2 + hk) * 16 + d]
// RUN: FileCheck %s --check-prefix=LAUNCH32 < %t.mlir
func.func @bwd32(%q: tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>, %k: tensor<?x?x2x16xf32, #kiln.dims<[b, s]>>, %v: tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, %dy: tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>) -> (tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>, tensor<?x?x2x16xf32, #kiln.dims<[b, s]>>, tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>) {
  %0:3 = kiln.attention_grad %q, %k, %v grad %dy {causal, seq_major = array<i1: false, true, false, false, false, false, true, false>} : (tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>, tensor<?x?x2x16xf32, #kiln.dims<[b, s]>>, tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>, tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>) -> (tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>, tensor<?x?x2x16xf32, #kiln.dims<[b, s]>>, tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>)
  return %0#0, %0#1, %0#2 : tensor<?x4x?x16xf32, #kiln.dims<[b, s]>>, tensor<?x?x2x16xf32, #kiln.dims<[b, s]>>, tensor<?x2x?x16xf32, #kiln.dims<[b, s]>>
}
