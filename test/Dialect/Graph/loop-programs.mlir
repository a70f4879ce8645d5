// RUN: kiln-opt %s --kiln-loop-programs | FileCheck %s
// RUN: kiln-opt %s --kiln-loop-programs '--kiln-train-step=optimizer=sgd lr=0.1 grad-norm=true' | FileCheck %s --check-prefix=STEP
// RUN: not kiln-opt %s --kiln-autodiff '--kiln-grad-accum=micro-batches=2' --kiln-loop-programs 2>&1 | FileCheck %s --check-prefix=TWICE

// The gradient of a masked cross entropy (kiln compile --emit=grads-mlir).
func.func @main(%x: tensor<6x4xf32> {kiln.name = "x"}, %labels: tensor<6xi64> {kiln.name = "labels"})
    -> (tensor<f32> {kiln.name = "loss"}, tensor<4x5xf32> {kiln.grad_of = "w"}) {
  %one = kiln.constant dense<1.000000e+00> : tensor<f32>
  %w = kiln.parameter "w" trainable : tensor<4x5xf32>
  %logits = kiln.matmul %x, %w : (tensor<6x4xf32>, tensor<4x5xf32>) -> tensor<6x5xf32>
  %loss = kiln.cross_entropy %logits, %labels : (tensor<6x5xf32>, tensor<6xi64>) -> tensor<f32>
  %dlogits = kiln.cross_entropy_grad %logits, %labels, %one : (tensor<6x5xf32>, tensor<6xi64>, tensor<f32>) -> tensor<6x5xf32>
  %dw = kiln.matmul %x, %dlogits {transpose_a} : (tensor<6x4xf32>, tensor<6x5xf32>) -> tensor<4x5xf32>
  return %loss, %dw : tensor<f32>, tensor<4x5xf32>
}

// @main stays as it was.
// CHECK-LABEL: func.func @main(
// CHECK-SAME: -> (tensor<f32> {kiln.name = "loss"}, tensor<4x5xf32> {kiln.grad_of = "w"})

// Accumulate: n = counted labels; acc += n * grad, n * loss (0 when n is 0), n.
// CHECK-LABEL: func.func @main__accum(
// CHECK-SAME: %[[X:[^:]+]]: tensor<6x4xf32> {kiln.name = "x"}, %[[L:[^:]+]]: tensor<6xi64> {kiln.name = "labels"},
// CHECK-SAME: %[[GW:[^:]+]]: tensor<4x5xf32> {kiln.accum = "grad/w"}, %[[LS:[^:]+]]: tensor<f32> {kiln.accum = "loss"},
// CHECK-SAME: %[[NS:[^:]+]]: tensor<f32> {kiln.accum = "tokens"}, %[[W:[^:]+]]: tensor<4x5xf32> {kiln.param = "w"})
// CHECK-SAME: -> (tensor<f32> {kiln.name = "loss"}, tensor<f32> {kiln.name = "tokens"}, tensor<4x5xf32> {kiln.accum = "grad/w"}, tensor<f32> {kiln.accum = "loss"}, tensor<f32> {kiln.accum = "tokens"})
// CHECK-SAME: kiln.loop_program = "accum"
// CHECK: %[[LOGITS:.+]] = kiln.matmul %[[X]], %[[W]]
// CHECK: %[[LOSS:.+]] = kiln.cross_entropy %[[LOGITS]], %[[L]]
// CHECK: %[[DW:.+]] = kiln.matmul %[[X]], %{{.+}} {transpose_a}
// CHECK: %[[IGNORE:.+]] = kiln.constant dense<-100> : tensor<i64>
// CHECK: %[[KEEP:.+]] = kiln.ne %[[L]], %[[IGNORE]]
// CHECK: %[[ONES:.+]] = kiln.select %[[KEEP]]
// CHECK: %[[N:.+]] = kiln.reduce_sum %[[ONES]] {axes = array<i64: 0>}
// CHECK: %[[WEIGHTED:.+]] = kiln.mul %[[DW]], %[[N]]
// CHECK: %[[NEWGW:.+]] = kiln.add %[[GW]], %[[WEIGHTED]]
// CHECK: %[[SOME:.+]] = kiln.gt %[[N]]
// CHECK: %[[LN:.+]] = kiln.mul %[[LOSS]], %[[N]]
// CHECK: %[[LSUM:.+]] = kiln.select %[[SOME]], %[[LN]]
// CHECK: %[[NEWLS:.+]] = kiln.add %[[LS]], %[[LSUM]]
// CHECK: %[[NEWNS:.+]] = kiln.add %[[NS]], %[[N]]
// CHECK: return %[[LOSS]], %[[N]], %[[NEWGW]], %[[NEWLS]], %[[NEWNS]]

// Apply: the means over all counted tokens, as (loss, gradients), and the
// accumulators cleared.
// CHECK-LABEL: func.func @main__apply(
// CHECK-SAME: %[[AGW:[^:]+]]: tensor<4x5xf32> {kiln.accum = "grad/w"}, %[[ALS:[^:]+]]: tensor<f32> {kiln.accum = "loss"}, %[[ANS:[^:]+]]: tensor<f32> {kiln.accum = "tokens"})
// CHECK-SAME: -> (tensor<f32> {kiln.name = "loss"}, tensor<4x5xf32> {kiln.grad_of = "w"}, tensor<4x5xf32> {kiln.accum = "grad/w"}, tensor<f32> {kiln.accum = "loss"}, tensor<f32> {kiln.accum = "tokens"})
// CHECK-SAME: kiln.loop_program = "apply"
// CHECK: kiln.parameter "w" trainable
// CHECK: %[[MEANLOSS:.+]] = kiln.div %[[ALS]], %[[ANS]]
// CHECK: %[[MEANGRAD:.+]] = kiln.div %[[AGW]], %[[ANS]]
// CHECK: %[[ZEROS:.+]] = kiln.expand
// CHECK: return %[[MEANLOSS]], %[[MEANGRAD]], %[[ZEROS]]

// Eval: forward only.
// CHECK-LABEL: func.func @main__eval(
// CHECK-SAME: {kiln.param = "w"})
// CHECK-SAME: -> (tensor<f32> {kiln.name = "loss"}, tensor<f32> {kiln.name = "tokens"})
// CHECK-SAME: kiln.loop_program = "eval"
// CHECK-NOT: cross_entropy_grad
// CHECK: return

// kiln-train-step updates @main and @main__apply, with the gradient norm;
// accumulate and eval are left alone.
// STEP-LABEL: func.func @main(
// STEP-SAME: {kiln.lr}
// STEP-SAME: -> (tensor<f32> {kiln.name = "loss"}, tensor<f32> {kiln.name = "grad_norm"}, tensor<4x5xf32> {kiln.param = "w"})
// STEP-LABEL: func.func @main__accum(
// STEP-NOT: kiln.lr
// STEP-LABEL: func.func @main__apply(
// STEP-SAME: {kiln.lr}
// STEP-SAME: -> (tensor<f32> {kiln.name = "loss"}, tensor<f32> {kiln.name = "grad_norm"}, tensor<4x5xf32> {kiln.accum = "grad/w"}, tensor<f32> {kiln.accum = "loss"}, tensor<f32> {kiln.accum = "tokens"}, tensor<4x5xf32> {kiln.param = "w"})
// STEP-LABEL: func.func @main__eval(
// STEP-NOT: kiln.lr

// TWICE: error: kiln-loop-programs: @main already accumulates micro-batches
