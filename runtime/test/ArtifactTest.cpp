//===- ArtifactTest.cpp - Tests for the artifact library --------*- C++ -*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// CRC-32C, JSON, size expressions and guards, and the .kiln container:
// round trips, and every truncation and every single-bit flip of a sample
// artifact rejected with one line.
//
//===----------------------------------------------------------------------===//

#include "Check.h"

#include "kiln/artifact/Artifact.h"
#include "kiln/artifact/Crc32c.h"
#include "kiln/artifact/FileIO.h"
#include "kiln/artifact/Guards.h"
#include "kiln/artifact/Json.h"

#include <cstdlib>
#include <cstring>
#include <sys/stat.h>
#include <unistd.h>

using namespace kiln::artifact;

static bool isOneLine(const std::string &message) {
  return !message.empty() && message.find('\n') == std::string::npos;
}

static void testCrc32c() {
  // The standard check value of CRC-32C.
  CHECK(crc32c(0, "123456789", 9) == 0xE3069283u);
  CHECK(crc32c(0, "", 0) == 0);
  // 32 zero bytes: the iSCSI test vector (RFC 3720 B.4).
  std::string zeros(32, '\0');
  CHECK(crc32c(0, zeros.data(), zeros.size()) == 0x8A9136AAu);
  // Incremental == one shot, across the 8-byte fast path's boundaries.
  std::string text;
  for (int i = 0; i < 1000; ++i)
    text += static_cast<char>(i * 7 + 3);
  uint32_t whole = crc32c(0, text.data(), text.size());
  for (size_t split : {0, 1, 7, 8, 9, 500, 999}) {
    uint32_t part = crc32c(0, text.data(), split);
    CHECK(crc32c(part, text.data() + split, text.size() - split) == whole);
  }
  // Byte-at-a-time reference.
  uint32_t reference = ~0u;
  for (unsigned char c : text) {
    reference ^= c;
    for (int bit = 0; bit < 8; ++bit)
      reference = (reference >> 1) ^ ((reference & 1) ? 0x82F63B78u : 0);
  }
  CHECK(~reference == whole);
  CHECK_EQ(formatCrc32c(0xE3069283u), "0xe3069283");
}

