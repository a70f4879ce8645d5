//===- MemoryPlanSection.cpp - The arena plan as a symbolic chain ---------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/MemoryPlanSection.h"

#include "kiln/artifact/ArenaScratch.h"

#include "kiln/artifact/Json.h"

#include <algorithm>
#include <climits>
#include <set>

using namespace kiln::artifact;

namespace {
size_t alignUp(size_t bytes, size_t alignment) {
  return (std::max<size_t>(bytes, 1) + alignment - 1) / alignment * alignment;
}
/// alignUp without wrapping around; false if it would.
bool alignUpChecked(size_t bytes, size_t alignment, size_t &out) {
  size_t sum;
  if (__builtin_add_overflow(std::max<size_t>(bytes, 1), alignment - 1, &sum))
    return false;
  out = sum / alignment * alignment;
  return true;
}
} // namespace

Expected<size_t> kiln::artifact::persistentBytes(const StepProgram &program,
                                                 const SymbolBindings &sizes) {
  std::vector<int> ids;
  std::set<std::string> named; // the executor keeps one tensor per name
  for (const ProgramBinding &arg : program.args)
    if ((arg.role != "param" && arg.role != "state") || named.insert(arg.name).second)
      ids.push_back(arg.buffer);
  for (const ProgramOp &op : program.ops)
    if ((op.kind == ProgramOp::Kind::Weight && named.insert(weightKey(program, op)).second) ||
        op.kind == ProgramOp::Kind::Constant)
      ids.push_back(op.result);
  size_t total = 0;
  for (int id : ids) {
    Expected<size_t> bytes = program.byteCount(id, sizes);
    if (!bytes)
      return Error{"buffer " + std::to_string(id) + ": " + bytes.getError()};
    if (__builtin_add_overflow(total, *bytes, &total))
      return Error{"the persistent bytes overflow"};
  }
  return total;
}

Expected<StepMemoryPlan> kiln::artifact::planStepMemory(const StepProgram &program,
                                                        const SymbolBindings &sizes) {
  Expected<ArenaPlan> arena = program.planArena(sizes, kArenaAlignment);
  if (!arena)
    return arena.takeError();
  Expected<size_t> persistent = persistentBytes(program, sizes);
  if (!persistent)
    return persistent.takeError();
  StepMemoryPlan plan;
  plan.plannedAt = sizes;
  plan.arenaBytes = arena->size;
  plan.persistentBytes = *persistent;
  // The live peak: +bytes at the alloc, -bytes after the last use.
  LiveRanges live = program.liveRanges();
  std::vector<int64_t> delta(program.ops.size() + 2, 0);
  for (size_t id = 0; id < arena->inArena.size(); ++id)
    if (arena->inArena[id]) {
      int64_t bytes = static_cast<int64_t>(alignUp(arena->bytes[id], kArenaAlignment));
      delta[live.allocAt[id]] += bytes;
      delta[live.lastUse[id] + 1] -= bytes;
    }
  int64_t liveBytes = 0;
  for (int64_t d : delta) {
    liveBytes += d;
    plan.livePeakBytes = std::max(plan.livePeakBytes, static_cast<size_t>(liveBytes));
  }
  Expected<AttentionScratchEstimate> attention =
      estimateAttentionScratch(program, *arena, sizes, plan.workspaceBytes);
  if (!attention)
    return attention.takeError();
  plan.attentionCalls = attention->calls;
  plan.attentionInPlanBytes = attention->inPlan;
  plan.attentionBesideBytes = attention->beside;
  // planArena places in id order, so every base precedes its buffer.
  for (size_t id = 0; id < arena->inArena.size(); ++id) {
    if (!arena->inArena[id])
      continue;
    Expected<SizeExpr> size = program.byteSize(static_cast<int>(id));
    if (!size)
      return Error{"buffer " + std::to_string(id) + ": " + size.getError()};
    plan.buffers.push_back({static_cast<int>(id), std::move(*size), arena->base[id]});
  }
  return plan;
}

std::string kiln::artifact::encodeMemoryPlan(const StepMemoryPlan &plan) {
  Json root = Json::object();
  root.set("format", Json::string("kiln-memory-plan"));
  root.set("version", Json::integer(1));
  root.set("alignment", Json::integer(static_cast<int64_t>(plan.alignment)));
  Json at = Json::object();
  for (const auto &[symbol, value] : plan.plannedAt)
    at.set(symbol, Json::integer(value));
  root.set("planned_at", std::move(at));
  root.set("arena_bytes", Json::integer(static_cast<int64_t>(plan.arenaBytes)));
  root.set("persistent_bytes", Json::integer(static_cast<int64_t>(plan.persistentBytes)));
  root.set("workspace_bytes", Json::integer(static_cast<int64_t>(plan.workspaceBytes)));
  Json buffers = Json::array();
  for (const ChainBuffer &b : plan.buffers) {
    Json entry = Json::object();
    entry.set("buffer", Json::integer(b.buffer));
    entry.set("size", Json::string(b.size.getText()));
    entry.set("base", Json::integer(b.base));
    buffers.push(std::move(entry));
  }
  root.set("buffers", std::move(buffers));
  return root.print() + "\n";
}

