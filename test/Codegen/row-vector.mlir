// Row kernels with a static row length that is a multiple of the vector
// width (RowLayout, lib/Dialect/Kernel/OpClassification.cpp): every thread
// loads its chunks of each input once, 16 bytes (or 8 for bf16 beside f32)
// per access, all loads before the first pass, keeps them in registers
// through the reductions and stores its outputs as vectors; a warp per row
// (8 rows per block) below 256 vectors, the block above. Dynamic, ragged
// against the vector width and over-long rows keep the scalar template.
// RUN: rm -rf %t && kiln-opt %s --kiln-fuse --kiln-lower-to-step -o %t.mlir
// RUN: FileCheck %s --check-prefix=LAUNCH < %t.mlir
// RUN: kiln compile %t.mlir --emit=cuda --arch=sm_90 -o %t 2>&1 | FileCheck %s --check-prefix=WROTE
// RUN: FileCheck %s --check-prefix=BLOCK < %t/grad2048_k0_rms_norm_grad_cast_mul.cu
// RUN: FileCheck %s --check-prefix=WARP < %t/norm768_k0_rms_norm_add_cast.cu
// RUN: FileCheck %s --check-prefix=RAGGED < %t/soft320_k0_softmax.cu
// RUN: FileCheck %s --check-prefix=XENT < %t/xent512_k0_cross_entropy_cross_entropy_grad.cu
// RUN: FileCheck %s --check-prefix=SCALAR < %t/odd18_k0_rms_norm.cu
// RUN: FileCheck %s --check-prefix=SCALAR < %t/long32k_k0_softmax.cu
// RUN: FileCheck %s --check-prefix=SCALAR < %t/dyncols_k0_softmax.cu

// WROTE: wrote {{.*}} (7 kernels in 1 modules, 0 GEMMs)
// LAUNCH-LABEL: func.func @grad2048
// LAUNCH: kiln_kernel.launch @grad2048_k0_rms_norm_grad_cast_mul {{.*}} per 1 block 256
// LAUNCH-LABEL: func.func @norm768
// LAUNCH: kiln_kernel.launch @norm768_k0_rms_norm_add_cast {{.*}} per 8 block 256
// LAUNCH-LABEL: func.func @soft320
// LAUNCH: per 8 block 256
// LAUNCH-LABEL: func.func @xent512
// LAUNCH: per 1 block 256
// LAUNCH-LABEL: func.func @odd18
// LAUNCH: per 1 block 256

