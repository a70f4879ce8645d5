//===- OnnxImporter.cpp - ONNX models into the graph dialect --------------===//
//
// Walks the (topologically sorted) ONNX graph once. Inputs become function
// arguments with symbolic dims, initializers become parameters or constants
// on first use, and each node goes through its handler; a node without one,
// or with a variant the handler does not cover, becomes kiln.opaque.
// OnnxModelFile.cpp reads the file.
// Kept whole (~730 lines): one class, GraphImporter, and the node checks only it runs.
//
//===----------------------------------------------------------------------===//

#include "kiln/Import/OnnxImporter.h"
#include "InitializerMaskPattern.h"
#include "NodeContext.h"
#include "kiln/Dialect/Graph/DimOverflow.h"
#include "kiln/Dialect/Graph/MaskAnalysis.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Import/TensorProto.h"
#include "kiln/Pipelines/Pipelines.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/unknown_field_set.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Transforms/Passes.h"
#include "onnx/defs/schema.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MathExtras.h"
#include "llvm/Support/Path.h"

#include <set>

using namespace mlir;

namespace kiln {
namespace {

/// Oldest and newest default-domain opsets whose op semantics Kiln knows.
constexpr int64_t kMinOpset = 1;
constexpr int64_t kMaxOpset = 21;

/// The PyTorch parameter an initializer was folded from, as the dynamo
/// exporter's optimizer records it: metadata `['m.layers.0.q_proj.weight']`.
/// Debian's ONNX 1.12 predates ValueInfoProto.metadata_props (field 4), so
/// protobuf keeps it as unknown fields: StringStringEntryProto messages with
/// key (1) and value (2).
std::optional<std::string> foldedSource(const onnx::ValueInfoProto &info) {
  constexpr int kMetadataProps = 4, kKey = 1, kValue = 2;
  const google::protobuf::UnknownFieldSet &unknown = info.GetReflection()->GetUnknownFields(info);
  for (int i = 0; i < unknown.field_count(); ++i) {
    const google::protobuf::UnknownField &field = unknown.field(i);
    if (field.number() != kMetadataProps ||
        field.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
      continue;
    google::protobuf::UnknownFieldSet entry;
    if (!entry.ParseFromString(field.length_delimited()))
      continue;
    std::string key, value;
    for (int j = 0; j < entry.field_count(); ++j) {
      const google::protobuf::UnknownField &part = entry.field(j);
      if (part.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
        continue;
      if (part.number() == kKey)
        key = part.length_delimited();
      else if (part.number() == kValue)
        value = part.length_delimited();
    }
    if (key != "pkg.onnxscript.optimizer.folded_from")
      continue;
    StringRef list = StringRef(value).trim();
    if (!list.consume_front("['") || !list.consume_back("']") || list.contains('\'') ||
        list.empty())
      return std::nullopt; // Folded from several tensors: no single name.
    return list.str();
  }
  return std::nullopt;
}

/// Symbol names must be MLIR keywords: letters, digits, `_`, `.`, `$`.
std::string symbolName(StringRef raw) {
  std::string name;
  for (char c : raw)
    name += (llvm::isAlnum(c) || c == '_') ? c : '_';
  if (name.empty() || llvm::isDigit(name[0]))
    name = "s_" + name;
  return name;
}

/// An attribute whose type is not the one the op's ONNX schema declares
/// (ONNX 1.12 knows schemas up to opset 17; newer ops are not checked).
std::optional<std::string> attributeTypeError(const onnx::NodeProto &node, int64_t opset) {
  const onnx::OpSchema *schema = onnx::OpSchemaRegistry::Schema(
      node.op_type(), static_cast<int>(std::min<int64_t>(opset, INT32_MAX)));
  if (!schema)
    return std::nullopt;
  for (const onnx::AttributeProto &a : node.attribute()) {
    auto it = schema->attributes().find(a.name());
    if (it == schema->attributes().end() || a.type() == onnx::AttributeProto::UNDEFINED ||
        a.type() == it->second.type)
      continue;
    return "attribute '" + a.name() + "' is " + onnx::AttributeProto::AttributeType_Name(a.type()) +
           ", expected " + onnx::AttributeProto::AttributeType_Name(it->second.type);
  }
  return std::nullopt;
}

/// A result type whose static element count, or byte size, overflows
/// int64: no tensor, and every later size computation would wrap.
std::optional<std::string> oversizedResult(Operation *op) {
  for (auto [i, type] : llvm::enumerate(op->getResultTypes())) {
    auto ranked = llvm::dyn_cast<RankedTensorType>(type);
    if (!ranked)
      continue;
    int64_t count = 1, bytes = 0;
    bool countOverflow = false;
    for (int64_t d : ranked.getShape())
      if (!ShapedType::isDynamic(d))
        countOverflow |= llvm::MulOverflow(count, d, count);
    int64_t width =
        ranked.getElementType().isIntOrFloat() ? (ranked.getElementTypeBitWidth() + 7) / 8 : 1;
    bool bytesOverflow = !countOverflow && llvm::MulOverflow(count, width, bytes);
    if (countOverflow || bytesOverflow) {
      std::string text;
      llvm::raw_string_ostream os(text);
      os << "result " << i << " " << shapeToString(ranked) << " " << ranked.getElementType()
         << " has more " << (countOverflow ? "elements" : "bytes") << " than int64 can count";
      return text;
    }
  }
  return std::nullopt;
}

/// The first verifier diagnostic of `op`, with its operand and result
/// types; nullopt when it verifies.
std::optional<std::string> verifyNodeOp(Operation *op) {
  if (std::optional<std::string> oversized = oversizedResult(op))
    return oversized;
  std::string first;
  {
    ScopedDiagnosticHandler capture(op->getContext(), [&](Diagnostic &diag) {
      if (first.empty())
        first = diag.str();
      return success();
    });
    if (succeeded(verify(op)))
      return std::nullopt;
  }
  auto typeList = [](TypeRange types) {
    std::string text;
    llvm::raw_string_ostream os(text);
    llvm::interleaveComma(types, os, [&](Type t) {
      if (auto ranked = llvm::dyn_cast<RankedTensorType>(t))
        os << shapeToString(ranked) << " " << ranked.getElementType();
      else
        os << t;
    });
    return text;
  };
  return first + " (operands " + typeList(op->getOperandTypes()) + "; result " +
         typeList(op->getResultTypes()) + ")";
}

class GraphImporter {
public:
  GraphImporter(MLIRContext *context, const onnx::ModelProto &model, std::string path,
                const ImportOptions &options)
      : context_(context), model_(model), path_(std::move(path)), options_(options),
        builder_(context) {}

  absl::StatusOr<ImportResult> run();

private:
  absl::Status fail(const Twine &message) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": ", oneLine(message.str())));
  }
  absl::StatusOr<RankedTensorType> importValueType(const onnx::ValueInfoProto &info);
  absl::StatusOr<ImportedValue *> lookup(const std::string &name);
  absl::StatusOr<ImportedValue> importInitializer(const onnx::TensorProto &tensor);
  absl::Status importNode(const onnx::NodeProto &node, int index);
  /// An If whose predicate is a compile-time constant: the taken branch is
  /// imported inline (no graph break). Returns false when it is not one.
  absl::StatusOr<bool> inlineConstantIf(const onnx::NodeProto &node, ImportedValue *predicate);
  absl::Status emitOpaque(const onnx::NodeProto &node, StringRef nodeName, StringRef reason,
                          Location loc);
  Type opaqueResultType(const std::string &name);

