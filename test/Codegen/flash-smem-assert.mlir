// The tiled attention kernels carry a static_assert that the shared memory
// their launch gets (the launch's `shared`, from launchShape) is what the
// kiln_flash template lays out for that element type and head dim; NVRTC
// compiles them, so a size that differs cannot reach a GPU. D = 128 is the
// forward whose O staging does not fit in S's rows.
// RUN: rm -rf %t && kiln-opt %s --kiln-fuse --kiln-lower-to-step -o %t.mlir
// RUN: FileCheck %s --check-prefix=LAUNCH < %t.mlir
// RUN: kiln compile %t.mlir --emit=cuda --arch=sm_80 -o %t
// RUN: FileCheck %s --check-prefix=FWD64 < %t/fwd64_k0_attention.cu
// RUN: FileCheck %s --check-prefix=FWD128 < %t/fwd128_k0_attention.cu
// RUN: FileCheck %s --check-prefix=BWD128 < %t/bwd128_k0_attention_grad.cu

// LAUNCH: kiln_kernel.launch @fwd64_k0_attention {{.*}} shared #kiln.expr<54272>
// LAUNCH: kiln_kernel.launch @fwd128_k0_attention {{.*}} shared #kiln.expr<112640>
// LAUNCH: kiln_kernel.launch @bwd128_k0_attention_grad {{.*}} shared #kiln.expr<126976>

// FWD64: static_assert(kiln_flash::ForwardSmem<__nv_bfloat16, 64>::bytes == 54272, "the launch's shared memory is not kiln_flash's layout");
// FWD64-NEXT: auto mask
// FWD64: kiln_flash::forward<__nv_bfloat16, 64>(
func.func @fwd64(%q: tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>>, %k: tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>>, %v: tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>>) -> tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>> {
  %0 = kiln.attention %q, %k, %v {causal} : (tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>>, tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>>, tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>>) -> tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>>
  return %0 : tensor<?x4x?x64xbf16, #kiln.dims<[b, s]>>
}

// FWD128: static_assert(kiln_flash::ForwardSmem<__half, 128>::bytes == 112640,
func.func @fwd128(%q: tensor<?x2x?x128xf16, #kiln.dims<[b, s]>>, %k: tensor<?x2x?x128xf16, #kiln.dims<[b, s]>>, %v: tensor<?x2x?x128xf16, #kiln.dims<[b, s]>>) -> tensor<?x2x?x128xf16, #kiln.dims<[b, s]>> {
  %0 = kiln.attention %q, %k, %v : (tensor<?x2x?x128xf16, #kiln.dims<[b, s]>>, tensor<?x2x?x128xf16, #kiln.dims<[b, s]>>, tensor<?x2x?x128xf16, #kiln.dims<[b, s]>>) -> tensor<?x2x?x128xf16, #kiln.dims<[b, s]>>
  return %0 : tensor<?x2x?x128xf16, #kiln.dims<[b, s]>>
}

// BWD128: static_assert(kiln_flash::BackwardSmem<__nv_bfloat16, 128>::bytes == 126976,
// BWD128: kiln_flash::backward<__nv_bfloat16, 128>(
func.func @bwd128(%q: tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>, %k: tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>, %v: tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>, %dy: tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>) -> (tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>) {
  %0:3 = kiln.attention_grad %q, %k, %v grad %dy : (tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>) -> (tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>)
  return %0#0, %0#1, %0#2 : tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x128xbf16, #kiln.dims<[b, s]>>
}
