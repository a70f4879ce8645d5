//===- MemoryPlan.cpp - Liveness, arena placement and peak memory ---------===//
//
// Program order is op order in the body. A tensor is live from its defining
// op to its last use; views share their operand's buffer, and an
// elementwise op may write its result over an operand that dies there. Arena
// buffers are placed greedily, largest first, into the best-fitting gap
// among the buffers live at the same time.
//
//===----------------------------------------------------------------------===//

#include "kiln/Analysis/MemoryPlan.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <map>
#include <set>

using namespace mlir;

namespace kiln {

StringRef categoryName(MemoryCategory category) {
  switch (category) {
  case MemoryCategory::Parameter: return "parameters";
  case MemoryCategory::OptimizerState: return "optimizer state";
  case MemoryCategory::Input: return "inputs";
  case MemoryCategory::Constant: return "constants";
  case MemoryCategory::Activation: return "activations";
  case MemoryCategory::Gradient: return "gradients";
  case MemoryCategory::Workspace: return "workspace";
  }
  return "?";
}

bool isPersistent(MemoryCategory category) {
  return category == MemoryCategory::Parameter || category == MemoryCategory::OptimizerState ||
         category == MemoryCategory::Input || category == MemoryCategory::Constant;
}

int64_t elementBytes(Type elementType) {
  unsigned bits = elementType.getIntOrFloatBitWidth();
  return std::max<int64_t>(1, (bits + 7) / 8);
}

SymExprAttr tensorBytesExpr(RankedTensorType type) {
  MLIRContext *context = type.getContext();
  return dimMul(dimProduct(getDims(type), context),
                dimConst(context, elementBytes(type.getElementType())));
}

std::optional<int64_t> tensorBytes(RankedTensorType type, const SymbolValues &symbols) {
  auto lookup = [&](StringRef name) -> std::optional<int64_t> {
    auto it = symbols.find(name);
    if (it == symbols.end())
      return std::nullopt;
    return it->second;
  };
  // Per dim, so products past the expression degree limit still evaluate.
  int64_t bytes = elementBytes(type.getElementType());
  for (Dim d : getDims(type)) {
    std::optional<int64_t> size = evaluateDim(d, lookup);
    if (!size)
      return std::nullopt;
    bytes *= std::max<int64_t>(*size, 0);
  }
  return bytes;
}

std::string formatBytes(int64_t bytes) {
  std::string text;
  llvm::raw_string_ostream os(text);
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  unsigned unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0)
    os << bytes << " B";
  else
    os << llvm::format(value < 10    ? "%.2f %s"
                       : value < 100 ? "%.1f %s"
                                     : "%.0f %s",
                       value, units[unit]);
  return text;
}

std::vector<unsigned> MemoryPlan::liveAt(int64_t point) const {
  std::vector<unsigned> live;
  for (unsigned i = 0; i < tensors.size(); ++i) {
    const PlannedTensor &t = tensors[i];
    if (!t.view && t.def <= point && point <= t.occupiedUntil)
      live.push_back(i);
  }
  std::sort(live.begin(), live.end(), [&](unsigned a, unsigned b) {
    if (tensors[a].bytes != tensors[b].bytes)
      return tensors[a].bytes > tensors[b].bytes;
    return a < b;
  });
  return live;
}

bool isJointFunction(func::FuncOp func) {
  bool gradients = false, paramResults = false, paramArgs = false;
  for (unsigned i = 0, e = func.getNumResults(); i < e; ++i) {
    gradients |= static_cast<bool>(func.getResultAttr(i, "kiln.grad_of"));
    paramResults |= static_cast<bool>(func.getResultAttr(i, "kiln.param"));
  }
  // An init program returns parameters too, but takes none.
  for (unsigned i = 0, e = func.getNumArguments(); i < e; ++i)
    paramArgs |= static_cast<bool>(func.getArgAttr(i, "kiln.param"));
  return gradients || (paramResults && paramArgs);
}

