//===- OnnxWeightSource.h - Parameter values from an ONNX model -*- C++ -*-===//

#ifndef KILN_IMPORT_ONNXWEIGHTSOURCE_H
#define KILN_IMPORT_ONNXWEIGHTSOURCE_H

#include "kiln/Interp/Interpreter.h"

#include <memory>
#include <string>

namespace kiln {

/// Reads initializers by name from the model the IR was imported from,
/// including external data files next to it; nothing is read until asked.
class OnnxWeightSource : public WeightSource {
public:
  static absl::StatusOr<std::unique_ptr<OnnxWeightSource>> open(const std::string &modelPath);
  ~OnnxWeightSource() override;
  absl::StatusOr<HostTensor> load(llvm::StringRef name) override;

private:
  struct Model;
  explicit OnnxWeightSource(std::unique_ptr<Model> model);
  std::unique_ptr<Model> model_;
};

} // namespace kiln

#endif // KILN_IMPORT_ONNXWEIGHTSOURCE_H
