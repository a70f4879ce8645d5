//===- StepTime.cpp - A roofline estimate of a step's device time ---------===//
//
// Contractions are timed by FLOPs (or bytes, when they move more than they
// compute: the rank-16 LoRA GEMMs); the other ops by the bytes their fused
// kernel moves. Fusion is approximated the way kiln-fuse groups pointwise
// and row ops: an op whose only user is another such op joins its kernel,
// so only the values entering and leaving a group are read and written.
//
//===----------------------------------------------------------------------===//

#include "kiln/Analysis/StepTime.h"
#include "kiln/Analysis/CostModel.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"

#include <algorithm>
#include <functional>
#include <numeric>

using namespace mlir;

namespace kiln {
namespace {

int64_t bytesOf(Value v, const SymbolValues &symbols) {
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  return type ? tensorBytes(type, symbols).value_or(0) : 0;
}

bool isContraction(Operation *op) {
  return llvm::isa<MatmulOp, AttentionOp, AttentionGradOp, LinearCrossEntropyOp,
                   LinearCrossEntropyGradOp>(op);
}

bool isFree(Operation *op) { return llvm::isa<ParameterOp, ConstantOp>(op); }

/// Another shape over the operand's bytes: no kernel of its own.
bool isViewOp(Operation *op) { return llvm::isa<ReshapeOp, SqueezeOp, UnsqueezeOp>(op); }

/// Ops a generated kernel runs (pointwise, row, shape, indexing). Views
/// run none; their readers read the producer's bytes.
bool isFusible(Operation *op) {
  return !isContraction(op) && !isFree(op) && !isViewOp(op) && op->getNumRegions() == 0;
}

/// Ops that read only the part of an operand they write (a row gather of the
/// embedding table, a slice): the operand counts at most at the result's size.
bool readsPartOfOperand(Operation *op) {
  return llvm::isa<GatherOp, GatherElementsOp, GatherNdOp, SliceOp>(op);
}

/// A one-element operand: a GEMM's alpha.
bool isScalar(Value v) {
  auto type = llvm::dyn_cast<RankedTensorType>(v.getType());
  return type && type.hasStaticShape() && type.getNumElements() == 1;
}

/// The single-use result of a matmul, possibly scaled by a scalar.
bool isGemmProduct(Value v) {
  Operation *def = v.getDefiningOp();
  if (!def || !v.hasOneUse())
    return false;
  if (llvm::isa<MatmulOp>(def))
    return true;
  if (auto mul = llvm::dyn_cast<MulOp>(def))
    return (isGemmProduct(mul.getLhs()) && isScalar(mul.getRhs())) ||
           (isGemmProduct(mul.getRhs()) && isScalar(mul.getLhs()));
  return false;
}

/// Sums and scalar scales of GEMM products that cuBLASLt's beta = 1 and
/// alpha compute (kiln-lower-to-step's GemmAccumulate): no kernel; an add
/// reads its other operand as the GEMM's C. Returns whether `op` is one and
/// sets `read` to that operand (null for a scale).
bool foldsIntoGemm(Operation *op, Value &read) {
  read = nullptr;
  if (auto mul = llvm::dyn_cast<MulOp>(op))
    return mul.getResult().hasOneUse() &&
           ((isGemmProduct(mul.getLhs()) && isScalar(mul.getRhs())) ||
            (isGemmProduct(mul.getRhs()) && isScalar(mul.getLhs()))) &&
           llvm::isa<AddOp>(*mul.getResult().user_begin());
  if (auto add = llvm::dyn_cast<AddOp>(op)) {
    if (add.getLhs().getType() != add.getType() || add.getRhs().getType() != add.getType())
      return false;
    if (isGemmProduct(add.getRhs())) {
      read = add.getLhs();
      return true;
    }
    if (isGemmProduct(add.getLhs())) {
      read = add.getRhs();
      return true;
    }
  }
  return false;
}

/// Causal attention computes about half the score matrix.
double attentionFlops(Value query, Value key, Value value, bool causal, bool keySeqMajor,
                      const SymbolValues &symbols) {
  auto dim = [&](Value v, int64_t fromEnd) -> double {
    auto type = llvm::cast<RankedTensorType>(v.getType());
    auto d = evaluateDim(getDim(type, type.getRank() - fromEnd),
                         [&](StringRef name) -> std::optional<int64_t> {
                           auto it = symbols.find(name);
                           if (it == symbols.end())
                             return std::nullopt;
                           return it->second;
                         });
    return static_cast<double>(d.value_or(0));
  };
  double d = dim(query, 1), dv = dim(value, 1), keys = dim(key, 4 - attentionSeqDim(keySeqMajor));
  double queryElements = 0;
  if (auto type = llvm::dyn_cast<RankedTensorType>(query.getType()))
    queryElements = static_cast<double>(bytesOf(query, symbols)) /
                    std::max<int64_t>(elementBytes(type.getElementType()), 1);
  double rows = queryElements / std::max(d, 1.0);
  return 2 * rows * keys * (d + dv) * (causal ? 0.5 : 1.0);
}

double contractionSeconds(Operation *op, const SymbolValues &symbols, const DeviceRates &rates) {
  double bytes = 0;
  for (Value operand : op->getOperands())
    if (!llvm::isa_and_nonnull<ParameterOp, ConstantOp>(operand.getDefiningOp()) ||
        llvm::isa<MatmulOp>(op))
      bytes += static_cast<double>(bytesOf(operand, symbols));
  for (Value result : op->getResults())
    bytes += static_cast<double>(bytesOf(result, symbols));
  double memory = bytes / rates.bytesPerSecond;
  double compute = 0;
  if (auto attention = llvm::dyn_cast<AttentionOp>(op))
    compute = attentionFlops(attention.getQuery(), attention.getKey(), attention.getValue(),
                             attention.getCausal(), isSeqMajor(attention, kAttnKey), symbols) /
              rates.attentionFlopsPerSecond;
  else if (auto grad = llvm::dyn_cast<AttentionGradOp>(op))
    // dS, dP and the three gradient products: about 2.5 forward passes.
    compute =
        2.5 *
        attentionFlops(grad.getQuery(), grad.getKey(), grad.getValue(), grad.getCausal(),
                       isSeqMajor(grad, kGradKey), symbols) /
        rates.attentionFlopsPerSecond;
  else
    compute = static_cast<double>(estimateFlops(op, symbols)) / rates.gemmFlopsPerSecond;
  return std::max(memory, compute) + rates.launchSeconds;
}

} // namespace

double estimateStepSeconds(func::FuncOp func, const SymbolValues &symbols,
                           const DeviceRates &rates) {
  Block &body = func.getBody().front();
  std::vector<Operation *> ops;
  llvm::DenseMap<Operation *, unsigned> index;
  for (Operation &op : body.without_terminator()) {
    index[&op] = ops.size();
    ops.push_back(&op);
  }
  // Fusion groups: union-find over single-use producer -> consumer edges.
  std::vector<unsigned> parent(ops.size());
  std::iota(parent.begin(), parent.end(), 0u);
  std::function<unsigned(unsigned)> find = [&](unsigned i) {
    while (parent[i] != i)
      i = parent[i] = parent[parent[i]];
    return i;
  };
  for (unsigned i = 0; i < ops.size(); ++i) {
    Operation *op = ops[i];
    Value read;
    if (!isFusible(op) || op->getNumResults() != 1 || foldsIntoGemm(op, read))
      continue;
    Operation *user = nullptr;
    bool single = true;
    for (Operation *u : op->getResult(0).getUsers()) {
      if (user && u != user)
        single = false;
      user = u;
    }
    if (!single || !user || !index.count(user) || !isFusible(user) || foldsIntoGemm(user, read))
      continue;
    parent[find(i)] = find(index[user]);
  }

  double seconds = 0;
  llvm::DenseMap<unsigned, double> groupBytes;
  llvm::DenseMap<unsigned, llvm::DenseSet<Value>> groupInputs;
  for (unsigned i = 0; i < ops.size(); ++i) {
    Operation *op = ops[i];
    if (isFree(op) || isViewOp(op))
      continue;
    if (Value read; foldsIntoGemm(op, read)) {
      if (read)
        seconds += static_cast<double>(bytesOf(read, symbols)) / rates.bytesPerSecond;
      continue;
    }
    if (isContraction(op) || op->getNumRegions() > 0) {
      seconds += contractionSeconds(op, symbols, rates);
      continue;
    }
    unsigned group = find(i);
    double &bytes = groupBytes[group];
    int64_t largestResult = 0;
    for (Value result : op->getResults()) {
      largestResult = std::max(largestResult, bytesOf(result, symbols));
      // Written when anything outside the group (or the caller) reads it.
      bool leaves = false;
      for (OpOperand &use : result.getUses()) {
        Operation *user = use.getOwner();
        auto it = index.find(user);
        leaves |= it == index.end() || find(it->second) != group;
      }
      if (leaves)
        bytes += static_cast<double>(bytesOf(result, symbols));
    }
    for (Value operand : op->getOperands()) {
      Operation *def = operand.getDefiningOp();
      auto it = def ? index.find(def) : index.end();
      bool inside = it != index.end() && !isFree(def) && find(it->second) == group;
      if (inside || !groupInputs[group].insert(operand).second)
        continue;
      int64_t read = bytesOf(operand, symbols);
      if (readsPartOfOperand(op))
        read = std::min(read, largestResult);
      bytes += static_cast<double>(read);
    }
  }
  for (auto &entry : groupBytes)
    if (entry.second > 0)
      seconds += entry.second / rates.bytesPerSecond + rates.launchSeconds;
  return seconds;
}

} // namespace kiln
