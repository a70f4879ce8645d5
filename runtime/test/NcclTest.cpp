//===- NcclTest.cpp - Loading NCCL at run time, without a GPU -------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Nccl.h declares NCCL's ABI itself (no nccl.h at build time): the
// documented enum values and the 128-byte unique id are pinned here, and
// the loader's errors (no library, not an NCCL, too old an NCCL) are one
// line each.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/runtime/Nccl.h"

using namespace kiln::runtime;
namespace artifact = kiln::artifact;

int main(int argc, char **argv) {
  // nccl.h (NCCL 2.x): ncclFloat16 = 6, ncclFloat32 = 7, ncclFloat64 = 8,
  // ncclBfloat16 = 9; ncclAvg = 4; NCCL_UNIQUE_ID_BYTES = 128.
  CHECK(sizeof(nccl::UniqueId) == 128);
  CHECK(nccl::Avg == 4 && nccl::Sum == 0);
  CHECK(nccl::dataTypeOf(artifact::DType::F32) == nccl::DataType(7));
  CHECK(nccl::dataTypeOf(artifact::DType::F16) == nccl::DataType(6));
  CHECK(nccl::dataTypeOf(artifact::DType::F64) == nccl::DataType(8));
  CHECK(nccl::dataTypeOf(artifact::DType::BF16) == nccl::DataType(9));
  CHECK(!nccl::dataTypeOf(artifact::DType::I64));

  Expected<Nccl> missing = Nccl::load({"/nonexistent/libnccl.so.2"});
  CHECK(!missing);
  CHECK(missing.getError().rfind("NCCL not found (/nonexistent/libnccl.so.2: ", 0) == 0);
  CHECK(missing.getError().find("set KILN_NCCL_LIBRARY") != std::string::npos);

  Expected<Nccl> notNccl = Nccl::load({"libm.so.6"});
  CHECK(!notNccl);
  CHECK_EQ(notNccl.getError(), "libm.so.6 does not export ncclGetVersion; it is not a usable NCCL");

  if (argc > 1) { // the fake NCCL 2.9.3 library's path
    Expected<Nccl> old = Nccl::load({argv[1]});
    CHECK(!old);
    CHECK_EQ(old.getError(),
             std::string(argv[1]) + " is NCCL 2.9.3; kiln-run needs NCCL 2.10 or later (ncclAvg)");
  }
  return checkFailures() != 0;
}
