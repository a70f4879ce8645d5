//===- GraphBase.td - Kiln graph dialect definition --------*- tablegen -*-===//
//
// The graph dialect: tensor-level ops with value semantics and symbolic dims.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_GRAPH_BASE_TD
#define KILN_GRAPH_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Graph_Dialect : Dialect {
  let name = "kiln";
  let cppNamespace = "::kiln";
  let summary = "Kiln graph dialect: tensor ops for whole training steps";
  let description = [{
    The graph dialect is the tensor level of Kiln. Values are immutable ranked
    tensors (`tensor<...>` from the builtin dialect). Dimensions are static
    integers or symbolic expressions over named size symbols; the symbolic
    ones are `?` in the builtin shape and their expressions live in the
    `#kiln.dims<[...]>` encoding, e.g.

    ```mlir
    %0 = kiln.matmul %x, %w {transpose_b}
        : (tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>, tensor<128x64xf32>)
        -> tensor<?x?x128xf32, #kiln.dims<[batch, seq]>>
    ```

    Training-specific pieces: `kiln.parameter` names a weight and says
    whether it is trainable; `kiln.stop_gradient` cuts differentiation.
    Ops the importer does not understand become `kiln.opaque`.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

class Kiln_Op<string mnemonic, list<Trait> traits = []>
    : Op<Graph_Dialect, mnemonic, traits>;

class Kiln_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Graph_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

def Kiln_FloatElement : AnyTypeOf<[F16, BF16, F32, F64]>;
def Kiln_IntElement : AnyTypeOf<[I8, I16, I32, I64, UI8, UI16, UI32, UI64]>;

def Kiln_Tensor : RankedTensorOf<[AnyType]>;
def Kiln_FloatTensor : RankedTensorOf<[Kiln_FloatElement]>;
def Kiln_IntTensor : RankedTensorOf<[Kiln_IntElement]>;
def Kiln_IndexTensor : RankedTensorOf<[I32, I64]>;
def Kiln_BoolTensor : RankedTensorOf<[I1]>;
def Kiln_NumericTensor : RankedTensorOf<[Kiln_FloatElement, Kiln_IntElement]>;
def Kiln_SignedNumericTensor : RankedTensorOf<[Kiln_FloatElement, I8, I16, I32, I64]>;

#endif // KILN_GRAPH_BASE_TD
