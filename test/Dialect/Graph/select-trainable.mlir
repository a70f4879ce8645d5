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
