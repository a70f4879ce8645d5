//===- StepProgram.h - The runtime's names for the step program -*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The decoded step program belongs to the artifact library
// (kiln/artifact/StepProgram.h); the runtime uses it by these names.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_STEPPROGRAM_H
#define KILN_RUNTIME_STEPPROGRAM_H

#include "kiln/artifact/StepProgram.h"
#include "kiln/runtime/Expected.h"

namespace kiln::runtime {
using artifact::ArenaPlan;
using artifact::AttentionRoles;
using artifact::decodeHex;
using artifact::LinearCrossEntropy;
using artifact::LiveRanges;
using artifact::ProgramBinding;
using artifact::ProgramBuffer;
using artifact::ProgramOp;
using artifact::StepProgram;
} // namespace kiln::runtime

#endif // KILN_RUNTIME_STEPPROGRAM_H
