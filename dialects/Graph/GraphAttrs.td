//===- GraphAttrs.td - Kiln graph dialect attributes -------*- tablegen -*-===//

#ifndef KILN_GRAPH_ATTRS_TD
#define KILN_GRAPH_ATTRS_TD

include "Graph/GraphBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/EnumAttr.td"
include "mlir/IR/TensorEncoding.td"

def Kiln_SymExprAttr : Kiln_Attr<"SymExpr", "expr"> {
  let summary = "A size expression: an integer polynomial over named symbols";
  let description = [{
    A canonical polynomial with integer coefficients over size symbols, e.g.
    `batch*seq`, `2*seq + 1`, `seq - 1`. Terms are sorted and merged, so two
    equal polynomials are the same attribute and compare with `==`.
    `#kiln.expr<batch*seq>` on its own; bare inside `#kiln.dims`.
  }];
  let parameters = (ins ArrayRefParameter<"::kiln::SymTerm", "terms">:$terms);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Builds the canonical form of `terms` (sorted, merged, zero-free).
    static SymExprAttr getCanonical(::mlir::MLIRContext *context,
                                    ::llvm::ArrayRef<::kiln::SymTerm> terms);
    static SymExprAttr getSymbol(::mlir::MLIRContext *context,
                                 ::llvm::StringRef name);
    static SymExprAttr getConstant(::mlir::MLIRContext *context, int64_t value);
    /// The value when the expression has no symbols.
    std::optional<int64_t> getConstantValue() const;
    /// Parses the bare form used inside `#kiln.dims<[...]>`.
    static ::mlir::FailureOr<SymExprAttr> parseBare(::mlir::AsmParser &parser);
    void printBare(::llvm::raw_ostream &os) const;
  }];
}

def Kiln_DimsAttr : Kiln_Attr<"Dims", "dims",
    [DeclareAttrInterfaceMethods<VerifiableTensorEncoding>]> {
  let summary = "Tensor encoding: the expressions of the dynamic dimensions";
  let description = [{
    Attached as the encoding of a ranked tensor type; one entry per `?`
    dimension, in order. An entry is a size expression or `?` when nothing is
    known (the shape-propagation pass replaces those). A dimension whose
    expression is a constant is written as a static size instead, so each
    shape has exactly one spelling.

    ```mlir
    tensor<?x?x64xf32, #kiln.dims<[batch, seq]>>
    tensor<?x64xf32, #kiln.dims<[batch*seq]>>
    ```
  }];
  let parameters = (ins ArrayRefParameter<"::kiln::SymExprAttr", "dims">:$dims);
  let hasCustomAssemblyFormat = 1;
}

def Kiln_Reduction : I32EnumAttr<"Reduction", "loss reduction", [
    I32EnumAttrCase<"mean", 0>, I32EnumAttrCase<"sum", 1>,
    I32EnumAttrCase<"none", 2>]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}
def Kiln_ReductionAttr : EnumAttr<Graph_Dialect, Kiln_Reduction, "reduction"> {
  let assemblyFormat = "`<` $value `>`";
}

def Kiln_GeluApproximation : I32EnumAttr<"GeluApproximation",
    "GELU formula", [I32EnumAttrCase<"none", 0>, I32EnumAttrCase<"tanh", 1>]> {
  let cppNamespace = "::kiln";
  let genSpecializedAttr = 0;
}
def Kiln_GeluApproximationAttr
    : EnumAttr<Graph_Dialect, Kiln_GeluApproximation, "gelu"> {
  let assemblyFormat = "`<` $value `>`";
}

#endif // KILN_GRAPH_ATTRS_TD
