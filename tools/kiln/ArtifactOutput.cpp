//===- ArtifactOutput.cpp - kiln compile --emit=artifact ------------------===//
//
// The lowered step as a .kiln file: the sections computed on the graph-level
// step (meta, guards, params), one set of kernel images per NVRTC module
// (kernels/<module>/sm_XY.cubin, compute_XY.ptx, source), and the step and
// init programs, plus one step program per shape bucket (step/<function>,
// listed in meta "buckets") (docs/artifact.md).
//
//===----------------------------------------------------------------------===//

#include "CudaOutput.h"
#include "Driver.h"
#include "Progress.h"

#include "kiln/ArtifactEmit/Sections.h"
#include "kiln/Dialect/Graph/InitProgram.h"
#include "kiln/Import/OnnxWeightSource.h"
#include "kiln/artifact/Artifact.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

using namespace llvm;
using namespace mlir;

namespace kiln::driver {

namespace {
/// Little-endian bytes of `t` as a float safetensors dtype, as hex.
std::optional<std::string> floatHex(const HostTensor &t, StringRef dtype) {
  const fltSemantics *semantics = dtype == "F32"    ? &APFloat::IEEEsingle()
                                  : dtype == "F64"  ? &APFloat::IEEEdouble()
                                  : dtype == "BF16" ? &APFloat::BFloat()
                                  : dtype == "F16"  ? &APFloat::IEEEhalf()
                                                    : nullptr;
  if (!semantics || !t.isFloat())
    return std::nullopt;
  static const char digits[] = "0123456789abcdef";
  std::string hex;
  for (int64_t i = 0, n = t.numel(); i < n; ++i) {
    APFloat v(t.getDouble(i));
    bool lost = false;
    v.convert(*semantics, APFloat::rmNearestTiesToEven, &lost);
    APInt bits = v.bitcastToAPInt();
    for (unsigned byte = 0; byte < bits.getBitWidth() / 8; ++byte) {
      uint64_t b = bits.extractBitsAsZExtValue(8, byte * 8);
      hex += digits[b >> 4];
      hex += digits[b & 15];
    }
  }
  return hex;
}
} // namespace

int addInlineValues(std::vector<std::pair<std::string, std::string>> &sections, StringRef model) {
  if (!model.ends_with(".onnx") && !model.ends_with(".onnxtxt"))
    return 0; // Kiln IR text holds no weights.
  auto params = llvm::find_if(sections, [](auto &s) { return s.first == "params"; });
  if (params == sections.end())
    return 0;
  Expected<json::Value> parsed = json::parse(params->second);
  if (!parsed)
    return fail("params section: " + toString(parsed.takeError()));
  json::Array *entries = parsed->getAsArray();
  if (!entries)
    return 0;
  absl::StatusOr<std::unique_ptr<OnnxWeightSource>> source = OnnxWeightSource::open(model.str());
  if (!source.ok())
    return 0; // The import already read this model; nothing to add.
  bool changed = false;
  for (json::Value &value : *entries) {
    json::Object *entry = value.getAsObject();
    if (!entry || entry->getBoolean("trainable").value_or(false) ||
        entry->getBoolean("init").value_or(false))
      continue;
    int64_t count = 1;
    if (const json::Array *shape = entry->getArray("shape"))
      for (const json::Value &d : *shape)
        count *= d.getAsInteger().value_or(0);
    std::optional<StringRef> name = entry->getString("source");
    std::optional<StringRef> dtype = entry->getString("dtype");
    if (!name || !dtype || count > kInlineValueElements)
      continue;
    // A weight whose bytes are not here (external data left behind) has
    // no value to carry: the weights file must hold it. Any other failure
    // (external data outside the model's folder, a corrupt tensor) is the
    // model's error.
    absl::StatusOr<HostTensor> tensor = (*source)->load(*name);
    if (!tensor.ok() && !absl::IsNotFound(tensor.status()))
      return fail(std::string(tensor.status().message()));
    if (!tensor.ok() || tensor->numel() != count)
      continue;
    if (std::optional<std::string> hex = floatHex(*tensor, *dtype)) {
      (*entry)["value"] = *hex;
      changed = true;
    }
  }
  if (changed)
    params->second = formatv("{0}", json::Value(std::move(*parsed))).str();
  return 0;
}

int writeArtifact(ModuleOp module, std::vector<std::pair<std::string, std::string>> sections,
                  StringRef path, const CudaOutputOptions &options) {
  KernelBuild build;
  if (int rc = buildKernels(module, options, build))
    return rc;
  if (build.compiled.empty() && !build.modules.empty())
    return fail("--emit=artifact needs kernel images: --arch must name at least one arch");
  // NVRTC's PTX comes from the lowest requested arch's compile.
  std::string ptxArch;
  for (const std::string &arch : options.archs) {
    std::string digits = arch.substr(3);
    if (ptxArch.empty() || std::stoi(digits) < std::stoi(ptxArch))
      ptxArch = digits;
  }
  if (!ptxArch.empty() && ptxArch.back() == 'a')
    ptxArch.pop_back();
  StringMap<std::string> kernelModules;
  for (auto [m, range] : llvm::enumerate(build.ranges)) {
    const std::string &name = build.modules[m].name;
    for (size_t i = range.first; i < range.second; ++i)
      kernelModules[build.sources[i].name] = name;
    for (const auto &[arch, bytes] : build.compiled[m].cubins)
      sections.push_back({"kernels/" + name + "/" + arch + ".cubin", bytes});
    sections.push_back({"kernels/" + name + "/compute_" + ptxArch + ".ptx", build.compiled[m].ptx});
    sections.push_back({"kernels/" + name + "/source", build.modules[m].source});
  }
  if (int rc = addHopperAttentionSections(module, options, sections))
    return rc;
  auto step = module.lookupSymbol<func::FuncOp>("main");
  if (!step)
    return fail("no @main step function to write");
  FailureOr<std::string> program = emitStepProgramSection(step, kernelModules);
  if (failed(program))
    return 1;
  sections.push_back({"step", *program});
  // The shape buckets' copies of the step, as "step/<function>".
  if (failed(addBucketSections(step, kernelModules, sections)))
    return 1;
  // The run-time loop's programs (--loop-programs), as "accum", "apply", "eval".
  for (const char *loop : {"accum", "apply", "eval"})
    if (auto func = module.lookupSymbol<func::FuncOp>(std::string("main__") + loop)) {
      FailureOr<std::string> loopProgram = emitStepProgramSection(func, kernelModules);
      if (failed(loopProgram))
        return 1;
      sections.push_back({loop, *loopProgram});
    }
  if (auto init = module.lookupSymbol<func::FuncOp>(kInitProgramName)) {
    FailureOr<std::string> initProgram = emitStepProgramSection(init, kernelModules);
    if (failed(initProgram))
      return 1;
    sections.push_back({"init", *initProgram});
  }
  mlir::TimingScope none;
  mlir::TimingScope writeTiming = (options.timing ? *options.timing : none).nest("write");
  if (options.progress)
    options.progress->stage("write " + path);
  // What the last line reports: the parameters and how many train.
  size_t params = 0, trainable = 0;
  for (auto &[name, payload] : sections) {
    if (name != "params")
      continue;
    Expected<json::Value> parsed = json::parse(payload);
    if (!parsed) {
      consumeError(parsed.takeError());
      continue;
    }
    if (const json::Array *entries = parsed->getAsArray())
      for (const json::Value &entry : *entries) {
        ++params;
        if (const json::Object *object = entry.getAsObject())
          trainable += object->getBoolean("trainable").value_or(false);
      }
  }
  artifact::ArtifactWriter writer;
  for (auto &[name, payload] : sections)
    writer.add(name, payload);
  if (artifact::Status status = writer.write(path.str()); !status)
    return fail(status.getError());
  writeTiming.stop();
  uint64_t size = 0;
  sys::fs::file_size(path, size);
  if (options.progress)
    options.progress->finish("wrote " + path + " (" + formatFileSize(size) + ", " +
                             Twine(build.sources.size()) + " kernels in " +
                             Twine(build.modules.size()) + " modules, " + Twine(params) +
                             " params, " + Twine(trainable) + " trainable)");
  return 0;
}

} // namespace kiln::driver