namespace {

/// Ops whose result is the operand's bytes under another shape.
bool isView(Operation *op) { return llvm::isa<ReshapeOp, SqueezeOp, UnsqueezeOp>(op); }

/// Ops that read element i of each same-shaped operand only to write
/// element i of the result, so the result may overwrite such an operand.
bool isElementwise(Operation *op) {
  return op->getNumResults() == 1 &&
         (op->hasTrait<OpTrait::Elementwise>() ||
          llvm::isa<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, SelectOp, EqOp, NeOp, LtOp,
                    LeOp, GtOp, GeOp, AndOp, OrOp, XorOp>(op));
}

/// The values the loss depends on, when `func` is a joint forward/backward
/// function (it returns gradients or updated parameters); else empty.
llvm::DenseSet<Operation *> forwardOps(func::FuncOp func) {
  llvm::DenseSet<Operation *> forward;
  auto ret = llvm::dyn_cast<func::ReturnOp>(func.getBody().front().getTerminator());
  if (!isJointFunction(func) || !ret || ret.getNumOperands() == 0)
    return forward;
  SmallVector<Value> work = {ret.getOperand(0)};
  while (!work.empty()) {
    Operation *def = work.pop_back_val().getDefiningOp();
    if (!def || !forward.insert(def).second)
      continue;
    for (Value operand : def->getOperands())
      work.push_back(operand);
  }
  return forward;
}

class Planner {
public:
  Planner(func::FuncOp func, const SymbolValues &symbols) : func(func) {
    plan.function = func.getSymName().str();
    plan.symbols = symbols;
  }

  MemoryPlan run() {
    Block &body = func.getBody().front();
    for (Operation &op : body)
      index[&op] = plan.numPoints++;
    forward = forwardOps(func);
    llvm::DenseSet<Value> gradients;
    auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
    for (unsigned i = 0, e = func.getNumResults(); i < e; ++i)
      if (func.getResultAttr(i, "kiln.grad_of"))
        gradients.insert(ret.getOperand(i));

    for (BlockArgument arg : body.getArguments()) {
      unsigned i = arg.getArgNumber();
      MemoryCategory category = func.getArgAttr(i, "kiln.param")   ? MemoryCategory::Parameter
                                : func.getArgAttr(i, "kiln.state") ? MemoryCategory::OptimizerState
                                                                   : MemoryCategory::Input;
      // The step returns new parameters and state, so their buffers are
      // donated: an update may overwrite them in place.
      addTensor(arg, category, -1, /*donated=*/category != MemoryCategory::Input);
    }
    for (Operation &op : body.without_terminator()) {
      int64_t point = index[&op];
      for (Value result : op.getResults()) {
        if (llvm::isa<ParameterOp>(op))
          addTensor(result, MemoryCategory::Parameter, point, false);
        else if (llvm::isa<ConstantOp>(op))
          addTensor(result, MemoryCategory::Constant, point, false);
        else if (gradients.contains(result))
          addTensor(result, MemoryCategory::Gradient, point, false);
        else if (forward.contains(&op) && usedByBackward(result))
          addTensor(result, MemoryCategory::Activation, point, false);
        else
          addTensor(result, MemoryCategory::Workspace, point, false);
      }
    }
    for (Operation &op : body.without_terminator())
      if (RankedTensorType chunk = scratchOf(&op))
        addScratch(&op, chunk, index[&op]);
    assignBuffers(body);
    sweep();
    place();
    return std::move(plan);
  }

private:
  int64_t pointOf(Operation *user) {
    Operation *top = func.getBody().front().findAncestorOpInBlock(*user);
    return top ? index.lookup(top) : plan.numPoints - 1;
  }

  bool usedByBackward(Value v) {
    for (Operation *user : v.getUsers()) {
      Operation *top = func.getBody().front().findAncestorOpInBlock(*user);
      if (top && !forward.contains(top) && !llvm::isa<func::ReturnOp>(top))
        return true;
    }
    return false;
  }

