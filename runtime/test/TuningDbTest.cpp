//===- TuningDbTest.cpp - Tests for the tuning database ---------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/artifact/Crc32c.h"
#include "kiln/runtime/GemmScreening.h"
#include "kiln/runtime/TuningDb.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unistd.h>

using namespace kiln::runtime;
using namespace kiln::artifact;

static std::string tempDir;

static TuningKey h200() {
  TuningKey key;
  key.gpu = "NVIDIA H200";
  key.smCount = 132;
  key.ccMajor = 9;
  key.ccMinor = 0;
  key.driver = 12080;
  key.cuda = 12080;
  key.cublasLt = 120804;
  key.cudnn = "9.19.0";
  return key;
}

static TuningEntry gemmEntry(const std::string &shape, int64_t choice) {
  TuningEntry e;
  e.kind = "gemm";
  e.hash = hashSignature("bf16 " + shape);
  e.shape = shape;
  e.label = "gemm " + shape + " BF16";
  e.candidates = 8;
  e.choice = choice;
  unsigned char algo[64];
  for (int i = 0; i < 64; ++i)
    algo[i] = static_cast<unsigned char>(i * 7 + choice);
  e.algo = toHex(algo, 64);
  e.config = "id=66,tile=20,stages=31,splitk=" + std::to_string(choice + 1) +
             ",reduction=2,swizzle=0,custom=0,inner=0,cluster=0";
  e.defaultConfig = "id=66,tile=20,stages=31,splitk=1,reduction=0,swizzle=0,custom=0,inner=0,"
                    "cluster=0";
  e.defaultMs = 0.25;
  e.tunedMs = 0.125;
  e.error = 0.00390625;
  return e;
}

static std::string readAll(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

static void writeAll(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary) << text;
}

static void testRoundTrip() {
  TuningDb db;
  db.put(h200(), gemmEntry("m=4096,n=2048,k=16,batch=1", 3));
  TuningEntry attention;
  attention.kind = "attention";
  attention.hash = hashSignature("step forward b4 h32 kv8 s2048 d64 causal");
  attention.shape = "batch=4,seq=2048";
  attention.label = "attention (step) batch=4,seq=2048";
  attention.candidates = 2;
  attention.choice = 1;
  attention.impl = "kernels";
  db.put(h200(), attention);
  // Replacing an entry of the same op keeps one.
  db.put(h200(), gemmEntry("m=4096,n=2048,k=16,batch=1", 5));
  std::string path = tempDir + "/cache/kiln/tuning.db"; // directories made by write
  CHECK(db.write(path));
  Expected<TuningDb> back = TuningDb::load(path);
  CHECK(back);
  if (!back)
    return std::fprintf(stderr, "%s\n", back.getError().c_str()), void();
  CHECK(back->devices.size() == 1);
  CHECK(back->devices[0].entries.size() == 2);
  const TuningEntry *g = back->find(h200(), "gemm", gemmEntry("m=4096,n=2048,k=16,batch=1", 0).hash,
                                    "m=4096,n=2048,k=16,batch=1");
  CHECK(g && g->choice == 5 && g->algo == gemmEntry("m=4096,n=2048,k=16,batch=1", 5).algo);
  CHECK(g && g->defaultMs == 0.25 && g->tunedMs == 0.125 && g->error == 0.00390625);
  // The configuration train rebuilds a choice beyond the heuristic from.
  CHECK(g && g->config == gemmEntry("m=4096,n=2048,k=16,batch=1", 5).config);
  CHECK(g && g->config.find("splitk=6,") != std::string::npos);
  // The default's configuration, for comparing two runs.
  CHECK(g && g->defaultConfig == gemmEntry("m=4096,n=2048,k=16,batch=1", 5).defaultConfig);
  const TuningEntry *a = back->find(h200(), "attention", attention.hash, "batch=4,seq=2048");
  CHECK(a && a->impl == "kernels" && a->choice == 1 && a->config.empty());
  CHECK(a && a->defaultConfig.empty()); // written for GEMMs only
  CHECK_EQ(back->serialize(), db.serialize());
  CHECK_EQ(readAll(path), db.serialize());
  unsigned char bytes[64];
  CHECK(fromHex(g->algo, bytes, 64) && bytes[1] == 7 + 5);
}

