//===- WeightLoading.cpp - Persistent tensors: weights, init program -----===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The executor's named tensors: parameters and frozen weights from the
// safetensors files (by the artifact's parameter list), from --init random,
// or from the artifact's own small values; then the init program's results.
//
//===----------------------------------------------------------------------===//

#include "WeightLoading.h"

#include "ElementConversion.h"
#include "kiln/runtime/PersistentPool.h"
#include "ProgramRunner.h"

#include <cstring>
#include <set>

using namespace kiln::runtime;
using namespace kiln::artifact;

Expected<NamedTensor> kiln::runtime::makeTensor(const Device &device, DType dtype,
                                                std::vector<int64_t> shape, PersistentPool *pool,
                                                const std::string &name) {
  NamedTensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.count = 1;
  for (int64_t d : t.shape)
    t.count *= d;
  size_t bytes = t.count * dtypeSize(dtype);
  if (pool)
    if (std::optional<DeviceBuffer> slice = pool->take(name, bytes)) {
      t.memory = std::move(*slice);
      return t;
    }
  Expected<DeviceBuffer> memory = DeviceBuffer::allocate(device, std::max<size_t>(1, bytes));
  if (!memory)
    return memory.takeError();
  t.memory = std::move(*memory);
  return t;
}

// Every transfer goes through the executor's stream: the synchronous driver
// calls use the legacy stream, which a non-blocking stream does not wait for.
Status kiln::runtime::uploadTo(const Device &device, NamedTensor &t, const std::string &bytes) {
  if (bytes.empty())
    return Status::success();
  if (Status s = device.check(device.getDriver().cuMemcpyHtoDAsync_v2(
                                  t.memory.get(), bytes.data(), bytes.size(), device.getStream()),
                              "cuMemcpyHtoDAsync");
      !s)
    return s;
  return device.synchronize();
}