  MLIRContext *context_;
  const onnx::ModelProto &model_;
  std::string path_;
  const ImportOptions &options_;
  OpBuilder builder_;
  int64_t opset_ = 0;
  std::map<std::string, ImportedValue> values_;
  std::map<std::string, const onnx::TensorProto *> initializers_;
  std::map<std::string, const onnx::TypeProto *> valueInfo_;
  /// Initializers the exporter folded from one PyTorch parameter (e.g. a
  /// pre-transposed weight `val_95` from `...q_proj.weight`).
  std::map<std::string, std::string> foldedFrom_;
  /// Whether a 2-D folded initializer is its source's transpose, where the
  /// graph says so (foldedLayout).
  std::optional<bool> foldedTransposed(const std::string &name) const;
  /// For each PyTorch name of a tied parameter, its other names (the model's
  /// kiln.tied_weights metadata, which scripts/export_hf.py writes).
  std::map<std::string, std::vector<std::string>> tiedAliases_;
  absl::Status readTiedWeights();
  /// The model's PyTorch parameters (kiln.parameters metadata), when the
  /// exporter recorded them: other float initializers are buffers or
  /// constants (RoPE's inv_freq), which `--train all` leaves frozen.
  std::optional<std::set<std::string>> pytorchParameters_;
  absl::Status readParameterList();
  bool isPytorchParameter(const std::string &initializer) const;
  std::vector<UnsupportedNode> unsupported_;
  NodeContext *currentNode_ = nullptr;
  /// What defines each value name ("graph input 'x'", "node 'Add_3'"):
  /// ONNX graphs are in SSA form, and a second definition would silently
  /// replace the first for every later use.
  std::map<std::string, std::string> definedBy_;
  absl::Status define(const std::string &name, const std::string &what);
  /// Gather indices from an integer initializer large enough to stay a
  /// frozen parameter: read from the model and checked against the
  /// gathered dim, as the handler checks constant indices.
  absl::Status checkInitializerIndices(const onnx::NodeProto &node, const std::string &nodeName,
                                       ArrayRef<ImportedValue *> inputs);
};

/// A 2-D initializer folded from a PyTorch weight and read only as the B
/// operand of MatMul (or of Gemm without transB) is x W^T of a linear
/// layer: the exporter folded Transpose(W), so it holds W^T of the [out, in]
/// weight. Read as Gemm's B with transB it is W itself. Any other reader
/// leaves the relation unknown: for a square weight the runtime cannot
/// tell W from W^T by shape, and must not guess.
std::optional<bool> GraphImporter::foldedTransposed(const std::string &name) const {
  std::optional<bool> transposed;
  for (const onnx::NodeProto &node : model_.graph().node())
    for (int i = 0; i < node.input_size(); ++i) {
      if (node.input(i) != name)
        continue;
      bool isMatmulB = i == 1 && node.domain().empty() && node.op_type() == "MatMul";
      bool isGemmB = i == 1 && node.domain().empty() && node.op_type() == "Gemm";
      if (!isMatmulB && !isGemmB)
        return std::nullopt;
      bool transB = false;
      if (isGemmB)
        for (const onnx::AttributeProto &a : node.attribute())
          if (a.name() == "transB")
            transB = a.i() != 0;
      bool here = !transB;
      if (transposed && *transposed != here)
        return std::nullopt;
      transposed = here;
    }
  return transposed;
}

/// kiln.tied_weights = [["lm_head.weight", "model.embed_tokens.weight"], ...]:
/// groups of PyTorch names of one tensor. Malformed metadata is an error,
/// not ignored: a wrong alias would load the wrong weight.
absl::Status GraphImporter::readTiedWeights() {
  for (const onnx::StringStringEntryProto &entry : model_.metadata_props()) {
    if (entry.key() != "kiln.tied_weights")
      continue;
    auto bad = [&](const Twine &why) {
      return fail("metadata kiln.tied_weights: " + why +
                  " (expected a JSON list of lists of parameter names)");
    };
    llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(entry.value());
    if (!parsed)
      return bad(llvm::toString(parsed.takeError()));
    const llvm::json::Array *groups = parsed->getAsArray();
    if (!groups)
      return bad("not a list");
    for (const llvm::json::Value &group : *groups) {
      const llvm::json::Array *names = group.getAsArray();
      if (!names || names->size() < 2)
        return bad("a group is not a list of two or more names");
      std::vector<std::string> all;
      for (const llvm::json::Value &name : *names) {
        std::optional<llvm::StringRef> text = name.getAsString();
        if (!text || text->empty())
          return bad("a name is not a non-empty string");
        if (tiedAliases_.count(text->str()) || llvm::is_contained(all, text->str()))
          return bad("'" + *text + "' is in two groups");
        all.push_back(text->str());
      }
      for (const std::string &name : all)
        for (const std::string &other : all)
          if (other != name)
            tiedAliases_[name].push_back(other);
    }
  }
  return absl::OkStatus();
}

/// kiln.parameters = ["model.embed_tokens.weight", ...]: the names of the
/// model's parameters (named_parameters), as scripts/export_hf.py records
/// them. Malformed metadata is an error.
absl::Status GraphImporter::readParameterList() {
  for (const onnx::StringStringEntryProto &entry : model_.metadata_props()) {
    if (entry.key() != "kiln.parameters")
      continue;
    auto bad = [&](const Twine &why) {
      return fail("metadata kiln.parameters: " + why +
                  " (expected a JSON list of parameter names)");
    };
    llvm::Expected<llvm::json::Value> parsed = llvm::json::parse(entry.value());
    if (!parsed)
      return bad(llvm::toString(parsed.takeError()));
    const llvm::json::Array *names = parsed->getAsArray();
    if (!names)
      return bad("not a list");
    pytorchParameters_.emplace();
    for (const llvm::json::Value &name : *names) {
      std::optional<llvm::StringRef> text = name.getAsString();
      if (!text || text->empty())
        return bad("a name is not a non-empty string");
      pytorchParameters_->insert(text->str());
    }
  }
  return absl::OkStatus();
}

/// Without the record every float initializer may be one; with it, the
/// initializer's own name, the weight it was folded from, or a tied name
/// of either must be listed.
bool GraphImporter::isPytorchParameter(const std::string &initializer) const {
  if (!pytorchParameters_)
    return true;
  std::vector<std::string> names{initializer};
  if (auto source = foldedFrom_.find(initializer); source != foldedFrom_.end())
    names.push_back(source->second);
  for (size_t i = 0, n = names.size(); i < n; ++i)
    if (auto aliases = tiedAliases_.find(names[i]); aliases != tiedAliases_.end())
      names.insert(names.end(), aliases->second.begin(), aliases->second.end());
  return llvm::any_of(names, [&](const std::string &n) { return pytorchParameters_->count(n); });
}

absl::Status GraphImporter::checkInitializerIndices(const onnx::NodeProto &node,
                                                    const std::string &nodeName,
                                                    ArrayRef<ImportedValue *> inputs) {
  if (inputs.size() < 2 || !inputs[0] || !inputs[1] || !inputs[0]->value || !inputs[1]->value ||
      !inputs[1]->value.getDefiningOp<ParameterOp>())
    return absl::OkStatus();
  auto init = initializers_.find(node.input(1));
  auto type = llvm::dyn_cast<RankedTensorType>(inputs[0]->value.getType());
  if (init == initializers_.end() || !type || type.getRank() == 0)
    return absl::OkStatus();
  int64_t axis = 0;
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == "axis")
      axis = a.i();
  if (axis < 0)
    axis += type.getRank();
  if (axis < 0 || axis >= type.getRank() || type.isDynamicDim(axis))
    return absl::OkStatus(); // The handler reports a bad axis.
  // Without the bytes (external data left behind) there is nothing to check:
  // compiling needs only shapes.
  absl::StatusOr<HostTensor> indices = tensorFromProto(*init->second, folderOf(path_));
  if (!indices.ok() || indices->isFloat())
    return absl::OkStatus();
  int64_t n = type.getDimSize(axis);
  for (int64_t index : indices->ints)
    if (index < -n || index >= n)
      return fail("node '" + nodeName + "' (Gather): Gather index " + Twine(index) +
                  " is out of range for dim " + Twine(axis) + " of size " + Twine(n));
  return absl::OkStatus();
}