static void testKeyMismatch() {
  TuningDb db;
  db.put(h200(), gemmEntry("m=8,n=8,k=8,batch=1", 1));
  std::string hash = gemmEntry("m=8,n=8,k=8,batch=1", 0).hash;
  CHECK(db.find(h200(), "gemm", hash, "m=8,n=8,k=8,batch=1"));
  // Any field of the key differing: nothing from the database.
  TuningKey other = h200();
  other.driver = 12090;
  CHECK(!db.find(other, "gemm", hash, "m=8,n=8,k=8,batch=1"));
  CHECK(!db.findDevice(other));
  CHECK(db.countOtherDevices(other) == 1);
  other = h200();
  other.cudnn = "none";
  CHECK(!db.find(other, "gemm", hash, "m=8,n=8,k=8,batch=1"));
  other = h200();
  other.smCount = 114; // an H100 PCIe-like part of the same architecture
  CHECK(!db.find(other, "gemm", hash, "m=8,n=8,k=8,batch=1"));
  // Another shape or hash: nothing either.
  CHECK(!db.find(h200(), "gemm", hash, "m=8,n=8,k=16,batch=1"));
  CHECK(!db.find(h200(), "attention", hash, "m=8,n=8,k=8,batch=1"));
  // train's line: every op at its default, and why.
  CHECK_EQ(describeTuningUse(db, "t.db", other, 0, 371, ""),
           "tuning: 0 ops from t.db, 371 defaults (no entries for this machine, NVIDIA H200 "
           "(sm_90, 114 SMs), driver 12080, CUDA 12080, cuBLASLt 120804, cuDNN 9.19.0; the "
           "database holds 1 for others: run kiln-run tune here)");
  CHECK_EQ(describeTuningUse(db, "t.db", h200(), 339, 32, "a note"),
           "tuning: 339 ops from t.db, 32 defaults (a note)");
  CHECK_EQ(describeTuningUse(db, "t.db", h200(), 339, 0, ""),
           "tuning: 339 ops from t.db, 0 defaults");
  // Two devices in one file.
  other = h200();
  other.gpu = "NVIDIA A100-SXM4-80GB";
  db.put(other, gemmEntry("m=8,n=8,k=8,batch=1", 2));
  Expected<TuningDb> back = TuningDb::parse(db.serialize(), "two.db");
  CHECK(back && back->devices.size() == 2);
  CHECK(back && back->find(other, "gemm", hash, "m=8,n=8,k=8,batch=1")->choice == 2);
  CHECK(back && back->find(h200(), "gemm", hash, "m=8,n=8,k=8,batch=1")->choice == 1);
}

static void expectCorrupt(const std::string &text, const std::string &fragment) {
  Expected<TuningDb> db = TuningDb::parse(text, "t.db");
  CHECK(!db);
  if (db)
    return;
  // One line that names the file.
  CHECK(db.getError().find('\n') == std::string::npos);
  CHECK(db.getError().rfind("t.db: ", 0) == 0);
  if (db.getError().find(fragment) == std::string::npos) {
    std::fprintf(stderr, "expected '%s' in: %s\n", fragment.c_str(), db.getError().c_str());
    ++checkFailures();
  }
}

