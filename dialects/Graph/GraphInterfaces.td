//===- GraphInterfaces.td - Graph dialect op interfaces ----*- tablegen -*-===//

#ifndef KILN_GRAPH_INTERFACES_TD
#define KILN_GRAPH_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Kiln_DifferentiableOpInterface : OpInterface<"DifferentiableOpInterface"> {
  let cppNamespace = "::kiln";
  let description = [{
    An op that knows its vector-Jacobian product. The autodiff pass walks
    the graph backwards and asks each op on the differentiated path for the
    gradients of its operands given the gradients of its results; it has no
    op-specific code of its own.
  }];
  let methods = [
    InterfaceMethod<[{
        Builds, at the builder's insertion point, the gradient of every
        operand i with `wantOperandGrad[i]` set, given the gradient of each
        result (`resultGrads[j]` is null when result j has none: treat it as
        zero). Appends exactly one value per operand to `operandGrads`, null
        where no gradient was wanted or none exists. Gradients have exactly
        the operand's type (broadcasting is summed away).
      }],
      "::llvm::LogicalResult", "buildVJP",
      (ins "::mlir::OpBuilder &":$builder,
           "::llvm::ArrayRef<::mlir::Value>":$resultGrads,
           "::llvm::ArrayRef<bool>":$wantOperandGrad,
           "::llvm::SmallVectorImpl<::mlir::Value> &":$operandGrads)>
  ];
}

#endif // KILN_GRAPH_INTERFACES_TD
