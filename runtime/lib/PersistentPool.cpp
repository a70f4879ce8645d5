//===- PersistentPool.cpp - One allocation for the named tensors ---------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/PersistentPool.h"

#include "ProgramRunner.h"

using namespace kiln::runtime;
using namespace kiln::artifact;

Expected<PoolLayout> kiln::runtime::layOutPool(const std::map<std::string, size_t> &bytes,
                                               size_t alignment) {
  PoolLayout layout;
  for (const auto &[name, size] : bytes) {
    if (size == 0)
      continue; // makeTensor gives an empty tensor one byte of its own
    size_t padded = 0;
    if (__builtin_add_overflow(size, alignment - 1, &padded) ||
        __builtin_add_overflow(layout.total, padded / alignment * alignment, &padded))
      return Error{"the persistent tensors' bytes overflow at '" + name + "'"};
    layout.offsets[name] = layout.total;
    layout.bytes[name] = size;
    layout.total = padded;
  }
  return layout;
}

Expected<std::unique_ptr<PersistentPool>> PersistentPool::create(const Device &device,
                                                                 PoolLayout layout) {
  std::unique_ptr<PersistentPool> pool(new PersistentPool());
  if (layout.total) {
    Expected<DeviceBuffer> memory = DeviceBuffer::allocate(device, layout.total);
    if (!memory)
      return Error{"the persistent tensors (" + std::to_string(layout.total) +
                   " bytes in one allocation): " + memory.getError()};
    pool->memory = std::move(*memory);
  }
  pool->layout = std::move(layout);
  return pool;
}

std::optional<DeviceBuffer> PersistentPool::take(const std::string &name, size_t bytes) {
  auto size = layout.bytes.find(name);
  if (size == layout.bytes.end() || size->second != bytes || !taken.insert(name).second)
    return std::nullopt;
  return DeviceBuffer::borrowed(memory.get() + layout.offsets.at(name), bytes);
}

Expected<std::map<std::string, size_t>>
kiln::runtime::persistentTensorBytes(const std::vector<const StepProgram *> &programs,
                                     const SymbolBindings &sizes) {
  std::map<std::string, size_t> bytes;
  auto add = [&](const StepProgram &program, const std::string &key,
                 int buffer) -> Status {
    if (bytes.count(key))
      return Status::success();
    Expected<size_t> count = program.byteCount(buffer, sizes);
    if (!count)
      return Error{"persistent tensor '" + key + "': " + count.getError()};
    bytes[key] = *count;
    return Status::success();
  };
  for (const StepProgram *program : programs) {
    for (const ProgramBinding &arg : program->args)
      if (arg.role == "param" || arg.role == "state" || arg.role == "accum")
        if (Status s = add(*program, persistentKey(arg), arg.buffer); !s)
          return s.takeError();
    for (const ProgramOp &op : program->ops)
      if (op.kind == ProgramOp::Kind::Weight)
        if (Status s = add(*program, weightKey(*program, op), op.result); !s)
          return s.takeError();
  }
  return bytes;
}
