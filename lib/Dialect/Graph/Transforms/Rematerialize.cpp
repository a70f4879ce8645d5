//===- Rematerialize.cpp - Recompute activations in the backward pass -----===//
//
// Chooses which forward values the backward pass keeps and which it
// recomputes, by a minimum cut over the joint forward/backward graph: every
// forward value is an edge weighted by its bytes, the backward pass's reads
// are tied to the sink, and ops that may not be recomputed are tied to the
// source. The cut is the cheapest set of values to keep; everything behind
// it is cloned next to its backward uses. Contractions (matmul, attention)
// join the recomputable set only when a byte budget demands it, cheapest
// FLOPs per byte first.
//
//===----------------------------------------------------------------------===//

#include "kiln/Analysis/CostModel.h"
#include "kiln/Analysis/MemoryPlan.h"
#include "kiln/Analysis/MinCut.h"
#include "kiln/Analysis/StepTime.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "mlir/IR/IRMapping.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <functional>
#include <limits>
#include <optional>

namespace kiln {
#define GEN_PASS_DEF_REMATERIALIZEPASS
#include "kiln/Dialect/Graph/Passes.h.inc"
} // namespace kiln

using namespace mlir;
using namespace kiln;

namespace {

/// Symbols nobody gave a value for size the cut at this (relative costs
/// only; a byte budget refuses to guess).
constexpr int64_t kSampleSymbolValue = 1024;

/// `auto` lets contractions be recomputed while the estimated step time
/// (StepTime.h) grows by at most this fraction: 8.5%, so that the measured
/// step stays within +10% (on the H200 the bench 1b step's auto plans ran up
/// to 1.3 points above the estimate's growth once q/k/v shared their GEMMs,
/// docs/memory.md).
constexpr double kAutoTimeBound = 0.085;

/// What one recomputed op must save, as a fraction of the bytes the
/// backward pass reads without remat: the cut's price of a recomputation
/// (a kernel launch at least). Scale-free, so that tiny graphs and the 1b
/// step alike keep their few-KiB values (the LoRA weights' casts and pads,
/// 3 MiB on 1b) rather than recompute them.
constexpr int64_t kRecomputePenaltyDivisor = 4096;

/// The joint function split into its forward part (what the loss depends
/// on) and the rest, by position so a clone of the function maps 1:1.
struct Joint {
  std::vector<Operation *> ops; // the body, terminator excluded
  llvm::DenseMap<Operation *, unsigned> position;
  std::vector<bool> forward;

  explicit Joint(func::FuncOp func) {
    Block &body = func.getBody().front();
    for (Operation &op : body.without_terminator()) {
      position[&op] = ops.size();
      ops.push_back(&op);
    }
    forward.assign(ops.size(), false);
    auto ret = llvm::cast<func::ReturnOp>(body.getTerminator());
    SmallVector<Value> work = {ret.getOperand(0)};
    while (!work.empty()) {
      Operation *def = work.pop_back_val().getDefiningOp();
      if (!def || !position.count(def) || forward[position[def]])
        continue;
      forward[position[def]] = true;
      llvm::append_range(work, def->getOperands());
    }
  }