Expected<StepMemoryPlan> kiln::artifact::decodeMemoryPlan(std::string_view json,
                                                          const std::string &origin) {
  Expected<Json> parsed = Json::parse(json);
  if (!parsed)
    return Error{origin + ": " + parsed.getError()};
  const Json &root = *parsed;
  auto fail = [&](const std::string &what) { return Error{origin + ": " + what}; };
  const Json *format = root.isObject() ? root.get("format") : nullptr;
  const Json *version = root.isObject() ? root.get("version") : nullptr;
  if (!format || !format->isString() || format->getString() != "kiln-memory-plan" || !version ||
      !version->isInteger() || version->getInteger() != 1)
    return fail("not a version 1 kiln-memory-plan");
  auto count = [](const Json &object, const char *key, int64_t min, int64_t &out) {
    const Json *value = object.get(key);
    if (!value || !value->isInteger() || value->getInteger() < min)
      return false;
    out = value->getInteger();
    return true;
  };
  StepMemoryPlan plan;
  int64_t number = 0;
  if (!count(root, "alignment", 1, number) || (number & (number - 1)))
    return fail("'alignment' must be a power of two");
  if (number < static_cast<int64_t>(kArenaAlignment) || number > kMaxArenaAlignment)
    return fail("'alignment' " + std::to_string(number) + " is outside " +
                std::to_string(kArenaAlignment) + ".." + std::to_string(kMaxArenaAlignment));
  plan.alignment = static_cast<size_t>(number);
  for (auto [key, out] : {std::pair<const char *, size_t *>{"arena_bytes", &plan.arenaBytes},
                          {"persistent_bytes", &plan.persistentBytes},
                          {"workspace_bytes", &plan.workspaceBytes}}) {
    if (!count(root, key, 0, number))
      return fail(std::string("missing or negative integer '") + key + "'");
    *out = static_cast<size_t>(number);
  }
  const Json *at = root.get("planned_at");
  if (!at || !at->isObject())
    return fail("missing object 'planned_at'");
  for (const JsonMember &member : at->getMembers()) {
    if (!member.value.isInteger())
      return fail("'planned_at': '" + member.key + "' is not an integer");
    if (member.value.getInteger() < 1)
      return fail("'planned_at': '" + member.key + "' must be positive");
    plan.plannedAt[member.key] = member.value.getInteger();
  }
  const Json *buffers = root.get("buffers");
  if (!buffers || !buffers->isArray())
    return fail("missing array 'buffers'");
  std::set<int64_t> seen;
  for (const Json &entry : buffers->getElements()) {
    std::string where = "buffers entry " + std::to_string(plan.buffers.size());
    ChainBuffer buffer;
    int64_t id = 0, base = 0;
    if (!entry.isObject() || !count(entry, "buffer", 0, id) || id > INT32_MAX)
      return fail(where + ": missing or bad 'buffer'");
    const Json *size = entry.get("size");
    if (!size || !size->isString())
      return fail(where + ": missing string 'size'");
    Expected<SizeExpr> expr = SizeExpr::parse(size->getString());
    if (!expr)
      return fail(where + ": 'size': " + expr.getError());
    if (!count(entry, "base", -1, base))
      return fail(where + ": missing or bad 'base'");
    if (base >= 0 && !seen.count(base))
      return fail(where + ": 'base' " + std::to_string(base) + " is not a buffer listed before it");
    if (!seen.insert(id).second)
      return fail(where + ": buffer " + std::to_string(id) + " is listed twice");
    buffer.buffer = static_cast<int>(id);
    buffer.size = std::move(*expr);
    buffer.base = static_cast<int>(base);
    plan.buffers.push_back(std::move(buffer));
  }
  return plan;
}

