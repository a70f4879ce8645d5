//===- Nf4Roles.h - The roles of an NF4 dequantize launch -------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// A launch that dequantizes an NF4 weight for GEMMs carries the roles of its
// buffers in the step program ("nf4", docs/artifact.md), as attention
// launches carry theirs: the codes, the absmax (or the double-quantized
// triple), the dequantized [out, in] weight and the GEMMs that read it. The
// runtime may then run a GEMM that reads the codes itself (the fused NF4
// GEMM, docs/lora-qlora.md) and skip the launch. The artifact holds the
// candidates, never a choice.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_ARTIFACTEMIT_NF4ROLES_H
#define KILN_ARTIFACTEMIT_NF4ROLES_H

#include "kiln/Dialect/Kernel/KernelDialect.h"
#include "kiln/artifact/Json.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

#include <optional>

namespace kiln {

/// The "nf4" array of \p launch (of \p kernel): one object per dequantized
/// weight it writes whose every reader is a GEMM operand A or B (\p ids:
/// buffer ids, \p opIndex: op indices of the step); none when it writes no
/// such weight.
std::optional<artifact::Json> nf4RolesOf(kernel::LaunchOp launch, kernel::KernelOp kernel,
                                         const llvm::DenseMap<mlir::Value, int64_t> &ids,
                                         const llvm::DenseMap<mlir::Operation *, int64_t> &opIndex);

} // namespace kiln

#endif // KILN_ARTIFACTEMIT_NF4ROLES_H
