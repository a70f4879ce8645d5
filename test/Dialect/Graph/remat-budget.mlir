// RUN: kiln-opt %s '--kiln-remat=budget=1 symbols=n=1024' | FileCheck %s --check-prefix=ROOMY
// RUN: kiln-opt %s '--kiln-remat=budget=0.0115 symbols=n=1024' | FileCheck %s --check-prefix=TIGHT
// RUN: not kiln-opt %s '--kiln-remat=budget=0.01 symbols=n=1024' 2>&1 | FileCheck %s --check-prefix=IMPOSSIBLE
// RUN: kiln-opt %s '--kiln-remat=budget=min symbols=n=1024' | FileCheck %s --check-prefix=MIN
// RUN: not kiln-opt %s --kiln-remat=budget=1 2>&1 | FileCheck %s --check-prefix=UNBOUND
// RUN: not kiln-opt %s --kiln-remat=budget=min 2>&1 | FileCheck %s --check-prefix=MINUNBOUND
// RUN: not kiln-opt %s --kiln-remat=budget=lots 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not kiln-opt %s '--kiln-remat=budget=auto symbols=n=x' 2>&1 | FileCheck %s --check-prefix=BADSYM

// Two layers, each with a wide [n, 1024] activation the backward pass
// reads (%v1, %v2). With n = 1024 the step plans 12 MiB; the cheapest cut
// without recomputing a matmul keeps both (8 MiB). A budget of 1 GiB is
// met as it is: nothing changes.
// ROOMY-LABEL: func.func @layers
// ROOMY-SAME: kiln.remat = {budget = "1", extra_flops = 0 : i64, peak_bytes = 12582916 : i64, peak_bytes_before = 12582916 : i64, recomputed = 0 : i64
// ROOMY-NOT: kiln.recomputed

// 0.0115 GiB (11.8 MiB) is not met by the auto cut, so matmuls become
// recomputable (same FLOPs per byte here: program order decides). Layer 1
// is recomputed from the input %x next to its backward use; only %v2 is
// kept, and the peak drops to 11 MiB.
// TIGHT-LABEL: func.func @layers
// TIGHT-SAME: (%[[X:[^:]+]]: tensor<?x256xf32
// TIGHT-SAME: extra_flops = 537919488 : i64, peak_bytes = 11534340 : i64, peak_bytes_before = 12582916 : i64, recomputed = 2 : i64, saved = 1 : i64, saved_before = 2 : i64, saved_bytes = 4194304 : i64
// TIGHT: %[[WU:.+]] = kiln.parameter "wu"
// TIGHT: %[[U1:.+]] = kiln.matmul %[[X]], %[[WU]] :
// TIGHT: %[[V1:.+]] = kiln.tanh %[[U1]] :
// TIGHT: %[[V2:.+]] = kiln.tanh
// TIGHT: kiln.mul %[[V2]], %[[V2]] :
// TIGHT: kiln.matmul {{.+}} {transpose_b}
// TIGHT: %[[DV1:.+]] = kiln.matmul {{.+}} {transpose_b}
// TIGHT: %[[U1R:.+]] = kiln.matmul %[[X]], %[[WU]] {kiln.recomputed}
// TIGHT: %[[V1R:.+]] = kiln.tanh %[[U1R]] {kiln.recomputed}
// TIGHT: kiln.mul %[[DV1]], %[[V1R]] :

// `min` scans as a GiB budget does, to the end, and applies the plan with
// the smallest peak: the one TIGHT found, which the IMPOSSIBLE error names
// as the smallest (11.0 MiB).
// MIN-LABEL: func.func @layers
// MIN-SAME: kiln.remat = {budget = "min", extra_flops = 537919488 : i64, peak_bytes = 11534340 : i64, peak_bytes_before = 12582916 : i64, recomputed = 2 : i64
// MIN: kiln.matmul {{.+}} {kiln.recomputed}

// IMPOSSIBLE: error: kiln-remat: budget 0.01 GiB cannot be met: the smallest plan needs 11.0 MiB (parameters, optimizer state and inputs alone: 3.00 MiB)
// UNBOUND: error: kiln-remat: budget=1 needs a value for n (give --memory-report or --dynamic ranges, or symbols=)
// MINUNBOUND: error: kiln-remat: budget=min needs a value for n
// BAD: error: kiln-remat: budget must be none, pointwise, auto, min or a positive number of GiB, got 'lots'
// BADSYM: error: kiln-remat: bad symbol value 'n=x' (want name=N)
func.func @layers(%x: tensor<?x256xf32, #kiln.dims<[n]>>) -> (tensor<f32>, tensor<256x1024xf32> {kiln.grad_of = "wu"}) {
  %wu = kiln.parameter "wu" trainable : tensor<256x1024xf32>
  %wd = kiln.parameter "wd" : tensor<1024x256xf32>
  %u1 = kiln.matmul %x, %wu : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<256x1024xf32>) -> tensor<?x1024xf32, #kiln.dims<[n]>>
  %v1 = kiln.tanh %u1 : tensor<?x1024xf32, #kiln.dims<[n]>>
  %x2 = kiln.matmul %v1, %wd : (tensor<?x1024xf32, #kiln.dims<[n]>>, tensor<1024x256xf32>) -> tensor<?x256xf32, #kiln.dims<[n]>>
  %u2 = kiln.matmul %x2, %wu : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<256x1024xf32>) -> tensor<?x1024xf32, #kiln.dims<[n]>>
  %v2 = kiln.tanh %u2 : tensor<?x1024xf32, #kiln.dims<[n]>>
  %x3 = kiln.matmul %v2, %wd : (tensor<?x1024xf32, #kiln.dims<[n]>>, tensor<1024x256xf32>) -> tensor<?x256xf32, #kiln.dims<[n]>>
  %l = kiln.reduce_sum %x3 {axes = array<i64: 0, 1>} : (tensor<?x256xf32, #kiln.dims<[n]>>) -> tensor<f32>
  %g2 = kiln.mul %v2, %v2 : (tensor<?x1024xf32, #kiln.dims<[n]>>, tensor<?x1024xf32, #kiln.dims<[n]>>) -> tensor<?x1024xf32, #kiln.dims<[n]>>
  %dx2 = kiln.matmul %g2, %wu {transpose_b} : (tensor<?x1024xf32, #kiln.dims<[n]>>, tensor<256x1024xf32>) -> tensor<?x256xf32, #kiln.dims<[n]>>
  %dv1 = kiln.matmul %dx2, %wd {transpose_b} : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<1024x256xf32>) -> tensor<?x1024xf32, #kiln.dims<[n]>>
  %g1 = kiln.mul %dv1, %v1 : (tensor<?x1024xf32, #kiln.dims<[n]>>, tensor<?x1024xf32, #kiln.dims<[n]>>) -> tensor<?x1024xf32, #kiln.dims<[n]>>
  %dw = kiln.matmul %x, %g1 {transpose_a} : (tensor<?x256xf32, #kiln.dims<[n]>>, tensor<?x1024xf32, #kiln.dims<[n]>>) -> tensor<256x1024xf32>
  return %l, %dw : tensor<f32>, tensor<256x1024xf32>
}