static void testCorrupt() {
  TuningDb db;
  db.put(h200(), gemmEntry("m=8,n=8,k=8,batch=1", 1));
  std::string good = db.serialize();
  CHECK(TuningDb::parse(good, "t.db"));
  expectCorrupt("", "not a Kiln tuning database");
  expectCorrupt("{\"devices\": []}\n", "not a Kiln tuning database");
  expectCorrupt(good.substr(0, good.size() - 10), "truncated or damaged");
  std::string flipped = good;
  flipped[flipped.find("\"choice\": 1") + 10] = '2';
  expectCorrupt(flipped, "CRC-32C");
  std::string version = good;
  version.replace(std::strlen("kiln-tuning-db "), 1, "2");
  expectCorrupt(version, "format version 2, this kiln-run reads 1");
  expectCorrupt("kiln-tuning-db 1 garbage\n{}", "damaged header line");
  // Well-formed files with bad fields: re-serialized with a valid checksum.
  auto withBody = [](const std::string &body) {
    TuningDb empty;
    std::string text = empty.serialize();
    std::string header = text.substr(0, text.find('\n'));
    (void)header;
    char line[96];
    std::snprintf(line, sizeof line, "kiln-tuning-db 1 crc32c=0x%08x bytes=%zu\n",
                  crc32c(0, body.data(), body.size()), body.size());
    return std::string(line) + body;
  };
  expectCorrupt(withBody("[1, 2"), "invalid JSON");
  expectCorrupt(withBody("{}"), "\"devices\" array");
  std::string entryText = good.substr(good.find('\n') + 1);
  std::string badChoice = entryText;
  badChoice.replace(badChoice.find("\"choice\": 1"), 11, "\"choice\": 9");
  expectCorrupt(withBody(badChoice), "\"choice\" must index the candidates");
  std::string manyCandidates = entryText;
  manyCandidates.replace(manyCandidates.find("\"candidates\": 8"), 15,
                         "\"candidates\": 1000000000");
  expectCorrupt(withBody(manyCandidates), "\"candidates\" must be from 1 to 64");
  std::string badAlgo = entryText;
  badAlgo.replace(badAlgo.find("\"algo\": \"") + 9, 2, "zz");
  expectCorrupt(withBody(badAlgo), "\"algo\" must be 128 hex digits");
  std::string badConfig = entryText;
  badConfig.replace(badConfig.find("splitk=2"), 8, "splitk=x");
  expectCorrupt(withBody(badConfig),
                "devices[0].entries[0]: \"config\": 'splitk' needs a decimal number, got 'x'");
  std::string numberConfig = entryText;
  size_t config = numberConfig.find("\"config\": \"");
  numberConfig.replace(config, numberConfig.find('"', config + 11) + 1 - config, "\"config\": 7");
  expectCorrupt(withBody(numberConfig), "\"config\" must be a string");
  std::string numberDefault = entryText;
  size_t byDefault = numberDefault.find("\"default_config\": \"");
  CHECK(byDefault != std::string::npos);
  numberDefault.replace(byDefault, numberDefault.find('"', byDefault + 19) + 1 - byDefault,
                        "\"default_config\": 7");
  expectCorrupt(withBody(numberDefault), "\"default_config\" must be a string");
  // Written before tune searched beyond the heuristic: no "config", loads
  // (its GEMMs match by "algo" alone).
  std::string legacy = entryText;
  config = legacy.find("\"config\": \"");
  legacy.erase(config, legacy.find('"', config + 11) + 1 - config);
  legacy.erase(legacy.rfind(',', config), 1); // the comma before it
  Expected<TuningDb> old = TuningDb::parse(withBody(legacy), "old.db");
  CHECK(old);
  if (!old)
    std::fprintf(stderr, "%s\n%s\n", old.getError().c_str(), legacy.c_str());
  CHECK(old && old->devices[0].entries[0].config.empty() &&
        old->devices[0].entries[0].choice == 1);
  std::string badKind = entryText;
  badKind.replace(badKind.find("\"kind\": \"gemm\""), 14, "\"kind\": \"conv\"");
  expectCorrupt(withBody(badKind), "\"kind\" must be");
  std::string badKey = entryText;
  badKey.replace(badKey.find("\"sm_count\": 132"), 15, "\"sm_count\": \"x\"");
  expectCorrupt(withBody(badKey), "devices[0].key: \"sm_count\" must be an integer");
  // A file on disk: load names it.
  std::string path = tempDir + "/bad.db";
  writeAll(path, "kiln-tuning-db 1 crc32c=0x00000000 bytes=2\n{}");
  Expected<TuningDb> loaded = TuningDb::load(path);
  CHECK(!loaded && loaded.getError() == path + ": fails its CRC-32C check (damaged)");
  CHECK(!TuningDb::load(tempDir + "/missing.db"));
}