  /// The [chunk, vocab] logits chunk the fused LM head computes in: fp32,
  /// or bf16 under bf16_logits (kiln-lower-to-step allocates the same).
  static RankedTensorType scratchOf(Operation *op) {
    auto chunk = [](auto fused) {
      auto weight = llvm::cast<RankedTensorType>(fused.getWeight().getType());
      int64_t vocab = weight.getDimSize(fused.getTransposeWeight() ? 0 : 1);
      int64_t rows = static_cast<int64_t>(fused.getChunkTokens());
      MLIRContext *ctx = fused.getContext();
      Type element = fused.getBf16Logits() ? Type(BFloat16Type::get(ctx))
                                           : Type(Float32Type::get(ctx));
      return RankedTensorType::get({rows, vocab}, element);
    };
    if (auto fused = llvm::dyn_cast<LinearCrossEntropyOp>(op))
      return chunk(fused);
    if (auto fused = llvm::dyn_cast<LinearCrossEntropyGradOp>(op))
      return chunk(fused);
    return nullptr;
  }

  void addScratch(Operation *op, RankedTensorType type, int64_t point) {
    PlannedTensor t;
    t.value = op->getResult(0);
    t.category = MemoryCategory::Workspace;
    t.scratch = true;
    t.scratchType = type;
    t.bytesExpr = tensorBytesExpr(type);
    t.bytes = tensorBytes(type, plan.symbols).value_or(0);
    t.def = t.lastUse = point;
    scratchAt[point].push_back(plan.tensors.size());
    plan.tensors.push_back(t);
  }

  void addTensor(Value v, MemoryCategory category, int64_t def, bool donated) {
    auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
    if (!type)
      return;
    PlannedTensor t;
    t.value = v;
    t.category = category;
    t.bytesExpr = tensorBytesExpr(type);
    std::optional<int64_t> bytes = tensorBytes(type, plan.symbols);
    if (!bytes) {
      for (Dim d : getDims(type))
        for (StringRef s : dimSymbols(d))
          if (!plan.symbols.count(s) && !llvm::is_contained(plan.unboundSymbols, s.str()))
            plan.unboundSymbols.push_back(s.str());
    }
    t.bytes = bytes.value_or(0);
    t.def = def;
    t.lastUse = def;
    for (Operation *user : v.getUsers())
      t.lastUse = std::max(t.lastUse, pointOf(user));
    // Donated buffers keep their real last use: an update may take them
    // over there.
    if (isPersistent(category) && !donated)
      t.lastUse = plan.numPoints - 1;
    tensorOf[v] = plan.tensors.size();
    if (donated)
      donatedTensors.insert(plan.tensors.size());
    plan.tensors.push_back(t);
  }

  unsigned newBuffer(unsigned tensor) {
    PlannedTensor &t = plan.tensors[tensor];
    PlannedBuffer b;
    b.category = t.category;
    b.bytesExpr = t.bytesExpr;
    b.bytes = t.bytes;
    b.persistent = isPersistent(t.category);
    b.start = b.persistent ? -1 : t.def;
    b.end = b.persistent ? plan.numPoints - 1 : t.lastUse;
    plan.buffers.push_back(b);
    bufferLastUse.push_back(t.lastUse);
    donatedBuffers.push_back(donatedTensors.contains(tensor));
    return plan.buffers.size() - 1;
  }

  void join(unsigned tensor, unsigned buffer) {
    PlannedTensor &t = plan.tensors[tensor];
    t.buffer = buffer;
    bufferLastUse[buffer] = std::max(bufferLastUse[buffer], t.lastUse);
    PlannedBuffer &b = plan.buffers[buffer];
    if (!b.persistent)
      b.end = std::max(b.end, t.lastUse);
  }

