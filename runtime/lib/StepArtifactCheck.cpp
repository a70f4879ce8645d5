//===- StepArtifactCheck.cpp - The sections against each other ------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Each section decodes on its own (StepArtifact.cpp); here they are checked
// against each other, so nothing a run meets later on the device can be
// inconsistent: every size expression is over meta "symbols", every
// parameter a program names is in "params", every launch's kernel module is
// in the artifact, the init program makes exactly the parameters marked
// "init", and the memory plan is the step's own at its planned_at sizes.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/StepArtifact.h"

#include <algorithm>
#include <set>

using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {
const std::set<std::string> kRoles = {"input", "param", "state", "lr",        "step",  "rng_seed",
                                      "loss",  "other", "accum", "grad_norm", "tokens"};

const char *opName(ProgramOp::Kind kind) {
  switch (kind) {
  case ProgramOp::Kind::Alloc: return "alloc";
  case ProgramOp::Kind::View: return "view";
  case ProgramOp::Kind::Weight: return "weight";
  case ProgramOp::Kind::Constant: return "constant";
  case ProgramOp::Kind::Fill: return "fill";
  case ProgramOp::Kind::Copy: return "copy";
  case ProgramOp::Kind::Launch: return "launch";
  case ProgramOp::Kind::Gemm: return "gemm";
  case ProgramOp::Kind::AllReduce: return "all_reduce";
  case ProgramOp::Kind::AllReduceWait: return "all_reduce_wait";
  case ProgramOp::Kind::LinearCrossEntropy: return "linear_cross_entropy";
  }
  return "?";
}

/// Checks one program; \p symbols, \p params and \p modules are the
/// artifact's.
class ProgramChecker {
public:
  ProgramChecker(const std::string &section, const std::vector<std::string> &symbols,
                 const std::set<std::string> &params, const std::set<std::string> &modules)
      : section(section), symbols(symbols), params(params), modules(modules) {}

  Status check(const StepProgram &program) {
    for (size_t i = 0; i < program.buffers.size(); ++i)
      for (const SizeExpr &dim : program.buffers[i].shape)
        if (!expr(dim, "buffer " + std::to_string(i)))
          return error;
    for (auto [key, list] :
         {std::pair<const char *, const std::vector<ProgramBinding> *>{"args", &program.args},
          {"results", &program.results}})
      for (size_t i = 0; i < list->size(); ++i) {
        const ProgramBinding &binding = (*list)[i];
        std::string where = std::string(key) + " entry " + std::to_string(i);
        if (!kRoles.count(binding.role))
          return fail(where + ": unknown role '" + binding.role + "'");
        if (section == "init" && std::string(key) == "args" && binding.role != "rng_seed")
          return fail(where + ": role '" + binding.role +
                      "'; the init program takes only rng_seed arguments");
        if (binding.role == "param" && !params.count(binding.name))
          return fail(where + ": parameter '" + binding.name + "' is not in \"params\"");
        if ((binding.role == "state" || binding.role == "input" || binding.role == "accum") &&
            binding.name.empty())
          return fail(where + ": a " + binding.role + " needs a name");
      }
    for (size_t i = 0; i < program.ops.size(); ++i) {
      const ProgramOp &op = program.ops[i];
      std::string where = "op " + std::to_string(i) + " (" + opName(op.kind) + ")";
      switch (op.kind) {
      case ProgramOp::Kind::Weight:
        if (!params.count(op.name))
          return fail(where + ": weight '" + op.name + "' is not in \"params\"");
        for (const WeightMember &m : op.members)
          if (!params.count(m.name))
            return fail(where + ": weight '" + m.name + "' is not in \"params\"");
        break;
      case ProgramOp::Kind::Launch:
        if (!modules.count(op.module))
          return fail(where + ": kernel module '" + op.module +
                      "' is not in the artifact (no kernels/" + op.module + "/ section)");
        if (!expr(*op.items, where + ": 'items'") || !expr(*op.shared, where + ": 'shared'"))
          return error;
        for (const std::string &symbol : op.symbols)
          if (std::find(symbols.begin(), symbols.end(), symbol) == symbols.end())
            return fail(where + ": symbol '" + symbol + "' is not in meta \"symbols\"");
        break;
      case ProgramOp::Kind::AllReduce:
        // The init program runs once at load on each rank alone.
        if (section == "init")
          return fail(where + ": the init program cannot all-reduce");
        break;
      case ProgramOp::Kind::View:
        if ((op.offset && !expr(*op.offset, where + ": 'offset'")) ||
            (op.rowStride && !expr(*op.rowStride, where + ": 'row_stride'")))
          return error;
        break;
      case ProgramOp::Kind::Gemm:
        for (const auto &[name, e] : {std::pair<const char *, const SizeExpr *>{"m", &*op.m},
                                      {"n", &*op.n},
                                      {"k", &*op.k},
                                      {"batch", &*op.batch}})
          if (!expr(*e, where + ": '" + name + "'"))
            return error;
        for (const SizeExpr &stride : op.strides)
          if (!expr(stride, where + ": 'strides'"))
            return error;
        for (const SizeExpr &ld : op.lds)
          if (!expr(ld, where + ": 'ld'"))
            return error;
        break;
      default: break;
      }
    }
    return Status::success();
  }

private:
  Status fail(const std::string &what) {
    error = Error{"section '" + section + "': " + what};
    return error;
  }
  /// False (with `error` set) if \p e uses a symbol meta does not list.
  bool expr(const SizeExpr &e, const std::string &where) {
    for (const std::string &symbol : e.getSymbols())
      if (std::find(symbols.begin(), symbols.end(), symbol) == symbols.end()) {
        (void)fail(where + ": size expression '" + e.getText() + "' uses '" + symbol +
                   "', which is not in meta \"symbols\"");
        return false;
      }
    return true;
  }

  const std::string &section;
  const std::vector<std::string> &symbols;
  const std::set<std::string> &params, &modules;
  Status error;
};

/// The symbol of \p e that \p symbols lacks, or empty.
std::string unknownSymbol(const SizeExpr &e, const std::vector<std::string> &symbols) {
  for (const std::string &symbol : e.getSymbols())
    if (std::find(symbols.begin(), symbols.end(), symbol) == symbols.end())
      return symbol;
  return {};
}
} // namespace