static void testTieRule() {
  // The default (index 0) stays unless a candidate beats it by > 3%.
  CHECK(chooseWinner({1.0, 0.98, 0.99}) == 0);
  CHECK(chooseWinner({1.0, 0.971}) == 0);
  CHECK(chooseWinner({1.0, 0.95}) == 1);
  CHECK(chooseWinner({1.0, 0.5, 0.9}) == 1);
  CHECK(chooseWinner({1.0, 0.9, 0.5}) == 2);
  // Candidates within the margin of the fastest: the best-ranked wins.
  CHECK(chooseWinner({1.0, 0.80, 0.79, 0.60}) == 3);
  CHECK(chooseWinner({1.0, 0.80, 0.79}) == 1);
  // Ineligible candidates (negative) never win; nor does anything when the
  // default itself failed.
  CHECK(chooseWinner({1.0, -1, 0.9}) == 2);
  CHECK(chooseWinner({1.0, -1, -1}) == 0);
  CHECK(chooseWinner({-1, 0.5}) == 0);
  CHECK(chooseWinner({}) == 0);
  CHECK(median({3, 1, 2}) == 2);
  CHECK(median({4, 1, 3, 2}) == 2.5);
  CHECK(median({}) == 0);
}

static void testTieFloor() {
  // The tolerance: the relative margin, at least kTieFloorMs (0.5 µs).
  CHECK(tieTolerance(1.0) == 0.03);
  CHECK(tieTolerance(0.010) == kTieFloorMs);
  CHECK(tieTolerance(0.010, kTieMargin, 0) == 0.010 * kTieMargin);
  // A 10 µs GEMM: 0.4 µs faster is 4% (beyond the margin) but within the
  // floor, a tie; 0.6 µs faster wins. Without the floor 0.4 µs would win.
  CHECK(chooseWinner({0.010, 0.0096}) == 0);
  CHECK(chooseWinner({0.010, 0.0094}) == 1);
  CHECK(chooseWinner({0.010, 0.0096}, kTieMargin, 0) == 1);
  // Two challengers 0.4 µs apart (4%): the lower index, the floor's tie.
  CHECK(chooseWinner({0.012, 0.0100, 0.0096}) == 1);
  CHECK(chooseWinner({0.012, 0.0100, 0.0096}, kTieMargin, 0) == 2);
  CHECK(chooseWinner({0.012, 0.0102, 0.0096}) == 2);
  // Millisecond GEMMs and whole steps: the relative margin alone.
  CHECK(chooseWinner({0.379, 0.3517, 0.3544}) == 1);
  CHECK(chooseWinner({100.0, 96.0}) == 1);
  // Close calls near the floor's threshold (9.5 µs for a 10 µs default).
  using V = std::vector<size_t>;
  CHECK(closeCallFinalists({0.010, 0.0094}) == (V{0, 1}));
  CHECK(closeCallFinalists({0.010, 0.00965}) == (V{0, 1}));
  CHECK(closeCallFinalists({0.010, 0.0098}) == V{});
  CHECK(closeCallFinalists({0.010, 0.0080}) == V{});
  CHECK(closeCallFinalists({0.012, 0.0100, 0.0096}) == (V{0, 1, 2}));
}

