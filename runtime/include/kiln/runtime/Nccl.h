//===- Nccl.h - NCCL loaded at run time -------------------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// kiln-run's data-parallel exchange is NCCL's, opened with dlopen: there is
// no nccl.h at build time, so the few types and entry points it uses are
// declared here from NCCL's documented ABI (nccl.h of NCCL 2.x): the
// 128-byte unique id, the communicator handle, and the enum values of
// ncclResult_t, ncclDataType_t and ncclRedOp_t. ncclAvg needs NCCL 2.10.
// Needs no GPU to load.
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_NCCL_H
#define KILN_RUNTIME_NCCL_H

#include "kiln/artifact/Safetensors.h"
#include "kiln/runtime/Expected.h"

#include <cuda.h>

#include <optional>
#include <string>
#include <vector>

namespace kiln::runtime::nccl {

constexpr int kUniqueIdBytes = 128; ///< NCCL_UNIQUE_ID_BYTES
struct UniqueId {
  char internal[kUniqueIdBytes];
};
struct Comm;
using Comm_t = Comm *;

enum Result : int {
  Success = 0,
  UnhandledCudaError = 1,
  SystemError = 2,
  InternalError = 3,
  InvalidArgument = 4,
  InvalidUsage = 5,
  RemoteError = 6,
  InProgress = 7,
};
enum RedOp : int { Sum = 0, Prod = 1, Max = 2, Min = 3, Avg = 4 };
enum DataType : int {
  Int8 = 0,
  Uint8 = 1,
  Int32 = 2,
  Uint32 = 3,
  Int64 = 4,
  Uint64 = 5,
  Float16 = 6,
  Float32 = 7,
  Float64 = 8,
  Bfloat16 = 9,
};

/// The NCCL element type of a floating-point step buffer, if it has one.
std::optional<DataType> dataTypeOf(artifact::DType dtype);

} // namespace kiln::runtime::nccl

namespace kiln::runtime {

class Nccl {
public:
  /// The oldest NCCL with ncclAvg (2.10.0), as ncclGetVersion encodes it.
  static constexpr int kMinimumVersion = 21000;

  /// Opens the first candidate that loads: by default $KILN_NCCL_LIBRARY
  /// (a path), then libnccl.so.2 on the loader path, then in the CUDA
  /// toolkit's library directory; resolves the entry points and checks the
  /// version. One line on failure, naming what was tried.
  static Expected<Nccl> load(std::vector<std::string> candidates = {});

  /// e.g. 22106 for 2.21.6.
  int getVersion() const { return version; }
  /// "2.21.6".
  std::string getVersionString() const;
  const std::string &getLibrary() const { return library; }
  /// "ncclInvalidUsage (text)" for a failed \p result.
  std::string describe(nccl::Result result) const;

  nccl::Result (*ncclGetVersion)(int *) = nullptr;
  nccl::Result (*ncclGetUniqueId)(nccl::UniqueId *) = nullptr;
  nccl::Result (*ncclCommInitRank)(nccl::Comm_t *, int, nccl::UniqueId, int) = nullptr;
  nccl::Result (*ncclAllReduce)(const void *, void *, size_t, nccl::DataType, nccl::RedOp,
                                nccl::Comm_t, CUstream) = nullptr;
  nccl::Result (*ncclGroupStart)() = nullptr;
  nccl::Result (*ncclGroupEnd)() = nullptr;
  nccl::Result (*ncclCommDestroy)(nccl::Comm_t) = nullptr;
  nccl::Result (*ncclCommAbort)(nccl::Comm_t) = nullptr;
  nccl::Result (*ncclCommGetAsyncError)(nccl::Comm_t, nccl::Result *) = nullptr;
  const char *(*ncclGetErrorString)(nccl::Result) = nullptr;

private:
  Nccl() = default;
  int version = 0;
  std::string library;
};

} // namespace kiln::runtime

#endif // KILN_RUNTIME_NCCL_H