absl::Status GraphImporter::define(const std::string &name, const std::string &what) {
  if (name.empty())
    return absl::OkStatus(); // No value: nothing can refer to it.
  auto [it, inserted] = definedBy_.try_emplace(name, what);
  if (inserted)
    return absl::OkStatus();
  return fail(what + ": value '" + name + "' is already defined by " + it->second);
}

absl::StatusOr<RankedTensorType> GraphImporter::importValueType(const onnx::ValueInfoProto &info) {
  if (!info.type().has_tensor_type())
    return fail("graph input '" + info.name() + "' is not a tensor");
  const onnx::TypeProto::Tensor &tensor = info.type().tensor_type();
  absl::StatusOr<DType> dtype = dtypeFromOnnx(tensor.elem_type());
  if (!dtype.ok())
    return fail("graph input '" + info.name() + "': " + std::string(dtype.status().message()));
  if (!tensor.has_shape())
    return fail("graph input '" + info.name() + "' has no shape (rank unknown)");
  DimList dims;
  int64_t staticElements = 1;
  for (int i = 0; i < tensor.shape().dim_size(); ++i) {
    const onnx::TensorShapeProto::Dimension &dim = tensor.shape().dim(i);
    if (dim.has_dim_value() &&
        (dim.dim_value() < 0 || llvm::MulOverflow(staticElements, dim.dim_value(), staticElements)))
      return fail("graph input '" + info.name() + "': " +
                  (dim.dim_value() < 0 ? "dim " + Twine(dim.dim_value()) + " is negative"
                                       : Twine("its element count overflows int64")));
    if (dim.has_dim_value())
      dims.push_back(dimConst(context_, dim.dim_value()));
    else if (dim.has_dim_param() && !dim.dim_param().empty())
      dims.push_back(SymExprAttr::getSymbol(context_, symbolName(dim.dim_param())));
    else // Unnamed dynamic dim: a generated, stable name.
      dims.push_back(
          SymExprAttr::getSymbol(context_, symbolName(info.name() + "_dim" + std::to_string(i))));
  }
  return makeTensorType(dims, toMlirType(*dtype, context_));
}

