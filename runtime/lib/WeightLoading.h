//===- WeightLoading.h - Persistent tensors on the device -------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Internal to the runtime library: allocating a named tensor and filling it
// from host bytes, shared by weight loading, the init program and
// checkpoints. The loader itself is StepExecutor::makeWeightLoader
// (WeightLoading.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_WEIGHTLOADING_H
#define KILN_RUNTIME_LIB_WEIGHTLOADING_H

#include "kiln/runtime/StepExecutor.h"

namespace kiln::runtime {

class PersistentPool;

/// A tensor of \p dtype and \p shape, allocated (at least one byte): the
/// slice \p pool planned for \p name when there is one, else on its own.
Expected<NamedTensor> makeTensor(const Device &device, artifact::DType dtype,
                                 std::vector<int64_t> shape, PersistentPool *pool = nullptr,
                                 const std::string &name = {});
/// Copies \p bytes into \p t through the device's stream and waits.
Status uploadTo(const Device &device, NamedTensor &t, const std::string &bytes);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_LIB_WEIGHTLOADING_H