  bool isForward(Operation *op) const {
    auto it = position.find(op);
    return it != position.end() && forward[it->second];
  }
  /// Forward values that are always at hand: parameters and constants.
  static bool isFree(Operation *op) { return llvm::isa<ParameterOp, ConstantOp>(op); }
  /// The top-level ops after the forward part that read forward values.
  bool isBackward(Operation *op) const {
    auto it = position.find(op);
    return it != position.end() && !forward[it->second];
  }
};

/// Which forward ops to recompute; everything else stays as it is.
struct Cut {
  std::vector<bool> recompute; // by position
  int64_t savedBytes = 0;      // forward values the backward still reads
  unsigned savedTensors = 0;
  bool operator==(const Cut &other) const { return recompute == other.recompute; }
};

int64_t bytesOf(Value v, const SymbolValues &symbols) {
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  return type ? tensorBytes(type, symbols).value_or(0) : 0;
}

/// Pointwise, cast and data-movement ops: recomputed in the backward pass
/// they fuse into the kernel that reads them (torch.compile's partitioner
/// makes the same choice by default). Norms, reductions, gathers and
/// contractions are not in this class.
bool isPointwiseOrShape(Operation *op) {
  return op->getNumResults() == 1 &&
         (op->hasTrait<OpTrait::Elementwise>() ||
          llvm::isa<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, SelectOp, EqOp, NeOp, LtOp,
                    LeOp, GtOp, GeOp, AndOp, OrOp, XorOp, CastOp, ReshapeOp, SqueezeOp, UnsqueezeOp,
                    TransposeOp, SliceOp, ConcatOp, PadOp, ExpandOp>(op));
}

bool mayRecompute(Operation *op, bool pointwiseOnly) {
  // The fused LM head's gradient op yields the loss, so it counts as forward;
  // recomputing it would run the head twice for a few MiB of hidden_grad.
  return isPure(op) && op->getNumRegions() == 0 &&
         !llvm::isa<OpaqueOp, LinearCrossEntropyOp, LinearCrossEntropyGradOp>(op) &&
         !Joint::isFree(op) && (!pointwiseOnly || isPointwiseOrShape(op));
}

/// Forward values read by a backward op.
llvm::DenseSet<Value> backwardReads(const Joint &joint) {
  llvm::DenseSet<Value> reads;
  for (Operation *op : joint.ops) {
    if (!joint.isBackward(op))
      continue;
    op->walk([&](Operation *nested) {
      for (Value operand : nested->getOperands())
        if (Operation *def = operand.getDefiningOp())
          if (joint.isForward(def) && !Joint::isFree(def))
            reads.insert(operand);
    });
  }
  return reads;
}

/// The minimum cut. Nodes: one per forward op, and an in/out pair per
/// result joined by an edge of the result's bytes (+1, so that among equal
/// byte counts fewer tensors win). Operand edges and result edges are
/// infinite; ops that must not be recomputed hang off the source, values
/// the backward reads off the sink. Values whose in-node stays on the
/// source side are kept; ops on the sink side that feed a backward read
/// are recomputed.
Cut solveCut(const Joint &joint, const std::vector<bool> &banned, const SymbolValues &symbols,
             bool pointwiseOnly = false) {
  llvm::DenseSet<Value> reads = backwardReads(joint);
  int64_t readBytes = 0;
  for (Value v : reads)
    readBytes += bytesOf(v, symbols);
  int64_t penalty = std::max<int64_t>(1, readBytes / kRecomputePenaltyDivisor);
  FlowNetwork network;
  unsigned source = network.addNode(), sink = network.addNode();
  llvm::DenseMap<Operation *, unsigned> opNode;
  llvm::DenseMap<Value, std::pair<unsigned, unsigned>> valueNodes;
  llvm::DenseMap<Value, unsigned> valueEdge;
  for (unsigned i = 0; i < joint.ops.size(); ++i) {
    Operation *op = joint.ops[i];
    if (!joint.forward[i] || Joint::isFree(op))
      continue;
    unsigned node = network.addNode();
    opNode[op] = node;
    if (banned[i] || !mayRecompute(op, pointwiseOnly))
      network.addEdge(source, node, FlowNetwork::kInfinite);
    else
      // Recomputing costs a kernel launch at least: an op is recomputed only
      // where that saves more than the penalty.
      network.addEdge(source, node, penalty);
    for (Value operand : op->getOperands()) {
      auto it = valueNodes.find(operand);
      if (it != valueNodes.end())
        network.addEdge(it->second.second, node, FlowNetwork::kInfinite);
    }
    for (Value result : op->getResults()) {
      unsigned in = network.addNode(), out = network.addNode();
      network.addEdge(node, in, FlowNetwork::kInfinite);
      valueEdge[result] = network.addEdge(in, out, bytesOf(result, symbols) + 1);
      valueNodes[result] = {in, out};
    }
  }
  for (Value v : reads)
    network.addEdge(valueNodes[v].second, sink, FlowNetwork::kInfinite);
  network.maxFlow(source, sink);
  // The latest minimum cut: among equally cheap choices, keep values
  // closest to the backward pass and recompute the least.
  std::vector<bool> side = network.reachesSink(sink);
  side.flip();

  Cut cut;
  cut.recompute.assign(joint.ops.size(), false);
  // Walk back from every backward read through values that are not kept.
  SmallVector<Value> work(reads.begin(), reads.end());
  llvm::DenseSet<Value> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    if (!seen.insert(v).second)
      continue;
    auto nodes = valueNodes.find(v);
    if (nodes == valueNodes.end())
      continue; // an argument or a free value
    if (side[nodes->second.first]) {
      ++cut.savedTensors;
      cut.savedBytes += bytesOf(v, symbols);
      continue;
    }
    Operation *op = v.getDefiningOp();
    cut.recompute[joint.position.lookup(op)] = true;
    llvm::append_range(work, op->getOperands());
  }
  return cut;
}

