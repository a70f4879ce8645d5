//===- TuningDb.h - The per-GPU tuning database -----------------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// `kiln-run tune` measures the candidates an artifact allows (cuBLASLt's
// top-K algorithms per GEMM, cuDNN or the generated kernels per attention
// shape) on one GPU and remembers the winners here; `kiln-run train` reads
// them back when the machine's key matches. The format is in docs/tuning.md:
// one header line "kiln-tuning-db <version> crc32c=0x... bytes=N" and N
// bytes of JSON. A file whose checksum, size, version or fields do not hold
// is reported in one line and ignored, never trusted. Writes replace the file
// atomically (writeFileAtomically).
//
//===----------------------------------------------------------------------===//

#ifndef KILN_RUNTIME_TUNINGDB_H
#define KILN_RUNTIME_TUNINGDB_H

#include "kiln/artifact/Safetensors.h"
#include "kiln/runtime/Expected.h"

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::runtime {

constexpr int kTuningDbVersion = 1;
/// The most candidates one op may have (kiln-run tune --tune-topk).
constexpr int64_t kMaxTuningCandidates = 64;

/// The machine and libraries a choice was measured with: a choice is used
/// only where every field is equal.
struct TuningKey {
  std::string gpu; ///< "NVIDIA H200"
  int64_t smCount = 0;
  int64_t ccMajor = 0, ccMinor = 0;
  int64_t driver = 0;   ///< cuDriverGetVersion, e.g. 12080
  int64_t cuda = 0;     ///< the toolkit kiln-run was built with
  int64_t cublasLt = 0; ///< cublasLtGetVersion
  std::string cudnn;    ///< "9.19.0", or "none"
  bool operator==(const TuningKey &other) const;
  bool operator!=(const TuningKey &other) const { return !(*this == other); }
  /// "NVIDIA H200 (sm_90, 132 SMs), driver 12080, CUDA 12080, cuBLASLt 120804, cuDNN 9.19.0".
  std::string describe() const;
};

/// One tuned op: a GEMM problem, the attention of one shape, or a
/// generated kernel's launch at one shape (its launch variants).
struct TuningEntry {
  std::string kind;       ///< "gemm", "attention", "launch" or "nf4"
  std::string hash;       ///< hashSignature() of the op's signature
  std::string shape;      ///< "m=4096,n=2048,k=16,batch=1" or "batch=4,seq=2048"
  std::string label;      ///< for people: "gemm 4096x2048x16 BF16"
  int64_t candidates = 0; ///< the search space measured (top-K, implementations)
  int64_t choice = 0;     ///< the winner's index among them; 0 is the default
  std::string algo;       ///< gemm: the winner's cublasLtMatmulAlgo_t, hex
  /// gemm: the winner's configuration (GemmConfig::encode), from which
  /// train rebuilds a choice the heuristic does not offer; "" in entries
  /// written before tune searched beyond the heuristic. launch: the
  /// winner's launch shape, encodeLaunchShape.
  std::string config;
  /// gemm: the default's (candidate 0's) configuration as this run's
  /// cuBLASLt heuristic gave it; for people comparing two runs, never read
  /// by train ("" in entries written before it).
  std::string defaultConfig;
  /// attention: "cudnn" or "kernels"; nf4: "dequant+cublaslt" (choice 0)
  /// or "nf4-fused" (choice 1, kiln/runtime/Nf4Gemm.h)
  std::string impl;
  double defaultMs = 0, tunedMs = 0;
  double error = 0; ///< the winner's relative L2 error against the default
};

struct TuningDevice {
  TuningKey key;
  std::vector<TuningEntry> entries;
};

class TuningDb {
public:
  /// Parses a whole database file; \p origin names it in errors.
  static Expected<TuningDb> parse(std::string_view text, const std::string &origin);
  /// The format version a header line states, if \p text starts with one.
  static std::optional<int> headerVersion(std::string_view text);
  /// Reads and parses \p path (a regular file).
  static Expected<TuningDb> load(const std::string &path);
  /// The file's bytes: header line and JSON.
  std::string serialize() const;
  /// Replaces \p path atomically (temporary file, fsync, rename), creating
  /// its directory (and that one's parent) if missing. \p progress, if
  /// given, is called after each MiB written (tests pause there).
  Status write(const std::string &path,
               const std::function<void(uint64_t written)> &progress = {}) const;

  const TuningDevice *findDevice(const TuningKey &key) const;
  const TuningEntry *find(const TuningKey &key, std::string_view kind, std::string_view hash,
                          std::string_view shape) const;
  /// Adds \p entry for \p key, replacing one of the same kind, hash and shape.
  void put(const TuningKey &key, TuningEntry entry);
  /// Entries for devices whose key differs from \p key.
  size_t countOtherDevices(const TuningKey &key) const;

  std::vector<TuningDevice> devices;
};

/// train's line about \p db at \p path: "tuning: N ops from PATH, M
/// defaults", with why nothing matched when \p db has no entries for \p key
/// (a note naming the machine), else \p note if any.
std::string describeTuningUse(const TuningDb &db, const std::string &path, const TuningKey &key,
                              size_t tuned, size_t defaults, const std::string &note);

/// $XDG_CACHE_HOME/kiln/tuning.db, else $HOME/.cache/kiln/tuning.db; empty
/// when neither variable is set.
std::string defaultTuningDbPath();

/// 16 hex digits: FNV-1a 64 of \p signature.
std::string hashSignature(std::string_view signature);

/// What a GEMM asks of cuBLASLt, as text: operand and result dtypes, which
/// (column-major) operands are transposed, the epilogue and whether it has a
/// bias, sizes, batch count and strides. Two GEMMs with the same signature
/// are one tuning problem. A descriptor attribute that changes which
/// algorithms apply (e.g. accumulating into C) belongs in it. \p lds, the
/// column-major leading dimensions of the first operand, the second and the
/// result, are named only when one is not its matrix's packed height (a
/// packed GEMM keeps the signature it had before leading dimensions).
std::string gemmSignature(artifact::DType ab, artifact::DType c, bool transFirst, bool transSecond,
                          const std::string &epilogue, bool bias, uint64_t m, uint64_t n,
                          uint64_t k, int64_t batch, const int64_t strides[3],
                          const int64_t *lds = nullptr);

/// A launch shape as a "launch" entry's config: "per=1024,block=256" (items
/// per block, threads per block); decodeLaunchShape reads it back (false
/// unless per >= 1 and block is 1 to 1024).
std::string encodeLaunchShape(int64_t per, int64_t block);
bool decodeLaunchShape(std::string_view text, int64_t &per, int64_t &block);

/// Which of a launch's shapes (\p shapes: per and block, the default first,
/// then the artifact's variants) \p entry chooses: its choice when it was
/// measured on this very list (as many candidates, the chosen shape equal
/// to its config), else 0 and \p note says why; 0 and no note without an
/// entry.
size_t chooseLaunchShape(const TuningEntry *entry,
                         const std::vector<std::pair<int64_t, int64_t>> &shapes,
                         std::string &note);

/// Bytes as lowercase hex and back (false on a bad digit or odd length).
std::string toHex(const void *data, size_t size);
bool fromHex(std::string_view hex, void *out, size_t size);

//===----------------------------------------------------------------------===//
// The measurement policy (docs/tuning.md)
//===----------------------------------------------------------------------===//

/// A candidate wins only if its median is faster than the default's by more
/// than this fraction; anything closer is a tie and keeps the default.
constexpr double kTieMargin = 0.03;
/// ... and by more than this many milliseconds per call: for the µs-scale
/// GEMMs and launches 3% is a fraction of a µs, below what two tune runs
/// reproduce (split-K variants of a 10 µs GEMM swapped between runs) and
/// below what a step can gain (16 calls x 0.5 µs = 8 µs of a 100 ms step).
constexpr double kTieFloorMs = 0.0005;

/// The gap below which two medians near \p ms are a tie:
/// max(\p margin * \p ms, \p floorMs).
double tieTolerance(double ms, double margin = kTieMargin, double floorMs = kTieFloorMs);

/// The median of \p samples (the mean of the middle two for an even count);
/// 0 for none.
double median(std::vector<double> samples);

/// The largest relative L2 error ||candidate - reference|| / ||reference||
/// a candidate of dtype \p dtype may have to be eligible: bf16 1e-2, f16
/// 2e-3, f32 1e-5, f64 1e-12 (a different summation order in fp32, rounded
/// to the output type, stays well inside).
double numericsBound(artifact::DType dtype);

/// ||candidate - reference||_2 / ||reference||_2 over \p count elements of
/// \p dtype (0 when both are zero; infinity on a NaN/Inf the reference lacks
/// or a zero reference with a non-zero candidate).
double relativeL2(const void *candidate, const void *reference, artifact::DType dtype,
                  size_t count);

/// The index of the winner among candidates measured at \p ms (index 0 is
/// the default; a negative time marks a candidate not eligible: failed, or
/// outside the numerics bound). A candidate must beat the default by more
/// tieTolerance (\p margin relative, \p floorMs absolute); among those that
/// do, the lowest index within the tolerance of the fastest wins (cuBLASLt
/// ranks its heuristic best first), so two runs measuring nearly the same
/// times choose the same.
size_t chooseWinner(const std::vector<double> &ms, double margin = kTieMargin,
                    double floorMs = kTieFloorMs);

/// A first measurement whose decision lies within this fraction of one of
/// chooseWinner's thresholds is a close call and is measured again.
constexpr double kCloseCallBand = 0.02;
/// The most candidates a close call re-measures (the default included).
constexpr size_t kMaxFinalists = 4;

/// The candidates to measure again, interleaved, before chooseWinner
/// decides (ascending indices, the default first); empty when the first
/// medians \p ms decide clearly: no candidate comes within \p band (a
/// fraction of the default's time) of chooseWinner's threshold, the
/// default's time less its tieTolerance; or one passes it by more than band
/// and every other is slower than that one by more than its tolerance plus
/// band. Otherwise the default and the fastest challengers (at most
/// kMaxFinalists in all): those within band of passing the threshold and
/// within tolerance plus band of the fastest. With \p floorMs 0 the
/// tolerance is margin alone: faster than the default by more than margin -
/// band, within margin + band of the fastest.
std::vector<size_t> closeCallFinalists(const std::vector<double> &ms, double margin = kTieMargin,
                                       double band = kCloseCallBand, double floorMs = kTieFloorMs);

} // namespace kiln::runtime

#endif // KILN_RUNTIME_TUNINGDB_H