static void testScreening() {
  using V = std::vector<size_t>;
  // Groups: the algorithm id and the split-K scheme, not the split count.
  GemmConfig plain, split4, split8, other;
  plain.algoId = split4.algoId = split8.algoId = 66;
  other.algoId = 31;
  split4.splitK = 4;
  split8.splitK = 8;
  split4.reduction = split8.reduction = 2;
  CHECK(screenGroup(split4) == screenGroup(split8));
  CHECK(screenGroup(plain) != screenGroup(split4));
  CHECK(screenGroup(plain) != screenGroup(other));
  // No more than `keep` runnable: all of them, nothing measured again.
  ScreenPolicy policy;
  CHECK(screenAdmit({0.01, -1, 0.02}, {0, 0, 0}, policy) == (V{0, 2}));
  CHECK(screenRemeasure({0.01, -1, 0.02}, {0, 0, 0}, policy) == V{});
  // Times within the tie tolerance of the cut (0.5 µs here) are taken by
  // index: two runs whose noise swaps 1-3 admit the same; by time alone the
  // second would admit {0, 2, 3}.
  ScreenPolicy three;
  three.keep = 3;
  three.perGroup = 0;
  std::vector<uint64_t> one(5, 0);
  CHECK(screenAdmit({0.0080, 0.0100, 0.0101, 0.0102, 0.0120}, one, three) == (V{0, 1, 2}));
  CHECK(screenAdmit({0.0080, 0.0102, 0.0100, 0.0101, 0.0120}, one, three) == (V{0, 1, 2}));
  // Beyond the tolerance, time decides.
  CHECK(screenAdmit({0.0080, 0.0120, 0.0100, 0.0101, 0.0090}, one, three) == (V{0, 2, 4}));
  // The fastest of each group within 25% of the fastest first (at most
  // half the slots): a dense cluster of one algorithm's split-K variants
  // (0-5) does not crowd out another algorithm (6); one 2x slower (7)
  // gets no reserved place.
  ScreenPolicy four;
  four.keep = 4;
  four.perGroup = 1;
  std::vector<double> ms = {0.0100, 0.0101, 0.0102, 0.0103, 0.0104, 0.0105, 0.0110, 0.0200};
  std::vector<uint64_t> groups = {1, 1, 1, 1, 1, 1, 2, 3};
  CHECK(screenAdmit(ms, groups, four) == (V{0, 1, 2, 6}));
  four.perGroup = 0;
  CHECK(screenAdmit(ms, groups, four) == (V{0, 1, 2, 3}));
  // Measured again: what the cut admits and what lies within 25% of the
  // cut's time (a configuration whose first samples were unlucky), at most
  // maxRescreen; never the unrunnable.
  ScreenPolicy two;
  two.keep = 2;
  two.perGroup = 0;
  std::vector<double> first = {0.010, 0.011, 0.012, 0.0135, 0.020, -1};
  std::vector<uint64_t> six(6, 0);
  CHECK(screenAdmit(first, six, two) == (V{0, 1}));
  CHECK(screenRemeasure(first, six, two) == (V{0, 1, 2, 3}));
  two.maxRescreen = 3;
  CHECK(screenRemeasure(first, six, two) == (V{0, 1, 2}));
  // The second pass decides among those alone: 3, unlucky before, is in.
  CHECK(screenAdmit({0.0101, 0.0112, -1, 0.0090, -1, -1}, six, two) == (V{0, 3}));
}

static void testCloseCalls() {
  using V = std::vector<size_t>;
  // Clear decisions are not measured again: nothing near beating the
  // default, or one candidate far ahead of the default and of the rest.
  CHECK(closeCallFinalists({1.0, 0.995, 1.2}) == V{});
  CHECK(closeCallFinalists({1.0, 0.94}) == V{});
  CHECK(closeCallFinalists({1.0, 0.5, 0.9}) == V{});
  // Near the margin against the default: the default and the challenger.
  CHECK(closeCallFinalists({1.0, 0.98, 1.1}) == (V{0, 1}));
  CHECK(closeCallFinalists({1.0, 0.96}) == (V{0, 1}));
  // Two candidates within the margin of each other (the H200's 1b run:
  // algorithms 2 and 7 of the frozen 8192x8192x2048 GEMM swapped between
  // two tunes); the slower ones stay out.
  CHECK(closeCallFinalists({0.379, 0.3517, 0.37, 0.375, 0.38, 0.39, 0.3544}) == (V{0, 1, 6}));
  CHECK(closeCallFinalists({1.0, 0.80, 0.79}) == (V{0, 1, 2}));
  // At most kMaxFinalists: the fastest challengers, in index order.
  CHECK(closeCallFinalists({1.0, 0.80, 0.81, 0.79, 0.795, 0.82}) == (V{0, 1, 3, 4}));
  // Ineligible candidates (negative) are never finalists.
  CHECK(closeCallFinalists({1.0, -1, 0.97}) == (V{0, 2}));
  CHECK(closeCallFinalists({-1, 0.5}) == V{});
  CHECK(closeCallFinalists({}) == V{});
  CHECK(closeCallFinalists({1.0}) == V{});
}

