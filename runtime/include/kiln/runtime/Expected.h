//===- Expected.h - The runtime's names for the result types ----*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Expected, Status and Error belong to the artifact library
// (kiln/artifact/Expected.h); the runtime uses them by these names.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_EXPECTED_H
#define KILN_RUNTIME_EXPECTED_H

#include "kiln/artifact/Expected.h"

namespace kiln::runtime {
using artifact::Error;
using artifact::Expected;
using artifact::oneLine;
using artifact::Status;
} // namespace kiln::runtime

#endif // KILN_RUNTIME_EXPECTED_H