  /// Views join their operand's buffer; an elementwise result joins an
  /// operand's buffer when every tensor in it dies at this op and the shapes
  /// match; everything else gets its own buffer.
  void assignBuffers(Block &body) {
    for (unsigned i = 0; i < plan.tensors.size(); ++i)
      if (llvm::isa<BlockArgument>(plan.tensors[i].value))
        plan.tensors[i].buffer = newBuffer(i);
    for (Operation &op : body.without_terminator()) {
      int64_t point = index[&op];
      for (Value result : op.getResults()) {
        auto it = tensorOf.find(result);
        if (it == tensorOf.end())
          continue;
        unsigned tensor = it->second;
        PlannedTensor &t = plan.tensors[tensor];
        if (isView(&op) && tensorOf.count(op.getOperand(0))) {
          t.view = true;
          unsigned source = tensorOf[op.getOperand(0)];
          unsigned storage = storageOf.count(source) ? storageOf.lookup(source) : source;
          storageOf[tensor] = storage;
          // A view kept for backward keeps its storage for backward.
          if (t.category == MemoryCategory::Activation &&
              plan.tensors[storage].category == MemoryCategory::Workspace)
            plan.tensors[storage].category = MemoryCategory::Activation;
          join(tensor, plan.tensors[source].buffer);
          continue;
        }
        std::optional<unsigned> reuse;
        if (isElementwise(&op)) {
          auto resultType = llvm::cast<RankedTensorType>(result.getType());
          for (Value operand : op.getOperands()) {
            auto found = tensorOf.find(operand);
            if (found == tensorOf.end())
              continue;
            const PlannedTensor &source = plan.tensors[found->second];
            unsigned buffer = source.buffer;
            const PlannedBuffer &b = plan.buffers[buffer];
            auto operandType = llvm::cast<RankedTensorType>(operand.getType());
            bool writable = !b.persistent || donatedBuffers[buffer];
            if (writable && bufferLastUse[buffer] == point && !takenAt.count({buffer, point}) &&
                getDims(operandType) == getDims(resultType) &&
                elementBytes(operandType.getElementType()) ==
                    elementBytes(resultType.getElementType())) {
              reuse = buffer;
              break;
            }
          }
        }
        if (reuse) {
          t.inPlace = true;
          ++plan.inPlaceUpdates;
          takenAt.insert({*reuse, point});
          join(tensor, *reuse);
        } else {
          t.buffer = newBuffer(tensor);
        }
      }
    }
    for (auto &[point, scratch] : scratchAt)
      for (unsigned tensor : scratch)
        plan.tensors[tensor].buffer = newBuffer(tensor);
    // Occupancy: a tensor holds its buffer until the next tensor written
    // over it in place, or to the buffer's end.
    std::vector<std::vector<unsigned>> members(plan.buffers.size());
    for (unsigned i = 0; i < plan.tensors.size(); ++i)
      if (!plan.tensors[i].view)
        members[plan.tensors[i].buffer].push_back(i);
    for (unsigned b = 0; b < members.size(); ++b) {
      std::vector<unsigned> &list = members[b];
      std::sort(list.begin(), list.end(), [&](unsigned x, unsigned y) {
        return std::make_pair(plan.tensors[x].def, x) < std::make_pair(plan.tensors[y].def, y);
      });
      int64_t end = plan.buffers[b].persistent ? plan.numPoints - 1
                                               : std::max(plan.buffers[b].end, bufferLastUse[b]);
      plan.buffers[b].end = end;
      for (unsigned k = 0; k < list.size(); ++k) {
        PlannedTensor &t = plan.tensors[list[k]];
        t.occupiedUntil = k + 1 < list.size() ? plan.tensors[list[k + 1]].def - 1 : end;
        // Tensors of a persistent buffer are accounted as its category.
        if (plan.buffers[b].persistent)
          t.category = plan.buffers[b].category;
      }
    }
  }

  /// Live bytes per category at every point; the peak is the point with
  /// the most arena bytes.
  void sweep() {
    int64_t points = plan.numPoints;
    std::vector<std::array<int64_t, kNumMemoryCategories>> delta(points + 1);
    for (const PlannedTensor &t : plan.tensors) {
      if (t.view)
        continue;
      auto c = static_cast<unsigned>(t.category);
      if (isPersistent(t.category))
        continue; // Counted once per buffer below.

      delta[std::max<int64_t>(t.def, 0)][c] += t.bytes;
      delta[t.occupiedUntil + 1][c] -= t.bytes;
    }
    std::array<int64_t, kNumMemoryCategories> live{};
    for (int64_t p = 0; p < points; ++p) {
      int64_t total = 0;
      for (unsigned c = 0; c < kNumMemoryCategories; ++c) {
        live[c] += delta[p][c];
        total += live[c];
      }
      plan.activationPeakBytes = std::max(plan.activationPeakBytes,
                                          live[static_cast<unsigned>(MemoryCategory::Activation)]);
      if (total > plan.livePeakBytes || p == 0) {
        plan.livePeakBytes = total;
        plan.peakPoint = p;
        plan.atPeak = live;
      }
    }
    for (const PlannedBuffer &b : plan.buffers) {
      if (!b.persistent)
        continue;
      plan.persistentBytes += b.bytes;
      plan.atPeak[static_cast<unsigned>(b.category)] += b.bytes;
    }
    for (const PlannedTensor &t : plan.tensors) {
      if (t.view)
        continue;
      if (t.category == MemoryCategory::Activation) {
        ++plan.savedActivations;
        plan.savedActivationBytes += t.bytes;
      }
    }
  }

