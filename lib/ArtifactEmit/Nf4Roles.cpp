//===- Nf4Roles.cpp - The "nf4" roles of a dequantize launch --------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Reads a launched kernel's body for kiln.nf4_dequantize of kernel inputs
// (the codes; the absmax as an input, or QLoRA's double quantization:
// dequantize_blockwise_8bit of two inputs plus a third, the mean) whose
// result the kernel yields unchanged, and follows the output buffer to its
// readers in the step. Only weights read by GEMM operands alone are
// recorded: a GEMM may read the codes itself, anything else needs the bf16
// buffer. Works on any kernel the fusion made, whatever the model.
//
//===----------------------------------------------------------------------===//

#include "kiln/ArtifactEmit/Nf4Roles.h"

#include "kiln/Dialect/Graph/GraphOps.h"

#include "llvm/ADT/SmallPtrSet.h"

using namespace mlir;
using kiln::artifact::Json;

namespace {

/// The launch input a body value is, if it is a block argument.
std::optional<unsigned> inputIndex(Value v) {
  if (auto arg = dyn_cast<BlockArgument>(v))
    return arg.getArgNumber();
  return std::nullopt;
}

struct Chain {
  kiln::Nf4DequantizeOp dequantize;
  unsigned codes = 0, output = 0;
  std::optional<unsigned> absmax;             // plain NF4
  unsigned absmaxCodes = 0, scale = 0, mean = 0; // double quantization
  int64_t absmaxBlock = 0;
  SmallVector<Operation *, 3> ops;
};

/// The absmax of \p dequantize as inputs of the body: one input, or
/// add(dequantize_blockwise_8bit(codes, scale), mean) in either order.
bool matchAbsmax(Value absmax, Chain &chain) {
  if (std::optional<unsigned> input = inputIndex(absmax)) {
    chain.absmax = input;
    return true;
  }
  auto add = absmax.getDefiningOp<kiln::AddOp>();
  if (!add || !add->hasOneUse())
    return false;
  for (int first = 0; first < 2; ++first) {
    Value dq = add->getOperand(first), mean = add->getOperand(1 - first);
    auto blockwise = dq.getDefiningOp<kiln::DequantizeBlockwise8bitOp>();
    std::optional<unsigned> meanInput = inputIndex(mean);
    if (!blockwise || !blockwise->hasOneUse() || !meanInput ||
        cast<ShapedType>(mean.getType()).getNumElements() != 1)
      continue;
    std::optional<unsigned> codes = inputIndex(blockwise.getCodes());
    std::optional<unsigned> scale = inputIndex(blockwise.getAbsmax());
    if (!codes || !scale)
      continue;
    chain.absmaxCodes = *codes;
    chain.scale = *scale;
    chain.mean = *meanInput;
    chain.absmaxBlock = static_cast<int64_t>(blockwise.getBlockSize());
    chain.ops.append({blockwise, add});
    return true;
  }
  return false;
}

/// The chain of \p dequantize when its result is one output of the kernel,
/// unchanged, of a static 2-D type.
std::optional<Chain> matchChain(kiln::Nf4DequantizeOp dequantize, kiln::kernel::YieldOp yield) {
  Chain chain;
  chain.dequantize = dequantize;
  auto type = dyn_cast<RankedTensorType>(dequantize.getType());
  std::optional<unsigned> codes = inputIndex(dequantize.getCodes());
  if (!type || type.getRank() != 2 || !type.hasStaticShape() || !codes ||
      !dequantize->hasOneUse() || *dequantize->getUsers().begin() != yield.getOperation())
    return std::nullopt;
  chain.codes = *codes;
  if (!matchAbsmax(dequantize.getAbsmax(), chain))
    return std::nullopt;
  for (OpOperand &use : dequantize->getUses())
    chain.output = use.getOperandNumber();
  chain.ops.push_back(dequantize);
  return chain;
}

} // namespace

std::optional<Json> kiln::nf4RolesOf(kernel::LaunchOp launch, kernel::KernelOp kernelOp,
                                     const llvm::DenseMap<Value, int64_t> &ids,
                                     const llvm::DenseMap<Operation *, int64_t> &opIndex) {
  Block &body = kernelOp.getBody().front();
  auto yield = dyn_cast<kernel::YieldOp>(body.getTerminator());
  if (!yield || body.getNumArguments() != launch.getIns().size() ||
      yield.getNumOperands() != launch.getOuts().size())
    return std::nullopt;
  Json weights = Json::array();
  llvm::SmallPtrSet<Operation *, 8> covered;
  size_t recorded = 0;
  for (auto dequantize : body.getOps<kiln::Nf4DequantizeOp>()) {
    std::optional<Chain> chain = matchChain(dequantize, yield);
    if (!chain)
      continue;
    Value weight = launch.getOuts()[chain->output];
    // Every reader must be a GEMM's A or B (not its C or bias).
    Json readers = Json::array();
    bool onlyGemms = !weight.use_empty();
    for (Operation *user : weight.getUsers()) {
      auto gemm = dyn_cast<kernel::GemmOp>(user);
      if (user == launch.getOperation())
        continue;
      if (!gemm || gemm.getC() == weight || gemm.getBias() == weight) {
        onlyGemms = false;
        break;
      }
      readers.push(Json::integer(opIndex.lookup(user)));
    }
    if (!onlyGemms)
      continue;
    auto in = [&](unsigned i) { return Json::integer(ids.lookup(launch.getIns()[i])); };
    auto type = cast<RankedTensorType>(dequantize.getType());
    Json roles = Json::object();
    roles.set("weight", Json::integer(ids.lookup(weight)));
    roles.set("codes", in(chain->codes));
    if (chain->absmax) {
      roles.set("absmax", in(*chain->absmax));
    } else {
      roles.set("absmax_codes", in(chain->absmaxCodes));
      roles.set("absmax_scale", in(chain->scale));
      roles.set("absmax_offset", in(chain->mean));
      roles.set("absmax_block", Json::integer(chain->absmaxBlock));
    }
    roles.set("rows", Json::integer(type.getDimSize(0)));
    roles.set("cols", Json::integer(type.getDimSize(1)));
    roles.set("block", Json::integer(static_cast<int64_t>(dequantize.getBlockSize())));
    roles.set("readers", std::move(readers));
    weights.push(std::move(roles));
    covered.insert(chain->ops.begin(), chain->ops.end());
    ++recorded;
  }
  if (!recorded)
    return std::nullopt;
  // Exclusive: the launch computes these weights and nothing else, so it
  // may be skipped once every reader reads the codes instead.
  bool exclusive = recorded == launch.getOuts().size();
  for (Operation &op : body.without_terminator())
    exclusive = exclusive && covered.contains(&op);
  Json entry = Json::object();
  entry.set("exclusive", Json::boolean(exclusive));
  entry.set("weights", std::move(weights));
  return entry;
}
