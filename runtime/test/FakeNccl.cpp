//===- FakeNccl.cpp - An NCCL 2.9 stand-in for the loader's tests ---------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Exports every entry point Nccl::load resolves, with NCCL's C ABI, and
// reports version 2.9.3 (before ncclAvg), so NcclTest sees the loader
// resolve all of them and refuse the version. Nothing here communicates.
//
//===----------------------------------------------------------------------===//

extern "C" {
int ncclGetVersion(int *version) {
  *version = 20903;
  return 0;
}
int ncclGetUniqueId(void *) { return 5; }
int ncclCommInitRank(void *, int, ...) { return 5; }
int ncclAllReduce(const void *, void *, unsigned long, int, int, void *, void *) { return 5; }
int ncclGroupStart() { return 0; }
int ncclGroupEnd() { return 0; }
int ncclCommDestroy(void *) { return 0; }
int ncclCommAbort(void *) { return 0; }
int ncclCommGetAsyncError(void *, int *) { return 0; }
const char *ncclGetErrorString(int) { return "fake"; }
}
