//===- PersistentPool.h - One allocation for the named tensors -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The executor's parameters, optimizer state, accumulators and weights live
// as long as it does. Allocated one by one, each is rounded up to the
// driver's granularity (2 MiB pages): the bench's small step has ~600 of
// them, 1.1–3 MiB weights among them, and took 398 MB for the plan's 302 MB.
// The pool is one allocation laid out before anything is loaded, each name
// at a fixed offset, so the measured peak is the plan's persistent bytes.
// A name asked for again, or with another size, gets its own allocation:
// the pool never hands out a slice twice.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_LIB_PERSISTENTPOOL_H
#define KILN_RUNTIME_LIB_PERSISTENTPOOL_H

#include "kiln/runtime/StepExecutor.h"

#include <map>
#include <optional>
#include <set>
#include <string>

namespace kiln::runtime {

/// Offsets of \p bytes by name, each aligned to \p alignment, and the total.
struct PoolLayout {
  std::map<std::string, size_t> offsets, bytes;
  size_t total = 0;
};
Expected<PoolLayout> layOutPool(const std::map<std::string, size_t> &bytes, size_t alignment);

class PersistentPool {
public:
  /// Allocates \p layout's total bytes at once (nothing for an empty one).
  static Expected<std::unique_ptr<PersistentPool>> create(const Device &device, PoolLayout layout);
  /// The slice planned for \p name if it has exactly \p bytes and was not
  /// taken before; otherwise none, and the caller allocates.
  std::optional<DeviceBuffer> take(const std::string &name, size_t bytes);
  size_t size() const { return memory.size(); }

private:
  PoolLayout layout;
  std::set<std::string> taken;
  DeviceBuffer memory;
};

/// The tensors the pool holds for \p programs at \p sizes: the `param`,
/// `state` and `accum` arguments and the `weight` ops, by the executor's
/// store key (`accum/<name>` for accumulators, as persistentKey).
Expected<std::map<std::string, size_t>>
persistentTensorBytes(const std::vector<const StepProgram *> &programs,
                      const artifact::SymbolBindings &sizes);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_LIB_PERSISTENTPOOL_H