absl::StatusOr<ImportedValue> GraphImporter::importInitializer(const onnx::TensorProto &tensor) {
  absl::StatusOr<DType> dtype = dtypeFromOnnx(tensor.data_type());
  if (!dtype.ok())
    return fail("initializer '" + tensor.name() + "': " + std::string(dtype.status().message()));
  std::vector<int64_t> shape(tensor.dims().begin(), tensor.dims().end());
  int64_t numel = 1;
  for (int64_t d : shape)
    if (d < 0 || llvm::MulOverflow(numel, d, numel))
      return fail("initializer '" + tensor.name() + "': " +
                  (d < 0 ? "dim " + Twine(d) + " is negative"
                         : Twine("its element count overflows int64")));
  auto type = RankedTensorType::get(shape, toMlirType(*dtype, context_));
  Location loc = NameLoc::get(StringAttr::get(context_, tensor.name()),
                              FileLineColLoc::get(context_, path_, 0, 0));
  ImportedValue result;
  // One-element float initializers are exporter constants (the dynamo
  // exporter stores SDPA's sqrt(scale) as `val_N : [1]`), not weights: a
  // PyTorch module's parameters keep their names or record `folded_from`.
  bool exporterScalar = numel == 1 && !foldedFrom_.count(tensor.name());
  bool weight = isFloat(*dtype) ? !shape.empty() && !exporterScalar : numel > kMaxKnownElements;
  if (weight) {
    // Only the shape is needed: the bytes stay in the model (or its external
    // data file) and are read by whoever needs values.
    bool buffer = isFloat(*dtype) && !isPytorchParameter(tensor.name());
    auto param = builder_.create<ParameterOp>(loc, type, tensor.name(),
                                              /*trainable=*/isFloat(*dtype) && !buffer);
    auto source = foldedFrom_.find(tensor.name());
    // A checkpoint keeps one name of a tied tensor (Hugging Face keeps the
    // input embedding's), which need not be the one the exporter used.
    auto aliases = tiedAliases_.find(source != foldedFrom_.end() ? source->second : tensor.name());
    if (aliases != tiedAliases_.end()) {
      SmallVector<Attribute> names;
      for (const std::string &alias : aliases->second)
        names.push_back(builder_.getStringAttr(alias));
      param->setAttr(kSourceAliasesAttr, builder_.getArrayAttr(names));
    }
    if (buffer)
      param->setAttr(kBufferAttr, builder_.getUnitAttr());
    if (source != foldedFrom_.end()) {
      param->setAttr(kSourceNameAttr, builder_.getStringAttr(source->second));
      if (shape.size() == 2)
        if (std::optional<bool> transposed = foldedTransposed(tensor.name()))
          param->setAttr(kSourceTransposedAttr, builder_.getBoolAttr(*transposed));
    } else if (std::optional<std::string> pattern =
                   initializerMaskPattern(tensor, folderOf(path_), *dtype, shape))
      // A folded attention mask (a module's weights record folded_from).
      param->setAttr(kMaskPatternAttr, builder_.getStringAttr(*pattern));
    else if (std::optional<double> splat =
                 initializerSplatValue(tensor, folderOf(path_), *dtype, shape))
      param->setAttr(kSplatValueAttr, builder_.getF64FloatAttr(*splat));
    result.value = param.getResult();
    return result;
  }
  absl::StatusOr<HostTensor> host = tensorFromProto(tensor, folderOf(path_));
  if (!host.ok())
    return fail(std::string(host.status().message()));
  return constantTensor(builder_, loc, *host);
}

