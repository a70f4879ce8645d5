//===- CudaOutput.cpp - kiln compile --emit=cuda and --fusion-report ------===//
//
// Writes one CUDA source per kernel, the step program and a manifest, then
// compiles every kernel with NVRTC (cubins + PTX) through the kernel cache.
//
//===----------------------------------------------------------------------===//

#include "CudaOutput.h"
#include "Driver.h"
#include "Progress.h"

#include "kiln/Codegen/Cuda.h"
#include "kiln/Codegen/Nvrtc.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Kernel/OpClassification.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>

using namespace llvm;
using namespace mlir;

namespace kiln::driver {
namespace {

Dim bytesOf(Type t) {
  auto type = cast<RankedTensorType>(t);
  unsigned bits = type.getElementType().getIntOrFloatBitWidth();
  int64_t size = bits < 8 ? 1 : bits / 8;
  return dimMul(dimProduct(getDims(type), t.getContext()), dimConst(t.getContext(), size));
}

std::string evaluated(Dim d, const StringMap<int64_t> &sizes) {
  std::string text = dimToString(d);
  if (sizes.empty())
    return text;
  std::optional<int64_t> value = evaluateDim(d, [&](StringRef s) -> std::optional<int64_t> {
    auto it = sizes.find(s);
    return it == sizes.end() ? std::nullopt : std::optional<int64_t>(it->second);
  });
  return value ? text + " = " + std::to_string(*value) : text;
}

Error writeFile(StringRef path, StringRef contents) {
  std::error_code ec;
  raw_fd_ostream os(path, ec, sys::fs::OF_None);
  if (ec)
    return createStringError(ec, "cannot write " + path + ": " + ec.message());
  os << contents;
  os.close();
  if ((ec = os.error())) {
    os.clear_error(); // Reported here, not as an LLVM fatal error.
    return createStringError(ec, path + ": write failed: " + ec.message());
  }
  return Error::success();
}

} // namespace

StepCounts countUnfused(func::FuncOp func) {
  StepCounts counts;
  counts.bytes = dimConst(func.getContext(), 0);
  func.walk([&](Operation *op) {
    using kernel::OpClass;
    if (op->getParentOp() != func || op->hasTrait<OpTrait::IsTerminator>())
      return;
    OpClass cls = kernel::classifyOp(op);
    if (cls == OpClass::Gemm) {
      ++counts.gemms;
      return;
    }
    if (cls == OpClass::Source || cls == OpClass::View || cls == OpClass::Collective)
      return;
    ++counts.kernels;
    for (Value v : op->getOperands())
      counts.bytes = dimAdd(counts.bytes, bytesOf(v.getType()));
    for (Value v : op->getResults())
      counts.bytes = dimAdd(counts.bytes, bytesOf(v.getType()));
  });
  return counts;
}

StepCounts countLowered(func::FuncOp func) {
  StepCounts counts;
  counts.bytes = dimConst(func.getContext(), 0);
  func.walk([&](Operation *op) {
    if (isa<kernel::GemmOp>(op))
      ++counts.gemms;
    auto launch = dyn_cast<kernel::LaunchOp>(op);
    if (!launch)
      return;
    ++counts.kernels;
    for (Value v : op->getOperands())
      counts.bytes =
          dimAdd(counts.bytes, bytesOf(cast<kernel::BufferType>(v.getType()).getTensor()));
  });
  return counts;
}

void printFusionReport(StringRef name, const StepCounts &before, const StepCounts &after,
                       const StringMap<int64_t> &sizes, raw_ostream &os) {
  os << "fusion report for @" << name << "\n";
  os << "  before fusion: " << before.kernels << " kernels, " << before.gemms << " GEMMs\n";
  os << "  after fusion:  " << after.kernels << " kernels, " << after.gemms << " GEMMs\n";
  os << "  bytes moved by kernels before fusion: " << evaluated(before.bytes, sizes) << "\n";
  os << "  bytes moved by fused kernels:         " << evaluated(after.bytes, sizes) << "\n";
}

namespace {

/// When a module fails, the kernels that fail alone, each with its log.
std::string isolateFailures(ArrayRef<codegen::CudaSource> kernels,
                            const codegen::NvrtcOptions &options, std::string moduleError) {
  std::string errors;
  for (const codegen::CudaSource &kernel : kernels) {
    Expected<std::string> alone =
        codegen::compileKernel({kernel.name, kernel.standalone()}, options.archs.front(), options);
    if (!alone)
      errors += (errors.empty() ? "" : "\n") + toString(alone.takeError());
  }
  return errors.empty() ? moduleError : errors;
}

} // namespace

int buildKernels(ModuleOp module, const CudaOutputOptions &options, KernelBuild &build) {
  std::vector<codegen::CudaSource> &sources = build.sources;
  std::vector<kernel::KernelOp> &kernelOps = build.kernelOps;
  mlir::TimingScope none;
  mlir::TimingScope &timing = options.timing ? *options.timing : none;
  mlir::TimingScope emitTiming = timing.nest("CUDA C++ emission");
  if (options.progress)
    options.progress->stage("CUDA C++ emission");
  for (auto kernel : module.getOps<kernel::KernelOp>()) {
    FailureOr<codegen::CudaSource> source = codegen::emitCudaKernel(kernel);
    if (failed(source))
      return 1;
    sources.push_back(*source);
    kernelOps.push_back(kernel);
  }
  // NVRTC programs: consecutive kernels behind one prelude.
  std::vector<codegen::KernelSource> &modules = build.modules;
  std::vector<std::pair<size_t, size_t>> &ranges = build.ranges;
  for (size_t begin = 0; begin < sources.size(); begin += kKernelsPerModule) {
    size_t end = std::min(sources.size(), begin + kKernelsPerModule);
    bool bf16 = false, f16 = false, map8 = false, flash = false;
    for (size_t i = begin; i < end; ++i) {
      bf16 |= sources[i].bf16;
      f16 |= sources[i].f16;
      map8 |= sources[i].dynamicMap8;
      flash |= sources[i].flashAttention;
    }
    std::string text = "// kiln: kernels " + std::to_string(begin) + ".." +
                       std::to_string(end - 1) + " of the step\n" +
                       codegen::cudaPrelude(bf16, f16, map8, flash);
    for (size_t i = begin; i < end; ++i)
      text += "\n" + sources[i].comment + sources[i].body;
    modules.push_back({"module" + std::to_string(modules.size()), std::move(text)});
    ranges.push_back({begin, end});
  }
  emitTiming.stop();
  std::vector<codegen::CompiledKernel> &compiled = build.compiled;
  double &seconds = build.seconds;
  codegen::NvrtcOptions nvrtc;
  nvrtc.archs = options.archs;
  nvrtc.cacheDir = options.cacheDir;
  if (CompileProgress *progress = options.progress)
    nvrtc.onKernelDone = [progress](size_t done, size_t total, const std::string &name,
                                    bool cached) {
      progress->nvrtcModule(done, total, name, cached);
    };
  if (!options.archs.empty()) {
    mlir::TimingScope nvrtcTiming = timing.nest("NVRTC");
    if (options.progress)
      options.progress->stage("NVRTC: " + Twine(modules.size()) + " modules for " +
                              llvm::join(options.archs, ","));
    auto start = std::chrono::steady_clock::now();
    Expected<std::vector<codegen::CompiledKernel>> result = codegen::compileKernels(modules, nvrtc);
    seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!result) {
      std::string failures;
      for (auto [m, range] : llvm::enumerate(ranges)) {
        bool alone = true;
        for (size_t t = 0; t < options.archs.size() && alone; ++t)
          alone = static_cast<bool>(codegen::compileKernel(modules[m], options.archs[t], nvrtc));
        if (!alone)
          failures +=
              isolateFailures(ArrayRef(sources).slice(range.first, range.second - range.first),
                              nvrtc, "module" + std::to_string(m) + " failed");
      }
      consumeError(result.takeError());
      return fail(failures.empty() ? std::string("NVRTC failed") : failures);
    }
    compiled = std::move(*result);
  }
  return 0;
}

