//===- RendezvousTest.cpp - Data-parallel ranks without NCCL --------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The host side of data parallelism (Rendezvous.h): the rank environment,
// the unique-id handoff, the artifact and settings comparison between
// ranks (each rank on its own thread, as separate processes would be), the
// failure marker and the timeouts. No GPU, no NCCL.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/runtime/Rendezvous.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <thread>
#include <unistd.h>

using namespace kiln::runtime;

namespace {

std::string makeDir() {
  char pattern[] = "/tmp/kiln-rendezvous-test-XXXXXX";
  return ::mkdtemp(pattern);
}

void writeFile(const std::string &path, const std::string &text) {
  std::ofstream(path, std::ios::binary) << text;
}

Expected<std::optional<RankInfo>> fromEnv(std::map<std::string, std::string> env) {
  return rankFromEnvironment([&](const char *name) -> const char * {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

void testEnvironment() {
  Expected<std::optional<RankInfo>> none = fromEnv({});
  CHECK(none && !*none);
  Expected<std::optional<RankInfo>> ok =
      fromEnv({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}});
  CHECK(ok && *ok && (*ok)->rank == 1 && (*ok)->world == 2 && (*ok)->localRank == 1);
  struct Case {
    std::map<std::string, std::string> env;
    const char *error;
  } cases[] = {
      {{{"RANK", "0"}},
       "WORLD_SIZE is not set, but RANK is: a data-parallel rank needs RANK, WORLD_SIZE and "
       "LOCAL_RANK"},
      {{{"LOCAL_RANK", "0"}},
       "RANK is not set, but LOCAL_RANK is: a data-parallel rank needs RANK, WORLD_SIZE and "
       "LOCAL_RANK"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "two"}}, "WORLD_SIZE='two' is not a positive integer"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "0"}}, "WORLD_SIZE='0' is not a positive integer"},
      {{{"RANK", "2"}, {"WORLD_SIZE", "2"}}, "RANK='2' is not an integer in [0, WORLD_SIZE=2)"},
      {{{"RANK", "-1"}, {"WORLD_SIZE", "2"}}, "RANK='-1' is not an integer in [0, WORLD_SIZE=2)"},
      {{{"RANK", "1x"}, {"WORLD_SIZE", "2"}}, "RANK='1x' is not an integer in [0, WORLD_SIZE=2)"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "5"}},
       "LOCAL_RANK='5' is not an integer in [0, WORLD_SIZE=2)"},
      {{{"RANK", "0"}, {"WORLD_SIZE", "16"}, {"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "8"}},
       "LOCAL_WORLD_SIZE='8' differs from WORLD_SIZE=16: kiln-run's data parallelism runs on "
       "one host"},
      {{{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "0"}},
       "LOCAL_RANK=0 differs from RANK=1: kiln-run's data parallelism runs on one host"},
  };
  for (const Case &c : cases) {
    Expected<std::optional<RankInfo>> bad = fromEnv(c.env);
    CHECK(!bad);
    CHECK_EQ(bad.getError(), c.error);
  }
}

void testUniqueIdAndRanks() {
  std::string dir = makeDir();
  std::string a = dir + "/a.kiln", b = dir + "/b.kiln";
  writeFile(a, "artifact one");
  writeFile(b, "artifact two");
  Expected<std::string> hashA = fileContentHash(a), hashB = fileContentHash(b);
  CHECK(hashA && hashB && *hashA != *hashB);
  CHECK_EQ(*fileContentHash(a), *hashA);
  CHECK(hashA->rfind("crc32c:", 0) == 0 && hashA->find(" bytes:12") != std::string::npos);

  Rendezvous r0(dir, {0, 2, 0}, 5), r1(dir, {1, 2, 1}, 5);
  CHECK(r0.open() && r1.open());
  std::string id(128, 'k');
  Expected<std::string> got = Error{"not run"};
  std::thread waiter([&] { got = r1.shareUniqueId(""); });
  ::usleep(50000); // rank 1 is waiting before rank 0 publishes
  Expected<std::string> mine = r0.shareUniqueId(id);
  waiter.join();
  CHECK(mine && got && *got == id);
  CHECK_EQ(r0.shareUniqueId("short").getError(), "the NCCL unique id is 5 bytes, not 128");

  // Same artifact, same settings: both pass.
  std::map<std::string, std::string> settings = {{"--steps", "10"}, {"--batch", "4"}};
  Status s0 = Error{"not run"}, s1 = Error{"not run"};
  std::thread one([&] { s1 = r1.checkRanks(a, *hashA, settings); });
  s0 = r0.checkRanks(a, *hashA, settings);
  one.join();
  CHECK(s0 && s1);
  // A second run may not reuse the directory.
  CHECK_EQ(r0.open().getError(), "rendezvous " + dir +
                                     " holds 'nccl-id' of an earlier run; give each run an empty "
                                     "directory");
}