absl::StatusOr<ImportedValue *> GraphImporter::lookup(const std::string &name) {
  auto it = values_.find(name);
  if (it != values_.end())
    return &it->second;
  auto init = initializers_.find(name);
  if (init == initializers_.end())
    return nullptr;
  absl::StatusOr<ImportedValue> value = importInitializer(*init->second);
  if (!value.ok())
    return value.status();
  return &(values_[name] = *value);
}

Type GraphImporter::opaqueResultType(const std::string &name) {
  auto it = valueInfo_.find(name);
  if (it != valueInfo_.end() && it->second->has_tensor_type()) {
    const auto &tensor = it->second->tensor_type();
    absl::StatusOr<DType> dtype = dtypeFromOnnx(tensor.elem_type());
    Type element = dtype.ok() ? toMlirType(*dtype, context_) : builder_.getF32Type();
    if (!tensor.has_shape())
      return UnrankedTensorType::get(element);
    DimList dims;
    for (const auto &dim : tensor.shape().dim()) {
      if (dim.has_dim_value())
        dims.push_back(dimConst(context_, dim.dim_value()));
      else if (dim.has_dim_param())
        dims.push_back(SymExprAttr::getSymbol(context_, symbolName(dim.dim_param())));
      else
        dims.push_back(Dim());
    }
    return makeTensorType(dims, element);
  }
  return UnrankedTensorType::get(builder_.getF32Type());
}