Expected<ArenaPlan> kiln::artifact::evaluateMemoryPlan(const StepMemoryPlan &plan,
                                                       const StepProgram &program,
                                                       const SymbolBindings &sizes) {
  size_t n = program.buffers.size();
  ArenaPlan arena;
  arena.bytes.assign(n, 0);
  arena.offsets.assign(n, 0);
  arena.inArena.assign(n, false);
  arena.base.assign(n, -1);
  for (size_t id = 0; id < n; ++id) {
    Expected<size_t> bytes = program.byteCount(static_cast<int>(id), sizes);
    if (!bytes)
      return Error{"buffer " + std::to_string(id) + ": " + bytes.getError()};
    arena.bytes[id] = *bytes;
  }
  if (plan.alignment < kArenaAlignment)
    return Error{"alignment " + std::to_string(plan.alignment) + " is below the executor's " +
                 std::to_string(kArenaAlignment)};
  std::vector<bool> isAlloc(n, false);
  for (const ProgramOp &op : program.ops)
    if (op.kind == ProgramOp::Kind::Alloc)
      isAlloc[op.result] = true;
  // The chain's own sizes give the offsets; the program's give the extents.
  std::vector<size_t> chainEnd(n, 0);
  for (const ChainBuffer &b : plan.buffers) {
    if (static_cast<size_t>(b.buffer) >= n || !isAlloc[b.buffer])
      return Error{"buffer " + std::to_string(b.buffer) + " is not an alloc of the step program"};
    Expected<int64_t> size = b.size.evaluate(sizes);
    if (!size)
      return Error{"buffer " + std::to_string(b.buffer) + ": " + size.getError()};
    if (*size < 0)
      return Error{"buffer " + std::to_string(b.buffer) + " has a negative size"};
    if (b.base >= 0 && (static_cast<size_t>(b.base) >= n || !arena.inArena[b.base]))
      return Error{"buffer " + std::to_string(b.buffer) + " sits on buffer " +
                   std::to_string(b.base) + ", which is not placed before it"};
    size_t offset = b.base < 0 ? 0 : chainEnd[b.base];
    arena.offsets[b.buffer] = offset;
    arena.base[b.buffer] = b.base;
    arena.inArena[b.buffer] = true;
    // Hostile sizes must not wrap around into a plan that seems to fit.
    size_t chainSize = 0, extent = 0;
    if (!alignUpChecked(static_cast<size_t>(*size), plan.alignment, chainSize) ||
        !alignUpChecked(arena.bytes[b.buffer], plan.alignment, extent) ||
        __builtin_add_overflow(offset, chainSize, &chainEnd[b.buffer]) ||
        __builtin_add_overflow(offset, extent, &extent))
      return Error{"buffer " + std::to_string(b.buffer) + ": the arena offset overflows"};
    arena.size = std::max(arena.size, extent);
  }
  for (size_t id = 0; id < n; ++id)
    if (isAlloc[id] && !arena.inArena[id])
      return Error{"buffer " + std::to_string(id) + " has no place in the plan"};
  return arena;
}

Status kiln::artifact::checkArenaPlan(const StepProgram &program, const ArenaPlan &arena) {
  LiveRanges live = program.liveRanges();
  struct Extent {
    size_t begin, end, lo, hi;
    int id;
  };
  std::vector<Extent> extents;
  for (size_t id = 0; id < arena.inArena.size(); ++id) {
    if (!arena.inArena[id] || live.allocAt[id] < 0)
      continue;
    Extent e{static_cast<size_t>(live.allocAt[id]), live.lastUse[id], arena.offsets[id],
             arena.offsets[id] + std::max<size_t>(arena.bytes[id], 1), static_cast<int>(id)};
    if (e.hi > arena.size)
      return Error{"buffer " + std::to_string(id) + " ends past the arena"};
    extents.push_back(e);
  }
  // By first op: each buffer only meets those that start before it ends.
  std::sort(extents.begin(), extents.end(),
            [](const Extent &a, const Extent &b) { return a.begin < b.begin; });
  for (size_t i = 0; i < extents.size(); ++i)
    for (size_t j = i + 1; j < extents.size() && extents[j].begin <= extents[i].end; ++j)
      if (extents[i].lo < extents[j].hi && extents[j].lo < extents[i].hi)
        return Error{"buffers " + std::to_string(extents[i].id) + " and " +
                     std::to_string(extents[j].id) + " are live at once and overlap"};
  return Status::success();
}

Expected<ArenaPlan> kiln::artifact::chooseArenaPlan(const StepProgram &program,
                                                    const StepMemoryPlan *plan,
                                                    const SymbolBindings &sizes,
                                                    std::string &note) {
  note.clear();
  if (plan) {
    Expected<ArenaPlan> arena = evaluateMemoryPlan(*plan, program, sizes);
    Status checked = arena ? checkArenaPlan(program, *arena) : Status(arena.takeError());
    if (checked)
      return arena;
    note = "the artifact's memory plan does not fit these sizes (" + checked.getError() +
           "); planning the arena at run time";
  }
  return program.planArena(sizes, kArenaAlignment);
}
