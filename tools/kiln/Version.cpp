//===- Version.cpp - kiln --version ---------------------------------------===//
//
// The Kiln version (the CMake project's), the commit it was built from (read
// from git at build time) and the versions of what it links: LLVM/MLIR and
// NVRTC.
//
//===----------------------------------------------------------------------===//

#include "Driver.h"

#include "KilnVersion.h"
#include "kiln/Codegen/Nvrtc.h"
#include "llvm/Config/llvm-config.h"
#include "llvm/Support/raw_ostream.h"

namespace kiln::driver {

void printVersion(llvm::raw_ostream &os) {
  os << "Kiln " KILN_VERSION " (git " KILN_GIT_HASH ")\n"
     << "  LLVM/MLIR " LLVM_VERSION_STRING "\n"
     << "  NVRTC " << codegen::nvrtcVersionString() << "\n";
}

} // namespace kiln::driver
