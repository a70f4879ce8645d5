//===- Passes.h - Kernel dialect passes -------------------------*- C++ -*-===//

#ifndef KILN_DIALECT_KERNEL_PASSES_H
#define KILN_DIALECT_KERNEL_PASSES_H

#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace kiln::kernel {

#define GEN_PASS_DECL
#include "kiln/Dialect/Kernel/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "kiln/Dialect/Kernel/Passes.h.inc"

} // namespace kiln::kernel

#endif // KILN_DIALECT_KERNEL_PASSES_H
