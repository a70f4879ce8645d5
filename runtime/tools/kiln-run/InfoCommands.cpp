//===- InfoCommands.cpp - kiln-run devices, inspect, ckpt-info --*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "Commands.h"

#include "kiln/artifact/Crc32c.h"
#include "kiln/artifact/HopperAttention.h"
#include "kiln/runtime/CudaDriver.h"
#include "kiln/runtime/StepArtifact.h"
#include "kiln/runtime/StepProgram.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>

using namespace kiln::run;
using namespace kiln::runtime;
using namespace kiln::artifact;

const std::vector<std::string> kiln::run::kNoFlags;

int kiln::run::runDevices(int argc, char **argv) {
  if (isHelp(argc, argv)) {
    std::printf("USAGE: kiln-run devices\n\nLists the CUDA devices the driver "
                "sees: name, arch, memory, SMs.\n");
    return 0;
  }
  if (argc > 0)
    return error(kExitUsage, "'devices' takes no arguments");
  Expected<CudaDriver> driver = CudaDriver::load();
  if (!driver)
    return error(kExitNoDevice, driver.getError());
  Expected<std::vector<DeviceInfo>> devices = driver->listDevices();
  if (!devices)
    return error(kExitNoDevice, devices.getError());
  for (const DeviceInfo &device : *devices)
    std::printf("%s\n", formatDevice(device).c_str());
  return 0;
}

/// Indents every line of \p text by \p spaces.
static std::string indent(const std::string &text, int spaces) {
  std::string out(spaces, ' ');
  for (char c : text) {
    out += c;
    if (c == '\n')
      out.append(spaces, ' ');
  }
  return out;
}

/// Each distinct kernel the programs (step, buckets, init, loop) launch, once,
/// with its module and how often the programs launch it.
static int printKernelLaunches(const StepArtifact &step, const char *path) {
  std::vector<std::string> sections;
  for (const char *name : {"step", "init", "accum", "apply", "eval"})
    if (step.getContainer().find(name))
      sections.push_back(name);
  for (const BucketSpec &bucket : step.getBuckets())
    sections.push_back(bucket.section);
  if (sections.empty())
    return 0;
  struct Uses {
    std::string module;
    size_t launches = 0;
  };
  std::map<std::string, Uses> kernels;
  size_t launches = 0;
  for (const std::string &section : sections) {
    Expected<StepProgram> program = StepProgram::decode(
        step.getContainer().contents(section), std::string(path) + ": section '" + section + "'");
    if (!program)
      return error(kExitBadInput, program.getError());
    for (const ProgramOp &op : program->ops) {
      if (op.kind != ProgramOp::Kind::Launch)
        continue;
      Uses &uses = kernels[op.name];
      uses.module = op.module;
      ++uses.launches;
      ++launches;
    }
  }
  std::printf("kernels (%zu distinct, %zu launches):\n", kernels.size(), launches);
  for (const auto &[name, uses] : kernels)
    std::printf("  %s  %s  %zu launch%s\n", name.c_str(), uses.module.c_str(), uses.launches,
                uses.launches == 1 ? "" : "es");
  return 0;
}

