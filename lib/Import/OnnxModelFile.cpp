//===- OnnxModelFile.cpp - Read an ONNX model file ------------------------===//
//
// Binary protobuf (with a clear error for too deeply nested subgraphs) or
// ONNX text through libonnx's parser; the importer and `kiln interp` read
// models through here.
//
//===----------------------------------------------------------------------===//

#include "NodeContext.h"
#include "kiln/Import/OnnxImporter.h"

#include "absl/strings/str_cat.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl.h"
#include "onnx/defs/parser.h"

#include <fstream>
#include <set>
#include <sstream>

using namespace mlir;

namespace kiln {
namespace {

bool isTextualModel(StringRef path) { return path.ends_with(".onnxtxt") || path.ends_with(".txt"); }

/// Protobuf refuses messages nested deeper than 100 levels (an If inside an
/// If costs three: node, attribute, graph). A model that parses under a
/// higher limit is well-formed but too deeply nested; the higher limit is
/// only tried after a failure, and stays far from exhausting the stack.
bool parsesWhenDeeper(const std::string &path) {
  std::ifstream file(path, std::ios::binary);
  google::protobuf::io::IstreamInputStream raw(&file);
  google::protobuf::io::CodedInputStream coded(&raw);
  coded.SetRecursionLimit(2000);
  onnx::ModelProto scratch;
  return scratch.ParseFromCodedStream(&coded) && coded.ConsumedEntireMessage();
}
} // namespace

absl::Status loadOnnxModel(const std::string &path, onnx::ModelProto &model) {
  std::ifstream file(path, std::ios::binary);
  if (!file)
    return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  if (isTextualModel(path)) {
    std::stringstream text;
    text << file.rdbuf();
    std::string source = text.str();
    onnx::Common::Status status;
    try {
      status = onnx::OnnxParser::Parse(model, source.c_str());
    } catch (const std::exception &e) {
      // ONNX 1.12's parser reads integers with std::stoll, which throws on
      // out-of-range literals.
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ONNX text does not parse: bad literal (", oneLine(e.what()), ")"));
    }
    if (!status.IsOK())
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": ONNX text does not parse: ", oneLine(status.ErrorMessage())));
  } else if (!model.ParseFromIstream(&file)) {
    if (parsesWhenDeeper(path))
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": the model nests subgraphs (If/Loop/Scan bodies) too deeply: "
                             "protobuf reads at most 100 nested messages"));
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a valid ONNX model (truncated or corrupt protobuf)"));
  }
  if (!model.has_graph())
    return absl::InvalidArgumentError(absl::StrCat(path, ": the model has no graph"));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> listOnnxInputs(const std::string &path) {
  onnx::ModelProto model;
  if (absl::Status status = loadOnnxModel(path, model); !status.ok())
    return status;
  std::set<std::string> initializers;
  for (const onnx::TensorProto &init : model.graph().initializer())
    initializers.insert(init.name());
  std::vector<std::string> inputs;
  for (const onnx::ValueInfoProto &info : model.graph().input())
    if (!initializers.count(info.name()))
      inputs.push_back(info.name());
  return inputs;
}

} // namespace kiln
