//===- LinearWeights.cpp - Find the weights of linear layers --------------===//

#include "kiln/Dialect/Graph/LinearWeights.h"

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Regex.h"

using namespace mlir;

namespace kiln {

std::optional<LinearWeight> matchLinearWeight(MatmulOp matmul) {
  if (matmul.getTransposeA())
    return std::nullopt;
  LinearWeight w;
  w.matmul = matmul;
  Value rhs = matmul.getRhs();
  if (auto transpose = rhs.getDefiningOp<TransposeOp>()) {
    if (transpose.getPerm() != ArrayRef<int64_t>{1, 0})
      return std::nullopt;
    w.transpose = transpose;
    rhs = transpose.getInput();
  }
  w.param = rhs.getDefiningOp<ParameterOp>();
  if (!w.param)
    return std::nullopt;
  RankedTensorType type = w.param.getType();
  if (type.getRank() != 2 || !type.hasStaticShape() || !llvm::isa<FloatType>(type.getElementType()))
    return std::nullopt;
  // matmul(x, P) computes x P: P is [in, out]. One transpose (flag or op)
  // makes it x P^T: P is [out, in], PyTorch's layout.
  w.pytorchLayout = matmul.getTransposeB() != static_cast<bool>(w.transpose);
  w.outFeatures = type.getDimSize(w.pytorchLayout ? 0 : 1);
  w.inFeatures = type.getDimSize(w.pytorchLayout ? 1 : 0);
  return w;
}

/// Exporter-generated names carry no module path: `val_95`,
/// `onnx::MatMul_123`, `_param_constant3`.
static bool isGeneratedName(StringRef name) {
  static const llvm::Regex generated("^(val_[0-9]+|onnx::.*|_param_constant[0-9]*|"
                                     "[0-9]+)$");
  return generated.match(name);
}

/// `/model/layers.0/self_attn/q_proj/MatMul` -> `model.layers.0.self_attn.q_proj`.
static std::optional<std::string> nodeScope(Location loc) {
  auto named = llvm::dyn_cast<NameLoc>(loc);
  if (!named)
    return std::nullopt;
  StringRef node = named.getName().getValue();
  if (!node.starts_with("/"))
    return std::nullopt;
  SmallVector<StringRef> parts;
  node.drop_front().split(parts, '/');
  if (parts.size() < 2)
    return std::nullopt;
  parts.pop_back(); // the op's own name
  return llvm::join(parts, ".");
}

std::string LinearWeight::pytorchName() const {
  // Op handles are cheap copies; their accessors are not const.
  ParameterOp param = this->param;
  MatmulOp matmul = this->matmul;
  if (auto source = param->getAttrOfType<StringAttr>(kSourceNameAttr))
    return source.str();
  StringRef name = param.getName();
  if (!isGeneratedName(name))
    return name.str();
  if (std::optional<std::string> scope = nodeScope(matmul.getLoc()))
    return *scope + ".weight";
  return name.str();
}

std::string LinearWeight::moduleName() const {
  std::string name = pytorchName();
  StringRef module(name);
  module.consume_back(".weight");
  return module.str();
}

} // namespace kiln