/// The step program's cuBLASLt GEMMs by signature (m x n x k, transposes,
/// beta = 1), with the sizes at the memory plan's values when it has them:
/// how many GEMMs of which shape a step issues (the LoRA ones are those
/// with a rank-sized dim), the labels `kiln-run train --profile` prints.
static int printGemms(const StepArtifact &step, const char *path) {
  if (!step.hasStepProgram())
    return 0;
  Expected<StepProgram> program = StepProgram::decode(step.getContainer().contents("step"),
                                                      std::string(path) + ": section 'step'");
  if (!program)
    return error(kExitBadInput, program.getError());
  SymbolBindings at;
  if (const std::optional<StepMemoryPlan> &plan = step.getMemoryPlan())
    at = plan->plannedAt;
  struct Signature {
    size_t count = 0;
    std::string sizes; // "8192x8192x32", or "" when a symbol has no value
  };
  std::map<std::string, Signature> signatures;
  size_t gemms = 0, accumulating = 0, strided = 0;
  // At the plan's sizes every matrix must lie inside its buffer at its
  // leading dimension (what the executor checks before it runs).
  std::vector<int64_t> elements;
  if (!at.empty()) {
    Expected<std::vector<int64_t>> reachable = reachableElements(*program, at);
    if (!reachable)
      return error(kExitBadInput, std::string(path) + ": section 'step': " + reachable.getError());
    elements = std::move(*reachable);
  }
  if (!at.empty())
    if (Status s = checkStridedViews(*program, at, elements); !s)
      return error(kExitBadInput, std::string(path) + ": section 'step': " + s.getError());
  for (size_t i = 0; i < program->ops.size(); ++i) {
    const ProgramOp &op = program->ops[i];
    if (op.kind != ProgramOp::Kind::Gemm || !op.m || !op.n || !op.k)
      continue;
    ++gemms;
    if (op.beta != 0)
      ++accumulating;
    if (!at.empty())
      if (Expected<std::vector<GemmMatrix>> checked = gemmMatrices(*program, op, at, elements);
          !checked)
        return error(kExitBadInput, std::string(path) + ": section 'step': op " +
                                        std::to_string(i) + " (gemm): " + checked.getError());
    std::string key = op.m->getText() + " x " + op.n->getText() + " x " + op.k->getText();
    if (op.transA)
      key += ", trans_a";
    if (op.transB)
      key += ", trans_b";
    if (op.beta != 0)
      key += ", beta = 1";
    if (!op.lds.empty()) {
      ++strided;
      key += ", ld " + op.lds[0].getText() + "/" + op.lds[1].getText() + "/" + op.lds[2].getText();
    }
    Signature &sig = signatures[key];
    if (sig.count++ == 0 && !at.empty()) {
      Expected<int64_t> m = op.m->evaluate(at), n = op.n->evaluate(at), k = op.k->evaluate(at);
      if (m && n && k)
        sig.sizes = std::to_string(*m) + "x" + std::to_string(*n) + "x" + std::to_string(*k);
    }
  }
  if (strided)
    std::printf("gemms in the step program (%zu, %zu with beta = 1, %zu with ld):\n", gemms,
                accumulating, strided);
  else
    std::printf("gemms in the step program (%zu, %zu with beta = 1):\n", gemms, accumulating);
  std::vector<std::pair<std::string, Signature>> sorted(signatures.begin(), signatures.end());
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const auto &a, const auto &b) { return a.second.count > b.second.count; });
  for (const auto &[key, sig] : sorted) {
    std::string sizes = sig.sizes.empty() ? "" : "  (" + sig.sizes + ")";
    std::printf("  %4zu  %s%s\n", sig.count, key.c_str(), sizes.c_str());
  }
  return 0;
}

