// A row kernel over a tensor with unit dims ([1, heads, s, s]: an attention
// that was not raised, its mask built from a constant) whose outputs are the
// softmax and its bf16 cast: the cast reads the softmax at the broadcast
// spelling of the index ("0" for a unit dim), the row loop binds it at its
// own; both are one value (Printer::valueKey), so the kernel compiles.
// RUN: rm -rf %t && kiln-opt %s --kiln-fuse --kiln-lower-to-step -o %t.mlir
// RUN: kiln compile %t.mlir --emit=cuda --arch=sm_90 -o %t 2>&1 | FileCheck %s --check-prefix=WROTE
// RUN: FileCheck %s < %t/sm_k0_softmax_cast_exp.cu

// WROTE: wrote {{.*}} (1 kernels in 1 modules, 0 GEMMs)
// CHECK: se += expf(
// CHECK: const float [[P:v[0-9]+]] = expf({{v[0-9]+}} - mx) / se;
// CHECK: out0_v[lane] = (float)([[P]]);
// CHECK: out1_v[lane] = __float2bfloat16({{v[0-9]+}});

func.func @sm(%m: tensor<16x16xf32>, %x: tensor<1x4x16x16xbf16>) -> (tensor<1x4x16x16xf32>, tensor<1x4x16x16xbf16>) {
  %0 = kiln.cast %m : tensor<16x16xf32> -> tensor<16x16xbf16>
  %1 = kiln.exp %0 : tensor<16x16xbf16>
  %2 = kiln.add %x, %1 : (tensor<1x4x16x16xbf16>, tensor<16x16xbf16>) -> tensor<1x4x16x16xbf16>
  %3 = kiln.cast %2 : tensor<1x4x16x16xbf16> -> tensor<1x4x16x16xf32>
  %4 = kiln.softmax %3 {axis = 3 : i64} : tensor<1x4x16x16xf32>
  %5 = kiln.cast %4 : tensor<1x4x16x16xf32> -> tensor<1x4x16x16xbf16>
  return %4, %5 : tensor<1x4x16x16xf32>, tensor<1x4x16x16xbf16>
}