  /// Greedy by size with best fit: each buffer, largest first, goes into the
  /// smallest gap between the placed buffers it overlaps in time.
  void place() {
    std::vector<unsigned> order;
    for (unsigned b = 0; b < plan.buffers.size(); ++b)
      if (!plan.buffers[b].persistent)
        order.push_back(b);
    std::sort(order.begin(), order.end(), [&](unsigned x, unsigned y) {
      const PlannedBuffer &a = plan.buffers[x], &b = plan.buffers[y];
      if (a.bytes != b.bytes)
        return a.bytes > b.bytes;
      if (a.start != b.start)
        return a.start < b.start;
      return x < y;
    });
    MLIRContext *context = func.getContext();
    std::vector<unsigned> placed;
    for (unsigned current : order) {
      PlannedBuffer &buffer = plan.buffers[current];
      std::vector<unsigned> overlapping;
      for (unsigned other : placed) {
        const PlannedBuffer &o = plan.buffers[other];
        if (o.start <= buffer.end && buffer.start <= o.end)
          overlapping.push_back(other);
      }
      std::sort(overlapping.begin(), overlapping.end(), [&](unsigned x, unsigned y) {
        return plan.buffers[x].offset < plan.buffers[y].offset;
      });
      int64_t gapStart = 0, bestOffset = -1, bestGap = 0;
      SymExprAttr gapExpr = dimConst(context, 0), bestExpr;
      for (unsigned other : overlapping) {
        const PlannedBuffer &o = plan.buffers[other];
        int64_t gap = o.offset - gapStart;
        if (gap >= buffer.bytes && (bestOffset < 0 || gap < bestGap)) {
          bestOffset = gapStart;
          bestGap = gap;
          bestExpr = gapExpr;
        }
        if (o.offset + o.bytes > gapStart) {
          gapStart = o.offset + o.bytes;
          gapExpr = dimAdd(o.offsetExpr, o.bytesExpr);
        }
      }
      if (bestOffset < 0) {
        bestOffset = gapStart;
        bestExpr = gapExpr;
      }
      buffer.offset = bestOffset;
      buffer.offsetExpr = bestExpr;
      plan.arenaBytes = std::max(plan.arenaBytes, bestOffset + buffer.bytes);
      placed.push_back(current);
    }
  }

  func::FuncOp func;
  MemoryPlan plan;
  llvm::DenseMap<Operation *, int64_t> index;
  llvm::DenseSet<Operation *> forward;
  llvm::DenseMap<Value, unsigned> tensorOf;
  llvm::DenseMap<unsigned, unsigned> storageOf; // view -> the tensor it aliases
  llvm::DenseSet<unsigned> donatedTensors;
  std::vector<int64_t> bufferLastUse;
  std::vector<bool> donatedBuffers;
  std::set<std::pair<unsigned, int64_t>> takenAt;
  std::map<int64_t, std::vector<unsigned>> scratchAt;
};

std::string describe(const PlannedTensor &t, func::FuncOp func) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << shapeToString(t.scratch ? t.scratchType : llvm::cast<RankedTensorType>(t.value.getType()))
     << "  ";
  if (auto arg = llvm::dyn_cast<BlockArgument>(t.value)) {
    os << "argument " << arg.getArgNumber();
    for (StringRef name : {"kiln.param", "kiln.state", "kiln.name"})
      if (auto attr = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), name))
        os << " \"" << attr.getValue() << "\"";
    return text;
  }
  Operation *op = t.value.getDefiningOp();
  os << op->getName().getStringRef();
  if (auto param = llvm::dyn_cast<ParameterOp>(op))
    os << " \"" << param.getName() << "\"";
  if (op->hasAttr("kiln.recomputed"))
    os << " (recomputed)";
  if (t.scratch)
    os << " (chunk scratch)";
  if (t.inPlace)
    os << " (in place)";
  // The ONNX node name is what users recognize; other locations print whole.
  os << "  ";
  if (auto name = llvm::dyn_cast<NameLoc>(op->getLoc()))
    os << name.getName().getValue();
  else
    op->getLoc().print(os);
  return text;
}

} // namespace