int kiln::run::runInspect(int argc, char **argv) {
  if (argc == 1 && (!std::strcmp(argv[0], "-h") || !std::strcmp(argv[0], "--help"))) {
    std::printf("USAGE: kiln-run inspect STEP.kiln\n\nPrints the artifact's "
                "header, sections, meta, guards, parameters, kernel\nmodules, the "
                "distinct kernels the programs launch (with their module\nand launch "
                "count), the step program's GEMMs by shape (sizes at the\nmemory plan's "
                "values), memory plan and shape buckets.\n");
    return 0;
  }
  if (argc != 1)
    return error(kExitUsage, "'inspect' takes one artifact file");
  Expected<StepArtifact> step = StepArtifact::open(argv[0]);
  if (!step)
    return error(kExitBadInput, step.getError());
  const Artifact &container = step->getContainer();
  std::printf("%s: Kiln artifact, format %u, %llu bytes, CRC-32C %s\n", argv[0],
              container.getFormatVersion(),
              static_cast<unsigned long long>(container.getFileSize()),
              formatCrc32c(container.getFileCrc32c()).c_str());

  std::printf("sections (%zu):\n  %10s %10s  %-10s  %s\n", container.getSections().size(), "offset",
              "size", "crc32c", "name");
  for (const Section &section : container.getSections())
    std::printf("  %10llu %10llu  %s  %s\n", static_cast<unsigned long long>(section.offset),
                static_cast<unsigned long long>(section.size), formatCrc32c(section.crc32c).c_str(),
                section.name.c_str());

  std::printf("meta:\n%s\n", indent(step->getMeta().print(true), 2).c_str());

  std::printf("guards (%zu):\n", step->getGuards().size());
  for (const Guard &guard : step->getGuards())
    std::printf("  %s  (%s)\n", describeGuard(guard).c_str(),
                guard.origin.empty() ? "no origin recorded" : guard.origin.c_str());

  std::printf("params (%zu):\n", step->getParams().size());
  for (const ParamSpec &param : step->getParams()) {
    std::printf("  %s  %s  %s", param.name.c_str(),
                describeTensorType(param.dtype, param.shape).c_str(),
                param.trainable ? "trainable" : "frozen");
    if (param.fromInit)
      std::printf("  (init program)");
    if (param.source != param.name)
      std::printf("  <- %s", param.source.c_str());
    if (!param.foldedFrom.empty())
      std::printf("  (folded from %s%s)", param.foldedFrom.c_str(),
                  param.foldedTransposed.value_or(false) ? ", its transpose" : "");
    for (const std::string &alias : param.aliases)
      std::printf("  (tied: %s)", alias.c_str());
    std::printf("\n");
  }

  std::printf("kernel modules (%zu):\n", step->getKernels().size());
  for (const auto &[name, images] : step->getKernels()) {
    std::string list;
    for (const KernelImage &cubin : images.cubins)
      list += (list.empty() ? "" : ", ") + cubin.section.substr(cubin.section.rfind('/') + 1);
    for (const KernelImage &ptx : images.ptx)
      list += (list.empty() ? "" : ", ") + ptx.section.substr(ptx.section.rfind('/') + 1);
    if (!images.source.empty())
      list += std::string(list.empty() ? "" : ", ") + "source";
    std::printf("  %s: %s\n", name.c_str(), list.c_str());
    // Kiln's sm_90a attention runs in place of launches, so no launch list
    // names its kernels: their entry points, from its source.
    if (name == kiln::artifact::kHopperAttentionModule && !images.source.empty()) {
      std::string_view text = container.contents(images.source);
      const std::string_view marker = "extern \"C\" __global__ void";
      for (size_t at = text.find(marker); at != std::string_view::npos;
           at = text.find(marker, at + 1)) {
        size_t begin = text.find("kiln_fa90_", at), end = text.find('(', begin);
        if (begin != std::string_view::npos && end != std::string_view::npos)
          std::printf("    %.*s\n", static_cast<int>(end - begin), text.data() + begin);
      }
    }
  }
  if (int rc = printKernelLaunches(*step, argv[0]))
    return rc;
  if (int rc = printGemms(*step, argv[0]))
    return rc;
  if (int rc = printNf4Gemms(*step, argv[0]))
    return rc;
  if (const std::optional<StepMemoryPlan> &plan = step->getMemoryPlan()) {
    std::string at;
    for (const auto &[symbol, value] : plan->plannedAt)
      at += (at.empty() ? " at " : ", ") + symbol + "=" + std::to_string(value);
    std::printf("memory plan%s: %zu bytes persistent + %zu arena (%zu buffers) + %zu "
                "workspace\n",
                at.c_str(), plan->persistentBytes, plan->arenaBytes, plan->buffers.size(),
                plan->workspaceBytes);
  } else {
    std::printf("memory plan: none (the arena is planned at load)\n");
  }
  std::string buckets;
  for (const BucketSpec &bucket : step->getBuckets()) {
    std::string values;
    for (const auto &[symbol, value] : bucket.values)
      values += (values.empty() ? "" : ", ") + symbol + "=" + std::to_string(value);
    buckets += (buckets.empty() ? "" : ", ") + bucket.function + " (" + values + ")";
  }
  std::printf("buckets: %s\n", buckets.empty() ? "none" : buckets.c_str());
  std::printf("loop programs: %s\n",
              step->getProgram("accum")
                  ? "accum, apply, eval (kiln-run train --grad-accum, --eval-data)"
                  : "none");
  std::printf("step program: %s\n",
              step->hasStepProgram() ? "present (opaque until the runtime executes it)" : "absent");
  return 0;
}

int kiln::run::runCkptInfo(int argc, char **argv) {
  if (argc == 1 && (!std::strcmp(argv[0], "-h") || !std::strcmp(argv[0], "--help"))) {
    std::printf("USAGE: kiln-run ckpt-info FILE.safetensors\n\nValidates the "
                "file (structure; Kiln's checksums when present) and lists its "
                "tensors.\n");
    return 0;
  }
  if (argc != 1)
    return error(kExitUsage, "'ckpt-info' takes one safetensors file");
  Expected<SafetensorsFile> file = SafetensorsFile::open(argv[0]);
  if (!file)
    return error(kExitBadInput, file.getError());
  std::printf("%s: safetensors, %zu tensors, %llu bytes, %s\n", argv[0], file->getTensors().size(),
              static_cast<unsigned long long>(file->getFileSize()),
              file->hasChecksums() ? "CRC-32C checksums verified"
                                   : "no Kiln checksums (structure checked only)");
  for (const auto &[key, value] : file->getMetadata())
    if (key.compare(0, std::strlen(kChecksumKeyPrefix), kChecksumKeyPrefix))
      std::printf("  metadata %s = %s\n", key.c_str(), value.c_str());
  for (const TensorInfo &tensor : file->getTensors())
    std::printf("  %s  %s\n", tensor.name.c_str(),
                describeTensorType(tensor.dtype, tensor.shape).c_str());
  return 0;
}