static void testJson() {
  const char *text =
      R"({"a": [1, -2, 3.5, true, false, null], "b": {"c": "x\"\\\n\u00e9\ud83d\ude00"}, "big": 9007199254740993})";
  Expected<Json> json = Json::parse(text);
  CHECK(json);
  if (!json)
    return;
  CHECK(json->get("a")->getElements().size() == 6);
  CHECK(json->get("a")->getElements()[1].getInteger() == -2);
  CHECK(json->get("a")->getElements()[2].getNumber() == 3.5);
  // Integers stay exact beyond 2^53.
  CHECK(json->get("big")->getInteger() == 9007199254740993LL);
  CHECK_EQ(json->get("b")->get("c")->getString(), "x\"\\\n\xc3\xa9\xf0\x9f\x98\x80");
  CHECK_EQ(json->print(), "{\"a\":[1,-2,3.5,true,false,null],\"b\":{\"c\":\"x\\\"\\\\\\n"
                          "\xc3\xa9\xf0\x9f\x98\x80\"},\"big\":9007199254740993}");
  // Printing and parsing again is the identity, compact or pretty.
  for (bool pretty : {false, true}) {
    Expected<Json> again = Json::parse(json->print(pretty));
    CHECK(again && again->print() == json->print());
  }
  CHECK_EQ(Json::parse("{\"k\": [1, {}]}")->print(true), "{\n  \"k\": [\n    1,\n    {}\n  ]\n}");

  struct {
    const char *text, *error;
  } bad[] = {
      {"", "invalid JSON at byte 0: unexpected end of input"},
      {"{\"a\":1,}", "invalid JSON at byte 7: expected a string key"},
      {"{\"a\":1 \"b\":2}", "invalid JSON at byte 7: expected ',' or '}'"},
      {"{\"a\":1,\"a\":2}", "invalid JSON at byte 7: duplicate key \"a\""},
      {"[1,2", "invalid JSON at byte 4: expected ',' or ']'"},
      {"\"abc", "invalid JSON at byte 4: unterminated string"},
      {"\"a\nb\"", "invalid JSON at byte 2: control character in string"},
      {"\"\\x\"", "invalid JSON at byte 2: bad escape in string"},
      {"\"\\ud800\"", "invalid JSON at byte 7: unpaired surrogate in \\u escape"},
      {"01", "invalid JSON at byte 2: leading zero in number"},
      {"1.", "invalid JSON at byte 2: expected digits after '.'"},
      {"99999999999999999999", "invalid JSON at byte 0: integer out of range"},
      {"tru", "invalid JSON at byte 0: unexpected character"},
      {"{} x", "invalid JSON at byte 3: unexpected text after the JSON value"},
      // Strings are UTF-8 (RFC 3629): no stray continuation bytes, overlong
      // forms, surrogates or code points above U+10FFFF.
      {"\"a\x80\"", "invalid JSON at byte 2: invalid UTF-8 in string"},
      {"\"\xc0\xaf\"", "invalid JSON at byte 1: invalid UTF-8 in string"},
      {"\"\xe0\x80\xaf\"", "invalid JSON at byte 1: invalid UTF-8 in string"},
      {"\"\xed\xa0\x80\"", "invalid JSON at byte 1: invalid UTF-8 in string"},
      {"\"\xf4\x90\x80\x80\"", "invalid JSON at byte 1: invalid UTF-8 in string"},
      {"\"\xe2\x82\"", "invalid JSON at byte 1: invalid UTF-8 in string"},
      {"{\"\xff\":1}", "invalid JSON at byte 2: invalid UTF-8 in string"},
  };
  for (const auto &[input, error] : bad) {
    Expected<Json> result = Json::parse(input);
    CHECK(!result);
    CHECK_EQ(result.getError(), error);
  }
  // Well-formed multi-byte UTF-8 passes through unchanged.
  CHECK_EQ(Json::parse("\"\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf\"")->getString(),
           "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf");
  // A duplicate key in a large object (sorted check) is found at the byte
  // of its second occurrence, as in a small one.
  std::string large = "{";
  for (int i = 0; i < 40; ++i)
    large += "\"k" + std::to_string(i) + "\":" + std::to_string(i) + ",";
  size_t at = large.size();
  large += "\"k7\":0,\"k3\":0}";
  CHECK_EQ(Json::parse(large).getError(),
           "invalid JSON at byte " + std::to_string(at) + ": duplicate key \"k7\"");
  // One element at a time.
  std::vector<int64_t> seen;
  CHECK(Json::forEachElement("[1, 2, 3]", [&](Json &value, size_t i) {
    seen.push_back(value.getInteger() * 10 + static_cast<int64_t>(i));
    return kiln::artifact::Status::success();
  }));
  CHECK(seen == (std::vector<int64_t>{10, 21, 32}));
  CHECK_EQ(
      Json::forEachElement("{}", [](Json &, size_t) { return kiln::artifact::Status::success(); })
          .getError(),
      "expected a JSON array");
  CHECK_EQ(Json::forEachElement("[1, x]",
                                [](Json &, size_t) { return kiln::artifact::Status::success(); })
               .getError(),
           "invalid JSON at byte 4: unexpected character");
  CHECK_EQ(Json::forEachElement("[1, 2]",
                                [](Json &value, size_t) {
                                  return value.getInteger() == 2
                                             ? kiln::artifact::Status(kiln::artifact::Error{"two"})
                                             : kiln::artifact::Status::success();
                                })
               .getError(),
           "two");
  CHECK_EQ(Json::forEachMember(
               "{\"a\":1,\"a\":2}",
               [](const std::string &, Json &) { return kiln::artifact::Status::success(); })
               .getError(),
           "invalid JSON at byte 7: duplicate key \"a\"");
  // Values copy and move deeply; assigning a value its own member works.
  Json tree = *Json::parse(R"({"x":[1,{"y":"long enough to live on the heap"}]})");
  Json copy = tree;
  tree = tree.get("x")->getElements()[1];
  CHECK_EQ(tree.print(), R"({"y":"long enough to live on the heap"})");
  CHECK_EQ(copy.print(), R"({"x":[1,{"y":"long enough to live on the heap"}]})");
  // Deep nesting is an error, not a stack overflow.
  std::string deep(100000, '[');
  Expected<Json> tooDeep = Json::parse(deep);
  CHECK(!tooDeep);
  CHECK_EQ(tooDeep.getError(), "invalid JSON at byte 64: nesting deeper than 64");
}

