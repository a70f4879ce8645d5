//===- LinearWeights.h - Find the weights of linear layers ------*- C++ -*-===//
//
// LoRA and NF4 act on linear layers: a kiln.matmul whose right operand is a
// 2-D parameter, read directly or through a transpose. Exporters store that
// weight either in PyTorch's [out, in] layout (legacy Gemm with transB) or
// pre-transposed as [in, out] under a generated name (dynamo's `val_95`);
// this helper recovers the layout and the PyTorch module name either way.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_DIALECT_GRAPH_LINEARWEIGHTS_H
#define KILN_DIALECT_GRAPH_LINEARWEIGHTS_H

#include "kiln/Dialect/Graph/GraphOps.h"

#include <optional>
#include <string>

namespace kiln {

struct LinearWeight {
  MatmulOp matmul;
  ParameterOp param;
  /// The transpose between the parameter and the matmul, if any.
  TransposeOp transpose;
  /// True when the stored tensor is PyTorch's [out, in]; false when it is
  /// the transposed [in, out].
  bool pytorchLayout = false;
  int64_t inFeatures = 0, outFeatures = 0;

  /// The weight's PyTorch name: the exporter's record of what it folded
  /// (kiln.source_name), else the initializer name when it looks like a
  /// module path, else the ONNX node scope (`/model/l1/MatMul` ->
  /// `model.l1.weight`), else the initializer name.
  std::string pytorchName() const;
  /// pytorchName() without its trailing `.weight`: what PEFT calls the
  /// module and prefixes adapter names with.
  std::string moduleName() const;
};

/// The linear layer `matmul` computes, if it is one: lhs is the activation
/// (no transpose_a) and rhs a static 2-D float parameter.
std::optional<LinearWeight> matchLinearWeight(MatmulOp matmul);

} // namespace kiln

#endif // KILN_DIALECT_GRAPH_LINEARWEIGHTS_H
