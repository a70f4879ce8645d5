// RUN: kiln-opt %s --kiln-select-trainable | FileCheck %s --check-prefix=ALL
// RUN: kiln-opt %s '--kiln-select-trainable=train=^l1\.' | FileCheck %s --check-prefix=L1
// RUN: not kiln-opt %s '--kiln-select-trainable=train=(' 2>&1 | FileCheck %s --check-prefix=BAD

// ALL-LABEL: func.func @params
// ALL: kiln.parameter "l1.weight" trainable
// ALL: kiln.parameter "l2.weight" trainable
// ALL: kiln.parameter "inv_freq" trainable
// ALL: kiln.parameter "scale" :
// ALL: kiln.parameter "position_ids" :
// L1-LABEL: func.func @params
// L1: kiln.parameter "l1.weight" trainable
// L1: kiln.parameter "l2.weight" :
// L1: kiln.parameter "inv_freq" :
// BAD: invalid --train regex '('
func.func @params() -> (tensor<4x4xf32>, tensor<4x4xf32>, tensor<8xf32>, tensor<f32>, tensor<1x16xi64>) {
  %a = kiln.parameter "l1.weight" : tensor<4x4xf32>
  %b = kiln.parameter "l2.weight" trainable : tensor<4x4xf32>
  %c = kiln.parameter "inv_freq" : tensor<8xf32>
  %d = kiln.parameter "scale" trainable : tensor<f32>
  %e = kiln.parameter "position_ids" trainable : tensor<1x16xi64>
  return %a, %b, %c, %d, %e : tensor<4x4xf32>, tensor<4x4xf32>, tensor<8xf32>, tensor<f32>, tensor<1x16xi64>
}

// RUN: kiln-opt %s --kiln-select-trainable=train=none | FileCheck %s --check-prefix=NONE
// NONE-LABEL: func.func @params
// NONE-NOT: trainable
// NONE: return

// A float initializer the exporter's parameter list does not hold
// (kiln.buffer: RoPE's inv_freq) stays frozen under `all`; a regex naming
// it still trains it.
// RUN: kiln-opt %s --kiln-select-trainable | FileCheck %s --check-prefix=BUFFER
// RUN: kiln-opt %s '--kiln-select-trainable=train=inv_freq' | FileCheck %s --check-prefix=BUFREGEX
// BUFFER-LABEL: func.func @buffer
// BUFFER: kiln.parameter "w" trainable
// BUFFER: kiln.parameter "inv_freq" {kiln.buffer} :
// BUFREGEX-LABEL: func.func @buffer
// BUFREGEX: kiln.parameter "inv_freq" trainable {kiln.buffer}
func.func @buffer() -> (tensor<4x4xf32>, tensor<8xf32>) {
  %a = kiln.parameter "w" : tensor<4x4xf32>
  %b = kiln.parameter "inv_freq" {kiln.buffer} : tensor<8xf32>
  return %a, %b : tensor<4x4xf32>, tensor<8xf32>
}
