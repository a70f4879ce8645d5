//===- ArtifactOutput.cpp - kiln compile --emit=artifact ------------------===//
//
// The lowered step as a .kiln file: the sections computed on the graph-level
// step (meta, guards, params), one set of kernel images per NVRTC module
// (kernels/<module>/sm_XY.cubin, compute_XY.ptx, source), and the step and
// init programs (docs/artifact.md).
//
//===----------------------------------------------------------------------===//

#include "CudaOutput.h"
#include "Driver.h"

#include "kiln/ArtifactEmit/Sections.h"
#include "kiln/Dialect/Graph/InitProgram.h"
#include "kiln/artifact/Artifact.h"

using namespace llvm;
using namespace mlir;

namespace kiln::driver {

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
  auto step = module.lookupSymbol<func::FuncOp>("main");
  if (!step)
    return fail("no @main step function to write");
  FailureOr<std::string> program = emitStepProgramSection(step, kernelModules);
  if (failed(program))
    return 1;
  sections.push_back({"step", *program});
  if (auto init = module.lookupSymbol<func::FuncOp>(kInitProgramName)) {
    FailureOr<std::string> initProgram = emitStepProgramSection(init, kernelModules);
    if (failed(initProgram))
      return 1;
    sections.push_back({"init", *initProgram});
  }
  artifact::ArtifactWriter writer;
  for (auto &[name, payload] : sections)
    writer.add(name, payload);
  if (runtime::Status status = writer.write(path.str()); !status)
    return fail(status.getError());
  return 0;
}

} // namespace kiln::driver