absl::Status GraphImporter::emitOpaque(const onnx::NodeProto &node, StringRef nodeName,
                                       StringRef reason, Location loc) {
  SmallVector<Value> operands;
  SmallVector<Attribute> hostValues;
  for (const std::string &name : node.input()) {
    if (name.empty())
      continue;
    absl::StatusOr<ImportedValue *> value = lookup(name);
    if (!value.ok())
      return value.status();
    if (!*value)
      return fail("node '" + nodeName + "' (" + node.op_type() + "): input '" + name +
                  "' is not defined before use");
    if (!(*value)->value) {
      NodeContext scratch(builder_, loc, node, opset_, {*value});
      if (failed(scratch.input(0))) {
        // Sizes that exist only as symbols cannot be a tensor operand; the
        // opaque op records them instead (a host-value graph break).
        std::string dims;
        for (Dim d : (*value)->known->elements)
          dims += (dims.empty() ? "" : ", ") + dimToString(d);
        hostValues.push_back(builder_.getStringAttr(name + " = [" + dims + "]"));
        continue;
      }
    }
    operands.push_back((*value)->value);
  }
  SmallVector<Type> resultTypes;
  for (const std::string &name : node.output())
    resultTypes.push_back(opaqueResultType(name));
  SmallVector<NamedAttribute> attrs;
  for (const onnx::AttributeProto &a : node.attribute()) {
    Attribute value;
    switch (a.type()) {
    case onnx::AttributeProto::INT: value = builder_.getI64IntegerAttr(a.i()); break;
    case onnx::AttributeProto::FLOAT: value = builder_.getF32FloatAttr(a.f()); break;
    case onnx::AttributeProto::STRING: value = builder_.getStringAttr(a.s()); break;
    case onnx::AttributeProto::INTS:
      value = builder_.getDenseI64ArrayAttr(SmallVector<int64_t>(a.ints().begin(), a.ints().end()));
      break;
    case onnx::AttributeProto::FLOATS:
      value =
          builder_.getDenseF32ArrayAttr(SmallVector<float>(a.floats().begin(), a.floats().end()));
      break;
    default: // Tensors and graphs: keep the kind, not the payload.
      value =
          builder_.getStringAttr("<" + onnx::AttributeProto::AttributeType_Name(a.type()) + ">");
    }
    attrs.push_back(builder_.getNamedAttr(a.name(), value));
  }
  auto op = builder_.create<OpaqueOp>(loc, resultTypes, node.op_type(), node.domain(),
                                      nodeName.str(), builder_.getDictionaryAttr(attrs), operands);
  op->setAttr("reason", builder_.getStringAttr(reason));
  if (!hostValues.empty())
    op->setAttr("host_values", builder_.getArrayAttr(hostValues));
  for (auto [i, name] : llvm::enumerate(node.output()))
    if (!name.empty())
      values_[name].value = op->getResult(i);
  unsupported_.push_back({nodeName.str(), node.op_type(), reason.str()});
  return absl::OkStatus();
}

absl::StatusOr<bool> GraphImporter::inlineConstantIf(const onnx::NodeProto &node,
                                                     ImportedValue *predicate) {
  if (!predicate->known)
    return false;
  std::optional<std::vector<int64_t>> value = predicate->known->constants();
  if (!value || value->size() != 1)
    return false;
  const char *branchName = (*value)[0] ? "then_branch" : "else_branch";
  const onnx::GraphProto *branch = nullptr;
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == branchName && a.has_g())
      branch = &a.g();
  if (!branch || branch->output_size() != node.output_size())
    return fail("node '" + node.name() + "' (If): the " + branchName +
                " graph does not produce the node's outputs");
  for (const onnx::TensorProto &init : branch->initializer())
    initializers_[init.name()] = &init;
  for (int i = 0; i < branch->node_size(); ++i)
    if (absl::Status status = importNode(branch->node(i), i); !status.ok())
      return status;
  for (int i = 0; i < node.output_size(); ++i) {
    absl::StatusOr<ImportedValue *> out = lookup(branch->output(i).name());
    if (!out.ok())
      return out.status();
    if (!*out)
      return fail("node '" + node.name() + "' (If): branch output '" + branch->output(i).name() +
                  "' is never produced");
    values_[node.output(i)] = **out;
  }
  return true;
}