/// Clones the recomputed ops right before their first backward use and
/// points every backward use at the clones. Returns the recomputed FLOPs.
int64_t applyCut(const Joint &joint, const Cut &cut, const SymbolValues &symbols) {
  llvm::DenseMap<Operation *, Operation *> clones;
  int64_t extraFlops = 0;
  std::function<Value(Value, Operation *)> materialize = [&](Value v, Operation *before) -> Value {
    Operation *def = v.getDefiningOp();
    if (!def || !joint.isForward(def) || !cut.recompute[joint.position.lookup(def)])
      return v;
    Operation *clone = clones.lookup(def);
    if (!clone) {
      // Operands first (recursion grows `clones`: no reference into it here).
      IRMapping mapping;
      for (Value operand : def->getOperands())
        mapping.map(operand, materialize(operand, before));
      OpBuilder builder(before);
      clone = builder.clone(*def, mapping);
      clone->setAttr("kiln.recomputed", builder.getUnitAttr());
      extraFlops += estimateFlops(def, symbols);
      clones[def] = clone;
    }
    return clone->getResult(llvm::cast<OpResult>(v).getResultNumber());
  };
  for (Operation *op : joint.ops) {
    if (!joint.isBackward(op) || op->hasAttr("kiln.recomputed"))
      continue;
    op->walk([&](Operation *nested) {
      for (OpOperand &use : nested->getOpOperands())
        use.set(materialize(use.get(), op));
    });
  }
  return extraFlops;
}

struct RematerializePass final : kiln::impl::RematerializePassBase<RematerializePass> {
  using RematerializePassBase::RematerializePassBase;

  /// Values for every size symbol: `symbols`, then the maxima of the range
  /// guards, then (only without a byte budget) a sample value.
  FailureOr<SymbolValues> resolveSymbols(func::FuncOp func, bool needExact) {
    SymbolValues values;
    SmallVector<StringRef> pairs;
    StringRef(symbols).split(pairs, ',', -1, /*KeepEmpty=*/false);
    for (StringRef pair : pairs) {
      auto [name, text] = pair.trim().split('=');
      int64_t value;
      if (name.empty() || text.trim().getAsInteger(10, value) || value < 1) {
        func.emitError("kiln-remat: bad symbol value '") << pair << "' (want name=N)";
        return failure();
      }
      values[name.trim()] = value;
    }
    if (auto guards = func->getAttrOfType<ArrayAttr>("kiln.guards")) {
      for (auto guard : guards.getAsRange<DictionaryAttr>()) {
        auto kind = guard.getAs<StringAttr>("kind");
        auto expr = guard.getAs<SymExprAttr>("expr");
        auto max = guard.getAs<IntegerAttr>("max");
        // Symbols without a user range carry the int32 bound: no size.
        if (!kind || kind.getValue() != "range" || !expr || !max ||
            max.getInt() >= std::numeric_limits<int32_t>::max())
          continue;
        SmallVector<StringRef> names = dimSymbols(expr);
        if (names.size() == 1 && expr == SymExprAttr::getSymbol(&getContext(), names[0]))
          values.try_emplace(names[0], max.getInt());
      }
    }
    std::vector<std::string> missing;
    auto visit = [&](Type type) {
      if (auto tensor = llvm::dyn_cast<RankedTensorType>(type))
        for (Dim d : getDims(tensor))
          for (StringRef s : dimSymbols(d))
            if (!values.count(s) && !llvm::is_contained(missing, s.str()))
              missing.push_back(s.str());
    };
    for (Type t : func.getArgumentTypes())
      visit(t);
    func.walk([&](Operation *op) {
      for (Type t : op->getResultTypes())
        visit(t);
    });
    if (!missing.empty() && needExact) {
      func.emitError("kiln-remat: budget=")
          << budget << " needs a value for " << llvm::join(missing, ", ")
          << " (give --memory-report or --dynamic ranges, or symbols=)";
      return failure();
    }
    for (const std::string &s : missing)
      values[s] = kSampleSymbolValue;
    return values;
  }