MemoryPlan planMemory(func::FuncOp func, const SymbolValues &symbols) {
  return Planner(func, symbols).run();
}

void printMemoryReport(const MemoryPlan &plan, llvm::raw_ostream &os, unsigned topK) {
  func::FuncOp func;
  if (!plan.tensors.empty()) {
    Value first = plan.tensors.front().value;
    Operation *owner = first.getParentBlock()->getParentOp();
    func = llvm::dyn_cast<func::FuncOp>(owner);
  }
  os << "memory plan for @" << plan.function;
  if (!plan.symbols.empty()) {
    std::vector<std::string> bindings;
    for (const auto &entry : plan.symbols)
      bindings.push_back(entry.getKey().str() + "=" + std::to_string(entry.getValue()));
    std::sort(bindings.begin(), bindings.end());
    os << " at " << llvm::join(bindings, ", ");
  }
  os << "\n";
  auto row = [&](StringRef label, int64_t bytes, StringRef note = "") {
    os << "  " << llvm::left_justify(label, 24) << llvm::right_justify(formatBytes(bytes), 11);
    if (!note.empty())
      os << "  " << note;
    os << "\n";
  };
  std::string peakOp;
  if (func) {
    Operation *op = &*std::next(func.getBody().front().begin(), plan.peakPoint);
    peakOp = " (" + op->getName().getStringRef().str() + ")";
  }
  row("planned peak", plan.peakBytes(),
      "parameters, state, inputs + arena; most live at op " + std::to_string(plan.peakPoint) +
          peakOp);
  // QLoRA's frozen weights as the plan holds them: 4-bit codes plus their
  // absmax (and double quantization's codes, scales and offsets).
  auto printNf4 = [&]() {
    if (!func)
      return;
    int64_t nf4Bytes = 0, nf4Weights = 0, nf4Elements = 0;
    for (const PlannedTensor &t : plan.tensors) {
      if (t.category != MemoryCategory::Parameter || t.view)
        continue;
      // A frozen parameter is read by kiln.parameter, a trained one is an
      // argument of the step.
      StringAttr name;
      if (auto param = t.value.getDefiningOp<ParameterOp>())
        name = param.getNameAttr();
      else if (auto arg = llvm::dyn_cast<BlockArgument>(t.value);
               arg && arg.getOwner()->getParentOp() == func)
        name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), "kiln.param");
      if (!name)
        continue;
      if (name.getValue().ends_with(".nf4_codes")) {
        ++nf4Weights;
        nf4Elements += 2 * t.bytes; // two codes per byte
        nf4Bytes += t.bytes;
      } else if (name.getValue().contains(".nf4_absmax")) {
        nf4Bytes += t.bytes;
      }
    }
    if (nf4Weights) {
      std::string perParam;
      llvm::raw_string_ostream(perParam)
          << llvm::format("%.3f", static_cast<double>(nf4Bytes) / nf4Elements);
      row("    of which nf4", nf4Bytes,
          std::to_string(nf4Weights) + " weights, " + std::to_string(nf4Elements) +
              " parameters: " + perParam + " bytes per parameter (codes + absmax)");
    }
  };
  for (unsigned c = 0; c < kNumMemoryCategories; ++c) {
    auto category = static_cast<MemoryCategory>(c);
    row(("  " + categoryName(category)).str(), plan.atPeak[c],
        category == MemoryCategory::Activation ? "forward values kept for backward" : "");
    if (category == MemoryCategory::Parameter)
      printNf4();
  }
  row("  arena fragmentation", plan.arenaBytes - plan.livePeakBytes);
  unsigned arenaBuffers =
      llvm::count_if(plan.buffers, [](const PlannedBuffer &b) { return !b.persistent; });
  row("arena", plan.arenaBytes,
      std::to_string(arenaBuffers) + " buffers, " + std::to_string(plan.inPlaceUpdates) +
          " in-place updates");
  row("activation peak", plan.activationPeakBytes,
      std::to_string(plan.savedActivations) + " saved tensors, " +
          formatBytes(plan.savedActivationBytes) + " in all");

  std::vector<unsigned> live = plan.liveAt(plan.peakPoint);
  os << "  largest arena tensors live at the peak:\n";
  unsigned shown = 0;
  for (unsigned i : live) {
    const PlannedTensor &t = plan.tensors[i];
    if (isPersistent(t.category) || shown == topK)
      continue;
    ++shown;
    os << "    " << llvm::right_justify(formatBytes(t.bytes), 11) << "  "
       << llvm::left_justify(categoryName(t.category), 15) << "  " << describe(t, func) << "\n";
  }
  os << "  largest persistent tensors:\n";
  shown = 0;
  for (unsigned i : live) {
    const PlannedTensor &t = plan.tensors[i];
    if (!isPersistent(t.category) || shown == 3)
      continue;
    ++shown;
    os << "    " << llvm::right_justify(formatBytes(t.bytes), 11) << "  "
       << llvm::left_justify(categoryName(t.category), 15) << "  " << describe(t, func) << "\n";
  }
}