absl::Status GraphImporter::importNode(const onnx::NodeProto &node, int index) {
  std::string nodeName =
      node.name().empty() ? node.op_type() + "_" + std::to_string(index) : node.name();
  // The op type rides along as metadata, so an error from a later pass can
  // say "node 'n' (Slice)" (tools/kiln/Diagnostics.cpp).
  Location loc = NameLoc::get(StringAttr::get(context_, nodeName),
                              FusedLoc::get(context_, {FileLineColLoc::get(context_, path_, 0, 0)},
                                            StringAttr::get(context_, node.op_type())));
  auto nodeError = [&](const Twine &message) {
    return fail("node '" + nodeName + "' (" + node.op_type() + "): " + message);
  };
  for (const std::string &name : node.output())
    if (!name.empty())
      if (absl::Status s = define(name, "node '" + nodeName + "' (" + node.op_type() + ")");
          !s.ok())
        return s;

  SmallVector<ImportedValue *> inputs;
  for (const std::string &name : node.input()) {
    if (name.empty()) {
      inputs.push_back(nullptr);
      continue;
    }
    absl::StatusOr<ImportedValue *> value = lookup(name);
    if (!value.ok())
      return value.status();
    if (!*value)
      return nodeError("input '" + name + "' is not defined before use");
    inputs.push_back(*value);
  }

  bool standardDomain = node.domain().empty() || node.domain() == "ai.onnx";
  if (standardDomain && node.op_type() == "If" && !inputs.empty() && inputs[0]) {
    absl::StatusOr<bool> inlined = inlineConstantIf(node, inputs[0]);
    if (!inlined.ok())
      return inlined.status();
    if (*inlined)
      return absl::OkStatus();
  }
  const HandlerMap &handlers = getHandlers();
  auto handler = handlers.find(node.op_type());
  if (!standardDomain || handler == handlers.end())
    return emitOpaque(
        node, nodeName,
        standardDomain ? "no importer for this op" : "op from domain '" + node.domain() + "'", loc);

  // Before opset 7, binary ops broadcast only on request (`broadcast`,
  // `axis`) and some ops took `consumed_inputs`; Kiln implements the numpy
  // rules of opset 7 and later only.
  for (const onnx::AttributeProto &a : node.attribute())
    if (a.name() == "broadcast" || a.name() == "consumed_inputs")
      return emitOpaque(node, nodeName, "pre-opset-7 attribute '" + a.name() + "'", loc);

  // Handlers read attributes by name (a->i(), a->f()); one of the wrong
  // type (axis=1.5) would silently read as 0.
  if (std::optional<std::string> bad = attributeTypeError(node, opset_))
    return nodeError(*bad);
  // Every ONNX op has an output; handlers may divide by the output count.
  if (node.output_size() == 0)
    return nodeError("the node has no outputs");

  if (node.op_type() == "Gather")
    if (absl::Status s = checkInitializerIndices(node, nodeName, inputs); !s.ok())
      return s;

  NodeContext ctx(builder_, loc, node, opset_, inputs);
  (void)takeDimOverflow();
  (void)takeNegativeDim();
  Block *block = builder_.getInsertionBlock();
  Operation *last = block->empty() ? nullptr : &block->back();
  currentNode_ = &ctx;
  LogicalResult result = handler->second(ctx);
  currentNode_ = nullptr;
  if (takeDimOverflow())
    return nodeError("a size computed from its inputs overflows int64");
  if (takeNegativeDim())
    return nodeError("a result dim computed from its inputs is negative");
  if (succeeded(result)) {
    // Ops built with a chosen result type (Reshape, Split, Expand) are
    // verified here, so a model's impossible shape is its node's error.
    Operation *first = last ? last->getNextNode() : block->empty() ? nullptr : &block->front();
    for (Operation *op = first; op; op = op->getNextNode())
      if (std::optional<std::string> bad = verifyNodeOp(op))
        return nodeError(*bad);
    for (auto [i, name] : llvm::enumerate(node.output())) {
      if (name.empty())
        continue;
      ImportedValue &out = ctx.outputs()[i];
      if (!out.value && !out.known)
        return nodeError("output " + Twine(i) + " was not produced");
      values_[name] = out;
    }
    return absl::OkStatus();
  }
  if (ctx.failureKind() == NodeFailure::Unsupported)
    return emitOpaque(node, nodeName, ctx.failureMessage(), loc);
  return nodeError(ctx.failureMessage());
}

