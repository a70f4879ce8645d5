//===- InitializerMaskPattern.h - Keep patterns of mask initializers -*- C++ -*-===//

#ifndef KILN_IMPORT_INITIALIZERMASKPATTERN_H
#define KILN_IMPORT_INITIALIZERMASKPATTERN_H

#include "kiln/Support/HostTensor.h"

#include "onnx/onnx_pb.h"
#include "llvm/ADT/ArrayRef.h"

#include <optional>
#include <string>

namespace kiln {

/// "causal" or "all" when the initializer's values are a keep pattern over
/// its last two (square) dims for every leading index (bool: nonzero keeps;
/// float: 0 keeps, -inf or <= -1e4 drops); nullopt for anything else, and
/// for a float one of zeros (a bias initialized to 0 is no mask).
std::optional<std::string> initializerMaskPattern(const onnx::TensorProto &proto,
                                                  const std::string &folder, DType dtype,
                                                  llvm::ArrayRef<int64_t> shape);

/// The one value of a square float initializer (rank >= 2) whose every
/// element is equal (a static export's `ones` a Trilu keeps a triangle of),
/// else nullopt.
std::optional<double> initializerSplatValue(const onnx::TensorProto &proto,
                                            const std::string &folder, DType dtype,
                                            llvm::ArrayRef<int64_t> shape);

} // namespace kiln

#endif // KILN_IMPORT_INITIALIZERMASKPATTERN_H
