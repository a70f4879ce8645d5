//===- DedupeKernels.cpp - One kernel per distinct body -------------------===//
//
// Repeated layers lower to kernels that differ only in their names; keeping
// one of each lets NVRTC compile each distinct source once and the artifact
// hold it once.
//
//===----------------------------------------------------------------------===//

#include "kiln/Dialect/Kernel/Passes.h"
#include "mlir/IR/OperationSupport.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/StringMap.h"

#include <unordered_map>

namespace kiln::kernel {
#define GEN_PASS_DEF_DEDUPEKERNELSPASS
#include "kiln/Dialect/Kernel/Passes.h.inc"
} // namespace kiln::kernel

using namespace mlir;
using namespace kiln::kernel;

namespace {

/// What two equal kernels share, cheap to compute: a filter before the
/// structural comparison.
size_t hashKernel(KernelOp kernel) {
  llvm::hash_code hash = llvm::hash_combine(kernel.getKindAttr(), kernel.getSymbolsAttr());
  Block &body = kernel.getBody().front();
  for (BlockArgument arg : body.getArguments())
    hash = llvm::hash_combine(hash, arg.getType());
  kernel.getBody().walk([&](Operation *op) {
    hash = llvm::hash_combine(hash, op->getName(), op->getAttrDictionary(), op->getNumOperands());
    for (Type type : op->getResultTypes())
      hash = llvm::hash_combine(hash, type);
  });
  return hash;
}

bool sameKernel(KernelOp a, KernelOp b) {
  return a.getKind() == b.getKind() && a.getSymbols() == b.getSymbols() &&
         a->getDiscardableAttrDictionary() == b->getDiscardableAttrDictionary() &&
         OperationEquivalence::isRegionEquivalentTo(&a.getBody(), &b.getBody(),
                                                    OperationEquivalence::IgnoreLocations);
}

struct DedupeKernelsPass final : kiln::kernel::impl::DedupeKernelsPassBase<DedupeKernelsPass> {
  using DedupeKernelsPassBase::DedupeKernelsPassBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    std::unordered_map<size_t, SmallVector<KernelOp, 1>> byHash;
    llvm::StringMap<FlatSymbolRefAttr> keptFor; // a copy's name -> the kernel kept
    SmallVector<KernelOp> copies;
    unsigned kept = 0;
    for (KernelOp kernel : module.getOps<KernelOp>()) {
      SmallVector<KernelOp, 1> &candidates = byHash[hashKernel(kernel)];
      auto same = llvm::find_if(candidates, [&](KernelOp c) { return sameKernel(c, kernel); });
      if (same == candidates.end()) {
        candidates.push_back(kernel);
        ++kept;
        continue;
      }
      keptFor[kernel.getSymName()] = FlatSymbolRefAttr::get(same->getSymNameAttr());
      copies.push_back(kernel);
    }
    numKernels += kept;
    if (copies.empty())
      return;
    module.walk([&](LaunchOp launch) {
      auto it = keptFor.find(launch.getKernel());
      if (it != keptFor.end())
        launch.setKernelAttr(it->second);
    });
    for (KernelOp copy : copies)
      copy.erase();
    numDuplicates += copies.size();
  }
};

} // namespace
