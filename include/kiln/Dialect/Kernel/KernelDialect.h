//===- KernelDialect.h - Kiln kernel dialect --------------------*- C++ -*-===//

#ifndef KILN_DIALECT_KERNEL_KERNELDIALECT_H
#define KILN_DIALECT_KERNEL_KERNELDIALECT_H

#include "kiln/Dialect/Graph/GraphAttrs.h"
#include "kiln/Dialect/Graph/GraphDialect.h"
#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Dialect.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/RegionKindInterface.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/ControlFlowInterfaces.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "kiln/Dialect/Kernel/KernelDialect.h.inc"
#include "kiln/Dialect/Kernel/KernelEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "kiln/Dialect/Kernel/KernelAttrs.h.inc"
#define GET_TYPEDEF_CLASSES
#include "kiln/Dialect/Kernel/KernelTypes.h.inc"
#define GET_OP_CLASSES
#include "kiln/Dialect/Kernel/KernelOps.h.inc"

#endif // KILN_DIALECT_KERNEL_KERNELDIALECT_H
