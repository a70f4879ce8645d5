//===- StepProgram.h - The decoded "step"/"init" section --------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The step program a .kiln artifact carries (docs/artifact.md, "The step
// program"): buffers with dtype and symbolic shape, the function's argument
// and result roles, and a straight-line list of ops. Decoding checks every
// buffer id and expression, so the executor never meets a malformed one.
// Plain C++17, no CUDA.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACT_STEPPROGRAM_H
#define KILN_ARTIFACT_STEPPROGRAM_H

#include "kiln/artifact/Guards.h"
#include "kiln/artifact/Safetensors.h"

#include <optional>
#include <string>
#include <vector>

namespace kiln::artifact {

class Json;

struct ProgramBuffer {
  DType dtype = DType::F32;
  std::vector<SizeExpr> shape;
};

/// A function argument or result: "input" (data, by name), "param",
/// "state", "lr", "step", "rng_seed", "loss", or "other".
struct ProgramBinding {
  std::string role;
  std::string name;
  int buffer = -1;
};

/// The "attention" object of a tiled attention launch: its buffers' roles,
/// so the runtime may run another implementation instead of the kernel
/// (docs/artifact.md). `replaces` are the ops that exist only for the kernel
/// (the fills and fp32-to-bf16 narrowing of its accumulated outputs): they
/// are skipped with it.
struct AttentionRoles {
  bool backward = false, causal = false;
  /// The kernel applies a mask of its own: only kiln_fa90's variant of this
  /// launch's kernel ("kiln_fa90_" + its name) may replace it, not cuDNN.
  bool masked = false;
  double scale = 1;
  int q = -1, k = -1, v = -1, o = -1;
  int dout = -1, dq = -1, dk = -1, dv = -1; ///< backward only
  /// The roles stored [B, S, H, D] rather than [B, H, S, D] (`seq_major`,
  /// version 5): bits of kiln/artifact/HopperAttention.h's
  /// AttentionLayoutBit (q 1, k 2, v 4, o 8, do 16, dq 32, dk 64, dv 128).
  unsigned seqMajor = 0;
  std::vector<size_t> replaces;
  bool isSeqMajor(unsigned bit) const { return (seqMajor & bit) != 0; }
};

/// The [B, H, S, D] view of a rank-4 attention tensor's \p shape: dims 1
/// and 2 swapped when it is stored \p seqMajor.
inline std::vector<int64_t> headMajorShape(std::vector<int64_t> shape, bool seqMajor) {
  if (seqMajor && shape.size() == 4)
    std::swap(shape[1], shape[2]);
  return shape;
}

/// One weight of the "nf4" object of a dequantize launch (docs/artifact.md,
/// "NF4 dequantize roles"): the launch writes `weight`, [rows, cols] = [out,
/// in], from NF4 `codes` in blocks of `block` and an fp32 `absmax` per block,
/// or QLoRA's double quantization (absmax = map8[absmaxCodes[i]] *
/// absmaxScale[i / absmaxBlock] + absmaxOffset[0]); `readers` are the GEMM
/// ops that read it, as their A or B. -1: absent.
struct Nf4Weight {
  int weight = -1, codes = -1, absmax = -1;
  int absmaxCodes = -1, absmaxScale = -1, absmaxOffset = -1;
  int64_t rows = 0, cols = 0, block = 64, absmaxBlock = 0;
  std::vector<size_t> readers;
  bool doubleQuant() const { return absmaxCodes >= 0; }
};
/// `exclusive`: the launch writes these weights and nothing else, so it may
/// be skipped when every reader reads the codes itself.
struct Nf4Roles {
  bool exclusive = false;
  std::vector<Nf4Weight> weights;
};

/// Decodes a launch's "nf4" object (\p bufferCount: ids must be below it;
/// the error names \p where); checkNf4Roles then checks it against the
/// program's ops.
bool decodeNf4Roles(const Json &json, const std::string &where, size_t bufferCount,
                    Nf4Roles &out, std::string &error);

/// The fused LM head and mean cross entropy (docs/artifact.md, "The fused
/// LM head"): buffer ids, -1 where absent (the forward-only form has no
/// grad and no gradients).
struct LinearCrossEntropy {
  int hidden = -1, weight = -1, labels = -1, grad = -1, loss = -1;
  int hiddenGrad = -1, weightGrad = -1, chunk = -1, stats = -1, weightAccum = -1;
  bool transposeWeight = false;
  int64_t ignoreIndex = -100, chunkTokens = 1;
  double softcap = 0; ///< 0: none
  /// Every buffer it reads or writes.
  std::vector<int> buffers() const {
    std::vector<int> ids;
    for (int id :
         {hidden, weight, labels, grad, loss, hiddenGrad, weightGrad, chunk, stats, weightAccum})
      if (id >= 0)
        ids.push_back(id);
    return ids;
  }
};

/// A frozen weight of a group sharing one padded buffer (version 6).
struct WeightMember {
  std::string name;
  int64_t size = 0; ///< along the group's axis
};

struct ProgramOp {
  enum class Kind {
    Alloc,
    View,
    Weight,
    Constant,
    Fill,
    Copy,
    Launch,
    Gemm,
    LinearCrossEntropy,
    AllReduce,
    AllReduceWait
  };
  Kind kind = Kind::Alloc;
  int result = -1;       ///< alloc, view, weight, constant
  int source = -1;       ///< view, copy
  int target = -1;       ///< fill, copy
  std::string name;      ///< weight: its name; launch: the kernel symbol
  /// weight, version 4: the weight's own [rows, cols] in the top-left block
  /// of its larger buffer (a padded frozen weight; empty: the whole buffer).
  std::vector<int64_t> paddedFrom;
  /// weight, version 6: several frozen weights side by side in that block
  /// (the first is `name`), each `size` along `memberAxis`; empty: one.
  std::vector<WeightMember> members;
  int64_t memberAxis = 1;
  std::string bytes;     ///< constant: raw little-endian element bytes
  double value = 0;      ///< fill
  std::string module;    ///< launch: kernels/<module>/...
  std::vector<int> args; ///< launch: inputs then outputs; all_reduce_wait: the bucket's buffers
  /// launch, version 3: per arg, the row stride the kernel indexes it at
  /// (0: packed; empty: all packed).
  std::vector<int64_t> rowStrides;
  std::vector<std::string> symbols; ///< launch: the int64 arguments after them
  std::optional<SizeExpr> items, shared;
  int64_t per = 1, block = 1;
  /// launch: other launch shapes of the same kernel the compiler offers
  /// `kiln-run tune` (docs/tuning.md, "Launch variants"); the kernel gives
  /// the same result under each. The default (per, block) is not listed.
  struct LaunchVariant {
    int64_t per = 1, block = 1;
  };
  std::vector<LaunchVariant> variants;
  static constexpr size_t kMaxLaunchVariants = 8;
  int a = -1, b = -1, bias = -1, c = -1; ///< gemm
  bool transA = false, transB = false;
  std::optional<SizeExpr> m, n, k, batch;
  std::vector<SizeExpr> strides;           ///< gemm: a, b, c element strides
  std::string epilogue;                    ///< gemm: "none", "bias", ...
  double alpha = 1, beta = 0;              ///< gemm: C = alpha op(A) op(B) + beta C
  /// gemm, version 3: the row strides of A, B, C as stored (empty: packed).
  std::vector<SizeExpr> lds;
  /// view, version 3: the first element (in the source's elements) and the
  /// distance between the result's rows (absent: 0 and the result's width).
  std::optional<SizeExpr> offset, rowStride;
  std::optional<AttentionRoles> attention; ///< launch: tiled attention
  std::optional<Nf4Roles> nf4;             ///< launch: NF4 dequantize for GEMMs
  std::optional<LinearCrossEntropy> head;  ///< linear_cross_entropy
  /// all_reduce: outs[i] becomes the mean of ins[i] over the ranks (the same
  /// id: in place); all_reduce_wait: the bucket the compute stream waits for.
  int64_t bucket = -1;
  std::vector<int> ins, outs;
  bool loss = false; ///< all_reduce: the logged loss
};

/// Where a program's allocated buffers live in its one arena at given sizes.
struct ArenaPlan {
  std::vector<size_t> bytes;   ///< Per buffer id: its size in bytes.
  std::vector<size_t> offsets; ///< Per buffer id: arena offset (allocs only).
  std::vector<bool> inArena;   ///< Per buffer id: an alloc's own memory.
  /// Per buffer id: the buffer it sits directly above (its offset is that
  /// one's end, aligned up), or -1 at offset 0 and outside the arena.
  std::vector<int> base;
  size_t size = 0;           ///< The arena's size.
  bool fromArtifact = false; ///< The artifact's memory_plan, evaluated.
};

/// When each buffer's memory is in use, in op indices.
struct LiveRanges {
  std::vector<int> root;       ///< Per buffer id: whose memory (views: the source's).
  std::vector<int> allocAt;    ///< Per buffer id: its alloc op, or -1.
  std::vector<size_t> lastUse; ///< Per root: last op touching it (results: ops.size()).
};

class StepProgram {
public:
  /// Decodes the JSON of a "step" or "init" section; \p origin names it in
  /// errors ("step.kiln: section 'step': ...").
  static Expected<StepProgram> decode(std::string_view json, const std::string &origin);

