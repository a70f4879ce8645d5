//===- OnnxWeightSource.cpp - Parameter values from an ONNX model ---------===//

#include "kiln/Import/OnnxWeightSource.h"
#include "kiln/Import/OnnxImporter.h"
#include "kiln/Import/TensorProto.h"

#include "absl/strings/str_cat.h"
#include "onnx/defs/parser.h"
#include "onnx/onnx_pb.h"
#include "llvm/Support/Path.h"

#include <fstream>
#include <map>
#include <sstream>

namespace kiln {

struct OnnxWeightSource::Model {
  std::string path;
  onnx::ModelProto proto;
  std::map<std::string, const onnx::TensorProto *> byName;
};

OnnxWeightSource::OnnxWeightSource(std::unique_ptr<Model> model) : model_(std::move(model)) {}
OnnxWeightSource::~OnnxWeightSource() = default;

absl::StatusOr<std::unique_ptr<OnnxWeightSource>>
OnnxWeightSource::open(const std::string &modelPath) {
  auto model = std::make_unique<Model>();
  model->path = modelPath;
  if (absl::Status status = loadOnnxModel(modelPath, model->proto); !status.ok())
    return status;
  for (const onnx::TensorProto &t : model->proto.graph().initializer())
    model->byName[t.name()] = &t;
  return std::unique_ptr<OnnxWeightSource>(new OnnxWeightSource(std::move(model)));
}

/// Errors are one line; initializer names may hold line breaks.
static std::string oneLine(absl::string_view text) {
  std::string line;
  for (char c : text)
    line += c == '\n' ? "\\n" : c == '\r' ? "\\r" : std::string(1, c);
  return line;
}

absl::StatusOr<HostTensor> OnnxWeightSource::load(llvm::StringRef name) {
  auto it = model_->byName.find(name.str());
  if (it == model_->byName.end())
    return absl::NotFoundError(
        absl::StrCat(model_->path, ": no initializer named '", oneLine(name.str()), "'"));
  absl::StatusOr<HostTensor> tensor = tensorFromProto(*it->second, folderOf(model_->path));
  if (!tensor.ok()) // The code stays: a missing file is NotFound.
    return absl::Status(tensor.status().code(),
                        absl::StrCat(model_->path, ": ", oneLine(tensor.status().message())));
  return tensor;
}

} // namespace kiln