static void testNumerics() {
  std::vector<float> ref = {1, 2, 3, 4}, same = ref, off = {1, 2, 3, 4.04f};
  CHECK(relativeL2(same.data(), ref.data(), DType::F32, 4) == 0);
  double e = relativeL2(off.data(), ref.data(), DType::F32, 4);
  CHECK(std::fabs(e - 0.04 / std::sqrt(30.0)) < 1e-6);
  std::vector<float> nan = {1, 2, NAN, 4};
  CHECK(std::isinf(relativeL2(nan.data(), ref.data(), DType::F32, 4)));
  CHECK(relativeL2(nan.data(), nan.data(), DType::F32, 4) == 0);
  std::vector<float> zero(4, 0.f);
  CHECK(std::isinf(relativeL2(ref.data(), zero.data(), DType::F32, 4)));
  // bf16 1.0 = 0x3f80, one ulp up 0x3f81 (1.0078125).
  uint16_t a[2] = {0x3f80, 0x4000}, b[2] = {0x3f81, 0x4000};
  double bf = relativeL2(b, a, DType::BF16, 2);
  CHECK(std::fabs(bf - 0.0078125 / std::sqrt(5.0)) < 1e-9);
  CHECK(bf < numericsBound(DType::BF16));
  // bf16 NaN (0x7fc0) and Inf (0x7f80): reproduced is fine, anything else is not.
  uint16_t n1[3] = {0x3f80, 0x7fc0, 0x4000}, n2[3] = {0x3f80, 0x7fc0, 0x4000},
           n3[3] = {0x3f80, 0x3f80, 0x4000}, inf[3] = {0x3f80, 0x7f80, 0x4000};
  CHECK(relativeL2(n2, n1, DType::BF16, 3) == 0);
  CHECK(std::isinf(relativeL2(n3, n1, DType::BF16, 3)));
  CHECK(std::isinf(relativeL2(n1, n3, DType::BF16, 3)));
  CHECK(std::isinf(relativeL2(inf, n3, DType::BF16, 3)));
  CHECK(relativeL2(inf, inf, DType::BF16, 3) == 0);
  // f16 1.0 = 0x3c00, 2.0 = 0x4000.
  uint16_t h[2] = {0x3c00, 0x4000}, h2[2] = {0x3c00, 0x4000};
  CHECK(relativeL2(h2, h, DType::F16, 2) == 0);
  CHECK(numericsBound(DType::F32) < numericsBound(DType::F16));
}

static void testDefaultPath() {
  ::setenv("XDG_CACHE_HOME", "/x/cache", 1);
  CHECK_EQ(defaultTuningDbPath(), "/x/cache/kiln/tuning.db");
  ::setenv("XDG_CACHE_HOME", "relative", 1); // not absolute: ignored, as XDG says
  ::setenv("HOME", "/home/u", 1);
  CHECK_EQ(defaultTuningDbPath(), "/home/u/.cache/kiln/tuning.db");
  ::unsetenv("XDG_CACHE_HOME");
  ::unsetenv("HOME");
  CHECK_EQ(defaultTuningDbPath(), "");
  CHECK_EQ(hashSignature(""), "cbf29ce484222325");
  CHECK(hashSignature("a") != hashSignature("b"));
}

// Leading dimensions are part of a GEMM's tuning problem, but a packed GEMM
// keeps the signature (and the tuned entries) it had before they existed.
static void testSignatureLeadingDims() {
  int64_t strides[3] = {0, 0, 0};
  std::string plain =
      gemmSignature(DType::BF16, DType::BF16, false, false, "none", false, 8192, 2048, 2064, 1,
                    strides);
  // Column-major: first operand (B) N x K at ld N, second (A) K x M at ld K.
  int64_t packed[3] = {2048, 2064, 2048};
  CHECK_EQ(gemmSignature(DType::BF16, DType::BF16, false, false, "none", false, 8192, 2048, 2064,
                         1, strides, packed),
           plain);
  int64_t concat[3] = {2048, 2080, 2048};
  std::string strided = gemmSignature(DType::BF16, DType::BF16, false, false, "none", false, 8192,
                                      2048, 2064, 1, strides, concat);
  CHECK(strided != plain);
  CHECK_EQ(strided, plain + " ld=2048,2080,2048");
}