  std::vector<ProgramBuffer> buffers;
  std::vector<ProgramBinding> args, results;
  std::vector<ProgramOp> ops;
  std::optional<double> defaultLr;

  /// The arena plan at \p sizes: a buffer lives from its alloc to its last
  /// use through itself or a view of it (results: to the end); first fit by
  /// offset among the buffers live at the same time, each aligned to
  /// \p alignment.
  Expected<ArenaPlan> planArena(const SymbolBindings &sizes, size_t alignment) const;

  /// The live range of every buffer, as planArena sees it.
  LiveRanges liveRanges() const;

  /// Elements of buffer \p id at \p sizes.
  Expected<int64_t> elementCount(int id, const SymbolBindings &sizes) const;

  /// Bytes of buffer \p id at \p sizes; an error if they overflow int64.
  Expected<size_t> byteCount(int id, const SymbolBindings &sizes) const;

  /// Bytes of buffer \p id as an expression ("4096*batch*seq").
  Expected<SizeExpr> byteSize(int id) const;
};

/// One matrix of a GEMM as stored, row-major: `rows` x `cols` at row
/// stride `ld`, `batch` of them `stride` elements apart.
struct GemmMatrix {
  int64_t rows = 0, cols = 0, ld = 0, batch = 1, stride = 0;
  /// Elements from the first to one past the last it touches.
  int64_t extent() const;
};

/// Per buffer id at \p sizes: how many elements lie from its first one to
/// the end of its memory (its element count; for a view at an offset, what
/// its source has left past the offset).
Expected<std::vector<int64_t>> reachableElements(const StepProgram &program,
                                                 const SymbolBindings &sizes);

/// The stored A, B and C of gemm op \p op at \p sizes, checked: sizes
/// evaluate, every leading dimension is at least its matrix's width and
/// every extent fits in its buffer's memory (\p elements: reachableElements
/// at these sizes). The error names the operand.
Expected<std::vector<GemmMatrix>> gemmMatrices(const StepProgram &program, const ProgramOp &op,
                                               const SymbolBindings &sizes,
                                               const std::vector<int64_t> &elements);

/// Views at an offset or row stride, checked at \p sizes (\p elements as
/// for gemmMatrices): each lies inside its source, and one whose row stride
/// is not its width (a block of columns) is read or written only by GEMMs
/// whose leading dimension for it is that stride; nothing else may index it
/// as packed (\p elements: reachableElements). The error names the op.
/// The executor's key for the tensor a weight op reads: its name, or for a
/// padded weight (paddedFrom) the name and the buffer's shape, so that a
/// program reading the same weight packed, or padded otherwise, gets a
/// tensor of its own.
std::string weightKey(const StepProgram &program, const ProgramOp &op);

/// The block of a weight group: the members' row-major images (each
/// `sizes[i]` rows of `cols` for axis 0, `rows` rows of `sizes[i]` for axis
/// 1) side by side along `axis`, row-major.
std::string groupWeightImage(const std::vector<std::string> &images, size_t elementSize,
                             int64_t axis, int64_t rows, const std::vector<int64_t> &sizes);

/// The padded image of a weight: `rows x cols` elements of `elementSize`
/// bytes (row-major, `packed`) in the top-left block of a row-major
/// `paddedRows x paddedCols` buffer, the rest zeros; and back.
std::string padWeightImage(const std::string &packed, size_t elementSize, int64_t rows,
                           int64_t cols, int64_t paddedRows, int64_t paddedCols);


Status checkStridedViews(const StepProgram &program, const SymbolBindings &sizes,
                         const std::vector<int64_t> &elements);

/// Each launch's "nf4" roles name its own args and GEMM ops reading the
/// weight as A or B (never as C); the error names the op.
std::string checkNf4Roles(const StepProgram &program, const std::string &origin);

/// Lowercase hex (two digits per byte) to bytes; false if malformed.
bool decodeHex(const std::string &hex, std::string &out);

} // namespace kiln::artifact

#endif // KILN_ARTIFACT_STEPPROGRAM_H