static void testSizeExpr() {
  SymbolBindings values{{"batch", 4}, {"seq", 1024}};
  struct {
    const char *text;
    int64_t value;
  } cases[] = {{"7", 7},
               {"seq", 1024},
               {"batch*seq + 1", 4097},
               {"4096*batch*seq - 2*seq", 4096LL * 4 * 1024 - 2048},
               {"- 1*seq + 3", -1021},
               {"-2*batch", -8},
               {"seq*seq*batch", 4LL * 1024 * 1024}};
  for (const auto &[text, value] : cases) {
    Expected<SizeExpr> expr = SizeExpr::parse(text);
    CHECK(expr);
    if (!expr)
      continue;
    Expected<int64_t> result = expr->evaluate(values);
    CHECK(result && *result == value);
  }
  CHECK(SizeExpr::parse("seq*batch + seq")->getSymbols() ==
        (std::vector<std::string>{"batch", "seq"}));
  CHECK_EQ(SizeExpr::parse("batch +").getError(),
           "bad size expression 'batch +' at byte 7: expected an integer or a "
           "symbol");
  CHECK_EQ(SizeExpr::parse("batch seq").getError(),
           "bad size expression 'batch seq' at byte 6: expected '+', '-' or "
           "'*'");
  CHECK_EQ(SizeExpr::parse("n")->evaluate(values).getError(),
           "size expression 'n' uses symbol 'n', which has no value");
  CHECK_EQ(SizeExpr::parse("seq*seq*seq*seq*seq*seq*seq")->evaluate(values).getError(),
           "size expression 'seq*seq*seq*seq*seq*seq*seq' overflows int64");
}

static void testGuards() {
  const char *json = R"([
    {"kind": "range", "expr": "seq", "min": 8, "max": 8192, "origin": "--dynamic seq=8..8192:8"},
    {"kind": "divisible", "expr": "seq", "divisor": 8, "origin": "--dynamic seq=8..8192:8"},
    {"kind": "range", "expr": "batch", "min": 1, "max": 2147483647, "origin": "a size is at least 1"},
    {"kind": "range", "expr": "32000*batch*seq", "min": 0, "max": 2147483647, "origin": "int32 element indexing in generated kernels"}
  ])";
  Expected<std::vector<Guard>> guards = parseGuards(json);
  CHECK(guards && guards->size() == 4);
  if (!guards)
    return;
  CHECK_EQ(describeGuard((*guards)[1]), "seq % 8 == 0");
  CHECK(checkGuards(*guards, {{"batch", 2}, {"seq", 1024}}));
  CHECK_EQ(checkGuards(*guards, {{"batch", 2}, {"seq", 1020}}).getError(),
           "seq=1020 violates seq % 8 == 0 (required by --dynamic "
           "seq=8..8192:8)");
  CHECK_EQ(checkGuards(*guards, {{"batch", 2}, {"seq", 16384}}).getError(),
           "seq=16384 violates 8 <= seq <= 8192 (required by --dynamic "
           "seq=8..8192:8)");
  CHECK_EQ(checkGuards(*guards, {{"batch", 64}, {"seq", 4096}}).getError(),
           "32000*batch*seq=8388608000 violates 0 <= 32000*batch*seq <= "
           "2147483647 (required by int32 element indexing in generated "
           "kernels)");
  CHECK_EQ(checkGuards(*guards, {{"seq", 8}}).getError(),
           "size expression 'batch' uses symbol 'batch', which has no value");
  CHECK_EQ(parseGuards("[{\"kind\":\"range\",\"expr\":\"seq\",\"min\":5}]").getError(),
           "guards[0]: a range guard needs integers min <= max");
  CHECK_EQ(parseGuards("[{\"kind\":\"odd\",\"expr\":\"seq\"}]").getError(),
           "guards[0]: unknown guard kind 'odd'");
  CHECK_EQ(parseGuards("{}").getError(), "guards: expected a JSON array");
}