// A generated kernel's launch: its entry round-trips with its launch shape,
// and a runner takes the choice only for the very list it was measured on.
static void testLaunchEntries() {
  CHECK_EQ(encodeLaunchShape(1024, 256), "per=1024,block=256");
  int64_t per = 0, block = 0;
  CHECK(decodeLaunchShape("per=1024,block=256", per, block) && per == 1024 && block == 256);
  for (const char *bad : {"", "per=1024", "block=256,per=1024", "per=0,block=256",
                          "per=1024,block=0", "per=1024,block=2048", "per=01,block=256",
                          "per=1024,block=256,", "per=-1,block=256", "per=1024,block=25x"})
    CHECK(!decodeLaunchShape(bad, per, block));

  std::vector<std::pair<int64_t, int64_t>> shapes = {
      {256, 256}, {128, 128}, {512, 512}, {1024, 256}, {4096, 256}, {2048, 512}};
  TuningEntry e;
  e.kind = "launch";
  e.hash = hashSignature("launch 0123456789abcdef main_k9_silu_mul");
  e.shape = "items=8388608,shared=0,batch=4,seq=2048";
  e.label = "launch main_k9_silu_mul (8388608 items)";
  e.candidates = 6;
  e.choice = 3;
  e.config = "per=1024,block=256";
  e.defaultMs = 0.1;
  e.tunedMs = 0.09;
  TuningDb db;
  db.put(h200(), e);
  Expected<TuningDb> back = TuningDb::parse(db.serialize(), "t.db");
  CHECK(back);
  const TuningEntry *found = back ? back->find(h200(), "launch", e.hash, e.shape) : nullptr;
  CHECK(found && found->config == "per=1024,block=256" && found->choice == 3 &&
        found->algo.empty() && found->impl.empty());
  std::string note;
  CHECK(chooseLaunchShape(found, shapes, note) == 3 && note.empty());
  // No entry: the default, no note; the default chosen: 0, no note.
  CHECK(chooseLaunchShape(nullptr, shapes, note) == 0 && note.empty());
  TuningEntry kept = e;
  kept.choice = 0;
  kept.config = "per=256,block=256";
  CHECK(chooseLaunchShape(&kept, shapes, note) == 0 && note.empty());
  // Another list of shapes than measured: the default, with why.
  std::vector<std::pair<int64_t, int64_t>> fewer(shapes.begin(), shapes.begin() + 3);
  CHECK(chooseLaunchShape(found, fewer, note) == 0);
  CHECK_EQ(note, "launch main_k9_silu_mul (8388608 items): tuned over 6 launch shapes, the "
                 "artifact offers 3 (default kept)");
  std::vector<std::pair<int64_t, int64_t>> other = shapes;
  other[3] = {8192, 256};
  note.clear();
  CHECK(chooseLaunchShape(found, other, note) == 0);
  CHECK_EQ(note, "launch main_k9_silu_mul (8388608 items): tuned for per=1024,block=256, the "
                 "artifact's shape 3 is per=8192,block=256 (default kept)");
  // A damaged launch shape in the file: one line naming the field.
  std::string text = db.serialize();
  std::string body = text.substr(text.find('\n') + 1);
  body.replace(body.find("per=1024,block=256"), 18, "per=1024,block=4096");
  char line[96];
  std::snprintf(line, sizeof line, "kiln-tuning-db 1 crc32c=0x%08x bytes=%zu\n",
                crc32c(0, body.data(), body.size()), body.size());
  expectCorrupt(line + body, "devices[0].entries[0]: \"config\" must be a launch shape "
                             "\"per=P,block=B\" (block 1 to 1024)");
}

int main() {
  testSignatureLeadingDims();
  char pattern[] = "/tmp/kiln-tuningdb-XXXXXX";
  if (!::mkdtemp(pattern))
    return 1;
  tempDir = pattern;
  testRoundTrip();
  testKeyMismatch();
  testCorrupt();
  testTieRule();
  testTieFloor();
  testScreening();
  testCloseCalls();
  testNumerics();
  testDefaultPath();
  testLaunchEntries();
  std::system(("rm -rf " + tempDir).c_str());
  return finishChecks();
}
