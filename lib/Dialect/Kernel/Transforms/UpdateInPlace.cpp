//===- UpdateInPlace.cpp - New params/state over the old ones -------------===//
//
// The optimizer's pointwise update kernel may write a parameter (or moment)
// over its old value when it reads the old value only at the element it
// writes and nothing reads the old value afterwards. Passes.td has the
// before/after IR.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Kernel/Passes.h"
#include "mlir/IR/SymbolTable.h"

namespace kiln::kernel {
#define GEN_PASS_DEF_UPDATEINPLACEPASS
#include "kiln/Dialect/Kernel/Passes.h.inc"
} // namespace kiln::kernel

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace {

/// Elementwise ops, including the broadcasting binary ones (the caller
/// checks that the broadcast never widens the input it follows).
bool isPointwise(Operation *op) {
  return op->hasTrait<OpTrait::Elementwise>() ||
         isa<AddOp, SubOp, MulOp, DivOp, PowOp, MaxOp, MinOp, EqOp, NeOp, LtOp, LeOp, GtOp, GeOp,
             AndOp, OrOp, XorOp, SelectOp>(op);
}

/// Whether a loop kernel reads input `index` only at the element it writes:
/// every op reached from it (transitively) is elementwise with the input's
/// shape, so thread t reads element t and writes element t of each output
/// computed from it (multi-tensor kernels walk segments of other shapes, but
/// those do not read this input).
bool readsOnlyAtOwnElement(KernelOp kernel, unsigned index) {
  if (kernel.getKind() != FusionKind::loop)
    return false;
  Block &body = kernel.getBody().front();
  if (index >= body.getNumArguments())
    return false;
  BlockArgument input = body.getArgument(index);
  auto shape = llvm::cast<RankedTensorType>(input.getType()).getShape();
  SmallVector<Value> work = {input};
  llvm::DenseSet<Operation *> seen;
  while (!work.empty()) {
    Value v = work.pop_back_val();
    for (Operation *user : v.getUsers()) {
      if (isa<YieldOp>(user) || !seen.insert(user).second)
        continue;
      if (!isPointwise(user))
        return false;
      for (Value result : user->getResults()) {
        if (llvm::cast<RankedTensorType>(result.getType()).getShape() != shape)
          return false;
        work.push_back(result);
      }
    }
  }
  return true;
}

struct UpdateInPlacePass final : kiln::kernel::impl::UpdateInPlacePassBase<UpdateInPlacePass> {
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    Block &block = func.getBody().front();
    auto ret = dyn_cast<func::ReturnOp>(block.getTerminator());
    if (!ret)
      return;
    auto module = func->getParentOfType<ModuleOp>();
    // Arguments by role and name.
    llvm::StringMap<BlockArgument> arguments;
    for (BlockArgument arg : func.getArguments())
      for (StringRef role : {"kiln.param", "kiln.state", "kiln.accum"})
        if (auto name = func.getArgAttrOfType<StringAttr>(arg.getArgNumber(), role))
          arguments[(role + "=" + name.getValue()).str()] = arg;
    llvm::DenseMap<Operation *, unsigned> order;
    for (auto [i, op] : llvm::enumerate(block))
      order[&op] = i;
    llvm::DenseSet<Value> taken;
    for (unsigned i = 0; i < ret.getNumOperands(); ++i) {
      BlockArgument old;
      for (StringRef role : {"kiln.param", "kiln.state", "kiln.accum"})
        if (auto name = func.getResultAttrOfType<StringAttr>(i, role)) {
          auto it = arguments.find((role + "=" + name.getValue()).str());
          if (it != arguments.end())
            old = it->second;
        }
      Value result = ret.getOperand(i);
      auto alloc = result.getDefiningOp<AllocOp>();
      if (!old || !alloc || old.getType() != result.getType() || taken.contains(old))
        continue;
      // One launch writes it; nothing else but the return touches it.
      LaunchOp writer;
      bool other = false;
      for (OpOperand &use : result.getUses()) {
        auto launch = dyn_cast<LaunchOp>(use.getOwner());
        bool isOut = launch && use.getOperandNumber() >= launch.getIns().size();
        if (isOut && !writer)
          writer = launch;
        else if (use.getOwner() != ret)
          other = true;
      }
      if (!writer || other || llvm::count(ret.getOperands(), result) != 1)
        continue;
      auto kernel =
          dyn_cast_or_null<KernelOp>(SymbolTable::lookupSymbolIn(module, writer.getKernelAttr()));
      auto inputs = writer.getIns();
      auto position = llvm::find(inputs, old);
      if (!kernel || position == inputs.end() || llvm::count(inputs, old) != 1 ||
          !readsOnlyAtOwnElement(kernel, position - inputs.begin()))
        continue;
      // The old value is dead after the launch (views of arguments are not
      // made for params/state, but check their readers too).
      unsigned at = order[writer];
      bool readLater = false;
      SmallVector<Value> aliases = {old};
      while (!aliases.empty() && !readLater) {
        Value v = aliases.pop_back_val();
        for (Operation *user : v.getUsers()) {
          if (isa<ViewOp>(user))
            aliases.push_back(user->getResult(0));
          if (user != writer && (user == ret || order.lookup(user) > at))
            readLater = true;
        }
      }
      if (readLater)
        continue;
      OpBuilder b(alloc);
      Value view = b.create<ViewOp>(alloc.getLoc(), result.getType(), old, SymExprAttr(),
                                      SymExprAttr());
      alloc.replaceAllUsesWith(view);
      alloc.erase();
      taken.insert(old);
      ++numInPlace;
    }
  }
};

} // namespace