static ArtifactWriter sampleWriter() {
  ArtifactWriter writer;
  writer.add("meta", R"({"creator":"ArtifactTest","targets":["sm_90"]})");
  writer.add("guards", "[]");
  writer.add("kernels/add/sm_90.cubin", std::string("\x7f"
                                                    "ELF\0\1\2",
                                                    7));
  writer.add("empty", "");
  writer.add("step", std::string(100, 'S'));
  return writer;
}

static void testRoundTrip() {
  Expected<std::string> bytes = sampleWriter().serialize();
  CHECK(bytes);
  if (!bytes)
    return;
  CHECK(bytes->size() % kSectionAlignment == kTrailerSize);
  Expected<Artifact> artifact = Artifact::parse(*bytes, "mem");
  CHECK(artifact);
  if (!artifact)
    return;
  CHECK(artifact->getFormatVersion() == kFormatVersion);
  CHECK(artifact->getSections().size() == 5);
  CHECK_EQ(std::string(artifact->contents("meta")),
           R"({"creator":"ArtifactTest","targets":["sm_90"]})");
  CHECK_EQ(std::string(artifact->contents("kernels/add/sm_90.cubin")), std::string("\x7f"
                                                                                   "ELF\0\1\2",
                                                                                   7));
  CHECK(artifact->find("empty") && artifact->find("empty")->size == 0);
  CHECK(!artifact->find("nope"));
  for (const Section &section : artifact->getSections())
    CHECK(section.offset % kSectionAlignment == 0);

  // Serialization is deterministic.
  CHECK(*sampleWriter().serialize() == *bytes);

  ArtifactWriter duplicate;
  duplicate.add("a", "1");
  duplicate.add("a", "2");
  CHECK_EQ(duplicate.serialize().getError(), "duplicate artifact section 'a'");
  ArtifactWriter unnamed;
  unnamed.add("", "1");
  CHECK_EQ(unnamed.serialize().getError(), "artifact section with an empty name");
}

static void testDamage() {
  std::string bytes = *sampleWriter().serialize();
  // Every truncation.
  for (size_t size = 0; size < bytes.size(); ++size) {
    Expected<Artifact> artifact = Artifact::parse(bytes.substr(0, size), "a");
    CHECK(!artifact && isOneLine(artifact.getError()));
  }
  CHECK_EQ(Artifact::parse(bytes.substr(0, 100), "a.kiln").getError(),
           "a.kiln: truncated Kiln artifact (100 of " + std::to_string(bytes.size()) + " bytes)");
  CHECK_EQ(Artifact::parse(bytes.substr(0, 10), "a.kiln").getError(),
           "a.kiln: truncated Kiln artifact (10 bytes; the header and trailer "
           "alone take 48)");
  // Every single-bit flip.
  int rejected = 0, total = 0;
  for (size_t byte = 0; byte < bytes.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = bytes;
      damaged[byte] ^= static_cast<char>(1 << bit);
      Expected<Artifact> artifact = Artifact::parse(damaged, "a");
      ++total;
      rejected += !artifact && isOneLine(artifact.getError());
    }
  CHECK(rejected == total);

  // The specific messages.
  auto flipped = [&](size_t at) {
    std::string damaged = bytes;
    damaged[at] ^= 0x10;
    return Artifact::parse(damaged, "a.kiln").getError();
  };
  Expected<Artifact> good = Artifact::parse(bytes, "a");
  const Section *step = good->find("step");
  CHECK_EQ(flipped(0), "a.kiln: not a Kiln artifact (bad magic)");
  CHECK_EQ(flipped(8), "a.kiln: Kiln artifact format version 17; this build reads version "
                       "1 (recompile the model with a matching kiln)");
  CHECK_EQ(flipped(20), "a.kiln: corrupt Kiln artifact: header checksum mismatch");
  CHECK_EQ(flipped(kHeaderSize + 3),
           "a.kiln: corrupt Kiln artifact: section table checksum mismatch");
  CHECK_EQ(flipped(step->offset + 50),
           "a.kiln: corrupt Kiln artifact: section 'step' checksum mismatch");
  CHECK_EQ(flipped(step->offset + step->size + 1),
           "a.kiln: corrupt Kiln artifact: file checksum mismatch");
  CHECK_EQ(Artifact::parse(bytes + "x", "a.kiln").getError(),
           "a.kiln: corrupt Kiln artifact: 1 unexpected bytes after the end (" +
               std::to_string(bytes.size()) + " bytes recorded)");
  CHECK_EQ(Artifact::parse("PK\3\4 this is a zip file, not an artifact", "a.kiln").getError(),
           "a.kiln: not a Kiln artifact (bad magic)");
}

