//===- StepPeak.cpp - What the step program holds at its arena peak -------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The kernel-level plan's counterpart of the graph-level report's "largest
// arena tensors live at the peak": the op where the most arena bytes are
// live (the runtime's liveness: alloc to last use through the buffer or a
// view of it), and the largest buffers live there with the op that first
// writes each. This is where a memory reduction has to show.
//
//===----------------------------------------------------------------------===//

#include "kiln/ArtifactEmit/Sections.h"

#include "kiln/Dialect/Kernel/KernelDialect.h"

#include <algorithm>

using namespace mlir;

namespace {

using kiln::artifact::ProgramOp;

/// A short name for the op: the kernel symbol, "gemm MxNxK", the head.
std::string describeOp(const ProgramOp &op) {
  switch (op.kind) {
  case ProgramOp::Kind::Launch: return op.name;
  case ProgramOp::Kind::Gemm:
    return "gemm " + (op.m ? op.m->getText() : "?") + "x" + (op.n ? op.n->getText() : "?") + "x" +
           (op.k ? op.k->getText() : "?");
  case ProgramOp::Kind::LinearCrossEntropy: return "linear_cross_entropy";
  case ProgramOp::Kind::Fill: return "fill";
  case ProgramOp::Kind::Copy: return "copy";
  default: return "?";
  }
}

bool touches(const ProgramOp &op, int id) {
  switch (op.kind) {
  case ProgramOp::Kind::Launch:
    return std::find(op.args.begin(), op.args.end(), id) != op.args.end();
  case ProgramOp::Kind::Gemm: return op.c == id;
  case ProgramOp::Kind::LinearCrossEntropy: {
    std::vector<int> ids = op.head->buffers();
    return std::find(ids.begin(), ids.end(), id) != ids.end();
  }
  case ProgramOp::Kind::Fill:
  case ProgramOp::Kind::Copy: return op.target == id;
  default: return false;
  }
}

} // namespace

FailureOr<kiln::StepPeak> kiln::describeLoweredStepPeak(func::FuncOp func,
                                                        const artifact::SymbolBindings &values,
                                                        size_t count) {
  llvm::StringMap<std::string> modules;
  if (auto module = func->getParentOfType<ModuleOp>())
    for (auto kernel : module.getOps<kernel::KernelOp>())
      modules[kernel.getSymName()] = "plan";
  FailureOr<std::string> json = emitStepProgramSection(func, modules);
  if (failed(json))
    return failure();
  artifact::Expected<artifact::StepProgram> program =
      artifact::StepProgram::decode(*json, "step program");
  if (!program)
    return func.emitError(program.getError()), failure();
  artifact::LiveRanges live = program->liveRanges();
  size_t n = program->buffers.size();
  std::vector<size_t> bytes(n, 0);
  for (size_t id = 0; id < n; ++id) {
    artifact::Expected<size_t> b = program->byteCount(static_cast<int>(id), values);
    if (!b)
      return func.emitError("step program buffer ") << id << ": " << b.getError(), failure();
    bytes[id] = (std::max<size_t>(*b, 1) + artifact::kArenaAlignment - 1) /
                artifact::kArenaAlignment * artifact::kArenaAlignment;
  }
  std::vector<int64_t> delta(program->ops.size() + 2, 0);
  for (size_t id = 0; id < n; ++id)
    if (live.allocAt[id] >= 0) {
      delta[live.allocAt[id]] += static_cast<int64_t>(bytes[id]);
      delta[live.lastUse[id] + 1] -= static_cast<int64_t>(bytes[id]);
    }
  StepPeak peak;
  int64_t liveBytes = 0;
  for (size_t i = 0; i < program->ops.size(); ++i) {
    liveBytes += delta[i];
    if (liveBytes > static_cast<int64_t>(peak.liveBytes)) {
      peak.liveBytes = static_cast<size_t>(liveBytes);
      peak.op = i;
    }
  }
  // The bytes rise at an alloc: name the op that runs there.
  for (size_t i = peak.op; i < program->ops.size(); ++i) {
    ProgramOp::Kind kind = program->ops[i].kind;
    if (kind != ProgramOp::Kind::Alloc && kind != ProgramOp::Kind::View) {
      peak.opName = describeOp(program->ops[i]);
      break;
    }
  }
  std::vector<int> at;
  for (size_t id = 0; id < n; ++id)
    if (live.allocAt[id] >= 0 && static_cast<size_t>(live.allocAt[id]) <= peak.op &&
        live.lastUse[id] >= peak.op)
      at.push_back(static_cast<int>(id));
  std::stable_sort(at.begin(), at.end(), [&](int a, int b) { return bytes[a] > bytes[b]; });
  for (int id : at) {
    if (peak.largest.size() == count)
      break;
    StepPeak::Buffer entry;
    entry.bytes = bytes[id];
    entry.type = artifact::dtypeName(program->buffers[id].dtype);
    entry.type += " [";
    for (size_t d = 0; d < program->buffers[id].shape.size(); ++d)
      entry.type += (d ? ", " : "") + program->buffers[id].shape[d].getText();
    entry.type += "]";
    for (size_t i = live.allocAt[id] + 1; i < program->ops.size(); ++i)
      if (touches(program->ops[i], id)) {
        entry.writer = describeOp(program->ops[i]);
        break;
      }
    entry.lastUse = live.lastUse[id];
    peak.largest.push_back(std::move(entry));
  }
  return peak;
}