absl::StatusOr<ImportResult> GraphImporter::run() {
  for (const onnx::OperatorSetIdProto &opset : model_.opset_import()) {
    if (!opset.domain().empty() && opset.domain() != "ai.onnx")
      continue;
    if (opset_ != 0 && opset_ != opset.version())
      return fail("the model imports two default-domain (ai.onnx) opsets, " + Twine(opset_) +
                  " and " + Twine(opset.version()));
    opset_ = opset.version();
  }
  if (opset_ == 0)
    return fail("the model imports no default-domain (ai.onnx) opset");
  if (opset_ < kMinOpset || opset_ > kMaxOpset)
    return fail("opset " + Twine(opset_) + " is not supported (Kiln knows " + Twine(kMinOpset) +
                " to " + Twine(kMaxOpset) + ")");
  if (absl::Status s = readTiedWeights(); !s.ok())
    return s;
  if (absl::Status s = readParameterList(); !s.ok())
    return s;
  const onnx::GraphProto &graph = model_.graph();
  for (const onnx::TensorProto &init : graph.initializer()) {
    initializers_[init.name()] = &init;
    if (absl::Status s = define(init.name(), "initializer '" + init.name() + "'"); !s.ok())
      return s;
  }
  // An input an initializer also provides is that initializer (its default).
  for (const onnx::ValueInfoProto &info : graph.input())
    if (!initializers_.count(info.name()))
      if (absl::Status s = define(info.name(), "graph input '" + info.name() + "'"); !s.ok())
        return s;
  for (const onnx::ValueInfoProto &info : graph.value_info()) {
    valueInfo_[info.name()] = &info.type();
    if (std::optional<std::string> source = foldedSource(info))
      foldedFrom_[info.name()] = *source;
  }
  for (const onnx::ValueInfoProto &info : graph.output())
    valueInfo_[info.name()] = &info.type();

  OwningOpRef<ModuleOp> module = ModuleOp::create(builder_.getUnknownLoc());
  module->getOperation()->setAttr("kiln.weights", builder_.getStringAttr(path_));
  module->getOperation()->setAttr("kiln.opset", builder_.getI64IntegerAttr(opset_));

  // Inputs that an initializer also provides are constants, not arguments.
  SmallVector<Type> argTypes;
  SmallVector<std::string> argNames;
  for (const onnx::ValueInfoProto &info : graph.input()) {
    if (initializers_.count(info.name()))
      continue;
    if (options_.frozenInputs.count(info.name()))
      continue; // Becomes a constant in the body below.
    absl::StatusOr<RankedTensorType> type = importValueType(info);
    if (!type.ok())
      return type.status();
    argTypes.push_back(*type);
    argNames.push_back(info.name());
  }
  std::string funcName = graph.name().empty() ? "main" : "main";
  auto func = func::FuncOp::create(FileLineColLoc::get(context_, path_, 0, 0), funcName,
                                   builder_.getFunctionType(argTypes, {}));
  module->push_back(func);
  Block *entry = func.addEntryBlock();
  builder_.setInsertionPointToStart(entry);
  for (auto [i, name] : llvm::enumerate(argNames)) {
    func.setArgAttr(i, "kiln.name", builder_.getStringAttr(name));
    values_[name].value = entry->getArgument(i);
  }
  for (const auto &[name, tensor] : options_.frozenInputs)
    values_[name] = constantTensor(
        builder_,
        NameLoc::get(StringAttr::get(context_, name), FileLineColLoc::get(context_, path_, 0, 0)),
        tensor);

  // Type-inference diagnostics belong to the node being imported.
  ScopedDiagnosticHandler diagnostics(context_, [&](Diagnostic &diag) {
    if (currentNode_) {
      currentNode_->noteDiagnostic(diag.str());
      return success();
    }
    return failure();
  });

  for (int i = 0; i < graph.node_size(); ++i)
    if (absl::Status status = importNode(graph.node(i), i); !status.ok())
      return status;

  SmallVector<Value> results;
  SmallVector<Type> resultTypes;
  for (const onnx::ValueInfoProto &info : graph.output()) {
    absl::StatusOr<ImportedValue *> value = lookup(info.name());
    if (!value.ok())
      return value.status();
    if (!*value)
      return fail("graph output '" + info.name() + "' is never produced");
    if (!(*value)->value) {
      onnx::NodeProto none;
      NodeContext scratch(builder_, func.getLoc(), none, opset_, {*value});
      FailureOr<Value> v = scratch.input(0);
      if (failed(v))
        return fail("graph output '" + info.name() + "': " + scratch.failureMessage());
    }
    results.push_back((*value)->value);
    resultTypes.push_back((*value)->value.getType());
  }
  builder_.create<func::ReturnOp>(func.getLoc(), results);
  func.setType(builder_.getFunctionType(argTypes, resultTypes));
  for (auto [i, info] : llvm::enumerate(graph.output()))
    func.setResultAttr(i, "kiln.name", builder_.getStringAttr(info.name()));

  PassManager pm(context_);
  kiln::PipelineOptions cleanup;
  cleanup.raiseComposites = options_.raiseComposites;
  kiln::buildImportCleanupPipeline(pm, cleanup);
  std::string verifyErrors;
  {
    ScopedDiagnosticHandler capture(context_, [&](Diagnostic &diag) {
      verifyErrors += diag.str();
      return success();
    });
    if (failed(verify(*module)) || failed(pm.run(*module)))
      return absl::InternalError(
          absl::StrCat(path_, ": internal error: imported IR does not verify: ", verifyErrors));
  }
  ImportResult result;
  result.module = std::move(module);
  result.unsupported = std::move(unsupported_);
  return result;
}

} // namespace

std::string oneLine(const std::string &text) {
  std::string line;
  for (char c : text)
    line += c == '\n' ? "\\n" : c == '\r' ? "\\r" : std::string(1, c);
  return line;
}

absl::StatusOr<ImportResult> importOnnxFile(MLIRContext *context, const std::string &path,
                                            const ImportOptions &options) {
  context->loadDialect<GraphDialect, func::FuncDialect>();
  onnx::ModelProto model;
  if (absl::Status status = loadOnnxModel(path, model); !status.ok())
    return status;
  GraphImporter importer(context, model, path, options);
  return importer.run();
}

std::vector<std::string> getSupportedOnnxOps() {
  std::vector<std::string> ops;
  for (const auto &entry : getHandlers())
    ops.push_back(entry.getKey().str());
  std::sort(ops.begin(), ops.end());
  return ops;
}

} // namespace kiln
