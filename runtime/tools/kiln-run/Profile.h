//===- Profile.h - kiln-run train --profile ---------------------*- C++ -*-===//
//
// Writes a profiled step's op times (TSV) and prints where the time went:
// GEMMs vs generated kernels vs memory ops, then the costliest kernels.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUN_PROFILE_H
#define KILN_RUN_PROFILE_H

#include "kiln/runtime/StepExecutor.h"

#include <string>
#include <vector>

namespace kiln::run {

runtime::Status writeProfile(const std::string &path, const std::vector<runtime::ActionTime> &times,
                             unsigned top = 20);

} // namespace kiln::run

#endif // KILN_RUN_PROFILE_H
