//===- Common.h - Interpreter internals shared by the op families -*- C++
//-*-===//
//
// The driver (Interpreter.cpp) asks each op family in turn to run an op. A
// family answers std::nullopt when the op is not one of its ops. Kernels
// report errors without naming the op: the driver prefixes every error with
// the op name and location, so messages stay one line and uniform.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_LIB_INTERP_COMMON_H
#define KILN_LIB_INTERP_COMMON_H

#include "absl/status/statusor.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Interp/Interpreter.h"
#include "kiln/Support/HostTensor.h"
#include "mlir/IR/Operation.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace kiln::interp {

using Shape = std::vector<int64_t>;
using Tensors = std::vector<HostTensor>;
using Operands = llvm::ArrayRef<const HostTensor *>;
/// A family's answer: std::nullopt when the op belongs to another family.
using MaybeResults = std::optional<absl::StatusOr<Tensors>>;

/// Evaluates symbolic result types with the symbols bound from the inputs.
class Env {
public:
  explicit Env(const std::map<std::string, int64_t> &symbols) : symbols(symbols) {}
  /// nullopt when `dim` is `?` or uses a symbol no input bound.
  std::optional<int64_t> evaluate(Dim dim) const;
  /// The dims of a ranked tensor type, each evaluated as above.
  std::vector<std::optional<int64_t>> evaluate(mlir::Type type) const;
  /// The shape of `value`'s type; an error unless every dim is known.
  absl::StatusOr<Shape> concreteShape(mlir::Value value) const;

private:
  const std::map<std::string, int64_t> &symbols;
};

int64_t numel(llvm::ArrayRef<int64_t> shape);
/// The element count, or an error when a dim is negative or the product
/// overflows int64.
absl::StatusOr<int64_t> checkedNumel(llvm::ArrayRef<int64_t> shape);
/// Row-major strides.
Shape stridesOf(llvm::ArrayRef<int64_t> shape);
std::string shapeString(llvm::ArrayRef<int64_t> shape);
/// The dtype of a tensor type's elements, or an error for unsupported ones.
absl::StatusOr<DType> dtypeOf(mlir::Type type);
/// An empty tensor with the dtype of `value`'s type.
absl::StatusOr<HostTensor> makeResult(mlir::Value value, Shape shape);
/// Checks that the storage vector matches dtype and shape (inputs and
/// weights come from outside and may be malformed).
absl::Status checkStorage(const HostTensor &tensor);
/// A copy with every float rounded to the dtype: tensors from outside may
/// hold doubles that an f32/bf16/f16 tensor could not, and ops must see the
/// stored values.
HostTensor roundedToDType(HostTensor tensor);
/// Float -> int truncating toward zero; NaN gives 0 and out-of-range values
/// saturate, so the conversion is never undefined behaviour.
int64_t truncToInt(double value);

/// Copies an element without re-rounding (both tensors have the same dtype).
inline void copyElement(HostTensor &dst, int64_t to, const HostTensor &src, int64_t from) {
  if (dst.isFloat())
    dst.floats[to] = src.floats[from];
  else
    dst.ints[to] = src.ints[from];
}

/// Numpy broadcast of several shapes.
absl::StatusOr<Shape> broadcastShapes(llvm::ArrayRef<Shape> shapes);

/// Maps a flat index of the broadcast shape `out` to the flat index of a
/// tensor of shape `in` (numpy rules: `in` aligns to the right, its size-1
/// dims repeat).
class BroadcastMap {
public:
  BroadcastMap(llvm::ArrayRef<int64_t> in, llvm::ArrayRef<int64_t> out);
  int64_t operator()(int64_t outIndex) const;

private:
  Shape outShape;
  Shape inStrides; // 0 along broadcast dims
};

/// Splits `shape` around `axis`: outer = prod(shape[:axis]),
/// inner = prod(shape[axis+1:]). Element (o, k, i) is at (o*len + k)*inner + i.
struct AxisSplit {
  int64_t outer = 1, len = 1, inner = 1;
  AxisSplit(llvm::ArrayRef<int64_t> shape, int64_t axis);
  int64_t at(int64_t o, int64_t k, int64_t i) const { return (o * len + k) * inner + i; }
};

/// Normalizes an index into [0, size) (negatives count from the end).
absl::StatusOr<int64_t> wrapIndex(int64_t index, int64_t size);

/// Checks a norm weight or bias against dims [axis, rank) of the input.
absl::Status checkNormParam(const HostTensor &in, int64_t axis, const HostTensor &param,
                            const char *what);

/// Attention operands checked at run time: q [B, Hq, S, D], k [B, Hkv, L, D],
/// v [B, Hkv, L, Dv] and an optional mask that broadcasts to the scores
/// [B, Hq, S, L]. The forward and backward kernels share it so that they
/// scale and mask the scores identically.
struct Attention {
  const HostTensor *q, *k, *v, *mask;
  bool causal;
  double scale;
  int64_t B, Hq, S, D, Hkv, L, Dv;
  std::optional<BroadcastMap> maskMap;

  /// The kv head that query head `h` reads (grouped-query attention).
  int64_t kvHead(int64_t h) const { return h / (Hq / Hkv); }
  /// Fills scores[0, L) for query row `i` of head (b, h): q.k * scale plus
  /// the mask, -inf where masked. Returns the row maximum.
  double scoreRow(int64_t b, int64_t h, int64_t i, double *scores) const;
};
/// `scale` defaults to 1/sqrt(D).
absl::StatusOr<Attention> makeAttention(const HostTensor &q, const HostTensor &k,
                                        const HostTensor &v, const HostTensor *mask, bool causal,
                                        std::optional<double> scale);

/// [B, S, H, D] <-> [B, H, S, D] of a rank-4 tensor (a copy).
HostTensor swapSeqAndHeads(const HostTensor &in);
/// Runs an attention op whose `seq_major` marks some tensors [B, S, H, D]:
/// `run` sees every operand [B, H, S, D] and returns its results so.
/// operandRoles[i] is operand i's seq_major position (-1: none, the mask).
absl::StatusOr<Tensors> runHeadMajor(mlir::Operation *op, Operands args,
                                     llvm::ArrayRef<int> operandRoles,
                                     llvm::ArrayRef<unsigned> resultRoles,
                                     llvm::function_ref<absl::StatusOr<Tensors>(Operands)> run);

MaybeResults runSource(mlir::Operation *op, const Env &env, WeightSource &weights);
MaybeResults runElementwise(mlir::Operation *op, Operands args);
MaybeResults runLinalg(mlir::Operation *op, Operands args);
MaybeResults runReduction(mlir::Operation *op, Operands args);
MaybeResults runIndexing(mlir::Operation *op, Operands args);
MaybeResults runShape(mlir::Operation *op, Operands args, const Env &env);
MaybeResults runBackward(mlir::Operation *op, Operands args);
MaybeResults runLinearCrossEntropy(mlir::Operation *op, Operands args);
MaybeResults runRandomQuant(mlir::Operation *op, Operands args, const Env &env);
/// Host fallbacks for ONNX ops kept as kiln.opaque; nullopt if none.
MaybeResults runFallback(kiln::OpaqueOp op, Operands args);

} // namespace kiln::interp

#endif // KILN_LIB_INTERP_COMMON_H
