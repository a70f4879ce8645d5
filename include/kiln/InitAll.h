//===- InitAll.h - Register every Kiln dialect and pass ---------*- C++ -*-===//

#ifndef KILN_INITALL_H
#define KILN_INITALL_H

#include "kiln/Dialect/Graph/GraphDialect.h"
#include "kiln/Dialect/Graph/Passes.h"
#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "kiln/Dialect/Kernel/Passes.h"
#include "kiln/Pipelines/Pipelines.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/Transforms/Passes.h"

namespace kiln {

inline void registerAllDialects(mlir::DialectRegistry &registry) {
  registry.insert<GraphDialect, kernel::KernelDialect, mlir::func::FuncDialect>();
}

/// Kiln's passes and pipelines plus the upstream passes its pipelines use
/// (canonicalize, cse).
inline void registerAllPasses() {
  registerGraphPasses();
  kernel::registerKernelPasses();
  registerPipelines();
  mlir::registerCanonicalizerPass();
  mlir::registerCSEPass();
}

} // namespace kiln

#endif // KILN_INITALL_H