Status StepArtifact::checkConsistency() const {
  auto overUnknown = [&](const SizeExpr &e, const std::string &symbol) {
    return "size expression '" + e.getText() + "' uses '" + symbol +
           "', which is not in meta \"symbols\"";
  };
  // A damaged guard is the artifact's fault, found here, not blamed on the
  // run's --batch/--seq later.
  for (size_t i = 0; i < guards.size(); ++i)
    if (std::string symbol = unknownSymbol(guards[i].expr, symbols); !symbol.empty())
      return Error{"guards[" + std::to_string(i) + "]: " + overUnknown(guards[i].expr, symbol)};

  std::set<std::string> paramNames, modules;
  for (const ParamSpec &param : params)
    paramNames.insert(param.name);
  for (const auto &entry : kernels)
    modules.insert(entry.first);
  for (const auto &[section, program] : programs) {
    ProgramChecker checker(section, symbols, paramNames, modules);
    if (Status status = checker.check(program); !status)
      return status;
  }

  // The loop programs (kiln compile --loop-programs) come together, and
  // apply reads and clears exactly the accumulators accum writes.
  const StepProgram *accum = getProgram("accum"), *apply = getProgram("apply"),
                    *eval = getProgram("eval");
  if ((accum || apply || eval) && !(accum && apply && eval))
    return Error{std::string("the loop programs come together, but section '") +
                 (!accum   ? "accum"
                  : !apply ? "apply"
                           : "eval") +
                 "' is missing"};
  if (accum) {
    std::set<std::string> written, read, cleared;
    for (const ProgramBinding &r : accum->results)
      if (r.role == "accum")
        written.insert(r.name);
    for (const ProgramBinding &a : apply->args)
      if (a.role == "accum")
        read.insert(a.name);
    for (const ProgramBinding &r : apply->results)
      if (r.role == "accum")
        cleared.insert(r.name);
    if (written.empty() || written != read || written != cleared)
      return Error{"section 'apply': its accumulators differ from those section 'accum' writes"};
  }

  // The init program makes exactly the parameters marked "init".
  const StepProgram *init = getProgram("init");
  std::set<std::string> made;
  if (init)
    for (const ProgramBinding &result : init->results)
      if (result.role == "param")
        made.insert(result.name);
  for (const ParamSpec &param : params)
    if (param.fromInit && !made.count(param.name))
      return Error{
          "params: '" + param.name + "' is marked \"init\", but " +
          (init ? "the init program does not make it" : "the artifact has no init program")};

  if (!memoryPlan)
    return Status::success();
  const std::string where = "section 'memory_plan': ";
  for (const auto &[symbol, value] : memoryPlan->plannedAt)
    if (std::find(symbols.begin(), symbols.end(), symbol) == symbols.end())
      return Error{where + "'planned_at' names '" + symbol + "', which is not in meta \"symbols\""};
  for (size_t i = 0; i < memoryPlan->buffers.size(); ++i) {
    const SizeExpr &size = memoryPlan->buffers[i].size;
    if (std::string symbol = unknownSymbol(size, symbols); !symbol.empty())
      return Error{where + "buffers entry " + std::to_string(i) + ": " + overUnknown(size, symbol)};
  }
  if (memoryPlan->workspaceBytes != kGemmWorkspaceBytes)
    return Error{where + "'workspace_bytes' is " + std::to_string(memoryPlan->workspaceBytes) +
                 ", but the executor's GEMM workspace is " + std::to_string(kGemmWorkspaceBytes)};
  // At its own sizes the plan is exactly the step's: its totals are what
  // the chain and the program give there (so a damaged total is found now).
  const StepProgram *step = getProgram("step");
  if (!step)
    return Status::success();
  const SymbolBindings &at = memoryPlan->plannedAt;
  Expected<ArenaPlan> arena = evaluateMemoryPlan(*memoryPlan, *step, at);
  if (!arena)
    return Error{where + "at its planned_at sizes: " + arena.getError()};
  if (Status status = checkArenaPlan(*step, *arena); !status)
    return Error{where + "at its planned_at sizes: " + status.getError()};
  if (arena->size != memoryPlan->arenaBytes)
    return Error{where + "'arena_bytes' is " + std::to_string(memoryPlan->arenaBytes) +
                 ", but its buffers take " + std::to_string(arena->size) + " at planned_at"};
  Expected<size_t> persistent = persistentBytes(*step, at);
  if (!persistent)
    return Error{where + "at its planned_at sizes: " + persistent.getError()};
  if (*persistent != memoryPlan->persistentBytes)
    return Error{where + "'persistent_bytes' is " + std::to_string(memoryPlan->persistentBytes) +
                 ", but the step's arguments, weights and constants take " +
                 std::to_string(*persistent) + " at planned_at"};
  return Status::success();
}