// The 1b config's RMSNorm gradient: [n, 2048], the saved f32 input, bf16
// gradients: 4-element vectors (f32 is the widest), 512 per row, 2 per
// thread of a block of 256. Each input is read once, x (uint4), dy and the
// residual gradient (uint2) before the first reduction, the weights (read at
// the column) before the first row.
// BLOCK: // 4-element vectors, 2 per thread in registers, a block per row
// BLOCK: const int tr = threadIdx.x % 256;
// BLOCK: __align__(16) float [[W:in[0-9]+]]_w[2][4];
// BLOCK: const int64_t chunk = c * 256 + tr;
// BLOCK: reinterpret_cast<const uint4 *>([[W]])[chunk];
// BLOCK: for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
// BLOCK: __align__(16) float [[X:in[0-9]+]]_v[2][4];
// BLOCK: __align__(16) __nv_bfloat16 [[DY:in[0-9]+]]_v[2][4];
// BLOCK: *reinterpret_cast<uint4 *>([[X]]_v[c]) = reinterpret_cast<const uint4 *>([[X]])[row * 512 + chunk];
// BLOCK: *reinterpret_cast<uint2 *>([[DY]]_v[c]) = reinterpret_cast<const uint2 *>([[DY]])[row * 512 + chunk];
// BLOCK-NOT: [[X]][
// BLOCK: ms = kiln_block_reduce(ms, red, false) / (float)cols;
// BLOCK: mgx = kiln_block_reduce(mgx, red, false) / (float)cols;
// BLOCK: __align__(16) __nv_bfloat16 out0_v[4];
// BLOCK: = [[X]]_v[c][lane];
// BLOCK: out0_v[lane] = __float2bfloat16(
// BLOCK: reinterpret_cast<uint2 *>(out0)[row * 512 + chunk] = *reinterpret_cast<const uint2 *>(out0_v);
// BLOCK-NOT: [[X]][
func.func @grad2048(%x: tensor<?x2048xf32, #kiln.dims<[n]>>, %w: tensor<2048xf32>, %dy: tensor<?x2048xbf16, #kiln.dims<[n]>>, %r: tensor<?x2048xbf16, #kiln.dims<[n]>>) -> tensor<?x2048xbf16, #kiln.dims<[n]>> {
  %g = kiln.cast %dy : tensor<?x2048xbf16, #kiln.dims<[n]>> -> tensor<?x2048xf32, #kiln.dims<[n]>>
  %dx, %dw = kiln.rms_norm_grad %x, %w, %g {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<?x2048xf32, #kiln.dims<[n]>>, tensor<2048xf32>, tensor<?x2048xf32, #kiln.dims<[n]>>) -> (tensor<?x2048xf32, #kiln.dims<[n]>>, tensor<2048xf32>)
  %c = kiln.cast %dx : tensor<?x2048xf32, #kiln.dims<[n]>> -> tensor<?x2048xbf16, #kiln.dims<[n]>>
  %s = kiln.mul %c, %r : (tensor<?x2048xbf16, #kiln.dims<[n]>>, tensor<?x2048xbf16, #kiln.dims<[n]>>) -> tensor<?x2048xbf16, #kiln.dims<[n]>>
  return %s : tensor<?x2048xbf16, #kiln.dims<[n]>>
}

// The small config's residual add + RMSNorm + cast: [n, 768] bf16 in, f32
// weight: 192 vectors of 4 per row, a warp per row, 6 per lane; warp
// reductions (no barrier), rows strided by warps.
// WARP: // 4-element vectors, 6 per thread in registers, a warp per row (8 rows per block)
// WARP: const int tr = threadIdx.x % 32;
// WARP: for (int64_t row = blockIdx.x * 8 + threadIdx.x / 32; row < rows; row += (int64_t)gridDim.x * 8) {
// WARP: reinterpret_cast<const uint2 *>(in0)[row * 192 + chunk];
// WARP: reinterpret_cast<const uint2 *>(in1)[row * 192 + chunk];
// WARP: ms = kiln_warp_reduce(ms, false) / (float)cols;
// WARP-NOT: kiln_block_reduce
// WARP: reinterpret_cast<uint4 *>(out0)[row * 192 + chunk]
// WARP: reinterpret_cast<uint2 *>(out1)[row * 192 + chunk]
func.func @norm768(%a: tensor<?x768xbf16, #kiln.dims<[n]>>, %b: tensor<?x768xbf16, #kiln.dims<[n]>>, %w: tensor<768xf32>) -> (tensor<?x768xbf16, #kiln.dims<[n]>>, tensor<?x768xf32, #kiln.dims<[n]>>) {
  %s = kiln.add %a, %b : (tensor<?x768xbf16, #kiln.dims<[n]>>, tensor<?x768xbf16, #kiln.dims<[n]>>) -> tensor<?x768xbf16, #kiln.dims<[n]>>
  %f = kiln.cast %s : tensor<?x768xbf16, #kiln.dims<[n]>> -> tensor<?x768xf32, #kiln.dims<[n]>>
  %y = kiln.rms_norm %f, %w {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<?x768xf32, #kiln.dims<[n]>>, tensor<768xf32>) -> tensor<?x768xf32, #kiln.dims<[n]>>
  %c = kiln.cast %y : tensor<?x768xf32, #kiln.dims<[n]>> -> tensor<?x768xbf16, #kiln.dims<[n]>>
  return %c, %f : tensor<?x768xbf16, #kiln.dims<[n]>>, tensor<?x768xf32, #kiln.dims<[n]>>
}

// 320 f32 columns: 80 vectors over the 32 lanes of a warp, 3 chunks, the
// last guarded (ragged).
// RAGGED: // 4-element vectors, 3 per thread in registers, a warp per row (8 rows per block)
// RAGGED: if (chunk < 80) {
// RAGGED: mx = kiln_warp_reduce(mx, true);
// RAGGED: se = kiln_warp_reduce(se, false);
// RAGGED: if (chunk < 80) {
// RAGGED: reinterpret_cast<uint4 *>(out0)[row * 80 + chunk]
func.func @soft320(%x: tensor<?x320xf32, #kiln.dims<[n]>>) -> tensor<?x320xf32, #kiln.dims<[n]>> {
  %0 = kiln.softmax %x {axis = 1 : i64} : tensor<?x320xf32, #kiln.dims<[n]>>
  return %0 : tensor<?x320xf32, #kiln.dims<[n]>>
}

// Cross entropy and its gradient on 512 f32 logits with i64 labels: the
// labels are the widest element, so 2-element vectors, 256 per row, one per
// thread of a block; the loss by the row's first thread; labels scalar.
// XENT: // 2-element vectors, 1 per thread in registers, a block per row
// XENT: counted = kiln_block_reduce(counted, red, false);
// XENT: for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
// XENT: reinterpret_cast<const uint2 *>(in0)[row * 256 + chunk];
// XENT: mx = kiln_block_reduce(mx, red, true);
// XENT: if (tr == 0) {
// XENT: kiln_atomic_add(out0, loss / counted);
// XENT: out1_v[lane] = (float)(
// XENT: reinterpret_cast<uint2 *>(out1)[row * 256 + chunk]
func.func @xent512(%x: tensor<?x512xf32, #kiln.dims<[n]>>, %l: tensor<?xi64, #kiln.dims<[n]>>) -> (tensor<f32>, tensor<?x512xf32, #kiln.dims<[n]>>) {
  %one = kiln.constant dense<1.0> : tensor<f32>
  %loss = kiln.cross_entropy %x, %l : (tensor<?x512xf32, #kiln.dims<[n]>>, tensor<?xi64, #kiln.dims<[n]>>) -> tensor<f32>
  %g = kiln.cross_entropy_grad %x, %l, %one : (tensor<?x512xf32, #kiln.dims<[n]>>, tensor<?xi64, #kiln.dims<[n]>>, tensor<f32>) -> tensor<?x512xf32, #kiln.dims<[n]>>
  return %loss, %g : tensor<f32>, tensor<?x512xf32, #kiln.dims<[n]>>
}

// The scalar template: 18 columns (not a multiple of 4), 32768 f32 columns
// (32 vectors per thread: more than registers hold), a dynamic row.
// SCALAR-NOT: const int tr
// SCALAR: for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)
// SCALAR: for (int64_t col = threadIdx.x; col < cols; col += blockDim.x)
// SCALAR: kiln_block_reduce(
func.func @odd18(%x: tensor<?x18xf32, #kiln.dims<[n]>>, %w: tensor<18xf32>) -> tensor<?x18xf32, #kiln.dims<[n]>> {
  %0 = kiln.rms_norm %x, %w {axis = 1 : i64, epsilon = 1.0e-5 : f64} : (tensor<?x18xf32, #kiln.dims<[n]>>, tensor<18xf32>) -> tensor<?x18xf32, #kiln.dims<[n]>>
  return %0 : tensor<?x18xf32, #kiln.dims<[n]>>
}

func.func @long32k(%x: tensor<?x32768xf32, #kiln.dims<[n]>>) -> tensor<?x32768xf32, #kiln.dims<[n]>> {
  %0 = kiln.softmax %x {axis = 1 : i64} : tensor<?x32768xf32, #kiln.dims<[n]>>
  return %0 : tensor<?x32768xf32, #kiln.dims<[n]>>
}

func.func @dyncols(%x: tensor<8x?xf32, #kiln.dims<[m]>>) -> tensor<8x?xf32, #kiln.dims<[m]>> {
  %0 = kiln.softmax %x {axis = 1 : i64} : tensor<8x?xf32, #kiln.dims<[m]>>
  return %0 : tensor<8x?xf32, #kiln.dims<[m]>>
}
