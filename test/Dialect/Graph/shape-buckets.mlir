// RUN: kiln-opt %s '--kiln-shape-buckets=buckets=seq=8,16' | FileCheck %s
// RUN: not kiln-opt %s '--kiln-shape-buckets=buckets=seq=0' 2>&1 | FileCheck %s --check-prefix=BAD

// CHECK: func.func @main(%{{.+}}: tensor<?x?xf32, #kiln.dims<[b, seq]>>) -> tensor<?x?xf32, #kiln.dims<[b, seq]>> attributes {kiln.buckets = [@main__seq_8, @main__seq_16]}
// CHECK: func.func @main__seq_8(%{{.+}}: tensor<?x8xf32, #kiln.dims<[b]>>) -> tensor<?x8xf32, #kiln.dims<[b]>> attributes {kiln.bucket = {seq = 8 : i64}}
// CHECK: func.func @main__seq_16(%{{.+}}: tensor<?x16xf32, #kiln.dims<[b]>>)
// BAD: --buckets needs symbol=V1,V2,... with positive values, got 'seq=0'
func.func @main(%x: tensor<?x?xf32, #kiln.dims<[b, seq]>>) -> tensor<?x?xf32, #kiln.dims<[b, seq]>> {
  %0 = kiln.exp %x : tensor<?x?xf32, #kiln.dims<[b, seq]>>
  return %0 : tensor<?x?xf32, #kiln.dims<[b, seq]>>
}
