// RUN: kiln-opt %s --split-input-file --kiln-verify-shapes --verify-diagnostics

func.func @known(%x: tensor<?x4xf32, #kiln.dims<[n]>>) -> tensor<?x4xf32, #kiln.dims<[n]>> {
  %0 = kiln.exp %x : tensor<?x4xf32, #kiln.dims<[n]>>
  return %0 : tensor<?x4xf32, #kiln.dims<[n]>>
}

// -----

func.func @unknown(%x: tensor<?x4xf32, #kiln.dims<[n]>>) -> tensor<?x4xf32> {
  // expected-error @+1 {{result has an unknown dim: 'tensor<?x4xf32>'}}
  %0 = kiln.reshape %x : tensor<?x4xf32, #kiln.dims<[n]>> -> tensor<?x4xf32>
  return %0 : tensor<?x4xf32>
}
