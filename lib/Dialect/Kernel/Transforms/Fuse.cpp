//===- Fuse.cpp - Group graph ops into kiln_kernel.fusion regions ---------===//
//
// Greedy producer-into-consumer fusion in program order. Each op starts a
// group; it then absorbs the groups producing its operands when the merged
// group is still one kernel (see OpClassification.h) and every use of a group
// value outside the group comes after the group's last op, so the fusion can
// sit where that op was. Cheap scalar groups (the optimizer's bias
// corrections) are cloned into every consumer instead of becoming kernels.
// Kept whole (~830 lines): the sibling, recompute and prologue rules edit the
// same group table in one walk.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Kernel/FusionPolicy.h"
#include "kiln/Dialect/Kernel/Passes.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"

namespace kiln::kernel {
#define GEN_PASS_DEF_FUSEPASS
#include "kiln/Dialect/Kernel/Passes.h.inc"
} // namespace kiln::kernel

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace {

struct Group {
  FusionKind kind = FusionKind::loop;
  llvm::SetVector<Operation *> ops; // program order
  Operation *anchor = nullptr;      // the row / attention / scan op
  bool hasReduce = false;
  bool onlyViews = true;
  bool dead = false;
  /// Scalar groups copied into this one (see cloneable()), and elementwise
  /// ops of other groups recomputed here (borrowRecomputable()).
  llvm::SetVector<Operation *> borrowed;
  /// Where the fusion goes when not after its last op: a sibling merged
  /// into an earlier group sits at that group's place (mergeSiblings()).
  Operation *place = nullptr;
};

Operation *placeOf(Group *g) { return g->place ? g->place : g->ops.back(); }

Dim numel(Value v) {
  auto type = cast<RankedTensorType>(v.getType());
  return dimProduct(getDims(type), v.getContext());
}

struct FuseStats {
  unsigned fusions = 0;
};

struct Fuser {
  explicit Fuser(Block &block) : block(block) {}
  Block &block;
  std::vector<std::unique_ptr<Group>> groups;
  DenseMap<Operation *, Group *> groupOf;
  /// Group values that build() already replaced by a fusion result: a
  /// borrowed op of an earlier-built group may still read the original.
  DenseMap<Value, Value> builtAs;

  bool contains(Group *g, Operation *op) { return op && groupOf.lookup(op) == g; }
  bool inEither(Group *a, Group *b, Operation *op) {
    Group *g = groupOf.lookup(op);
    return g && (g == a || g == b);
  }

  /// Values of `g` used outside `g` and `other`.
  SmallVector<Value> outsideValues(Group *g, Group *other) {
    SmallVector<Value> out;
    for (Operation *op : g->ops)
      for (Value r : op->getResults())
        if (llvm::any_of(r.getUsers(), [&](Operation *u) {
              return !inEither(g, other, u) && !isBorrowed(u, op);
            }))
          out.push_back(r);
    return out;
  }
  bool isBorrowed(Operation *user, Operation *producer) {
    Group *ug = groupOf.lookup(user);
    return ug && ug->borrowed.contains(producer);
  }

  /// Every outside user of `a` or `b` comes after `last`.
  bool usersAfter(Group *a, Group *b, Operation *last) {
    for (Group *g : {a, b})
      for (Operation *op : g->ops)
        for (Operation *u : op->getUsers())
          if (!inEither(a, b, u) && !isBorrowed(u, op) && u->getBlock() == &block &&
              !last->isBeforeInBlock(u))
            return false;
    return true;
  }

  /// A scalar group without reductions: copying it is cheaper than a launch.
  /// So is a group that reads nothing (a zero fill, an iota): its consumer
  /// computes the value from the index instead of reading a buffer.
  bool cloneable(Group *p) {
    if (p->kind != FusionKind::loop || p->hasReduce || p->ops.size() > 32)
      return false;
    if (readsNothing(p))
      return true;
    return llvm::all_of(p->ops, [](Operation *op) {
      return llvm::all_of(op->getResultTypes(), [](Type t) {
        auto type = cast<RankedTensorType>(t);
        return type.hasStaticShape() && type.getNumElements() == 1;
      });
    });
  }

  /// Only fills and index arithmetic: cos/sin tables and the like stay
  /// kernels (a transcendental per element of every reader costs more).
  bool readsNothing(Group *p) {
    return llvm::all_of(p->ops, [&](Operation *op) {
      if (!isa<kiln::ConstantOp, IotaOp, ExpandOp, CastOp, ReshapeOp, SqueezeOp, UnsqueezeOp>(op))
        return false;
      return llvm::all_of(op->getOperands(), [&](Value v) {
        Operation *def = v.getDefiningOp();
        return (def && contains(p, def)) || literal(def);
      });
    });
  }

  void absorb(Group *into, Group *from) {
    for (Operation *op : from->ops) {
      into->ops.insert(op);
      groupOf[op] = into;
    }
    into->borrowed.insert(from->borrowed.begin(), from->borrowed.end());
    into->hasReduce |= from->hasReduce;
    into->onlyViews &= from->onlyViews;
    from->dead = true;
    // Keep program order.
    SmallVector<Operation *> sorted(into->ops.begin(), into->ops.end());
    llvm::sort(sorted, [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
    into->ops.clear();
    into->ops.insert(sorted.begin(), sorted.end());
  }

  /// Tries to fold producer group `p` into `g`, whose newest op is `op`
  /// reading `p` through operand `operandIndex`.
  bool tryMerge(Group *p, Group *g, Operation *op, unsigned operandIndex) {
    if (p == g || p->dead || g->dead)
      return false;
    if (!usersAfter(p, g, op))
      return false;
    SmallVector<Value> pOut = outsideValues(p, g);
    Dim space = numel(op->getResult(0));
    bool loopOp = g->kind == FusionKind::loop;
    switch (p->kind) {
    case FusionKind::loop: {
      if (p->hasReduce && numel(p->ops.back()->getResult(0)) != space)
        return false;
      if (loopOp) {
        // Outputs still needed outside are stored at the same flat index.
        if (g->hasReduce && !pOut.empty())
          return false;
        for (Value v : pOut)
          if (numel(v) != space)
            return false;
        return true;
      }
      if (p->hasReduce)
        return false;
      if (g->kind == FusionKind::row) {
        // The row kernel's last pass stores every output of the row's
        // shape, so a prologue value needed elsewhere is stored there too.
        // Cross entropy alone has no such pass.
        if (isa<CrossEntropyOp>(g->anchor) && !pOut.empty())
          return false;
        Dim rowSpace = numel(g->anchor->getOperand(0));
        return llvm::all_of(pOut, [&](Value v) { return numel(v) == rowSpace; });
      }
      if (!pOut.empty())
        return false;
      // Attention reads its mask once per score: computing it there is free.
      if (auto attention = dyn_cast<AttentionOp>(op))
        return attention.getMask() && operandIndex == 3;
      if (auto attentionGrad = dyn_cast<AttentionGradOp>(op))
        return attentionGrad.getMask() && operandIndex == 3;
      return false;
    }
    case FusionKind::row: {
      // A pointwise epilogue on the row op's output shape.
      if (loopOp && !g->hasReduce) {
        Dim rowSpace = numel(p->anchor->getOperand(0));
        if (numel(op->getResult(0)) != rowSpace)
          return false;
        for (Operation *member : g->ops) {
          // The row kernel has the row op's result only at the row it
          // computes: an epilogue op that reads another element of it
          // (per-head q/k norms feeding a head transpose) stays a kernel
          // of its own.
          if (isa<TransposeOp, SliceOp, ConcatOp, PadOp, GatherOp, GatherElementsOp, GatherNdOp>(
                  member))
            return false;
          for (Value r : member->getResults())
            if (numel(r) != rowSpace)
              return false;
        }
        return true;
      }
      // Cross entropy and its gradient on the same rows: one kernel.
      auto grad = dyn_cast<CrossEntropyGradOp>(op);
      auto fwd = dyn_cast<CrossEntropyOp>(p->anchor);
      if (grad && fwd && g->ops.size() == 1 && fwd.getLogits() == grad.getLogits() &&
          fwd.getLabels() == grad.getLabels() && !contains(p, grad.getGrad().getDefiningOp()))
        return true;
      return false;
    }
    default: return false;
    }
  }

  FusionKind kindOf(OpClass cls) {
    switch (cls) {
    case OpClass::Row: return FusionKind::row;
    case OpClass::Scan: return FusionKind::scan;
    case OpClass::Scatter: return FusionKind::scatter;
    case OpClass::Attention: return FusionKind::attention;
    case OpClass::AttentionGrad: return FusionKind::attention_grad;
    case OpClass::Quantize: return FusionKind::quantize;
    default: return FusionKind::loop;
    }
  }

  LogicalResult group() {
    for (Operation &op : block) {
      if (op.hasTrait<OpTrait::IsTerminator>())
        continue;
      OpClass cls = classifyOp(&op);
      // Batch sums, bias/activation epilogues, scales (alpha) and sums into
      // a GEMM's C (beta = 1) are computed by the GEMM. The fused LM head
      // stays one op: lower-to-step hands it to the runtime.
      if (cls == OpClass::Gemm || cls == OpClass::Source || cls == OpClass::Collective ||
          cls == OpClass::ChunkedHead || gemmOfBatchSum(&op) || gemmEpilogueOf(&op) ||
          isFoldedScale(&op) || gemmAccumulateOf(&op))
        continue;
      if (cls == OpClass::Unsupported)
        return op.emitOpError("has no kernel (kiln-fuse)");
      groups.push_back(std::make_unique<Group>());
      Group *g = groups.back().get();
      g->kind = kindOf(cls);
      g->ops.insert(&op);
      g->anchor = g->kind == FusionKind::loop ? nullptr : &op;
      g->hasReduce = cls == OpClass::Reduce;
      g->onlyViews = cls == OpClass::View;
      groupOf[&op] = g;
      // Cross entropy's gradient reads the same logits as the loss: one
      // kernel computes both from one pass over each row.
      if (auto grad = dyn_cast<CrossEntropyGradOp>(op)) {
        for (Operation *user : grad.getLogits().getUsers()) {
          Group *p = groupOf.lookup(user);
          if (p && !p->dead && isa<CrossEntropyOp>(user) && p->anchor == user &&
              tryMerge(p, g, &op, 0)) {
            absorb(p, g);
            g = p;
            break;
          }
        }
      }
      for (OpOperand &operand : op.getOpOperands()) {
        Group *p = groupOf.lookup(operand.get().getDefiningOp());
        if (!p || p == g || p->dead)
          continue;
        // The attention mask is read once per score: recompute it there.
        Value mask;
        if (auto attention = dyn_cast<AttentionOp>(op))
          mask = attention.getMask();
        else if (auto attentionGrad = dyn_cast<AttentionGradOp>(op))
          mask = attentionGrad.getMask();
        bool maskOperand = mask && operand.get() == mask;
        bool cheapMask = maskOperand && p->kind == FusionKind::loop && !p->hasReduce;
        if (!p->onlyViews && (cheapMask || (g->kind == FusionKind::loop && cloneable(p)))) {
          g->borrowed.insert(p->borrowed.begin(), p->borrowed.end());
          g->borrowed.insert(p->ops.begin(), p->ops.end());
          continue;
        }
        if (!tryMerge(p, g, &op, operand.getOperandNumber()))
          continue;
        // A row group absorbing this op keeps its kind and anchor.
        if (p->kind == FusionKind::row && g->kind == FusionKind::loop) {
          absorb(p, g);
          g = p;
        } else if (p->kind == FusionKind::row) {
          absorb(p, g); // cross entropy + gradient
          g = p;
        } else {
          absorb(g, p);
        }
      }
      if (g->kind == FusionKind::loop)
        mergeLateProducers(g, &op);
    }
    mergeSiblings();
    borrowRecomputable();
    mergeParameterCasts();
    mergeStepOutputs();
    return success();
  }

  /// A loop producer read by several ops of `g` could not join while its
  /// other readers were outside (the transpose before both halves of a RoPE
  /// rotation; the two rotated halves of its gradient before the concats):
  /// now that they are inside, try again.
  void mergeLateProducers(Group *g, Operation *newest) {
    for (bool changed = true; changed;) {
      changed = false;
      for (Operation *member : g->ops) {
        for (OpOperand &operand : member->getOpOperands()) {
          Group *p = groupOf.lookup(operand.get().getDefiningOp());
          if (!p || p == g || p->dead || p->kind != FusionKind::loop || p->hasReduce ||
              !tryMerge(p, g, newest, operand.getOperandNumber()))
            continue;
          absorb(g, p);
          changed = true;
          break;
        }
        if (changed)
          break; // absorb() rebuilt g->ops
      }
    }
  }

  /// The one element count of everything `g` stores, if it has one, and
  /// whether its values leave only to later kernels (not the step's results:
  /// those join the multi-tensor update).
  std::optional<Dim> siblingSpace(Group *g) {
    if (g->dead || g->onlyViews || g->kind != FusionKind::loop || g->hasReduce)
      return std::nullopt;
    Operation *terminator = block.getTerminator();
    std::optional<Dim> space;
    for (Value v : outsideValues(g, g)) {
      if (llvm::is_contained(v.getUsers(), terminator))
        return std::nullopt;
      Dim n = numel(v);
      if (space && *space != n)
        return std::nullopt;
      space = n;
    }
    return space;
  }

  /// A constant that build() copies into the kernel as a literal.
  static bool literal(Operation *def) {
    auto constant = dyn_cast_or_null<kiln::ConstantOp>(def);
    auto type = constant ? cast<RankedTensorType>(constant.getType()) : nullptr;
    return type && type.hasStaticShape() && type.getNumElements() <= 64;
  }

  /// The values `g` reads from outside (literals aside), as build() finds them.
  llvm::SetVector<Value> inputsOf(Group *g) {
    llvm::SetVector<Value> inputs;
    auto add = [&](Operation *op) {
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (!def || (!contains(g, def) && !g->borrowed.contains(def) && !literal(def)))
          inputs.insert(v);
      }
    };
    for (Operation *op : g->borrowed)
      if (!contains(g, op))
        add(op);
    for (Operation *op : g->ops)
      add(op);
    return inputs;
  }

  /// Where the value `v` exists after fusion: after its group's fusion, or
  /// where it is defined (an argument: before everything).
  Operation *availableAfter(Value v) {
    Operation *def = v.getDefiningOp();
    if (!def)
      return nullptr;
    Group *g = groupOf.lookup(def);
    return g && !g->dead && !g->onlyViews ? placeOf(g) : def;
  }

  /// Where `user` runs after fusion.
  Operation *runsAt(Operation *user) {
    Group *g = groupOf.lookup(user);
    return g && !g->dead && !g->onlyViews ? placeOf(g) : user;
  }

  static int64_t elementBytes(Value v) {
    unsigned bits = cast<RankedTensorType>(v.getType()).getElementType().getIntOrFloatBitWidth();
    return std::max(1u, bits / 8);
  }

  /// Moving `b` up to `a`'s place keeps b's outputs alive longer, but the
  /// inputs it read last die earlier: only hoist when that frees at least
  /// as many bytes (per element of `space`) as it holds. The SiLU gradient
  /// frees the output gradient, gate and up for the one d(gate) it holds.
  bool hoistFrees(Group *a, Group *b, const llvm::SetVector<Value> &inB, Dim space) {
    Operation *terminator = block.getTerminator();
    int64_t held = 0, freed = 0;
    for (Value v : outsideValues(b, b))
      held += elementBytes(v);
    for (Value v : inB) {
      if (numel(v) != space)
        continue;
      bool lastReadHere = llvm::all_of(v.getUsers(), [&](Operation *user) {
        if (user == terminator)
          return false;
        if (contains(a, user) || contains(b, user) || b->borrowed.contains(user))
          return true;
        Operation *at = runsAt(user);
        return at == placeOf(a) || at->isBeforeInBlock(placeOf(a));
      });
      if (lastReadHere)
        freed += elementBytes(v);
    }
    return freed >= held;
  }

  /// Bytes of `v` with every size symbol at `symbolValue`.
  static std::optional<int64_t> bytesAt(Value v, int64_t symbolValue) {
    std::optional<int64_t> n =
        evaluateDim(numel(v), [&](StringRef) -> std::optional<int64_t> { return symbolValue; });
    if (!n)
      return std::nullopt;
    return *n * elementBytes(v);
  }

  /// The third placement of two siblings: at the later one's place, with
  /// the earlier one's readers in between moved after it, and `b` may read
  /// values of `a` (both are elementwise over one space). The pointwise
  /// recompute of silu(gate) * up in the backward sits right before the
  /// LoRA GEMM that reads it, which comes before the GEMM that computes the
  /// gradient the SiLU gradient reads; moving that GEMM after the merged
  /// kernel lets one kernel read gate and up once for both. Only ops that
  /// run before `b` and are no kernel of their own move (GEMMs, views; a
  /// fused group's place is its own; collectives keep their bucket order),
  /// none of them read by `b`, at most kMaxSunk. a's outputs then live
  /// beside b's at the merged launch instead of from a's place to the
  /// readers (the recompute's output, 128 MiB on the 1b config); what the
  /// moved readers keep alive longer must not outweigh them (compared with
  /// every size symbol at 1 and at 4096).
  bool sinkableReaders(Group *a, Group *b, const llvm::SetVector<Value> &inB,
                       SmallVectorImpl<Operation *> &sunk) {
    constexpr size_t kMaxSunk = 8;
    Operation *from = placeOf(a), *to = placeOf(b);
    llvm::SmallPtrSet<Operation *, 8> moving;
    auto fromAOrMoving = [&](Value v) {
      Operation *def = v.getDefiningOp();
      return def && (contains(a, def) || moving.contains(def));
    };
    auto fromMoving = [&](Value v) { return moving.contains(v.getDefiningOp()); };
    for (Operation *op = from->getNextNode(); op && op != to; op = op->getNextNode()) {
      // b may read a's values (the recomputed silu(gate)): they are
      // computed inside the merged kernel, which the moved ops follow.
      if (contains(a, op) || contains(b, op)) {
        if (llvm::any_of(op->getOperands(), fromMoving))
          return false;
        continue;
      }
      if (!llvm::any_of(op->getOperands(), fromAOrMoving))
        continue;
      // A kernel that runs after b anyway (the optimizer's fp32 copy of a
      // gradient, in the update at the end) stays.
      if (to->isBeforeInBlock(runsAt(op)))
        continue;
      Group *owner = groupOf.lookup(op);
      if ((owner && !owner->dead && !owner->onlyViews) || op->getNumRegions() != 0 ||
          classifyOp(op) == OpClass::Collective || sunk.size() == kMaxSunk)
        return false;
      moving.insert(op);
      sunk.push_back(op);
    }
    if (llvm::any_of(inB, fromMoving))
      return false;
    // Values whose last reader moves are held until after `b`.
    llvm::SetVector<Value> heldLonger;
    Operation *terminator = block.getTerminator();
    for (Operation *op : sunk)
      for (Value v : op->getOperands()) {
        if (fromAOrMoving(v) || literal(v.getDefiningOp()))
          continue;
        bool lastReadMoves = llvm::all_of(v.getUsers(), [&](Operation *user) {
          if (user == terminator)
            return false;
          Operation *at = runsAt(user);
          return moving.contains(user) || at == to || at->isBeforeInBlock(to);
        });
        if (lastReadMoves)
          heldLonger.insert(v);
      }
    for (int64_t symbolValue : {int64_t(1), int64_t(4096)}) {
      int64_t held = 0, freed = 0;
      for (Value v : heldLonger) {
        std::optional<int64_t> bytes = bytesAt(v, symbolValue);
        if (!bytes)
          return false;
        held += *bytes;
      }
      for (Value v : outsideValues(a, a)) {
        std::optional<int64_t> bytes = bytesAt(v, symbolValue);
        if (!bytes)
          return false;
        freed += *bytes;
      }
      if (held > freed)
        return false;
    }
    return true;
  }

  /// Sibling fusion: two loop kernels over the same element count that read
  /// one input of that size become one kernel reading it once. The
  /// SiLU-and-product gradient is the case that matters: d(gate) and d(up)
  /// both read the output gradient (and, with borrowRecomputable(), gate),
  /// and the pointwise recompute of silu(gate) * up reads gate and up. When
  /// they do not depend on each other, the merged kernel sits where the
  /// later one was if the earlier one's values are read only after that,
  /// else where the earlier one was if every input of the later one exists
  /// by then; else (and when the later one reads the earlier one's values)
  /// where the later one was, with the earlier one's readers in between
  /// moved after it (sinkableReaders()).
  void mergeSiblings() {
    // A merged group tries again as the later one: d(up) and d(gate) become
    // one group before that group can take the recompute, which d(up) reads.
    for (auto &laterOwned : groups)
      for (Group *b = laterOwned.get(); b;)
        b = mergeSibling(b);
  }

  /// Merges `b` into the first earlier group it is a sibling of; that
  /// group, or null.
  Group *mergeSibling(Group *b) {
    std::optional<Dim> space = siblingSpace(b);
    if (!space)
      return nullptr;
    for (auto &earlierOwned : groups) {
      Group *a = earlierOwned.get();
      if (a == b || siblingSpace(a) != space)
        continue;
      if (!placeOf(a)->isBeforeInBlock(placeOf(b)))
        continue;
      llvm::SetVector<Value> inA = inputsOf(a), inB = inputsOf(b);
      bool shared =
          llvm::any_of(inB, [&](Value v) { return inA.contains(v) && numel(v) == *space; });
      bool dependent = llvm::any_of(inB, [&](Value v) { return contains(a, v.getDefiningOp()); });
      if (!shared)
        continue;
      Operation *at = nullptr;
      SmallVector<Operation *> sunk;
      if (!dependent && usersAfter(a, b, placeOf(b)))
        at = placeOf(b);
      else if (!dependent &&
               llvm::all_of(inB,
                            [&](Value v) {
                              Operation *after = availableAfter(v);
                              return !after || after == placeOf(a) ||
                                     after->isBeforeInBlock(placeOf(a));
                            }) &&
               hoistFrees(a, b, inB, *space))
        at = placeOf(a);
      else if (sinkableReaders(a, b, inB, sunk))
        at = placeOf(b);
      if (!at)
        continue;
      absorb(a, b);
      a->place = at == a->ops.back() ? nullptr : at;
      Operation *after = at;
      for (Operation *op : sunk) {
        op->moveAfter(after);
        after = op;
      }
      return a; // b is dead
    }
    return nullptr;
  }

  /// An elementwise op of another group whose operands this group reads
  /// anyway, or reads in fewer bytes, is recomputed here instead of being
  /// stored by its group and read back: silu(gate) in the SiLU gradient,
  /// which reads gate; the fp32 copy of the residual sum that the norm
  /// gradient reads, cast again from the bf16 sum the forward stores anyway.
  /// The producing kernels then store neither. Values inside kernels are
  /// rounded to their type, so the copy computes the same bits.
  void borrowRecomputable() {
    for (auto &owned : groups) {
      Group *g = owned.get();
      if (g->dead || g->onlyViews ||
          (g->kind != FusionKind::loop &&
           (g->kind != FusionKind::row || isa<CrossEntropyOp, CrossEntropyGradOp>(g->anchor))))
        continue;
      llvm::SetVector<Value> inputs = inputsOf(g);
      for (Value v : inputs) {
        Operation *def = v.getDefiningOp();
        Group *q = def ? groupOf.lookup(def) : nullptr;
        if (!q || q == g || q->dead || q->onlyViews || !def->hasTrait<OpTrait::Elementwise>() ||
            def->getNumOperands() == 0 || def->getNumResults() != 1)
          continue;
        // Reading a narrower operand instead pays only when v then need
        // not be stored: every reader outside q is this group.
        bool onlyReaderOutside = llvm::all_of(
            v.getUsers(), [&](Operation *user) { return contains(q, user) || contains(g, user); });
        SmallVector<Value> qOut;
        bool recomputable = llvm::all_of(def->getOperands(), [&](Value operand) {
          if (numel(operand) != numel(v))
            return false;
          if (!inputs.contains(operand) &&
              (elementBytes(operand) >= elementBytes(v) || !onlyReaderOutside))
            return false;
          // A value of q's own must be one q stores (build() hands it over).
          Operation *producer = operand.getDefiningOp();
          if (!producer || !contains(q, producer))
            return true;
          if (qOut.empty())
            qOut = outsideValues(q, q);
          return llvm::is_contained(qOut, operand);
        });
        if (recomputable)
          g->borrowed.insert(def);
      }
    }
  }

  /// Horizontal fusion of the step's prologue: the small loop groups that
  /// read only arguments and parameters (the bf16 copies of fp32 LoRA
  /// adapters, zero-padded or concatenated for the shared GEMMs: ten
  /// kernels per decoder layer) become one multi-tensor kernel at the
  /// first one's place, where every input exists. Their outputs are small
  /// (each at most 2^20 elements, 64 MiB together), so keeping them from
  /// the start costs little memory.
  void mergeParameterCasts() {
    constexpr int64_t kMaxElements = int64_t(1) << 20, kMaxBytes = int64_t(64) << 20;
    Operation *terminator = block.getTerminator();
    SmallVector<Group *> candidates;
    int64_t bytes = 0;
    for (auto &owned : groups) {
      Group *g = owned.get();
      if (g->dead || g->onlyViews || g->kind != FusionKind::loop || g->hasReduce || readsNothing(g))
        continue;
      bool prologue = llvm::all_of(inputsOf(g), [](Value v) {
        Operation *def = v.getDefiningOp();
        return !def || classifyOp(def) == OpClass::Source;
      });
      SmallVector<Value> outputs = outsideValues(g, g);
      int64_t groupBytes = 0;
      for (Value v : outputs) {
        auto type = cast<RankedTensorType>(v.getType());
        if (!type.hasStaticShape() || type.getNumElements() > kMaxElements ||
            llvm::is_contained(v.getUsers(), terminator))
          prologue = false;
        else
          groupBytes += type.getNumElements() * elementBytes(v);
      }
      if (!prologue || outputs.empty() || bytes + groupBytes > kMaxBytes)
        continue;
      bytes += groupBytes;
      candidates.push_back(g);
    }
    if (candidates.size() < 2)
      return;
    Group *into = *llvm::min_element(
        candidates, [](Group *x, Group *y) { return placeOf(x)->isBeforeInBlock(placeOf(y)); });
    Operation *at = placeOf(into);
    for (Group *g : candidates) {
      // A parameter defined after the place (frozen weights sit next to
      // their first use) keeps its group apart.
      bool available = g == into || llvm::all_of(inputsOf(g), [&](Value v) {
                         Operation *def = v.getDefiningOp();
                         return !def || def->isBeforeInBlock(at);
                       });
      if (!available || g == into)
        continue;
      absorb(into, g);
      into->place = at;
    }
  }

  /// Horizontal fusion: the loop groups that compute only step results (the
  /// optimizer update of every parameter) become one multi-tensor kernel;
  /// the emitter gives each distinct element count its own segment of the
  /// launch.
  void mergeStepOutputs() {
    Operation *terminator = block.getTerminator();
    Group *into = nullptr;
    for (auto &owned : groups) {
      Group *g = owned.get();
      // Segments are independent, so groups with inner reductions (a bias
      // gradient summed right into its update) join too.
      if (g->dead || g->onlyViews || g->kind != FusionKind::loop)
        continue;
      bool returned = false, onlyReturned = true;
      for (Operation *op : g->ops)
        for (Operation *user : op->getUsers()) {
          if (user == terminator)
            returned = true;
          else if (!g->ops.contains(user) && !isBorrowed(user, op))
            onlyReturned = false;
        }
      if (!returned || !onlyReturned)
        continue;
      if (!into) {
        into = g;
        continue;
      }
      absorb(into, g);
    }
  }

  /// Builds one fusion op per group, at the place of its last op.
  void build(FuseStats &stats);
};

void Fuser::build(FuseStats &stats) {
  for (auto &owned : groups) {
    Group *g = owned.get();
    if (g->dead || g->onlyViews)
      continue;
    Operation *last = placeOf(g);
    // Ops computed inside: borrowed scalars first, then the group's own.
    SmallVector<Operation *> body;
    for (Operation *op : g->borrowed)
      if (!g->ops.contains(op))
        body.push_back(op);
    llvm::sort(body, [](Operation *x, Operation *y) { return x->isBeforeInBlock(y); });
    body.append(g->ops.begin(), g->ops.end());
    llvm::SmallPtrSet<Operation *, 16> inside(body.begin(), body.end());
    // Inputs: values used inside and defined elsewhere; small constants are
    // copied in so they become literals.
    llvm::SetVector<Value> inputs;
    llvm::SetVector<Operation *> constants;
    for (Operation *op : body)
      for (Value v : op->getOperands()) {
        Operation *def = v.getDefiningOp();
        if (def && inside.contains(def))
          continue;
        if (auto constant = dyn_cast_or_null<kiln::ConstantOp>(def)) {
          auto type = cast<RankedTensorType>(constant.getType());
          if (type.hasStaticShape() && type.getNumElements() <= 64) {
            constants.insert(def);
            continue;
          }
        }
        inputs.insert(v);
      }
    SmallVector<Value> outputs;
    auto outsideUse = [&](Operation *producer, Operation *user) {
      return !g->ops.contains(user) && !isBorrowed(user, producer);
    };
    for (Operation *op : g->ops)
      for (Value r : op->getResults())
        if (llvm::any_of(r.getUsers(), [&](Operation *u) { return outsideUse(op, u); }))
          outputs.push_back(r);
    if (outputs.empty())
      continue; // only read by groups that copy it
    OpBuilder builder(last->getContext());
    builder.setInsertionPointAfter(last);
    SmallVector<Type> types;
    for (Value v : outputs)
      types.push_back(v.getType());
    SmallVector<Value> operands;
    for (Value v : inputs)
      operands.push_back(builtAs.lookup(v) ? builtAs.lookup(v) : v);
    auto fusion = builder.create<FusionOp>(last->getLoc(), g->kind, operands, types);
    Block &region = fusion.getBody().front();
    IRMapping map;
    for (auto [v, arg] : llvm::zip(inputs, region.getArguments()))
      map.map(v, arg);
    builder.setInsertionPointToStart(&region);
    for (Operation *c : constants)
      builder.clone(*c, map);
    for (Operation *op : body)
      builder.clone(*op, map);
    SmallVector<Value> yielded;
    for (Value v : outputs)
      yielded.push_back(map.lookup(v));
    builder.create<YieldOp>(last->getLoc(), yielded);
    for (auto [i, v] : llvm::enumerate(outputs)) {
      Operation *producer = v.getDefiningOp();
      builtAs[v] = fusion.getResult(i);
      v.replaceUsesWithIf(fusion.getResult(i),
                          [&](OpOperand &use) { return outsideUse(producer, use.getOwner()); });
    }
    ++stats.fusions;
  }
  // Erase fused ops, then borrowed scalar ops nobody reads any more.
  for (auto it = block.rbegin(); it != block.rend();) {
    Operation *op = &*it++;
    Group *g = groupOf.lookup(op);
    bool copiedConstant = isa<kiln::ConstantOp>(op) && op->use_empty();
    if ((g && !g->onlyViews && op->use_empty()) || copiedConstant)
      op->erase();
  }
}

struct FusePass final : kiln::kernel::impl::FusePassBase<FusePass> {
  using FusePassBase::FusePassBase;

  /// split(x) along an axis is one slice per piece: slices are loop
  /// kernels (or fuse into their consumers), a multi-result split is not.
  static void splitToSlices(Block &block) {
    for (Operation &op : llvm::make_early_inc_range(block)) {
      auto split = dyn_cast<SplitOp>(op);
      if (!split)
        continue;
      OpBuilder b(split);
      auto type = cast<RankedTensorType>(split.getInput().getType());
      int64_t axis = split.getAxis();
      Dim offset = dimConst(b.getContext(), 0);
      for (Value piece : split.getResults()) {
        DimList starts(type.getRank(), dimConst(b.getContext(), 0));
        starts[axis] = offset;
        SmallVector<int64_t> steps(type.getRank(), 1);
        Value slice =
            b.create<SliceOp>(split.getLoc(), piece.getType(), split.getInput(),
                              DimsAttr::get(b.getContext(), starts), b.getDenseI64ArrayAttr(steps));
        offset = dimAdd(offset, getDim(cast<RankedTensorType>(piece.getType()), axis));
        piece.replaceAllUsesWith(slice);
      }
      split.erase();
    }
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    Block &block = func.getBody().front();
    splitToSlices(block);
    for (Operation &op : block) {
      if (op.hasTrait<OpTrait::IsTerminator>())
        continue;
      OpClass cls = classifyOp(&op);
      if (cls != OpClass::Source && cls != OpClass::View && cls != OpClass::Collective)
        ++numOpsBefore;
      if (cls == OpClass::Gemm)
        ++numGemms;
    }
    Fuser fuser{block};
    if (failed(fuser.group()))
      return signalPassFailure();
    FuseStats stats;
    fuser.build(stats);
    numFusions += stats.fusions;
  }
};

} // namespace
