//===- NodeContext.cpp - What an ONNX op handler sees ---------------------===//

#include "NodeContext.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;

namespace kiln {

bool KnownTensor::allConstant() const {
  return llvm::all_of(elements, [](Dim d) { return d && d.getConstantValue(); });
}

std::optional<std::vector<int64_t>> KnownTensor::constants() const {
  std::vector<int64_t> values;
  for (Dim d : elements) {
    std::optional<int64_t> c = d ? d.getConstantValue() : std::nullopt;
    if (!c)
      return std::nullopt;
    values.push_back(*c);
  }
  return values;
}

NodeContext::NodeContext(OpBuilder &builder, Location loc, const onnx::NodeProto &node,
                         int64_t opset, SmallVector<ImportedValue *> inputs)
    : builder_(builder), loc_(loc), node_(node), opset_(opset), inputs_(std::move(inputs)) {
  while (!inputs_.empty() && !inputs_.back())
    inputs_.pop_back();
  outputs_.resize(node.output_size());
}

const KnownTensor *NodeContext::known(size_t i) const {
  if (!hasInput(i) || !inputs_[i]->known)
    return nullptr;
  return &*inputs_[i]->known;
}

FailureOr<Value> NodeContext::input(size_t i) {
  if (!hasInput(i)) {
    (void)error("input " + Twine(i) + " is missing");
    return failure();
  }
  ImportedValue &v = *inputs_[i];
  if (v.value) {
    // Only ranked tensors reach the dialect; an opaque producer without a
    // known rank makes its users opaque too.
    if (!llvm::isa<RankedTensorType>(v.value.getType())) {
      (void)unsupported("input " + Twine(i) + " has an unknown rank");
      return failure();
    }
    return v.value;
  }
  FailureOr<Value> value = materialize(*v.known);
  if (failed(value))
    return failure();
  v.value = *value; // Materialize once; later uses share the constant.
  return *value;
}

FailureOr<RankedTensorType> NodeContext::inputType(size_t i) {
  FailureOr<Value> v = input(i);
  if (failed(v))
    return failure();
  auto type = llvm::dyn_cast<RankedTensorType>(v->getType());
  if (!type) {
    (void)unsupported("input " + Twine(i) + " has an unknown rank");
    return failure();
  }
  return type;
}

FailureOr<std::vector<int64_t>> NodeContext::constantInts(size_t i, StringRef what) {
  const KnownTensor *k = known(i);
  std::optional<std::vector<int64_t>> values = k ? k->constants() : std::nullopt;
  if (!values) {
    (void)unsupported(what + " must be a compile-time constant");
    return failure();
  }
  return *values;
}

FailureOr<int64_t> NodeContext::constantInt(size_t i, StringRef what) {
  FailureOr<std::vector<int64_t>> values = constantInts(i, what);
  if (failed(values))
    return failure();
  if (values->size() != 1) {
    (void)error(what + " must hold one element, got " + Twine(values->size()));
    return failure();
  }
  return values->front();
}

std::optional<double> NodeContext::constantScalar(size_t i) {
  if (!hasInput(i))
    return std::nullopt;
  if (const KnownTensor *k = known(i)) {
    std::optional<std::vector<int64_t>> c = k->constants();
    if (c && c->size() == 1)
      return static_cast<double>((*c)[0]);
    return std::nullopt;
  }
  auto constant = inputs_[i]->value.getDefiningOp<ConstantOp>();
  if (!constant)
    return std::nullopt;
  auto dense = llvm::dyn_cast<DenseElementsAttr>(constant.getValue());
  if (!dense || !dense.isSplat() || !llvm::isa<FloatType>(dense.getElementType()))
    return std::nullopt;
  return dense.getSplatValue<APFloat>().convertToDouble();
}

const onnx::AttributeProto *NodeContext::attr(StringRef name) const {
  for (const onnx::AttributeProto &a : node_.attribute())
    if (a.name() == name)
      return &a;
  return nullptr;
}

int64_t NodeContext::attrInt(StringRef name, int64_t fallback) const {
  const onnx::AttributeProto *a = attr(name);
  return a ? a->i() : fallback;
}

float NodeContext::attrFloat(StringRef name, float fallback) const {
  const onnx::AttributeProto *a = attr(name);
  return a ? a->f() : fallback;
}

std::string NodeContext::attrString(StringRef name, StringRef fallback) const {
  const onnx::AttributeProto *a = attr(name);
  return a ? a->s() : fallback.str();
}

std::optional<std::vector<int64_t>> NodeContext::attrInts(StringRef name) const {
  const onnx::AttributeProto *a = attr(name);
  if (!a)
    return std::nullopt;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

void NodeContext::setOutput(size_t i, Value value) {
  if (i < outputs_.size())
    outputs_[i].value = value;
}

void NodeContext::setKnown(size_t i, KnownTensor known) {
  if (i < outputs_.size())
    outputs_[i].known = std::move(known);
}

Value NodeContext::scalar(double value, Type elementType) {
  auto type = RankedTensorType::get({}, elementType);
  Attribute element;
  if (llvm::isa<FloatType>(elementType))
    element = builder_.getFloatAttr(elementType, value);
  else
    element = builder_.getIntegerAttr(elementType, static_cast<int64_t>(value));
  return builder_.create<ConstantOp>(loc_, DenseElementsAttr::get(type, element)).getResult();
}

FailureOr<Value> NodeContext::materialize(const KnownTensor &known) {
  std::optional<std::vector<int64_t>> values = known.constants();
  if (!values) {
    (void)unsupported("a size computed from symbolic dims is used as tensor "
                      "data (host-value extraction)");
    return failure();
  }
  Type element = toMlirType(known.dtype, context());
  auto type = RankedTensorType::get(known.shape, element);
  SmallVector<Attribute> attrs;
  for (int64_t v : *values) {
    if (isFloat(known.dtype))
      attrs.push_back(builder_.getFloatAttr(element, static_cast<double>(v)));
    else
      attrs.push_back(builder_.getIntegerAttr(element, wrapToInt(known.dtype, v)));
  }
  return builder_.create<ConstantOp>(loc_, DenseElementsAttr::get(type, attrs)).getResult();
}

FailureOr<int64_t> NodeContext::normalizeAxis(int64_t axis, int64_t rank) {
  int64_t normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized >= rank) {
    (void)error("axis " + Twine(axis) + " is out of range for rank " + Twine(rank));
    return failure();
  }
  return normalized;
}

FailureOr<Value> NodeContext::finishInferred(Operation *op) {
  auto inferable = llvm::cast<InferTypeOpInterface>(op);
  SmallVector<Type> types;
  diagnostic_.clear();
  if (failed(inferable.inferReturnTypes(op->getContext(), op->getLoc(), op->getOperands(),
                                        op->getRawDictionaryAttrs(), op->getPropertiesStorage(),
                                        op->getRegions(), types))) {
    op->erase();
    (void)error(diagnostic_.empty() ? "operand types do not fit" : diagnostic_);
    return failure();
  }
  op->getResult(0).setType(types.front());
  return op->getResult(0);
}

LogicalResult NodeContext::unsupported(const Twine &reason) {
  if (failure_ == NodeFailure::None) {
    failure_ = NodeFailure::Unsupported;
    message_ = reason.str();
  }
  return failure();
}

LogicalResult NodeContext::error(const Twine &message) {
  if (failure_ != NodeFailure::Error) {
    failure_ = NodeFailure::Error;
    message_ = message.str();
  }
  return failure();
}

ImportedValue constantTensor(OpBuilder &builder, Location loc, const HostTensor &tensor) {
  ImportedValue result;
  MLIRContext *context = builder.getContext();
  if (!tensor.isFloat() && tensor.shape.size() <= 1 && tensor.numel() <= kMaxKnownElements) {
    KnownTensor known;
    known.dtype = tensor.dtype;
    known.shape = tensor.shape;
    for (int64_t v : tensor.ints)
      known.elements.push_back(dimConst(context, v));
    result.known = std::move(known);
    return result;
  }
  Type element = toMlirType(tensor.dtype, context);
  auto type = RankedTensorType::get(tensor.shape, element);
  SmallVector<Attribute> values;
  for (int64_t i = 0, n = tensor.numel(); i < n; ++i)
    values.push_back(tensor.isFloat() ? Attribute(builder.getFloatAttr(element, tensor.floats[i]))
                                      : Attribute(builder.getIntegerAttr(element, tensor.ints[i])));
  result.value = builder.create<ConstantOp>(loc, DenseElementsAttr::get(type, values)).getResult();
  return result;
}

const HandlerMap &getHandlers() {
  static const HandlerMap handlers = [] {
    HandlerMap map;
    registerElementwiseHandlers(map);
    registerNNHandlers(map);
    registerShapeHandlers(map);
    registerSliceHandlers(map);
    return map;
  }();
  return handlers;
}

} // namespace kiln
