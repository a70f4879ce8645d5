// One causal bf16 attention and its gradient (GQA 4:2, head dim 16),
// batch and seq symbolic: what bench/attention.py prepares per shape.
func.func @fwd(%q: tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>, %k: tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, %v: tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>) -> tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>> {
  %0 = kiln.attention %q, %k, %v {causal} : (tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>) -> tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>
  return %0 : tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>
}
func.func @bwd(%q: tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>, %k: tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, %v: tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, %dy: tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>, %o: tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>) -> (tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>) {
  %0:3 = kiln.attention_grad %q, %k, %v grad %dy out %o {causal} : (tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>) -> (tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>)
  return %0#0, %0#1, %0#2 : tensor<?x4x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>, tensor<?x2x?x16xbf16, #kiln.dims<[b, s]>>
}
