// RUN: kiln-opt %s '--kiln-shape-guards=dynamic=seq=16..4096:8' | FileCheck %s
// RUN: not kiln-opt %s '--kiln-shape-guards=dynamic=tokens=1..8' 2>&1 | FileCheck %s --check-prefix=UNKNOWN

// CHECK-LABEL: func.func @g
// CHECK-SAME: kiln.guards = [{expr = #kiln.expr<seq>, kind = "range", max = 4096 : i64, min = 16 : i64, origin = "--dynamic seq=16..4096:8"}, {divisor = 8 : i64, expr = #kiln.expr<seq>, kind = "divisible", origin = "--dynamic seq=16..4096:8"}, {expr = #kiln.expr<b>, kind = "range", max = 2147483647 : i64, min = 1 : i64, origin = "a size is at least 1"}, {expr = #kiln.expr<64*b*seq>, kind = "range", max = 2147483647 : i64, min = 0 : i64, origin = "int32 element indexing in generated kernels"}]
// UNKNOWN: --dynamic names symbol 'tokens', which no input uses
func.func @g(%x: tensor<?x?x64xf32, #kiln.dims<[b, seq]>>) -> tensor<?x?x64xf32, #kiln.dims<[b, seq]>> {
  return %x : tensor<?x?x64xf32, #kiln.dims<[b, seq]>>
}