/// Runs checkRanks for rank 0 and 1 of a fresh directory; rank 1 runs
/// \p path1 with \p settings1. Returns rank 1's result (both must agree).
std::string mismatch(const std::string &path1, const std::string &hash1,
                     const std::map<std::string, std::string> &settings1, const std::string &path0,
                     const std::string &hash0) {
  std::string dir = makeDir();
  Rendezvous r0(dir, {0, 2, 0}, 5), r1(dir, {1, 2, 1}, 5);
  Status s0 = Error{"not run"}, s1 = Error{"not run"};
  std::thread one([&] { s1 = r1.checkRanks(path1, hash1, settings1); });
  s0 = r0.checkRanks(path0, hash0, {{"--steps", "10"}});
  one.join();
  CHECK(!s0 && !s1);
  CHECK_EQ(s0.getError(), s1.getError());
  return s1.getError();
}

void testMismatches() {
  CHECK_EQ(
      mismatch("b.kiln", "crc32c:2 bytes:9", {{"--steps", "10"}}, "a.kiln", "crc32c:1 bytes:9"),
      "rank 0 runs a.kiln (crc32c:1 bytes:9) but rank 1 runs b.kiln (crc32c:2 bytes:9): "
      "every rank needs the same artifact");
  CHECK_EQ(mismatch("a.kiln", "h", {{"--steps", "20"}}, "a.kiln", "h"),
           "rank 0 and rank 1 differ in --steps: 10 vs 20");
  CHECK_EQ(mismatch("a.kiln", "h", {{"--steps", "10"}, {"--lr", "1e-4"}}, "a.kiln", "h"),
           "rank 0 and rank 1 differ in --lr: (unset) vs 1e-4");
}

void testFailureAndTimeout() {
  std::string dir = makeDir();
  Rendezvous r0(dir, {0, 3, 0}, 0.3), r2(dir, {2, 3, 2}, 0.3);
  CHECK(!r0.failure());
  // Nobody else arrives: a timeout names whom rank 0 waited for.
  Status timedOut = r0.checkRanks("a.kiln", "h", {});
  CHECK_EQ(timedOut.getError(), "rendezvous " + dir + ": rank 1's record (" + dir +
                                    "/rank-1.json) did not arrive within 0.3 s");
  // A failed rank stops the waiting ones; the first failure stays.
  r2.markFailed("w.safetensors: missing weight 'x'");
  r0.markFailed("later failure");
  CHECK(r0.failure() && *r0.failure() == "rank 2: w.safetensors: missing weight 'x'");
  Expected<std::string> id = Rendezvous(dir, {1, 3, 1}, 5).shareUniqueId("");
  CHECK_EQ(id.getError(), "stopped while waiting for rank 0's NCCL unique id (" + dir +
                              "/nccl-id): rank 2: w.safetensors: missing weight 'x'");
  // Bad directories.
  CHECK_EQ(Rendezvous(dir + "/missing", {0, 2, 0}).open().getError(),
           "rendezvous " + dir + "/missing: not a directory");
  // Published values reach rank 0; a missing one is absent after the wait.
  CHECK(Rendezvous(dir, {1, 3, 1}).publish("peak", "123"));
  std::map<int, std::string> peaks = r0.collect("peak", 0.1);
  CHECK(peaks.size() == 1 && peaks[1] == "123");
}

} // namespace

int main() {
  testEnvironment();
  testUniqueIdAndRanks();
  testMismatches();
  testFailureAndTimeout();
  return checkFailures() != 0;
}
