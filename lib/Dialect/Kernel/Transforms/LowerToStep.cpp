//===- LowerToStep.cpp - Fused step -> buffers, launches and GEMMs --------===//
//
// After this pass a step function is a straight-line program the runtime
// can interpret without MLIR: every value is a buffer, every kernel is a
// symbol with a fixed ABI, and every size is a polynomial over the step's
// size symbols.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Kernel/FusionPolicy.h"
#include "kiln/Dialect/Kernel/PaddedWeights.h"
#include "kiln/Dialect/Kernel/Passes.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringSet.h"

#include <array>
#include <cmath>
#include <map>
#include <set>

namespace kiln::kernel {
#define GEN_PASS_DEF_LOWERTOSTEPPASS
#include "kiln/Dialect/Kernel/Passes.h.inc"
} // namespace kiln::kernel

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace {

RankedTensorType tensorOf(Value v) { return cast<RankedTensorType>(v.getType()); }

/// The row stride of a buffer that is a block of columns of another (a view
/// with `row_stride`), or null for a packed one.
Dim rowStrideOf(Value buffer) {
  auto view = buffer.getDefiningOp<ViewOp>();
  return view ? view.getRowStrideAttr() : Dim();
}
BufferType bufferOf(Type t) { return BufferType::get(t.getContext(), cast<RankedTensorType>(t)); }

/// Sorted names of the size symbols a kernel body mentions.
SmallVector<std::string> bodySymbols(Block &body) {
  std::set<std::string> names;
  auto addType = [&](Type t) {
    if (auto type = dyn_cast<RankedTensorType>(t))
      for (Dim d : getDims(type))
        for (StringRef s : dimSymbols(d))
          names.insert(s.str());
  };
  for (BlockArgument arg : body.getArguments())
    addType(arg.getType());
  body.walk([&](Operation *op) {
    for (Type t : op->getResultTypes())
      addType(t);
    if (auto slice = dyn_cast<SliceOp>(op))
      for (Dim d : slice.getStarts().getDims())
        for (StringRef s : dimSymbols(d))
          names.insert(s.str());
  });
  return SmallVector<std::string>(names.begin(), names.end());
}

std::string kernelName(StringRef func, unsigned index, FusionKind kind, Block &body) {
  std::string name = (func + "_k" + Twine(index)).str();
  Operation *anchor = anchorOp(kind, body);
  SmallVector<StringRef> parts;
  if (anchor)
    parts.push_back(anchor->getName().stripDialect());
  for (Operation &op : body) {
    if (parts.size() >= 3)
      break;
    if (&op == anchor || isa<kiln::ConstantOp, YieldOp>(op))
      continue;
    StringRef part = op.getName().stripDialect();
    if (!llvm::is_contained(parts, part))
      parts.push_back(part);
  }
  for (StringRef part : parts)
    name += "_" + part.str();
  return name;
}

/// The roles of a tiled attention launch's buffers, for implementations the
/// runtime may run instead of the generated kernel (docs/codegen.md,
/// "Attention implementations"): operand positions in the launch's
/// ins-then-outs, the direction and the resolved scale. Only dense attention
/// whose kernel inputs and outputs are the op's own operands and results
/// qualifies; anything else stays the generated kernel alone. A masked one
/// says `masked`: only an implementation built from the kernel's own mask
/// (kiln_fa90's per-kernel variants) may replace it. `seq_major` lists the
/// roles stored [B, S, H, D] (kiln-attention-layout), absent when none is.
DictionaryAttr attentionRoles(FusionKind kind, Block &body, unsigned numIns,
                              ArrayRef<unsigned> widened, Builder &b) {
  if (kind != FusionKind::attention && kind != FusionKind::attention_grad)
    return nullptr;
  Operation *anchor = anchorOp(kind, body);
  if (!anchor || !isFlashAttention(anchor))
    return nullptr;
  auto attention = dyn_cast<AttentionOp>(anchor);
  auto grad = dyn_cast<AttentionGradOp>(anchor);
  if (grad && !grad.getOut())
    return nullptr;
  bool masked = attention ? static_cast<bool>(attention.getMask()) : static_cast<bool>(grad.getMask());
  SmallVector<NamedAttribute> roles;
  if (masked)
    roles.push_back(b.getNamedAttr("masked", b.getBoolAttr(true)));
  auto input = [&](StringRef role, Value v) {
    auto arg = dyn_cast<BlockArgument>(v);
    if (!arg || arg.getOwner() != &body)
      return false;
    roles.push_back(b.getNamedAttr(role, b.getI64IntegerAttr(arg.getArgNumber())));
    return true;
  };
  // A yielded result, seen through the fp32 widening of an accumulated one
  // (listed in `narrowed`: its final buffer is the narrowing launch's).
  SmallVector<Attribute> narrowed;
  auto output = [&](StringRef role, Value result) {
    for (OpOperand &use : body.getTerminator()->getOpOperands()) {
      Value yielded = use.get();
      bool wide = llvm::is_contained(widened, use.getOperandNumber());
      if (wide)
        if (auto cast = yielded.getDefiningOp<kiln::CastOp>())
          yielded = cast.getOperand();
      if (yielded == result) {
        if (wide)
          narrowed.push_back(b.getStringAttr(role));
        roles.push_back(b.getNamedAttr(role, b.getI64IntegerAttr(numIns + use.getOperandNumber())));
        return true;
      }
    }
    return false;
  };
  Value q = anchor->getOperand(0);
  auto queryType = cast<RankedTensorType>(q.getType());
  std::optional<APFloat> scale = attention ? attention.getScale() : grad.getScale();
  double resolved =
      scale ? scale->convertToDouble() : 1.0 / std::sqrt(double(queryType.getDimSize(3)));
  bool causal = attention ? attention.getCausal() : grad.getCausal();
  roles.push_back(b.getNamedAttr("direction", b.getStringAttr(attention ? "forward" : "backward")));
  roles.push_back(b.getNamedAttr("causal", b.getBoolAttr(causal)));
  roles.push_back(b.getNamedAttr("scale", b.getF64FloatAttr(resolved)));
  bool ok = input("q", q) && input("k", anchor->getOperand(1)) && input("v", anchor->getOperand(2));
  if (attention)
    ok = ok && output("o", attention.getResult());
  else
    ok = ok && input("o", grad.getOut()) && input("do", grad.getGrad()) &&
         output("dq", grad.getQueryGrad()) && output("dk", grad.getKeyGrad()) &&
         output("dv", grad.getValueGrad());
  if (!ok)
    return nullptr;
  // Role name -> its position in the op's seq_major.
  const std::pair<StringRef, unsigned> forwardLayout[] = {
      {"q", kAttnQuery}, {"k", kAttnKey}, {"v", kAttnValue}, {"o", kAttnResult}};
  const std::pair<StringRef, unsigned> backwardLayout[] = {
      {"q", kGradQuery},  {"k", kGradKey},       {"v", kGradValue},    {"o", kGradOut},
      {"do", kGradDout},  {"dq", kGradQueryGrad}, {"dk", kGradKeyGrad}, {"dv", kGradValueGrad}};
  SmallVector<Attribute> seqMajor;
  for (auto [role, position] : attention ? ArrayRef(forwardLayout) : ArrayRef(backwardLayout))
    if (isSeqMajor(anchor, position))
      seqMajor.push_back(b.getStringAttr(role));
  if (!seqMajor.empty())
    roles.push_back(b.getNamedAttr("seq_major", b.getArrayAttr(seqMajor)));
  roles.push_back(b.getNamedAttr("narrowed", b.getArrayAttr(narrowed)));
  return b.getDictionaryAttr(roles);
}

struct Lowering {
  explicit Lowering(func::FuncOp func) : func(func), builder(func) {}
  func::FuncOp func;
  IRMapping map;
  OpBuilder builder;
  unsigned kernels = 0, launches = 0, gemms = 0, allReduces = 0, chunkedHeads = 0;
  llvm::SmallPtrSet<Operation *, 8> folded; // reduce_sums merged into GEMMs
  /// All-reduce buckets not yet waited for: their buffers, and which
  /// graph values they produce.
  std::map<int64_t, SmallVector<Value>> pendingBuckets;
  DenseMap<Value, int64_t> bucketOf;
  // Decided on the fused IR before lowering moves kernel bodies away (a
  // scalar's value is read from its kernel's body).
  llvm::DenseMap<Operation *, std::pair<Value, double>> scales;
  llvm::DenseMap<Operation *, GemmAccumulate> accumulates;
  llvm::DenseMap<Operation *, GemmAccumulate> intoScales; // by the C's matmul
  llvm::SmallPtrSet<Operation *, 8> alphaOnly;
  /// In-place concatenations (docs/design/lora-k-concat.md): per input
  /// value, the concat fusion whose columns its producer writes and the
  /// first column; per concat, its buffer once the first producer ran.
  DenseMap<Value, std::pair<Operation *, int64_t>> columnsOf;
  DenseMap<Operation *, Value> concatBuffers;
  /// Per in-place concat, the inputs copied into their columns instead
  /// (with their first column): a kernel reads them, or something reads
  /// them after the concat's last use (the LoRA t the backward's dB reads:
  /// in place, it would keep the whole [x | t] alive).
  DenseMap<Operation *, SmallVector<std::pair<Value, int64_t>>> copiedColumns;
  /// Padded frozen weights (docs/design/lora-k-concat.md, piece 4): per
  /// weight name, one persistent [R + rows, C + cols] buffer holding W in
  /// its top-left block, the forward's adapter block (`s B^T`, when W is
  /// [in, out]) in the rows below and the input gradient's (`A^T`) in the
  /// columns beside; each concatenation is a view of it.
  /// Frozen weights concatenated side by side (group-frozen's `[Wq | Wk |
  /// Wv | A^T]`) are the members of one buffer: r x c is their block, each
  /// member at its offset along `axis`.
  struct PaddedWeight {
    int64_t r = 0, c = 0, rows = 0, cols = 0;
    SmallVector<WeightConcat, 2> concats;
    std::string name; // the first member's
    Type element;
    Value buffer; // the weight op, made where the first reader lowers
    int64_t axis = 1;
    SmallVector<std::string, 1> names;
    SmallVector<int64_t, 1> sizes, offsets; // along axis
    int64_t stride() const { return c + cols; }
    /// The member's own block: {first row, first column, rows, columns}.
    std::array<int64_t, 4> memberBlock(StringRef member) const {
      size_t i = llvm::find(names, member) - names.begin();
      return axis == 1 ? std::array<int64_t, 4>{0, offsets[i], r, sizes[i]}
                       : std::array<int64_t, 4>{offsets[i], 0, sizes[i], c};
    }
  };
  std::map<std::string, PaddedWeight> paddedWeights;
  /// Per member weight name, its buffer's key in paddedWeights.
  std::map<std::string, std::string> paddedGroupOf;
  DenseMap<Operation *, std::string> paddedConcats; // concat fusion -> weight
  /// Adapter blocks whose producer writes them into their padded weight
  /// (the concat fusion's other input, read by nothing else).
  DenseMap<Value, Operation *> weightBlockOf; // value -> its concat fusion
  /// Adapter blocks written by one launch: the first concat fusion of each
  /// block shape -> every fusion its kernel writes (itself first); the
  /// others launch nothing of their own.
  DenseMap<Operation *, SmallVector<FusionOp>> adapterLaunches;
  llvm::SmallPtrSet<Operation *, 32> adapterJoined;

  /// The concat's inputs (block arguments in order, each once) when `op`
  /// is a loop fusion that only concatenates them along the last axis.
  static std::optional<SmallVector<Value>> concatInputs(FusionOp fusion) {
    if (fusion.getKind() != FusionKind::loop || fusion->getNumResults() != 1)
      return std::nullopt;
    Block &body = fusion.getBody().front();
    if (!llvm::hasSingleElement(body.without_terminator()))
      return std::nullopt;
    auto concat = dyn_cast<ConcatOp>(body.front());
    auto type = concat ? dyn_cast<RankedTensorType>(concat.getType()) : nullptr;
    if (!concat || body.getTerminator()->getOperands() != ValueRange{concat.getResult()} ||
        static_cast<int64_t>(concat.getAxis()) != type.getRank() - 1 ||
        type.isDynamicDim(type.getRank() - 1))
      return std::nullopt;
    SmallVector<Value> inputs;
    for (Value operand : concat.getOperands()) {
      auto arg = dyn_cast<BlockArgument>(operand);
      if (!arg || arg.getOwner() != &body || !arg.hasOneUse())
        return std::nullopt;
      Value input = fusion.getInputs()[arg.getArgNumber()];
      if (llvm::is_contained(inputs, input))
        return std::nullopt;
      inputs.push_back(input);
    }
    return inputs;
  }

  /// Whether a GEMM can read `v` as a block of columns: `mm` reads it as
  /// rows of an unbatched product (a shared 2-D right operand, or a batch
  /// folded into k).
  bool readsAsColumns(MatmulOp mm, Value v) {
    if (weightGradSum(mm))
      return true;
    return mm.getLhs() == v && mm.getRhs() != v && !mm.getTransposeA() &&
           tensorOf(mm.getRhs()).getRank() == 2;
  }

  /// Whether `v`'s producer can write it straight into columns of a wider
  /// buffer: a plain GEMM (through ldc) or a loop or row kernel's output
  /// that nothing initializes (through its row stride).
  bool writesAsColumns(Value v, const llvm::SmallPtrSetImpl<Operation *> &concats) {
    Operation *def = v.getDefiningOp();
    if (!def || scales.count(def) || alphaOnly.contains(def))
      return false;
    if (auto mm = dyn_cast<MatmulOp>(def))
      return !accumulates.count(mm) && !intoScales.count(mm) && !gemmEpilogueOf(mm) &&
             !weightGradSum(mm) && !mm.getTransposeA() && tensorOf(mm.getRhs()).getRank() == 2;
    auto fusion = dyn_cast<FusionOp>(def);
    if (!fusion || concats.contains(fusion) ||
        (fusion.getKind() != FusionKind::loop && fusion.getKind() != FusionKind::row))
      return false;
    Value yielded =
        fusion.getBody().front().getTerminator()->getOperand(cast<OpResult>(v).getResultNumber());
    return outputInit(yielded) == OutputInit::None;
  }

  /// The elements a loop or row kernel moves per vector access (1: scalar).
  static int64_t vectorWidthOf(Value v) {
    auto fusion = v.getDefiningOp<FusionOp>();
    if (!fusion)
      return 1;
    Block &body = fusion.getBody().front();
    if (fusion.getKind() == FusionKind::row)
      return std::max<int64_t>(1, rowLayout(body).width);
    return loopVectorWidth(body);
  }

  /// Decides which concatenations are written in place: every input's
  /// producer writes its columns, and only GEMMs and loop or row kernels
  /// read an input besides (through ld / a row stride).
  /// Columns and row strides are multiples of 8 elements (16 bytes of
  /// bf16), which keeps vector stores and cuBLASLt's alignment.
  void planInPlaceConcats(ArrayRef<Operation *> ops) {
    DenseMap<Operation *, size_t> position;
    for (auto [i, op] : llvm::enumerate(ops))
      position[op] = i;
    llvm::SmallPtrSet<Operation *, 16> concats;
    for (Operation *op : ops) {
      auto fusion = dyn_cast<FusionOp>(op);
      std::optional<SmallVector<Value>> inputs =
          fusion && !paddedConcats.count(fusion) ? concatInputs(fusion) : std::nullopt;
      if (!inputs)
        continue;
      int64_t stride = tensorOf(fusion->getResult(0)).getShape().back();
      // The concat's buffer lives until its last reader.
      size_t lastUse = position.lookup(fusion);
      for (Operation *user : fusion->getUsers())
        lastUse = std::max(lastUse, position.lookup(user));
      bool ok = stride % 8 == 0;
      SmallVector<std::pair<Value, int64_t>> inPlace, copied;
      int64_t column = 0;
      // The columns each input takes, and whether it is the wide part (at
      // least half the columns).
      SmallVector<int64_t> columns;
      for (Value input : *inputs) {
        int64_t width = tensorOf(input).getShape().back();
        // Copied inputs go through a vectorized copy kernel: 8 elements.
        ok = ok && width % 8 == 0 && column % 8 == 0 && !columnsOf.count(input) &&
             !weightBlockOf.count(input);
        columns.push_back(column);
        column += width;
      }
      // The buffer lives until the last reader of an in-place wide part too.
      size_t wideEnd = 0;
      auto decide = [&](Value input, int64_t first) {
        int64_t width = tensorOf(input).getShape().back();
        int64_t vector = std::max<int64_t>(8, vectorWidthOf(input));
        bool here = width % vector == 0 && first % vector == 0 && stride % vector == 0 &&
                    writesAsColumns(input, concats) && input.getParentBlock() == fusion->getBlock();
        // A GEMM reading the input after the concat's last use keeps the
        // whole buffer alive: worth it for the wide part (the forward's x,
        // which the backward's dA reads: + t's columns), and for a narrow
        // one (t, which dB reads) only while the wide part keeps the buffer
        // alive anyway; else t would keep all of [x | t].
        bool wide = 2 * width >= stride;
        auto late = [&](Operation *user) {
          size_t at = position.lookup(user);
          return !wide && at >= lastUse && at > wideEnd;
        };
        auto gemmReads = [&](Operation *user, Value v) {
          auto mm = dyn_cast<MatmulOp>(user);
          return mm && readsAsColumns(mm, v) && !late(user);
        };
        // A loop or row kernel reads it through its row stride
        // (`kiln.in_row_strides`) when its vector accesses stay in a row.
        auto kernelReads = [&](Operation *user) {
          auto reader = dyn_cast<FusionOp>(user);
          if (!reader || reader == fusion || concatInputs(reader) ||
              (reader.getKind() != FusionKind::loop && reader.getKind() != FusionKind::row) ||
              late(user))
            return false;
          int64_t readerVector = std::max<int64_t>(8, vectorWidthOf(reader->getResult(0)));
          return width % readerVector == 0 && first % readerVector == 0 &&
                 stride % readerVector == 0;
        };
        for (Operation *user : input.getUsers()) {
          // A scale folded into the alpha of the GEMMs reading it (the
          // backward's dy · s): those GEMMs read the input itself.
          bool scaled = scales.count(user) && scales.lookup(user).first == input &&
                        !user->use_empty() &&
                        llvm::all_of(user->getUsers(), [&](Operation *reader) {
                          return gemmReads(reader, user->getResult(0));
                        });
          here = here && (user == fusion || scaled || gemmReads(user, input) || kernelReads(user));
        }
        return here;
      };
      // Wide parts first: where they stay in place, their readers set how
      // long the buffer lives for the narrow ones.
      SmallVector<bool> here(inputs->size(), false);
      for (bool widePass : {true, false})
        for (auto [i, input] : llvm::enumerate(*inputs)) {
          if ((2 * tensorOf(input).getShape().back() >= stride) != widePass)
            continue;
          here[i] = ok && decide(input, columns[i]);
          if (here[i] && widePass)
            for (Operation *user : input.getUsers())
              wideEnd = std::max(wideEnd, position.lookup(user));
        }
      for (auto [i, input] : llvm::enumerate(*inputs))
        (here[i] ? inPlace : copied).push_back({input, columns[i]});
      // Only worth it when a producer writes in place.
      if (!ok || inPlace.empty())
        continue;
      concats.insert(fusion);
      for (auto [input, first] : inPlace)
        columnsOf[input] = {fusion, first};
      copiedColumns[fusion] = std::move(copied);
    }
  }

  /// Where a weight concatenation's adapter block lies in `p`: {first row,
  /// first column, rows, columns}. Along the members' axis it follows all
  /// of them; across, it lies beside its one member.
  std::array<int64_t, 4> adapterRegion(const PaddedWeight &p, WeightConcat w) const {
    if (w.axis == p.axis)
      return p.axis == 1 ? std::array<int64_t, 4>{0, p.c, p.r, p.cols}
                         : std::array<int64_t, 4>{p.r, 0, p.rows, p.c};
    std::array<int64_t, 4> own = ownBlock(p, w);
    return w.axis == 0 ? std::array<int64_t, 4>{p.r, own[1], p.rows, own[3]}
                       : std::array<int64_t, 4>{own[0], p.c, own[2], p.cols};
  }

  /// The block of W a concatenation across the members' axis reads: its
  /// member's, or all of them side by side.
  static std::array<int64_t, 4> ownBlock(const PaddedWeight &p, WeightConcat w) {
    if (w.members.size() > 1)
      return {0, 0, p.r, p.c};
    return p.memberBlock(w.weight.getName());
  }

  /// The region a weight concatenation reads: its members' blocks and its
  /// adapter block.
  std::array<int64_t, 4> concatRegion(const PaddedWeight &p, WeightConcat w) const {
    std::array<int64_t, 4> a = adapterRegion(p, w);
    if (w.axis == p.axis)
      return p.axis == 1 ? std::array<int64_t, 4>{0, 0, p.r, p.c + p.cols}
                         : std::array<int64_t, 4>{0, 0, p.r + p.rows, p.c};
    std::array<int64_t, 4> own = ownBlock(p, w);
    return w.axis == 0 ? std::array<int64_t, 4>{0, own[1], own[2] + a[2], own[3]}
                       : std::array<int64_t, 4>{own[0], 0, own[2], own[3] + a[3]};
  }

  /// Decides which frozen weights get a padded buffer: every concatenation
  /// of one is a WeightConcat (at most one per axis), every other reader a
  /// GEMM taking it as a 2-D right operand (it reads the top-left block
  /// at the padded row stride), and the padded width and every block's
  /// first column and width are multiples of 8 elements (vector stores,
  /// cuBLASLt's 16-byte alignment). Weights concatenated side by side (a
  /// concatenation with several members) share one buffer, the members in
  /// its order; each member's own concatenation across lies beside it, all
  /// with the same adapter extent.
  void planPaddedWeights(ArrayRef<Operation *> ops) {
    std::map<std::string, SmallVector<ParameterOp>> params;
    SmallVector<WeightConcat> found;
    for (Operation *op : ops) {
      if (auto param = dyn_cast<ParameterOp>(op))
        params[param.getName().str()].push_back(param);
      auto fusion = dyn_cast<FusionOp>(op);
      if (std::optional<WeightConcat> w = fusion ? weightConcatOf(fusion) : std::nullopt)
        found.push_back(*w);
    }
    // Groups: a weight in two different groups gets none.
    std::map<std::string, SmallVector<std::string, 1>> groups; // key -> members
    llvm::StringSet<> conflicted;
    for (WeightConcat w : found) {
      if (w.members.size() < 2)
        continue;
      SmallVector<std::string, 1> names;
      for (ParameterOp m : w.members)
        names.push_back(m.getName().str());
      auto [it, fresh] = groups.try_emplace(names.front(), names);
      if (!fresh && it->second != names)
        conflicted.insert(names.front());
    }
    for (auto &[key, names] : groups)
      for (const std::string &name : names) {
        auto [it, fresh] = paddedGroupOf.try_emplace(name, key);
        if (!fresh && it->second != key)
          conflicted.insert(it->second), conflicted.insert(key);
      }
    for (auto it = paddedGroupOf.begin(); it != paddedGroupOf.end();)
      it = conflicted.contains(it->second) ? paddedGroupOf.erase(it) : std::next(it);
    for (WeightConcat w : found) {
      std::string name = w.weight.getName().str();
      auto group = paddedGroupOf.find(name);
      std::string key = group == paddedGroupOf.end() ? name : group->second;
      bool ok = w.members.size() == 1 || (group != paddedGroupOf.end() && key == name);
      for (ParameterOp m : w.members) {
        auto g = paddedGroupOf.find(m.getName().str());
        ok = ok && (g == paddedGroupOf.end() ? w.members.size() == 1 : g->second == key);
      }
      if (!ok)
        conflicted.insert(key);
      paddedWeights[key].concats.push_back(w);
    }
    for (auto it = paddedWeights.begin(); it != paddedWeights.end();) {
      PaddedWeight &p = it->second;
      p.name = it->first;
      bool ok = !conflicted.contains(it->first);
      auto groupIt = groups.find(it->first);
      p.names = groupIt != groups.end() ? groupIt->second
                                        : SmallVector<std::string, 1>{it->first};
      // The members' axis: their concatenation's, or 1 for a lone weight.
      for (WeightConcat w : p.concats)
        if (w.members.size() > 1)
          p.axis = w.memberAxis;
      // Each member's type, from its parameter ops.
      SmallVector<RankedTensorType, 1> types;
      for (const std::string &name : p.names) {
        auto &ops = params[name];
        ok = ok && !ops.empty();
        if (!ok)
          break;
        auto type = tensorOf(ops.front().getResult());
        ok = type.hasStaticShape() && type.getRank() == 2;
        types.push_back(type);
      }
      if (ok) {
        p.element = types.front().getElementType();
        int64_t across = types.front().getDimSize(1 - p.axis), along = 0;
        for (RankedTensorType type : types) {
          ok = ok && type.getElementType() == p.element && type.getDimSize(1 - p.axis) == across;
          p.offsets.push_back(along);
          p.sizes.push_back(type.getDimSize(p.axis));
          along += type.getDimSize(p.axis);
        }
        p.r = p.axis == 1 ? across : along;
        p.c = p.axis == 1 ? along : across;
      }
      llvm::SmallPtrSet<Operation *, 4> concatOps;
      // At most one concatenation along the members' axis, and across each
      // member at most one, all with one extent.
      bool along = false;
      llvm::StringSet<> across;
      int64_t acrossExtent = -1;
      for (WeightConcat w : p.concats) {
        if (!ok)
          break;
        auto result = tensorOf(w.concat.getResult());
        if (w.axis == p.axis) {
          ok = !along && w.members.size() == p.names.size();
          for (auto [m, name] : llvm::zip(w.members, p.names))
            ok = ok && m.getName() == name;
          int64_t own = p.axis == 1 ? p.c : p.r;
          int64_t extra = result.getDimSize(p.axis) - own;
          (p.axis == 1 ? p.cols : p.rows) = extra;
          ok = ok && extra > 0 && result.getDimSize(1 - p.axis) == (p.axis == 1 ? p.r : p.c);
          along = true;
        } else {
          // One member's, or (the merged forward) all members' at once.
          std::array<int64_t, 4> own = ownBlock(p, w);
          bool all = w.members.size() == p.names.size() && w.members.size() > 1;
          for (auto [m, name] : llvm::zip(w.members, p.names))
            all = all && m.getName() == name;
          ok = ok && (w.members.size() == 1 || all);
          for (ParameterOp m : w.members)
            ok = ok && across.insert(m.getName()).second;
          int64_t extra = result.getDimSize(w.axis) - (w.axis == 0 ? own[2] : own[3]);
          ok = ok && extra > 0 && (acrossExtent < 0 || acrossExtent == extra);
          acrossExtent = extra;
          (w.axis == 0 ? p.rows : p.cols) = extra;
        }
        concatOps.insert(w.fusion);
      }
      ok = ok && p.c % 8 == 0 && p.cols % 8 == 0;
      if (ok && p.axis == 1)
        for (auto [offset, size] : llvm::zip(p.offsets, p.sizes))
          ok = ok && offset % 8 == 0 && size % 8 == 0;
      for (const std::string &name : p.names)
        for (ParameterOp param : params[name])
          for (Operation *user : param->getUsers()) {
            auto mm = dyn_cast<MatmulOp>(user);
            ok = ok && (concatOps.contains(user) ||
                        (mm && mm.getRhs() == param.getResult() &&
                         mm.getLhs() != param.getResult() &&
                         (!mm.getTransposeA() || tensorOf(mm.getLhs()).getRank() == 2)));
          }
      if (!ok) {
        for (const std::string &name : p.names)
          if (auto g = paddedGroupOf.find(name); g != paddedGroupOf.end() && g->second == it->first)
            paddedGroupOf.erase(g);
        it = paddedWeights.erase(it);
        continue;
      }
      for (const std::string &name : p.names)
        paddedGroupOf[name] = it->first;
      for (WeightConcat w : p.concats) {
        paddedConcats[w.fusion] = it->first;
        // The adapter block's producer writes it in place when nothing
        // else reads it and it stores at the block's alignment.
        auto arg = dyn_cast<BlockArgument>(w.adapter());
        if (!arg)
          continue;
        Value block = w.fusion.getInputs()[arg.getArgNumber()];
        int64_t vector = std::max<int64_t>(8, vectorWidthOf(block));
        std::array<int64_t, 4> region = adapterRegion(p, w);
        int64_t width = region[3], first = region[1];
        llvm::SmallPtrSet<Operation *, 1> none;
        if (block.hasOneUse() && writesAsColumns(block, none) && !weightBlockOf.count(block) &&
            block.getParentBlock() == w.fusion->getBlock() && width % vector == 0 &&
            first % vector == 0 && p.stride() % vector == 0)
          weightBlockOf[block] = w.fusion;
      }
      ++it;
    }
  }

  /// Whether the adapter's block of `w` needs a kernel: no producer writes
  /// it in place.
  bool needsAdapterKernel(WeightConcat w) const {
    auto arg = dyn_cast<BlockArgument>(w.adapter());
    return !arg || !weightBlockOf.count(w.fusion.getInputs()[arg.getArgNumber()]);
  }

  /// Groups the adapter-block kernels: the blocks of one shape whose inputs
  /// (the bf16 adapters of the step's prologue) exist where the first of
  /// them lowers are written by one launch there, one segment of identical
  /// shape (the decoder layers' A^T blocks: 4 launches instead of 63 on the
  /// bench's 1b step). At most kMaxBlocks per launch (kernel parameters).
  void planAdapterBlockLaunches(ArrayRef<Operation *> ops) {
    constexpr size_t kMaxBlocks = 32;
    DenseMap<Operation *, size_t> position;
    for (auto [i, op] : llvm::enumerate(ops))
      position[op] = i;
    DenseMap<Type, FusionOp> leaders;
    for (Operation *op : ops) {
      auto fusion = dyn_cast<FusionOp>(op);
      if (!fusion || !paddedConcats.count(fusion))
        continue;
      std::optional<WeightConcat> w = weightConcatOf(fusion);
      if (!w || !needsAdapterKernel(*w))
        continue;
      Type blockType = w->adapter().getType();
      auto it = leaders.find(blockType);
      if (it == leaders.end() || adapterLaunches[it->second].size() == kMaxBlocks) {
        leaders[blockType] = fusion;
        adapterLaunches[fusion].push_back(fusion);
        continue;
      }
      size_t at = position.lookup(it->second);
      bool available = true;
      for (auto [i, input] : llvm::enumerate(fusion.getInputs())) {
        Operation *def = input.getDefiningOp();
        available &= llvm::is_contained(w->memberArgs, i) || !def || position.lookup(def) < at;
      }
      if (!available)
        continue; // launches its own kernel
      adapterLaunches[it->second].push_back(fusion);
      adapterJoined.insert(fusion);
    }
  }

  /// A view of `p`'s buffer: `shape` at `offset`, rows at the padded stride.
  Value paddedView(Location loc, PaddedWeight &p, ArrayRef<int64_t> shape, int64_t offset,
                   Type element) {
    MLIRContext *ctx = builder.getContext();
    // The weight op where its first reader or adapter-block writer lowers:
    // before every use.
    if (!p.buffer) {
      auto full = RankedTensorType::get({p.r + p.rows, p.c + p.cols}, p.element);
      auto weight = builder.create<WeightOp>(loc, bufferOf(full), p.name,
                                             builder.getDenseI64ArrayAttr({p.r, p.c}), ArrayAttr(),
                                             DenseI64ArrayAttr(), IntegerAttr());
      if (p.names.size() > 1) {
        SmallVector<StringRef> names(p.names.begin(), p.names.end());
        weight.setMembersAttr(builder.getStrArrayAttr(names));
        weight.setMemberSizesAttr(builder.getDenseI64ArrayAttr(p.sizes));
        weight.setMemberAxisAttr(builder.getI64IntegerAttr(p.axis));
      }
      p.buffer = weight;
    }
    auto type = RankedTensorType::get(shape, element);
    int64_t stride = p.stride();
    return builder.create<ViewOp>(loc, BufferType::get(ctx, type), p.buffer, dimConst(ctx, offset),
                                  stride != shape.back() ? dimConst(ctx, stride) : Dim());
  }

  /// The adapter's block of a weight concatenation: rows below W (axis 0)
  /// or columns beside it (axis 1).
  Value adapterBlock(Location loc, WeightConcat w) {
    PaddedWeight &p = paddedWeights.at(paddedConcats.lookup(w.fusion));
    Type element = tensorOf(w.weight.getResult()).getElementType();
    std::array<int64_t, 4> a = adapterRegion(p, w);
    return paddedView(loc, p, {a[2], a[3]}, a[0] * p.stride() + a[1], element);
  }

  /// Marks the inputs `kernel` reads as blocks of columns of a wider
  /// buffer (`kiln.in_row_strides`; kiln-dedupe-kernels keeps such a kernel
  /// apart from the packed one).
  static void markStridedInputs(KernelOp kernel, ValueRange ins) {
    SmallVector<int64_t> strides;
    for (Value v : ins)
      strides.push_back(rowStrideOfColumns(v));
    if (llvm::any_of(strides, [](int64_t s) { return s != 0; }))
      kernel->setAttr("kiln.in_row_strides", DenseI64ArrayAttr::get(kernel.getContext(), strides));
  }

  /// Copies the packed `input` into `columns` (a block-of-columns view at
  /// `stride`; 0: a packed block): a loop kernel that yields its argument.
  void copyIntoColumns(Location loc, Value input, Value columns, int64_t stride) {
    OpBuilder top(func);
    std::string name = (func.getName() + "_k" + Twine(kernels++) + "_columns").str();
    auto kernel = top.create<KernelOp>(loc, name, FusionKind::loop, top.getStrArrayAttr({}));
    Block *body = new Block();
    kernel.getBody().push_back(body);
    Value arg = body->addArgument(input.getType(), loc);
    OpBuilder::atBlockEnd(body).create<YieldOp>(loc, arg);
    SmallVector<std::string> symbols = bodySymbols(*body);
    SmallVector<StringRef> refs(symbols.begin(), symbols.end());
    kernel.setSymbolsAttr(top.getStrArrayAttr(refs));
    if (stride)
      kernel->setAttr("kiln.out_row_strides", top.getDenseI64ArrayAttr({stride}));
    markStridedInputs(kernel, lookup(input));
    LaunchShape shape = launchShape(FusionKind::loop, *body);
    builder.create<LaunchOp>(loc, kernel.getSymName(), ValueRange{lookup(input)},
                             ValueRange{columns}, shape.items, shape.itemsPerBlock, shape.block,
                             shape.shared);
    ++launches;
  }

  /// The block of columns `v` is written into when its concatenation is in
  /// place (the concat's buffer allocated here, before its first
  /// producer), else null.
  Value columnsFor(Value v, Location loc) {
    if (auto block = weightBlockOf.find(v); block != weightBlockOf.end()) {
      std::optional<WeightConcat> w = weightConcatOf(cast<FusionOp>(block->second));
      return adapterBlock(loc, *w);
    }
    auto it = columnsOf.find(v);
    if (it == columnsOf.end())
      return Value();
    auto [concat, first] = it->second;
    Value &buffer = concatBuffers[concat];
    if (!buffer)
      buffer = alloc(concat->getLoc(), concat->getResult(0).getType());
    MLIRContext *ctx = v.getContext();
    int64_t stride = tensorOf(concat->getResult(0)).getShape().back();
    return builder.create<ViewOp>(loc, bufferOf(v.getType()), buffer, dimConst(ctx, first),
                                  dimConst(ctx, stride));
  }

  /// The buffer a GEMM reads for `operand`: through a folded scale, whose
  /// factor multiplies alpha.
  Value gemmOperand(Value operand, double &alpha) {
    auto it = scales.find(operand.getDefiningOp());
    if (it == scales.end())
      return lookup(operand);
    alpha *= it->second.second;
    return lookup(it->second.first);
  }

  Value lookup(Value v) { return map.lookup(v); }

  /// The row stride a kernel writes a block view at (0: packed).
  static int64_t rowStrideOfColumns(Value view) {
    Dim stride = rowStrideOf(view);
    if (!stride)
      return 0;
    auto none = [](StringRef) -> std::optional<int64_t> { return std::nullopt; };
    return evaluateDim(stride, none).value_or(0);
  }

  Value alloc(Location loc, Type tensorType) {
    return builder.create<AllocOp>(loc, bufferOf(tensorType));
  }

  /// The reduce_sum folded into `mm` (see gemmOfBatchSum), if any.
  ReduceSumOp weightGradSum(MatmulOp mm) {
    if (!mm->hasOneUse())
      return nullptr;
    Operation *user = *mm->user_begin();
    return gemmOfBatchSum(user) ? cast<ReduceSumOp>(user) : nullptr;
  }

  LogicalResult lowerMatmul(MatmulOp mm, const GemmAccumulate *acc = nullptr) {
    MLIRContext *ctx = mm.getContext();
    Location loc = mm.getLoc();
    RankedTensorType a = tensorOf(mm.getLhs()), b = tensorOf(mm.getRhs()),
                     c = tensorOf(mm.getResult());
    DimList da = getDims(a), db = getDims(b), dc = getDims(c);
    bool ta = mm.getTransposeA(), tb = mm.getTransposeB();
    Dim m = dc[dc.size() - 2], n = dc.back();
    Dim k = ta ? da[da.size() - 2] : da.back();
    auto batchOf = [&](const DimList &d) { return dimProduct(ArrayRef<Dim>(d).drop_back(2), ctx); };
    Dim ba = batchOf(da), bb = batchOf(db), bc = batchOf(dc);
    Dim one = dimConst(ctx, 1), zero = dimConst(ctx, 0);
    Dim batch = bc, sa = dimMul(m, k), sb = dimMul(k, n), sc = dimMul(m, n);
    Type resultType = c;
    Operation *replaced = mm;
    if (ReduceSumOp sum = weightGradSum(mm)) {
      // Rows of every batch are consecutive: fold the batch into k.
      k = dimMul(ba, da[da.size() - 2]);
      batch = one;
      sa = sb = sc = zero;
      resultType = sum.getType();
      folded.insert(sum);
      replaced = sum;
    } else if (isConst(bb, 1) && !ta && ba == bc) {
      // A shared right operand: the batch is just more rows of A and C.
      m = dimMul(bc, m);
      batch = one;
      sa = sb = sc = zero;
    } else {
      if (isConst(ba, 1))
        sa = zero;
      else if (ba != bc)
        return mm.emitOpError("has batch dims cuBLASLt strides cannot express");
      if (isConst(bb, 1))
        sb = zero;
      else if (bb != bc)
        return mm.emitOpError("has batch dims cuBLASLt strides cannot express");
    }
    Value bias;
    Epilogue epilogue = Epilogue::none;
    if (std::optional<GemmEpilogue> chain = gemmEpilogueOf(mm)) {
      bias = lookup(chain->bias);
      epilogue = chain->kind;
      replaced = chain->last;
    }
    // Scalar factors of the operands and of the product become alpha.
    double alpha = 1;
    Value lhs = gemmOperand(mm.getLhs(), alpha);
    Value rhs = gemmOperand(mm.getRhs(), alpha);
    Value out;
    if (acc) {
      // beta = 1: the product is added to the sum's first term in place.
      alpha *= acc->alpha;
      out = lookup(acc->into);
      replaced = acc->add;
    } else {
      out = replaced == mm.getOperation() ? columnsFor(mm.getResult(), loc) : Value();
      if (!out)
        out = alloc(loc, resultType);
    }
    // The C of a sum, scaled: the scale is this GEMM's alpha and reads the
    // same buffer.
    if (auto it = intoScales.find(mm); it != intoScales.end()) {
      alpha *= it->second.intoAlpha;
      map.map(it->second.intoScale->getResult(0), out);
    }
    // A block of columns (a view at a row stride: a K-concatenation's
    // part) is read or written at its stride.
    Dim lda = rowStrideOf(lhs), ldb = rowStrideOf(rhs), ldc = rowStrideOf(out);
    DimsAttr lds;
    if (lda || ldb || ldc) {
      if (!isConst(batch, 1))
        return mm.emitOpError("is a batched GEMM of a block of columns");
      lds = DimsAttr::get(ctx, {lda ? lda : (ta ? m : k), ldb ? ldb : (tb ? k : n), ldc ? ldc : n});
    }
    auto gemm = builder.create<GemmOp>(loc, lhs, rhs, bias, out, ta, tb, m, n, k, batch,
                                       DimsAttr::get(ctx, {sa, sb, sc}), epilogue,
                                       Float32Type::get(ctx), FloatAttr(), acc != nullptr, lds);
    if (alpha != 1)
      gemm.setAlphaAttr(builder.getF64FloatAttr(alpha));
    map.map(replaced->getResult(0), out);
    ++gemms;
    return success();
  }

  /// A weight concatenation on a padded weight: the adapter's block is
  /// written into it (by its producer, or here by the fusion's body less
  /// W), and the concatenation is a view of the buffer.
  LogicalResult lowerPaddedConcat(FusionOp fusion, PaddedWeight &p) {
    Location loc = fusion.getLoc();
    std::optional<WeightConcat> w = weightConcatOf(fusion);
    Type element = tensorOf(w->weight.getResult()).getElementType();
    if (needsAdapterKernel(*w) && !adapterJoined.contains(fusion)) {
      SmallVector<FusionOp> members = adapterLaunches.lookup(fusion);
      if (members.empty())
        members.push_back(fusion);
      OpBuilder top(func);
      std::string name = (func.getName() + "_k" + Twine(kernels++) + "_adapter_block").str();
      auto kernel = top.create<KernelOp>(loc, name, FusionKind::loop, top.getStrArrayAttr({}));
      Block *body = new Block();
      kernel.getBody().push_back(body);
      SmallVector<Value> inputs, blocks, outs;
      SmallVector<int64_t> strides;
      for (FusionOp member : members) {
        WeightConcat m = *weightConcatOf(member);
        blocks.push_back(appendAdapterBlock(m, *body, inputs));
        outs.push_back(adapterBlock(loc, m));
        strides.push_back(rowStrideOfColumns(outs.back()));
      }
      OpBuilder::atBlockEnd(body).create<YieldOp>(loc, blocks);
      SmallVector<std::string> symbols = bodySymbols(*body);
      SmallVector<StringRef> refs(symbols.begin(), symbols.end());
      kernel.setSymbolsAttr(top.getStrArrayAttr(refs));
      if (llvm::any_of(strides, [](int64_t s) { return s != 0; }))
        kernel->setAttr("kiln.out_row_strides", top.getDenseI64ArrayAttr(strides));
      SmallVector<Value> ins;
      for (Value v : inputs)
        ins.push_back(lookup(v));
      markStridedInputs(kernel, ins);
      LaunchShape shape = launchShape(FusionKind::loop, *body);
      builder.create<LaunchOp>(loc, kernel.getSymName(), ins, outs, shape.items,
                               shape.itemsPerBlock, shape.block, shape.shared);
      ++launches;
    }
    std::array<int64_t, 4> region = concatRegion(p, *w);
    map.map(fusion->getResult(0), paddedView(loc, p, {region[2], region[3]},
                                             region[0] * p.stride() + region[1], element));
    return success();
  }

  LogicalResult lowerFusion(FusionOp fusion) {
    Location loc = fusion.getLoc();
    if (auto it = paddedConcats.find(fusion); it != paddedConcats.end())
      return lowerPaddedConcat(fusion, paddedWeights.at(it->second));
    // A concatenation in place: its producers wrote its columns.
    if (auto it = concatBuffers.find(fusion); it != concatBuffers.end()) {
      Value buffer = it->second;
      MLIRContext *ctx = fusion.getContext();
      int64_t stride = tensorOf(fusion->getResult(0)).getShape().back();
      for (auto [input, first] : copiedColumns.lookup(fusion)) {
        Value columns = builder.create<ViewOp>(loc, bufferOf(input.getType()), buffer,
                                               dimConst(ctx, first), dimConst(ctx, stride));
        copyIntoColumns(loc, input, columns, stride);
      }
      map.map(fusion->getResult(0), buffer);
      return success();
    }
    Block &body = fusion.getBody().front();
    FusionKind kind = fusion.getKind();
    std::string name = kernelName(func.getName(), kernels++, kind, body);
    // Atomic adds of bf16/f16 lose too much: such results accumulate in an
    // fp32 buffer that a small kernel converts afterwards.
    Operation *yield = body.getTerminator();
    SmallVector<std::pair<unsigned, RankedTensorType>> widened;
    for (OpOperand &operand : yield->getOpOperands()) {
      auto type = cast<RankedTensorType>(operand.get().getType());
      if (outputInit(operand.get()) != OutputInit::Zero || type.getElementType().isF32() ||
          type.getElementType().isF64() || !isa<FloatType>(type.getElementType()))
        continue;
      OpBuilder inside(yield);
      Value wide = inside.create<kiln::CastOp>(
          loc, RankedTensorType::get(type.getShape(), builder.getF32Type(), type.getEncoding()),
          operand.get());
      widened.push_back({operand.getOperandNumber(), type});
      operand.set(wide);
    }
    SmallVector<std::string> symbols = bodySymbols(body);
    LaunchShape shape = launchShape(kind, body);
    // Outputs, initialized when the kernel accumulates into them.
    SmallVector<Value> outs;
    SmallVector<int64_t> rowStrides; // per output; 0: packed
    for (auto [result, yielded] :
         llvm::zip(fusion.getResults(), body.getTerminator()->getOperands())) {
      Value out = columnsFor(result, loc);
      rowStrides.push_back(out ? rowStrideOfColumns(out) : 0);
      if (!out)
        out = alloc(loc, yielded.getType());
      Value source;
      OutputInit init = outputInit(yielded, &source);
      if (init == OutputInit::Zero)
        builder.create<FillOp>(loc, out, builder.getF64FloatAttr(0));
      if (init == OutputInit::CopyOperand) {
        // A splat destination (zeros, usually) copied into the body is a fill.
        auto constant = source.getDefiningOp<kiln::ConstantOp>();
        auto splat = constant ? dyn_cast<SplatElementsAttr>(constant.getValue()) : nullptr;
        if (splat && isa<FloatType>(splat.getElementType())) {
          builder.create<FillOp>(
              loc, out, builder.getF64FloatAttr(splat.getSplatValue<APFloat>().convertToDouble()));
        } else if (auto arg = dyn_cast<BlockArgument>(source)) {
          builder.create<CopyOp>(loc, lookup(fusion.getInputs()[arg.getArgNumber()]), out);
        } else {
          return fusion.emitOpError("scatter destination must be a kernel input or a splat");
        }
      }
      outs.push_back(out);
      map.map(result, out);
    }
    SmallVector<Value> ins;
    for (Value v : fusion.getInputs())
      ins.push_back(lookup(v));
    // Outline the body into a kernel symbol before the step function.
    OpBuilder top(func);
    SmallVector<StringRef> symbolRefs(symbols.begin(), symbols.end());
    auto kernel = top.create<KernelOp>(loc, name, kind, top.getStrArrayAttr(symbolRefs));
    kernel.getBody().takeBody(fusion.getBody());
    // Outputs written as columns of a wider buffer (kiln-dedupe-kernels
    // keeps such a kernel apart from the packed one).
    if (llvm::any_of(rowStrides, [](int64_t s) { return s != 0; }))
      kernel->setAttr("kiln.out_row_strides", top.getDenseI64ArrayAttr(rowStrides));
    markStridedInputs(kernel, ins);
    SmallVector<unsigned> widenedIndices;
    for (auto [index, type] : widened)
      widenedIndices.push_back(index);
    DictionaryAttr roles =
        attentionRoles(kind, kernel.getBody().front(), ins.size(), widenedIndices, builder);
    // Another attention implementation writes the narrowed outputs where the
    // kernel writes its accumulators: they must be live from here on.
    SmallVector<Value> narrowOuts;
    for (auto [index, type] : widened)
      narrowOuts.push_back(roles ? alloc(loc, type) : Value());
    auto launch = builder.create<LaunchOp>(loc, kernel.getSymName(), ins, outs, shape.items,
                                           shape.itemsPerBlock, shape.block, shape.shared);
    if (roles)
      launch.setAttentionAttr(roles);
    ++launches;
    for (auto [position, widenedOutput] : llvm::enumerate(widened)) {
      auto [index, type] = widenedOutput;
      // out = cast(accumulator), a loop kernel of one op.
      Value accumulator = outs[index];
      RankedTensorType wide = cast<BufferType>(accumulator.getType()).getTensor();
      std::string castName = name + "_narrow" + std::to_string(index);
      auto narrow = top.create<KernelOp>(loc, castName, FusionKind::loop, top.getStrArrayAttr({}));
      Block *castBody = new Block();
      narrow.getBody().push_back(castBody);
      Value arg = castBody->addArgument(wide, loc);
      OpBuilder inside = OpBuilder::atBlockEnd(castBody);
      Value narrowed = inside.create<kiln::CastOp>(loc, type, arg);
      inside.create<YieldOp>(loc, narrowed);
      SmallVector<std::string> castSymbols = bodySymbols(*castBody);
      SmallVector<StringRef> castRefs(castSymbols.begin(), castSymbols.end());
      narrow.setSymbolsAttr(top.getStrArrayAttr(castRefs));
      Value out = narrowOuts[position] ? narrowOuts[position] : alloc(loc, type);
      LaunchShape castShape = launchShape(FusionKind::loop, *castBody);
      builder.create<LaunchOp>(loc, narrow.getSymName(), ValueRange{accumulator}, ValueRange{out},
                               castShape.items, castShape.itemsPerBlock, castShape.block,
                               castShape.shared);
      map.map(fusion.getResult(index), out);
      ++launches;
    }
    return success();
  }

  /// An all-reduce bucket: in place on a gradient buffer nothing else
  /// reads (a fresh alloc whose value only the all-reduce uses), else into
  /// a fresh buffer.
  LogicalResult lowerAllReduce(kiln::AllReduceOp reduce) {
    Location loc = reduce.getLoc();
    SmallVector<Value> ins, outs;
    llvm::SetVector<Value> buffers;
    for (auto [input, result] : llvm::zip(reduce.getInputs(), reduce.getResults())) {
      Value in = lookup(input);
      bool inPlace =
          in.getDefiningOp<AllocOp>() && input.hasOneUse() && !llvm::is_contained(ins, in);
      Value out = inPlace ? in : alloc(loc, result.getType());
      ins.push_back(in);
      outs.push_back(out);
      buffers.insert(in);
      buffers.insert(out);
      map.map(result, out);
      bucketOf[result] = reduce.getBucket();
    }
    auto lowered = builder.create<kernel::AllReduceOp>(loc, ins, outs, reduce.getBucket());
    if (reduce.getLoss())
      lowered.setLoss(true);
    if (!pendingBuckets.emplace(reduce.getBucket(), buffers.takeVector()).second)
      return reduce.emitOpError("reuses bucket ") << reduce.getBucket();
    ++allReduces;
    return success();
  }

  /// Waits for the buckets \p op reads (all of them before the return).
  void waitForBuckets(Operation *op) {
    std::set<int64_t> needed;
    for (Value v : op->getOperands())
      if (auto it = bucketOf.find(v); it != bucketOf.end())
        needed.insert(it->second);
    if (isa<func::ReturnOp>(op))
      for (auto &[bucket, buffers] : pendingBuckets)
        needed.insert(bucket);
    for (int64_t bucket : needed) {
      auto it = pendingBuckets.find(bucket);
      if (it == pendingBuckets.end())
        continue;
      builder.create<AllReduceWaitOp>(op->getLoc(), it->second, bucket);
      pendingBuckets.erase(it);
    }
  }

  /// The fused LM head: its buffers, the scratch it runs in (one fp32 or
  /// bf16 chunk of logits, per-row losses + the counted rows, and an fp32
  /// weight-gradient accumulator for 16-bit weights) and one op the runtime
  /// expands into per-chunk GEMMs and row kernels.
  template <typename OpT> LogicalResult lowerLinearCrossEntropy(OpT op, Value grad) {
    MLIRContext *ctx = op.getContext();
    Location loc = op.getLoc();
    auto weightType = tensorOf(op.getWeight());
    auto hiddenType = tensorOf(op.getHidden());
    int64_t vocab = weightType.getDimSize(op.getTransposeWeight() ? 0 : 1);
    if (ShapedType::isDynamic(vocab))
      return op.emitOpError("needs a static vocabulary size");
    Type f32 = Float32Type::get(ctx);
    Value loss = alloc(loc, op.getLoss().getType());
    map.map(op.getLoss(), loss);
    Value hiddenGrad, weightGrad, accum;
    if (auto g = dyn_cast<LinearCrossEntropyGradOp>(op.getOperation())) {
      hiddenGrad = alloc(loc, g.getHiddenGrad().getType());
      map.map(g.getHiddenGrad(), hiddenGrad);
      if (Value w = g.getWeightGrad()) {
        weightGrad = alloc(loc, w.getType());
        map.map(w, weightGrad);
        if (!weightType.getElementType().isF32())
          accum = alloc(loc, RankedTensorType::get(weightType.getShape(), f32));
      }
    }
    // bf16_logits: the chunk is bf16 and its gradient overwrites it element
    // for element (the runtime reads the chunk's dtype).
    Type chunkElement = op.getBf16Logits() ? Type(BFloat16Type::get(ctx)) : f32;
    Value chunk = alloc(
        loc, RankedTensorType::get({static_cast<int64_t>(op.getChunkTokens()), vocab}, chunkElement));
    Dim rows = getDim(hiddenType, 0);
    Value stats = alloc(loc, makeTensorType({dimAdd(rows, dimConst(ctx, 1))}, f32));
    builder.create<kernel::LinearCrossEntropyOp>(
        loc, lookup(op.getHidden()), lookup(op.getWeight()), lookup(op.getLabels()),
        grad ? lookup(grad) : Value(), loss, hiddenGrad, weightGrad, chunk, stats, accum,
        op.getTransposeWeightAttr(), op.getIgnoreIndexAttr(),
        builder.getF64FloatAttr(op.getSoftcap() ? op.getSoftcap()->convertToDouble() : 0.0),
        op.getChunkTokensAttr());
    ++chunkedHeads;
    return success();
  }

  LogicalResult lowerOp(Operation *op) {
    Location loc = op->getLoc();
    builder.setInsertionPoint(op);
    if (folded.contains(op))
      return success();
    waitForBuckets(op);
    if (auto reduce = dyn_cast<kiln::AllReduceOp>(op))
      return lowerAllReduce(reduce);
    if (auto param = dyn_cast<ParameterOp>(op)) {
      auto group = paddedGroupOf.find(param.getName().str());
      auto padded = group == paddedGroupOf.end() ? paddedWeights.end()
                                                 : paddedWeights.find(group->second);
      if (padded == paddedWeights.end()) {
        map.map(param.getResult(),
                builder.create<WeightOp>(loc, bufferOf(param.getType()), param.getName(),
                                         DenseI64ArrayAttr(), ArrayAttr(), DenseI64ArrayAttr(),
                                         IntegerAttr()));
        return success();
      }
      // One buffer per name (or group), W in its block.
      PaddedWeight &p = padded->second;
      RankedTensorType type = tensorOf(param.getResult());
      std::array<int64_t, 4> own = p.memberBlock(param.getName());
      map.map(param.getResult(), paddedView(loc, p, type.getShape(),
                                            own[0] * p.stride() + own[1], type.getElementType()));
      return success();
    }
    if (auto constant = dyn_cast<kiln::ConstantOp>(op)) {
      // Read only as GEMM alphas: no buffer.
      if (!constant->use_empty() && llvm::all_of(constant->getUsers(), [&](Operation *user) {
            auto acc = accumulates.find(user);
            return scales.count(user) ||
                   (acc != accumulates.end() &&
                    (acc->second.scale == user || acc->second.intoScale == user));
          }))
        return success();
      map.map(constant.getResult(), builder.create<kernel::ConstantOp>(
                                        loc, bufferOf(constant.getType()), constant.getValue()));
      return success();
    }
    if (isa<ReshapeOp, SqueezeOp, UnsqueezeOp>(op)) {
      map.map(op->getResult(0), builder.create<ViewOp>(loc, bufferOf(op->getResult(0).getType()),
                                                       lookup(op->getOperand(0)), SymExprAttr(),
                                                       SymExprAttr()));
      return success();
    }
    // Scales folded into the alpha of every GEMM that reads them.
    if (scales.count(op) || alphaOnly.contains(op))
      return success();
    // A product added into C is issued at the add.
    if (auto it = accumulates.find(op); it != accumulates.end()) {
      if (op == it->second.add) {
        waitForBuckets(it->second.matmul); // the GEMM reads the matmul's operands here
        return lowerMatmul(cast<MatmulOp>(it->second.matmul), &it->second);
      }
      return success();
    }
    // A GEMM with a bias epilogue is issued where its chain ends: the bias
    // may be computed after the matmul.
    if (std::optional<GemmEpilogue> chain = gemmEpilogueOf(op)) {
      if (op == chain->last) {
        waitForBuckets(chain->matmul);
        return lowerMatmul(cast<MatmulOp>(chain->matmul));
      }
      return success();
    }
    if (auto mm = dyn_cast<MatmulOp>(op))
      return lowerMatmul(mm);
    if (auto fusion = dyn_cast<FusionOp>(op))
      return lowerFusion(fusion);
    if (auto fused = dyn_cast<kiln::LinearCrossEntropyOp>(op))
      return lowerLinearCrossEntropy(fused, Value());
    if (auto fused = dyn_cast<LinearCrossEntropyGradOp>(op))
      return lowerLinearCrossEntropy(fused, fused.getGrad());
    if (auto ret = dyn_cast<func::ReturnOp>(op)) {
      SmallVector<Value> values;
      for (Value v : ret.getOperands())
        values.push_back(lookup(v));
      builder.create<func::ReturnOp>(loc, values);
      return success();
    }
    return op->emitOpError("is not fused; run kiln-fuse before kiln-lower-to-step");
  }

  LogicalResult run() {
    if (func.isExternal())
      return success();
    Block &block = func.getBody().front();
    for (BlockArgument arg : block.getArguments()) {
      if (!isa<RankedTensorType>(arg.getType()))
        return func.emitOpError("has a non-tensor argument");
      map.map(arg, arg);
    }
    SmallVector<Operation *> ops;
    for (Operation &op : block)
      ops.push_back(&op);
    for (Operation *op : ops) {
      if (std::optional<std::pair<Value, double>> scale = foldedScaleOf(op))
        scales[op] = *scale;
      if (std::optional<GemmAccumulate> acc = gemmAccumulateOf(op))
        accumulates[op] = *acc;
      if (std::optional<GemmAccumulate> acc = gemmAccumulateIntoOf(op))
        intoScales[op] = *acc;
      if (onlyFeedsAlpha(op))
        alphaOnly.insert(op);
    }
    // Only in steps kiln-lora-k-concat rewrote (its flag is off by default
    // until the GPU measures the in-place concatenations).
    if (func->hasAttr("kiln.lora_k_concat")) {
      planPaddedWeights(ops);
      planAdapterBlockLaunches(ops);
      planInPlaceConcats(ops);
    }
    for (Operation *op : ops)
      if (failed(lowerOp(op)))
        return failure();
    // Drop the tensor program; buffers replace it.
    for (Operation *op : llvm::reverse(ops)) {
      op->dropAllUses();
      op->erase();
    }
    SmallVector<Type> argTypes, resultTypes;
    for (BlockArgument arg : block.getArguments()) {
      arg.setType(bufferOf(arg.getType()));
      argTypes.push_back(arg.getType());
    }
    for (Type t : func.getResultTypes())
      resultTypes.push_back(bufferOf(t));
    func.setFunctionType(FunctionType::get(func.getContext(), argTypes, resultTypes));
    return success();
  }
};

struct LowerToStepPass final : kiln::kernel::impl::LowerToStepPassBase<LowerToStepPass> {
  using LowerToStepPassBase::LowerToStepPassBase;

  void runOnOperation() override {
    SmallVector<func::FuncOp> funcs(getOperation().getOps<func::FuncOp>());
    for (func::FuncOp func : funcs) {
      Lowering lowering(func);
      if (failed(lowering.run()))
        return signalPassFailure();
      numLaunches += lowering.launches;
      numGemms += lowering.gemms;
      numAllReduces += lowering.allReduces;
    }
  }
};

} // namespace
