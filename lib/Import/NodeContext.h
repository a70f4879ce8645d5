//===- NodeContext.h - What an ONNX op handler sees -------------*- C++ -*-===//
//
// Internal to the importer. A handler maps one ONNX node to graph-dialect
// ops. Small integer tensors (shapes and the arithmetic on them) are tracked
// at compile time as KnownTensors whose elements are size expressions, so
// Shape -> Gather -> Concat -> Reshape chains fold into symbolic shapes and
// never become run-time tensors.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_IMPORT_NODECONTEXT_H
#define KILN_LIB_IMPORT_NODECONTEXT_H

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Support/HostTensor.h"
#include "mlir/IR/Builders.h"
#include "onnx/onnx_pb.h"
#include "llvm/ADT/StringMap.h"

#include <optional>
#include <string>

namespace kiln {

/// A compile-time integer tensor of rank <= 1 whose elements are dims.
struct KnownTensor {
  DType dtype = DType::I64;
  std::vector<int64_t> shape; // {} for a scalar, {n} for a vector
  DimList elements;

  bool isScalar() const { return shape.empty(); }
  bool allConstant() const;
  std::optional<std::vector<int64_t>> constants() const;
};

/// An ONNX value during import: an SSA value, a known tensor, or both.
struct ImportedValue {
  mlir::Value value;
  std::optional<KnownTensor> known;
};

enum class NodeFailure { None, Unsupported, Error };

class NodeContext {
public:
  NodeContext(mlir::OpBuilder &builder, mlir::Location loc, const onnx::NodeProto &node,
              int64_t opset, llvm::SmallVector<ImportedValue *> inputs);

  const onnx::NodeProto &node() const { return node_; }
  int64_t opset() const { return opset_; }
  mlir::OpBuilder &builder() { return builder_; }
  mlir::Location loc() const { return loc_; }
  mlir::MLIRContext *context() { return builder_.getContext(); }

  //===--- inputs ---------------------------------------------------------===//
  /// Number of inputs, counting trailing empty names as absent.
  size_t numInputs() const { return inputs_.size(); }
  bool hasInput(size_t i) const { return i < inputs_.size() && inputs_[i]; }
  /// The input as an SSA value (materializing a known tensor as a constant).
  mlir::FailureOr<mlir::Value> input(size_t i);
  /// The ranked type of input i, or failure (unsupported) when unranked.
  mlir::FailureOr<mlir::RankedTensorType> inputType(size_t i);
  const KnownTensor *known(size_t i) const;
  /// A compile-time list of integers (e.g. axes); fails when not constant.
  mlir::FailureOr<std::vector<int64_t>> constantInts(size_t i, llvm::StringRef what);
  /// A compile-time integer holding exactly one element (an axis, k, a
  /// flag); anything else is an error naming `what`.
  mlir::FailureOr<int64_t> constantInt(size_t i, llvm::StringRef what);
  /// The scalar value of a float constant input, if it is one.
  std::optional<double> constantScalar(size_t i);

  //===--- attributes -----------------------------------------------------===//
  const onnx::AttributeProto *attr(llvm::StringRef name) const;
  int64_t attrInt(llvm::StringRef name, int64_t fallback) const;
  float attrFloat(llvm::StringRef name, float fallback) const;
  std::string attrString(llvm::StringRef name, llvm::StringRef fallback) const;
  std::optional<std::vector<int64_t>> attrInts(llvm::StringRef name) const;

  //===--- outputs --------------------------------------------------------===//
  void setOutput(size_t i, mlir::Value value);
  void setKnown(size_t i, KnownTensor known);
  /// Sets output 0 from a freshly built op (the common handler ending).
  mlir::LogicalResult produce(mlir::FailureOr<mlir::Value> value) {
    if (mlir::failed(value))
      return mlir::failure();
    setOutput(0, *value);
    return mlir::success();
  }
  llvm::SmallVector<ImportedValue> &outputs() { return outputs_; }

  //===--- building ops ---------------------------------------------------===//
  /// Creates an op that infers its result type; type errors become an import
  /// error on this node.
  template <typename OpT, typename... Args> mlir::FailureOr<mlir::Value> create(Args &&...args) {
    auto op = builder_.create<OpT>(loc_, builder_.getNoneType(), std::forward<Args>(args)...);
    return finishInferred(op.getOperation());
  }
  /// Creates an op whose result type is a choice (reshape, expand, ...).
  template <typename OpT, typename... Args>
  mlir::Value createTyped(mlir::Type type, Args &&...args) {
    return builder_.create<OpT>(loc_, type, std::forward<Args>(args)...).getResult();
  }
  /// A rank-0 constant of `elementType`.
  mlir::Value scalar(double value, mlir::Type elementType);
  /// A constant from a known tensor (all elements constant).
  mlir::FailureOr<mlir::Value> materialize(const KnownTensor &known);
  /// Normalizes a possibly negative axis against `rank`.
  mlir::FailureOr<int64_t> normalizeAxis(int64_t axis, int64_t rank);

  //===--- failures -------------------------------------------------------===//
  /// The node is valid ONNX Kiln does not handle: it becomes kiln.opaque.
  mlir::LogicalResult unsupported(const llvm::Twine &reason);
  /// The node is malformed: import fails with this message.
  mlir::LogicalResult error(const llvm::Twine &message);
  NodeFailure failureKind() const { return failure_; }
  const std::string &failureMessage() const { return message_; }
  /// Diagnostics from op type inference land here.
  void noteDiagnostic(const std::string &message) { diagnostic_ = message; }

private:
  mlir::FailureOr<mlir::Value> finishInferred(mlir::Operation *op);

  mlir::OpBuilder &builder_;
  mlir::Location loc_;
  const onnx::NodeProto &node_;
  int64_t opset_;
  llvm::SmallVector<ImportedValue *> inputs_;
  llvm::SmallVector<ImportedValue> outputs_;
  NodeFailure failure_ = NodeFailure::None;
  std::string message_;
  std::string diagnostic_;
};

/// Integer tensors up to this many elements (rank <= 1) are compile-time
/// values.
inline constexpr int64_t kMaxKnownElements = 64;

/// A value known at compile time: small integer vectors stay KnownTensors
/// (materialized only if used as data), everything else is kiln.constant.
ImportedValue constantTensor(mlir::OpBuilder &builder, mlir::Location loc,
                             const HostTensor &tensor);

using NodeHandler = mlir::LogicalResult (*)(NodeContext &);
using HandlerMap = llvm::StringMap<NodeHandler>;

void registerElementwiseHandlers(HandlerMap &map);
void registerNNHandlers(HandlerMap &map);
void registerShapeHandlers(HandlerMap &map);
void registerSliceHandlers(HandlerMap &map);

/// Errors are one line, but names from the model (and ONNX parser messages)
/// may hold line breaks: those are escaped (OnnxImporter.cpp).
std::string oneLine(const std::string &text);

/// Known vector input \p i, e.g. the target of Reshape or Expand; fails
/// (with the node kept opaque) when it is not known (ShapeImport.cpp).
mlir::FailureOr<DimList> knownDims(NodeContext &ctx, size_t i, llvm::StringRef what);

const HandlerMap &getHandlers();

/// Folds an elementwise integer op over known tensors (numpy broadcasting
/// for rank <= 1); nullopt when it cannot (non-constant division, etc.).
std::optional<KnownTensor> foldKnownBinary(llvm::StringRef opType, const KnownTensor &a,
                                           const KnownTensor &b);

} // namespace kiln

#endif // KILN_LIB_IMPORT_NODECONTEXT_H