/// Damage the checksums do not see (resealArtifact recomputes them all):
/// reserved fields, NUL bytes in names, misplaced payloads, non-zero
/// padding.
static void testResealedDamage() {
  std::string bytes = *sampleWriter().serialize();
  CHECK(Artifact::parse(bytes, "a.kiln"));
  auto resealed = [&](size_t at, char value) {
    std::string damaged = bytes;
    damaged[at] = value;
    resealArtifact(damaged);
    Expected<Artifact> artifact = Artifact::parse(damaged, "a.kiln");
    return artifact ? std::string("parsed") : artifact.getError();
  };
  // Entry 0 ("meta") starts right after the header.
  CHECK_EQ(resealed(kHeaderSize + 22, 1),
           "a.kiln: corrupt Kiln artifact: section table entry 0: reserved field is 1, not 0");
  CHECK_EQ(resealed(kHeaderSize + 25, '\0'),
           "a.kiln: corrupt Kiln artifact: section table entry 0: the name contains a NUL byte");
  Expected<Artifact> artifact = Artifact::parse(bytes, "a.kiln");
  const Section *guards = artifact->find("guards");
  const Section *step = artifact->find("step");
  CHECK_EQ(resealed(guards->offset + guards->size, 'x'),
           "a.kiln: corrupt Kiln artifact: non-zero padding before section "
           "'kernels/add/sm_90.cubin'");
  CHECK_EQ(resealed(step->offset + step->size, 'x'),
           "a.kiln: corrupt Kiln artifact: non-zero padding before the trailer");
  // The step payload's offset moved by one (still inside, not overlapping).
  size_t entry = kHeaderSize;
  for (const Section &section : artifact->getSections()) {
    if (&section == step)
      break;
    entry += 24 + section.name.size();
  }
  CHECK_EQ(resealed(entry, static_cast<char>(step->offset + 1)),
           "a.kiln: corrupt Kiln artifact: section 'step' is not at a multiple of 64 bytes");
  // A name with a newline (found by kiln-fuzz-artifact): the message stays
  // one line, the control character written as \x0a.
  {
    ArtifactWriter writer;
    writer.add("meta", "{}");
    writer.add("m [\n", "x");
    std::string damaged = *writer.serialize();
    damaged[damaged.size() - 9] = 'x'; // the padding before the trailer
    resealArtifact(damaged);
    CHECK_EQ(Artifact::parse(damaged, "a.kiln").getError(),
             "a.kiln: corrupt Kiln artifact: non-zero padding before the trailer");
    damaged = *writer.serialize();
    Expected<Artifact> parsed = Artifact::parse(damaged, "a.kiln");
    const Section *named = parsed ? parsed->find("m [\n") : nullptr;
    CHECK(named);
    if (named) {
      damaged[named->offset - 1] = 'x'; // the padding before it
      resealArtifact(damaged);
      CHECK_EQ(Artifact::parse(damaged, "a.kiln").getError(),
               "a.kiln: corrupt Kiln artifact: non-zero padding before section 'm [\\x0a'");
    }
  }
  CHECK_EQ(kiln::artifact::Error{"a\tb\r\n\x7f"}.message, "a\\x09b\\x0d\\x0a\\x7f");
  // Resealing an intact file changes nothing.
  std::string same = bytes;
  resealArtifact(same);
  CHECK(same == bytes);
}