int writeCuda(ModuleOp module, StringRef dir, const CudaOutputOptions &options) {
  KernelBuild build;
  if (int rc = buildKernels(module, options, build))
    return rc;
  const std::vector<codegen::CudaSource> &sources = build.sources;
  std::vector<kernel::KernelOp> &kernelOps = build.kernelOps;
  const std::vector<codegen::KernelSource> &modules = build.modules;
  const std::vector<std::pair<size_t, size_t>> &ranges = build.ranges;
  const std::vector<codegen::CompiledKernel> &compiled = build.compiled;
  double seconds = build.seconds;
  mlir::TimingScope none;
  mlir::TimingScope writeTiming = (options.timing ? *options.timing : none).nest("write");
  if (options.progress)
    options.progress->stage("write " + dir);
  if (std::error_code ec = sys::fs::create_directories(dir))
    return fail("cannot create " + dir + ": " + ec.message());
  auto path = [&](const Twine &file) {
    SmallString<256> p(dir);
    sys::path::append(p, file);
    return std::string(p);
  };
  for (const codegen::CudaSource &source : sources)
    if (Error e = writeFile(path(source.name + ".cu"), source.standalone()))
      return fail(toString(std::move(e)));
  std::string step;
  raw_string_ostream stepOs(step);
  module.print(stepOs);
  if (Error e = writeFile(path("step.mlir"), step))
    return fail(toString(std::move(e)));

  unsigned hits = 0, compiles = 0;
  json::Array kernels, moduleList;
  for (auto [m, range] : llvm::enumerate(ranges)) {
    json::Object entry{{"name", modules[m].name}};
    json::Array members;
    for (size_t i = range.first; i < range.second; ++i)
      members.push_back(sources[i].name);
    entry["kernels"] = std::move(members);
    if (!compiled.empty()) {
      const codegen::CompiledKernel &c = compiled[m];
      json::Object cubins;
      for (const auto &[arch, bytes] : c.cubins) {
        std::string file = modules[m].name + "." + arch + ".cubin";
        if (Error e = writeFile(path(file), bytes))
          return fail(toString(std::move(e)));
        cubins[arch] = file;
      }
      if (Error e = writeFile(path(modules[m].name + ".ptx"), c.ptx))
        return fail(toString(std::move(e)));
      entry["cubins"] = std::move(cubins);
      entry["ptx"] = modules[m].name + ".ptx";
      hits += c.cacheHits;
      compiles += c.compiles;
    }
    moduleList.push_back(std::move(entry));
    for (size_t i = range.first; i < range.second; ++i) {
      json::Object k{{"name", sources[i].name},
                     {"kind", kernel::stringifyFusionKind(kernelOps[i].getKind())},
                     {"source", sources[i].name + ".cu"},
                     {"module", modules[m].name}};
      json::Array symbols;
      for (Attribute sym : kernelOps[i].getSymbols())
        symbols.push_back(cast<StringAttr>(sym).str());
      k["symbols"] = std::move(symbols);
      kernels.push_back(std::move(k));
    }
  }
  unsigned gemms = 0;
  module.walk([&](kernel::GemmOp) { ++gemms; });
  json::Object manifest{{"step", "step.mlir"},
                        {"kernels", std::move(kernels)},
                        {"modules", std::move(moduleList)},
                        {"gemms", gemms}};
  if (!options.archs.empty()) {
    manifest["nvrtc"] = codegen::nvrtcVersionString();
    manifest["archs"] = json::Array(options.archs);
  }
  std::string text;
  raw_string_ostream os(text);
  os << formatv("{0:2}", json::Value(std::move(manifest))) << "\n";
  if (Error e = writeFile(path("manifest.json"), text))
    return fail(toString(std::move(e)));
  if (options.progress)
    options.progress->finish("wrote " + dir + " (" + Twine(sources.size()) + " kernels in " +
                             Twine(modules.size()) + " modules, " + Twine(gemms) + " GEMMs" +
                             (compiled.empty() ? ", sources only" : "") + ")");
  if (options.verbose) {
    errs() << "kiln: " << sources.size() << " kernels in " << modules.size() << " modules, "
           << gemms << " GEMMs -> " << dir;
    if (!options.archs.empty())
      errs() << formatv("; NVRTC {0}: {1} compiled, {2} cached, {3:f2} s",
                        codegen::nvrtcVersionString(), compiles, hits, seconds);
    errs() << "\n";
  }
  return 0;
}

} // namespace kiln::driver