llvm::json::Value memoryPlanToJSON(const MemoryPlan &plan) {
  auto exprText = [](SymExprAttr e) -> llvm::json::Value {
    if (!e)
      return nullptr;
    return dimToString(e);
  };
  llvm::json::Object symbols;
  for (const auto &entry : plan.symbols)
    symbols[entry.getKey()] = entry.getValue();
  llvm::json::Object categories;
  for (unsigned c = 0; c < kNumMemoryCategories; ++c)
    categories[categoryName(static_cast<MemoryCategory>(c))] = plan.atPeak[c];
  llvm::json::Array buffers;
  for (const PlannedBuffer &b : plan.buffers)
    buffers.push_back(llvm::json::Object{
        {"category", categoryName(b.category)},
        {"bytes", b.bytes},
        {"bytes_expr", exprText(b.bytesExpr)},
        {"persistent", b.persistent},
        {"offset", b.persistent ? llvm::json::Value(nullptr) : b.offset},
        {"offset_expr", b.persistent ? llvm::json::Value(nullptr) : exprText(b.offsetExpr)},
        {"start", b.start},
        {"end", b.end}});
  llvm::json::Array tensors;
  for (const PlannedTensor &t : plan.tensors) {
    std::string where;
    llvm::raw_string_ostream os(where);
    if (auto arg = llvm::dyn_cast<BlockArgument>(t.value))
      os << "arg" << arg.getArgNumber();
    else
      os << t.value.getDefiningOp()->getName().getStringRef();
    tensors.push_back(llvm::json::Object{{"defined_by", where},
                                         {"category", categoryName(t.category)},
                                         {"bytes", t.bytes},
                                         {"buffer", t.buffer},
                                         {"def", t.def},
                                         {"last_use", t.lastUse},
                                         {"in_place", t.inPlace},
                                         {"view", t.view}});
  }
  return llvm::json::Object{{"function", plan.function},
                            {"symbols", std::move(symbols)},
                            {"peak_bytes", plan.peakBytes()},
                            {"persistent_bytes", plan.persistentBytes},
                            {"arena_bytes", plan.arenaBytes},
                            {"live_peak_bytes", plan.livePeakBytes},
                            {"peak_point", plan.peakPoint},
                            {"at_peak", std::move(categories)},
                            {"activation_peak_bytes", plan.activationPeakBytes},
                            {"buffers", std::move(buffers)},
                            {"tensors", std::move(tensors)}};
}

} // namespace kiln