static void testFiles() {
  char dir[] = "/tmp/kiln-artifact-test-XXXXXX";
  CHECK(::mkdtemp(dir));
  std::string path = std::string(dir) + "/step.kiln";
  CHECK(sampleWriter().write(path));
  Expected<Artifact> artifact = Artifact::open(path);
  CHECK(artifact && artifact->getSections().size() == 5);
  // No temporary file is left behind.
  CHECK(::access((std::string(dir) + "/.step.kiln.tmp-" + std::to_string(::getpid())).c_str(),
                 F_OK) != 0);
  CHECK_EQ(Artifact::open(std::string(dir) + "/missing.kiln").getError(),
           std::string(dir) + "/missing.kiln: No such file or directory");
  CHECK_EQ(Artifact::open(dir).getError(), std::string(dir) + ": not a regular file (a directory)");
  // A failing writer leaves the old file intact and no temporary file.
  Status failed = writeFileAtomically(path, [](FileWriter &writer) {
    (void)writer.write("partial");
    return Status(kiln::artifact::Error{"stopped"});
  });
  CHECK_EQ(failed.getError(), "stopped");
  CHECK(Artifact::open(path));
  ::unlink(path.c_str());
  ::rmdir(dir);
}

/// Atomic writers replace only regular files, and refuse before \p fill
/// runs; readers refuse a FIFO instead of blocking on it.
static void testSpecialFiles() {
  char dir[] = "/tmp/kiln-special-test-XXXXXX";
  CHECK(::mkdtemp(dir));
  std::string fifo = std::string(dir) + "/fifo", sub = std::string(dir) + "/sub";
  CHECK(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK(::mkdir(sub.c_str(), 0755) == 0);
  bool filled = false;
  auto write = [&](const std::string &path) {
    filled = false;
    Status status = writeFileAtomically(path, [&](FileWriter &writer) {
      filled = true;
      return writer.write("x");
    });
    return status ? std::string("written") : status.getError();
  };
  CHECK_EQ(write(fifo), fifo + ": not a regular file (a FIFO); refusing to replace it");
  CHECK_EQ(write(sub), sub + ": not a regular file (a directory); refusing to replace it");
  CHECK_EQ(write("/dev/null"),
           "/dev/null: not a regular file (a character device); refusing to replace it");
  CHECK_EQ(write("/proc/self/comm"),
           "/proc/self/comm: is under /proc, not a regular file system; refusing to write there");
  CHECK_EQ(write(sub + "/"), sub + "/: names a directory, not a file");
  CHECK_EQ(write(std::string(dir) + "/none/x"),
           std::string(dir) + "/none: No such file or directory");
  CHECK(!filled);
  struct stat info;
  CHECK(::stat(fifo.c_str(), &info) == 0 && S_ISFIFO(info.st_mode));
  CHECK(::stat("/dev/null", &info) == 0 && S_ISCHR(info.st_mode));
  // A symlink to a device is refused too; one to a regular file is replaced.
  std::string link = std::string(dir) + "/link";
  CHECK(::symlink("/dev/null", link.c_str()) == 0);
  CHECK_EQ(write(link), link + ": not a regular file (a character device); refusing to replace it");
  // A stale temporary name (here a FIFO: O_TRUNC would block on it) is
  // removed, never opened.
  std::string out = std::string(dir) + "/out.kiln";
  std::string temp = std::string(dir) + "/.out.kiln.tmp-" + std::to_string(::getpid());
  CHECK(::mkfifo(temp.c_str(), 0644) == 0);
  CHECK_EQ(write(out), "written");
  CHECK(filled && ::access(temp.c_str(), F_OK) != 0);
  // Readers: a FIFO, a directory and a device fail at once (no hang).
  CHECK_EQ(Artifact::open(fifo).getError(), fifo + ": not a regular file (a FIFO)");
  CHECK_EQ(MappedFile::open("/dev/zero").getError(),
           "/dev/zero: not a regular file (a character device)");
  ::unlink(out.c_str());
  ::unlink(link.c_str());
  ::unlink(fifo.c_str());
  ::rmdir(sub.c_str());
  ::rmdir(dir);
}

int main() {
  testSpecialFiles();
  testCrc32c();
  testJson();
  testSizeExpr();
  testGuards();
  testRoundTrip();
  testDamage();
  testResealedDamage();
  testFiles();
  return finishChecks();
}