  /// The planned peak and the estimated step seconds with a cut applied (on
  /// a copy of the function).
  struct Trial {
    int64_t peak = 0;
    double seconds = 0;
  };
  Trial tryCut(func::FuncOp func, const Cut &cut, const SymbolValues &values) {
    auto trial = llvm::cast<func::FuncOp>(func->clone());
    Joint joint(trial);
    applyCut(joint, cut, values);
    Trial result{planMemory(trial, values).peakBytes(), estimateStepSeconds(trial, values)};
    trial->erase();
    return result;
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (budget == "none" || func.isExternal() || !func.getBody().hasOneBlock())
      return;
    if (!isJointFunction(func))
      return; // Nothing is kept for a backward pass (e.g. @kiln_init).

    double budgetGiB = 0;
    bool pointwise = budget == "pointwise";
    bool automatic = budget == "auto";
    bool byBytes = !pointwise && !automatic;
    // `min`: the scan a GiB budget makes, to its end; the smallest peak wins.
    bool smallest = budget == "min";
    if (byBytes && !smallest && (StringRef(budget).getAsDouble(budgetGiB) || budgetGiB <= 0)) {
      func.emitError("kiln-remat: budget must be none, pointwise, auto, min or a positive "
                     "number of GiB, got '")
          << budget << "'";
      return signalPassFailure();
    }
    FailureOr<SymbolValues> values = resolveSymbols(func, byBytes);
    if (failed(values))
      return signalPassFailure();

    Joint graph(func);
    std::vector<bool> banned(graph.ops.size(), false);
    std::vector<unsigned> expensive;
    for (unsigned i = 0; i < graph.ops.size(); ++i)
      if (graph.forward[i] && isExpensiveToRecompute(graph.ops[i])) {
        banned[i] = true;
        expensive.push_back(i);
      }
    // Contractions become recomputable cheapest FLOPs per byte first.
    auto flopsPerByte = [&](unsigned i) {
      int64_t bytes = 1;
      for (Value r : graph.ops[i]->getResults())
        bytes += bytesOf(r, *values);
      return static_cast<double>(estimateFlops(graph.ops[i], *values)) / bytes;
    };
    std::sort(expensive.begin(), expensive.end(), [&](unsigned a, unsigned b) {
      return std::make_pair(flopsPerByte(a), a) < std::make_pair(flopsPerByte(b), b);
    });

    MemoryPlan before = planMemory(func, *values);
    double secondsBefore = estimateStepSeconds(func, *values);
    Builder b(&getContext());
    auto record = [&](const Cut &cut, int64_t extraFlops, unsigned recomputed, int64_t peak,
                      double seconds) {
      std::vector<std::string> pairs;
      for (const auto &entry : *values)
        pairs.push_back(entry.getKey().str() + "=" + std::to_string(entry.getValue()));
      llvm::sort(pairs);
      std::string bound = llvm::join(pairs, ",");
      func->setAttr(
          "kiln.remat",
          b.getDictionaryAttr({
              b.getNamedAttr("budget", b.getStringAttr(budget)),
              b.getNamedAttr("symbols", b.getStringAttr(bound)),
              b.getNamedAttr("saved_before", b.getI64IntegerAttr(before.savedActivations)),
              b.getNamedAttr("saved_bytes_before",
                             b.getI64IntegerAttr(before.savedActivationBytes)),
              b.getNamedAttr("saved", b.getI64IntegerAttr(cut.savedTensors)),
              b.getNamedAttr("saved_bytes", b.getI64IntegerAttr(cut.savedBytes)),
              b.getNamedAttr("recomputed", b.getI64IntegerAttr(recomputed)),
              b.getNamedAttr("extra_flops", b.getI64IntegerAttr(extraFlops)),
              b.getNamedAttr("peak_bytes_before", b.getI64IntegerAttr(before.peakBytes())),
              b.getNamedAttr("peak_bytes", b.getI64IntegerAttr(peak)),
              // The roofline estimate (StepTime.h), in microseconds.
              b.getNamedAttr("step_us_before",
                             b.getI64IntegerAttr(static_cast<int64_t>(secondsBefore * 1e6))),
              b.getNamedAttr("step_us", b.getI64IntegerAttr(static_cast<int64_t>(seconds * 1e6))),
          }));
    };
    auto apply = [&](const Cut &cut) {
      unsigned recomputed = llvm::count(cut.recompute, true);
      int64_t flops = applyCut(graph, cut, *values);
      record(cut, flops, recomputed, planMemory(func, *values).peakBytes(),
             estimateStepSeconds(func, *values));
    };

    if (pointwise) {
      apply(solveCut(graph, banned, *values, /*pointwiseOnly=*/true));
      return;
    }
    if (automatic) {
      // The cut without contractions, then contractions one at a time (the
      // order above) while the estimated step stays within the time bound;
      // the smallest peak among those plans wins (the earliest of equal
      // ones). The scan stops at the first plan over the bound.
      double limit = secondsBefore * (1.0 + kAutoTimeBound);
      Cut chosen = solveCut(graph, banned, *values);
      Trial best = tryCut(func, chosen, *values);
      Cut previous = chosen;
      // Among equal FLOPs per byte (every projection with the same inner
      // dimension) the largest results first: they free the most bytes per
      // recomputed op.
      auto resultBytes = [&](unsigned i) {
        int64_t bytes = 0;
        for (Value r : graph.ops[i]->getResults())
          bytes += bytesOf(r, *values);
        return bytes;
      };
      std::stable_sort(expensive.begin(), expensive.end(), [&](unsigned a, unsigned b) {
        double fa = flopsPerByte(a), fb = flopsPerByte(b);
        if (std::abs(fa - fb) > 1e-3 * std::max(fa, fb))
          return fa < fb;
        return resultBytes(a) > resultBytes(b);
      });
      for (unsigned next : expensive) {
        banned[next] = false;
        Cut cut = solveCut(graph, banned, *values);
        if (cut == previous)
          continue;
        previous = cut;
        Trial trial = tryCut(func, cut, *values);
        if (trial.seconds > limit)
          break;
        if (trial.peak < best.peak) {
          best = trial;
          chosen = cut;
        }
      }
      apply(chosen);
      return;
    }
    auto limit = smallest ? std::numeric_limits<int64_t>::min()
                          : static_cast<int64_t>(budgetGiB * 1024 * 1024 * 1024);
    auto keepAll = [&] {
      Cut none;
      none.recompute.assign(graph.ops.size(), false);
      none.savedTensors = before.savedActivations;
      none.savedBytes = before.savedActivationBytes;
      record(none, 0, 0, before.peakBytes(), secondsBefore);
    };
    if (before.peakBytes() <= limit)
      return keepAll(); // Fits as it is: recompute nothing.
    // Contractions become recomputable one at a time, in FLOPs-per-byte
    // order; the first plan that fits is applied. A linear scan, not a
    // bisection: the peak is not monotone (once the cut may recompute whole
    // layers, their clones are all live at the start of the backward pass).
    int64_t best = before.peakBytes();
    std::optional<Cut> bestCut; // none: keeping everything is the best
    Cut previous;
    for (size_t unbanned = 0;; ++unbanned) {
      if (unbanned > 0)
        banned[expensive[unbanned - 1]] = false;
      Cut cut = solveCut(graph, banned, *values);
      if (unbanned == 0 || !(cut == previous)) {
        int64_t peak = tryCut(func, cut, *values).peak;
        if (peak <= limit) {
          apply(cut);
          return;
        }
        if (peak < best) { // the first of equal peaks recomputes the least
          best = peak;
          bestCut = cut;
        }
      }
      previous = std::move(cut);
      if (unbanned == expensive.size())
        break;
    }
    if (smallest) {
      if (bestCut)
        apply(*bestCut);
      else
        keepAll();
      return;
    }
    func.emitError("kiln-remat: budget ")
        << budget << " GiB cannot be met: the smallest plan needs " << formatBytes(best)
        << " (parameters, optimizer state and inputs alone: " << formatBytes(before.persistentBytes)
        << ")";
    signalPassFailure();
  }
};

} // namespace