WeightLoader StepExecutor::makeWeightLoader(const std::vector<SafetensorsFile> *weights) {
  // Named tensors from the weights file: by the artifact's parameter list.
  std::map<std::string, const ParamSpec *> specs;
  for (const ParamSpec &param : artifact->getParams())
    specs[param.name] = &param;
  // --init random: a splitmix64 stream per tensor (seeded by the name), so
  // a tensor's values do not depend on load order (nor on its padding).
  auto randomBytes = [this](const std::string &name, DType dtype,
                            const std::vector<int64_t> &shape) -> Expected<std::string> {
    uint64_t state = *options.randomInitSeed ^ 0x9E3779B97F4A7C15ull;
    for (char c : name)
      state = (state ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
    int64_t count = 1;
    for (int64_t d : shape)
      count *= d;
    std::vector<float> values(static_cast<size_t>(count));
    bool isNorm = name.find("norm") != std::string::npos;
    for (float &v : values) {
      if (shape.size() < 2) {
        v = isNorm ? 1.0f : 0.0f;
        continue;
      }
      state += 0x9E3779B97F4A7C15ull;
      uint64_t z = state;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      z ^= z >> 31;
      float unit = static_cast<float>(z >> 40) * (1.0f / 16777216.0f); // [0, 1)
      v = (2.0f * unit - 1.0f) * 0.034641016f;                         // std 0.02
    }
    Expected<std::string> bytes = convertElements(values.data(), DType::F32, dtype, count);
    if (!bytes)
      return Error{"--init random: '" + name + "': " + bytes.getError()};
    return bytes;
  };
  // The weight's elements as `dtype`, row-major in `shape`.
  auto elementBytes = [this, weights, specs, randomBytes](
                          const std::string &name, DType dtype,
                          const std::vector<int64_t> &shape) -> Expected<std::string> {
    const StepArtifact &artifact = *this->artifact;
    int64_t count = 1;
    for (int64_t d : shape)
      count *= d;
    auto spec = specs.find(name);
    // The model file's own small values (RoPE frequencies, norm weights),
    // when the weights lack the tensor: never random.
    auto inlineValue = [&]() -> Expected<std::string> {
      Expected<std::string> bytes =
          convertElements(spec->second->value.data(), spec->second->dtype, dtype, count);
      if (!bytes || bytes->size() != static_cast<size_t>(count) * dtypeSize(dtype))
        return Error{"artifact value of '" + name + "' does not fit its buffer"};
      return bytes;
    };
    bool hasValue = spec != specs.end() && !spec->second->value.empty();
    if (!weights && options.randomInitSeed)
      return hasValue ? inlineValue() : randomBytes(name, dtype, shape);
    if (!weights || spec == specs.end())
      return Error{"no weights for '" + name + "'" +
                   (weights ? " (not in the artifact's params)" : " (no --weights)")};
    Expected<WeightMatch> match = artifact.matchWeight(*spec->second, *weights);
    if (!match)
      return match.takeError();
    if (!match->tensor && hasValue)
      return inlineValue();
    if (!match->tensor)
      return Error{weights->front().getPath() + ": missing weight '" + spec->second->source + "'"};
    const TensorInfo &info = *match->tensor;
    const SafetensorsFile &file = *match->file;
    const unsigned char *data = file.data(info);
    std::string transposed;
    if (match->transpose) {
      size_t rows = info.shape[0], cols = info.shape[1], size = dtypeSize(info.dtype);
      transposed.resize(rows * cols * size);
      for (size_t i = 0; i < rows; ++i)
        for (size_t j = 0; j < cols; ++j)
          std::memcpy(&transposed[(j * rows + i) * size], data + (i * cols + j) * size, size);
      data = reinterpret_cast<const unsigned char *>(transposed.data());
    }
    if (static_cast<int64_t>(info.getElementCount()) != count)
      return Error{file.getPath() + ": weight '" + info.name + "' has " +
                   std::to_string(info.getElementCount()) + " elements; '" + name + "' needs " +
                   std::to_string(count)};
    Expected<std::string> bytes = convertElements(data, info.dtype, dtype, count);
    if (!bytes)
      return Error{file.getPath() + ": weight '" + info.name + "': " + bytes.getError()};
    return bytes;
  };
  // A weight the step divides by must have no zero element (wherever its
  // values came from: file, model or --init random).
  auto weightBytes = [specs, elementBytes](const std::string &name, DType dtype,
                                           const std::vector<int64_t> &shape)
      -> Expected<std::string> {
    Expected<std::string> bytes = elementBytes(name, dtype, shape);
    auto spec = specs.find(name);
    if (!bytes || spec == specs.end() || !spec->second->nonzero)
      return bytes;
    if (Status s = checkNonzeroWeight(*spec->second, *bytes, dtype); !s)
      return s.takeError();
    return bytes;
  };
  return [this, weightBytes](const std::string &key, DType dtype, const std::vector<int64_t> &shape,
                             const std::string &source,
                             const std::vector<int64_t> &paddedFrom,
                             const std::vector<WeightMember> &members,
                             int64_t memberAxis) -> Expected<NamedTensor *> {
    auto existing = store.find(key);
    if (existing != store.end())
      return &existing->second;
    // A padded weight (K-concatenation): its own values in the top-left
    // block, zeros in the rows and columns the step writes its adapter into.
    // A group's members stand side by side in that block.
    bool padded = !paddedFrom.empty();
    Expected<std::string> bytes = std::string();
    if (!members.empty()) {
      std::vector<std::string> images;
      std::vector<int64_t> sizes;
      for (const WeightMember &m : members) {
        std::vector<int64_t> own = paddedFrom;
        own[memberAxis] = m.size;
        Expected<std::string> image = weightBytes(m.name, dtype, own);
        if (!image)
          return image.takeError();
        images.push_back(std::move(*image));
        sizes.push_back(m.size);
      }
      bytes = groupWeightImage(images, dtypeSize(dtype), memberAxis, paddedFrom[0], sizes);
    } else {
      bytes = weightBytes(padded ? source : key, dtype, padded ? paddedFrom : shape);
    }
    if (!bytes)
      return bytes.takeError();
    if (padded)
      *bytes = padWeightImage(*bytes, dtypeSize(dtype), paddedFrom[0], paddedFrom[1], shape[0],
                              shape[1]);
    Expected<NamedTensor> tensor = makeTensor(*device, dtype, shape, pool.get(), key);
    if (!tensor)
      return tensor.takeError();
    if (bytes->size() != static_cast<size_t>(tensor->count) * dtypeSize(dtype))
      return Error{"weight '" + key + "' does not fit its buffer"};
    if (Status s = uploadTo(*device, *tensor, *bytes); !s)
      return s.takeError();
    return &(store[key] = std::move(*tensor));
  };
}

Status StepExecutor::runInitProgram(const StepProgram &init, const StepProgram &step,
                                    const SymbolBindings &sizes, const WeightLoader &loadWeight) {
  Expected<ArenaPlan> plan = init.planArena(sizes, kArenaAlignment);
  if (!plan)
    return Error{"init program: " + plan.getError()};
  Expected<std::unique_ptr<ProgramRunner>> runner = ProgramRunner::prepare(
      init, "init program", *device, *lt, handle, moduleIndex, store, loadWeight, sizes, *plan);
  if (!runner)
    return runner.takeError();
  for (const ProgramBinding &arg : init.args) {
    if (arg.role != "rng_seed")
      return Error{"init program: argument role '" + arg.role + "' is not supported"};
    if (Status s = (*runner)->upload(
            arg.buffer,
            scalarBytes(init.buffers[arg.buffer].dtype, static_cast<double>(options.seed)),
            device->getStream());
        !s)
      return s.takeError();
  }
  if (Status s = (*runner)->record(device->getStream()); !s)
    return s.takeError();
  for (const ProgramBinding &result : init.results) {
    if (result.role != "param")
      continue;
    Expected<std::string> bytes = (*runner)->downloadBuffer(result.buffer);
    if (!bytes)
      return bytes.takeError();
    const ProgramBuffer &buffer = init.buffers[result.buffer];
    std::vector<int64_t> shape;
    for (const SizeExpr &d : buffer.shape)
      shape.push_back(*d.evaluate(sizes));
    Expected<NamedTensor> t = makeTensor(*device, buffer.dtype, shape, pool.get(), result.name);
    if (!t)
      return t.takeError();
    if (Status s = uploadTo(*device, *t, *bytes); !s)
      return s.takeError();
    store[result.name] = std::move(*t);
  }
  if (Status s = device->synchronize(); !s)
    return s.takeError();
  // What only the init program read (the bf16 weights NF4 codes are made
  // from) is freed: QLoRA must not keep the weights it quantized.
  std::set<std::string> needed;
  std::vector<const StepProgram *> stepPrograms = {&step};
  for (const char *loop : {"accum", "apply", "eval"})
    if (const StepProgram *p = artifact->getProgram(loop))
      stepPrograms.push_back(p);
  for (const BucketSpec &bucket : artifact->getBuckets())
    if (const StepProgram *p = artifact->getProgram(bucket.section))
      stepPrograms.push_back(p);
  for (const StepProgram *p : stepPrograms) {
    for (const ProgramBinding &arg : p->args)
      needed.insert(persistentKey(arg));
    for (const ProgramOp &op : p->ops)
      if (op.kind == ProgramOp::Kind::Weight)
        needed.insert(weightKey(*p, op));
  }
  for (auto it = store.begin(); it != store.end();)
    it = needed.count(it->first) ? std::next(it) : store.erase(it);
  return Status::success();
}
