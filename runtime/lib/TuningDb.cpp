//===- TuningDb.cpp - The per-GPU tuning database -------------------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/TuningDb.h"
#include "kiln/runtime/Nf4Gemm.h"

#include "kiln/artifact/Crc32c.h"
#include "kiln/artifact/FileIO.h"
#include "kiln/artifact/Json.h"
#include "kiln/runtime/GemmConfig.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sys/stat.h>

using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {
constexpr const char *kMagic = "kiln-tuning-db";

uint16_t load16(const unsigned char *p) { return static_cast<uint16_t>(p[0] | (p[1] << 8)); }

double elementValue(const unsigned char *p, DType t) {
  switch (t) {
  case DType::F64: {
    double d;
    std::memcpy(&d, p, 8);
    return d;
  }
  case DType::F32: {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  case DType::BF16: {
    uint32_t u = static_cast<uint32_t>(load16(p)) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
  case DType::F16: {
    uint16_t h = load16(p);
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    double sign = (h & 0x8000) ? -1 : 1;
    if (exp == 0)
      return sign * std::ldexp(mant, -24);
    if (exp == 31)
      return mant ? NAN : sign * INFINITY;
    return sign * std::ldexp(mant + 1024, exp - 25);
  }
  default: return 0;
  }
}

// Field readers: each failure names the field, so a damaged file says where.
Status need(bool ok, const std::string &what) {
  return ok ? Status::success() : Status(Error{what});
}
Expected<std::string> stringField(const Json &object, const char *name, const std::string &where) {
  const Json *v = object.get(name);
  if (!v || !v->isString())
    return Error{where + ": \"" + name + "\" must be a string"};
  return v->getString();
}
Expected<int64_t> integerField(const Json &object, const char *name, const std::string &where) {
  const Json *v = object.get(name);
  if (!v || !v->isInteger())
    return Error{where + ": \"" + name + "\" must be an integer"};
  return v->getInteger();
}
Expected<double> numberField(const Json &object, const char *name, const std::string &where) {
  const Json *v = object.get(name);
  if (!v || !v->isNumber() || !std::isfinite(v->getNumber()))
    return Error{where + ": \"" + name + "\" must be a finite number"};
  return v->getNumber();
}

Expected<TuningKey> parseKey(const Json &json, const std::string &where) {
  if (!json.isObject())
    return Error{where + " must be an object"};
  TuningKey key;
  Expected<std::string> gpu = stringField(json, "gpu", where),
                        cudnn = stringField(json, "cudnn", where);
  if (!gpu)
    return gpu.takeError();
  if (!cudnn)
    return cudnn.takeError();
  key.gpu = *gpu;
  key.cudnn = *cudnn;
  struct {
    const char *name;
    int64_t *field;
  } numbers[] = {{"sm_count", &key.smCount}, {"cc_major", &key.ccMajor},
                 {"cc_minor", &key.ccMinor}, {"driver", &key.driver},
                 {"cuda", &key.cuda},        {"cublaslt", &key.cublasLt}};
  for (auto &n : numbers) {
    Expected<int64_t> v = integerField(json, n.name, where);
    if (!v)
      return v.takeError();
    *n.field = *v;
  }
  return key;
}

Expected<TuningEntry> parseEntry(const Json &json, const std::string &where) {
  if (!json.isObject())
    return Error{where + " must be an object"};
  TuningEntry e;
  struct {
    const char *name;
    std::string *field;
  } strings[] = {{"kind", &e.kind},   {"hash", &e.hash}, {"shape", &e.shape},
                 {"label", &e.label}, {"algo", &e.algo}, {"impl", &e.impl}};
  for (auto &s : strings) {
    Expected<std::string> v = stringField(json, s.name, where);
    if (!v)
      return v.takeError();
    *s.field = *v;
  }
  struct {
    const char *name;
    int64_t *field;
  } integers[] = {{"candidates", &e.candidates}, {"choice", &e.choice}};
  for (auto &n : integers) {
    Expected<int64_t> v = integerField(json, n.name, where);
    if (!v)
      return v.takeError();
    *n.field = *v;
  }
  struct {
    const char *name;
    double *field;
  } numbers[] = {{"default_ms", &e.defaultMs}, {"tuned_ms", &e.tunedMs}, {"error", &e.error}};
  for (auto &n : numbers) {
    Expected<double> v = numberField(json, n.name, where);
    if (!v)
      return v.takeError();
    *n.field = *v;
  }
  if (Status s = need(e.kind == "gemm" || e.kind == "attention" || e.kind == "launch" ||
                          e.kind == "nf4",
                      where + ": \"kind\" must be \"gemm\", \"attention\", \"launch\" or "
                              "\"nf4\"");
      !s)
    return s.takeError();
  if (Status s = need(e.hash.size() == 16 &&
                          e.hash.find_first_not_of("0123456789abcdef") == std::string::npos,
                      where + ": \"hash\" must be 16 hex digits");
      !s)
    return s.takeError();
  if (Status s = need(e.candidates >= 1 && e.candidates <= kMaxTuningCandidates,
                      where + ": \"candidates\" must be from 1 to " +
                          std::to_string(kMaxTuningCandidates));
      !s)
    return s.takeError();
  if (Status s = need(e.choice >= 0 && e.choice < e.candidates,
                      where + ": \"choice\" must index the candidates");
      !s)
    return s.takeError();
  // "config" came with the search beyond the heuristic: optional, so
  // databases written before it still load (their GEMMs match by "algo").
  if (json.get("config")) {
    Expected<std::string> config = stringField(json, "config", where);
    if (!config)
      return config.takeError();
    e.config = *config;
  }
  if (json.get("default_config")) {
    Expected<std::string> defaultConfig = stringField(json, "default_config", where);
    if (!defaultConfig)
      return defaultConfig.takeError();
    e.defaultConfig = *defaultConfig;
  }
  if (e.kind == "gemm") {
    unsigned char bytes[64];
    if (Status s = need(e.algo.size() == 128 && fromHex(e.algo, bytes, sizeof(bytes)),
                        where + ": \"algo\" must be 128 hex digits");
        !s)
      return s.takeError();
    if (!e.config.empty())
      if (Expected<GemmConfig> config = GemmConfig::decode(e.config); !config)
        return Error{where + ": \"config\": " + config.getError()};
  } else if (e.kind == "launch") {
    int64_t per = 0, block = 0;
    if (Status s = need(decodeLaunchShape(e.config, per, block),
                        where + ": \"config\" must be a launch shape \"per=P,block=B\" (block 1 "
                                "to 1024)");
        !s)
      return s.takeError();
  } else if (e.kind == "nf4") {
    // Who runs a GEMM on a dequantized NF4 weight (kiln/runtime/Nf4Gemm.h).
    if (Status s = need(e.config.empty() && (e.impl == kNf4Default || e.impl == kNf4Fused) &&
                            e.candidates == 2 && (e.choice == 1) == (e.impl == kNf4Fused),
                        where + ": an \"nf4\" entry has 2 candidates, an empty \"config\" and "
                                "\"impl\" \"" + kNf4Default + "\" (choice 0) or \"" +
                                kNf4Fused + "\" (choice 1)");
        !s)
      return s.takeError();
  } else if (Status s = need(e.config.empty(), where + ": \"config\" must be empty for attention");
             !s) {
    return s.takeError();
  } else if (Status s = need(e.impl == "cudnn" || e.impl == "kernels",
                             where + ": \"impl\" must be \"cudnn\" or \"kernels\"");
             !s) {
    return s.takeError();
  }
  return e;
}

Json keyJson(const TuningKey &key) {
  Json j = Json::object();
  j.append("gpu", Json::string(key.gpu));
  j.append("sm_count", Json::integer(key.smCount));
  j.append("cc_major", Json::integer(key.ccMajor));
  j.append("cc_minor", Json::integer(key.ccMinor));
  j.append("driver", Json::integer(key.driver));
  j.append("cuda", Json::integer(key.cuda));
  j.append("cublaslt", Json::integer(key.cublasLt));
  j.append("cudnn", Json::string(key.cudnn));
  return j;
}

Json entryJson(const TuningEntry &e) {
  Json j = Json::object();
  j.append("kind", Json::string(e.kind));
  j.append("hash", Json::string(e.hash));
  j.append("shape", Json::string(e.shape));
  j.append("label", Json::string(e.label));
  j.append("candidates", Json::integer(e.candidates));
  j.append("choice", Json::integer(e.choice));
  j.append("algo", Json::string(e.algo));
  j.append("impl", Json::string(e.impl));
  j.append("config", Json::string(e.config));
  if (!e.defaultConfig.empty())
    j.append("default_config", Json::string(e.defaultConfig));
  j.append("default_ms", Json::number(e.defaultMs));
  j.append("tuned_ms", Json::number(e.tunedMs));
  j.append("error", Json::number(e.error));
  return j;
}

bool sameOp(const TuningEntry &a, std::string_view kind, std::string_view hash,
            std::string_view shape) {
  return a.kind == kind && a.hash == hash && a.shape == shape;
}
} // namespace

bool TuningKey::operator==(const TuningKey &o) const {
  return gpu == o.gpu && smCount == o.smCount && ccMajor == o.ccMajor && ccMinor == o.ccMinor &&
         driver == o.driver && cuda == o.cuda && cublasLt == o.cublasLt && cudnn == o.cudnn;
}

std::string TuningKey::describe() const {
  return gpu + " (sm_" + std::to_string(ccMajor) + std::to_string(ccMinor) + ", " +
         std::to_string(smCount) + " SMs), driver " + std::to_string(driver) + ", CUDA " +
         std::to_string(cuda) + ", cuBLASLt " + std::to_string(cublasLt) + ", cuDNN " + cudnn;
}

Expected<TuningDb> TuningDb::parse(std::string_view text, const std::string &origin) {
  size_t newline = text.find('\n');
  if (newline == std::string_view::npos || text.compare(0, std::strlen(kMagic), kMagic) != 0)
    return Error{origin + ": not a Kiln tuning database (no \"" + std::string(kMagic) +
                 "\" header line)"};
  std::string header(text.substr(0, newline));
  int version = 0;
  unsigned crc = 0;
  unsigned long long bytes = 0;
  char tail = 0;
  if (std::sscanf(header.c_str(), "kiln-tuning-db %d crc32c=0x%8x bytes=%llu%c", &version, &crc,
                  &bytes, &tail) < 1)
    return Error{origin + ": damaged header line"};
  if (version != kTuningDbVersion)
    return Error{origin + ": format version " + std::to_string(version) + ", this kiln-run reads " +
                 std::to_string(kTuningDbVersion)};
  if (std::sscanf(header.c_str(), "kiln-tuning-db %d crc32c=0x%8x bytes=%llu%c", &version, &crc,
                  &bytes, &tail) != 3)
    return Error{origin + ": damaged header line"};
  std::string_view body = text.substr(newline + 1);
  if (body.size() != bytes)
    return Error{origin + ": " + std::to_string(body.size()) + " bytes after the header, it says " +
                 std::to_string(bytes) + " (truncated or damaged)"};
  if (crc32c(0, body.data(), body.size()) != crc)
    return Error{origin + ": fails its CRC-32C check (damaged)"};
  Expected<Json> json = Json::parse(body, 16);
  if (!json)
    return Error{origin + ": " + json.getError()};
  const Json *devices = json->get("devices");
  if (!json->isObject() || !devices || !devices->isArray())
    return Error{origin + ": expected an object with a \"devices\" array"};
  TuningDb db;
  for (size_t d = 0; d < devices->getElements().size(); ++d) {
    const Json &device = devices->getElements()[d];
    std::string where = origin + ": devices[" + std::to_string(d) + "]";
    const Json *key = device.get("key");
    const Json *entries = device.get("entries");
    if (!device.isObject() || !key || !entries || !entries->isArray())
      return Error{where + ": expected \"key\" and an \"entries\" array"};
    Expected<TuningKey> parsed = parseKey(*key, where + ".key");
    if (!parsed)
      return parsed.takeError();
    if (db.findDevice(*parsed))
      return Error{where + ": a second list for the same device"};
    TuningDevice out{*parsed, {}};
    std::set<std::string> seen; // linear time for any number of entries
    for (size_t i = 0; i < entries->getElements().size(); ++i) {
      Expected<TuningEntry> entry =
          parseEntry(entries->getElements()[i], where + ".entries[" + std::to_string(i) + "]");
      if (!entry)
        return entry.takeError();
      if (!seen.insert(entry->kind + " " + entry->hash + " " + entry->shape).second)
        return Error{where + ".entries[" + std::to_string(i) + "]: a second entry for " +
                     entry->kind + " " + entry->hash + " at " + entry->shape};
      out.entries.push_back(std::move(*entry));
    }
    db.devices.push_back(std::move(out));
  }
  return db;
}

std::optional<int> TuningDb::headerVersion(std::string_view text) {
  std::string head(text.substr(0, std::min<size_t>(text.size(), 64)));
  int version = 0;
  if (std::sscanf(head.c_str(), "kiln-tuning-db %d", &version) != 1)
    return std::nullopt;
  return version;
}

Expected<TuningDb> TuningDb::load(const std::string &path) {
  Expected<MappedFile> file = MappedFile::open(path);
  if (!file)
    return file.takeError();
  return parse(file->view(), path);
}

std::string TuningDb::serialize() const {
  Json devicesJson = Json::array();
  for (const TuningDevice &device : devices) {
    Json entries = Json::array();
    for (const TuningEntry &e : device.entries)
      entries.push(entryJson(e));
    Json d = Json::object();
    d.append("key", keyJson(device.key));
    d.append("entries", std::move(entries));
    devicesJson.push(std::move(d));
  }
  Json root = Json::object();
  root.append("devices", std::move(devicesJson));
  std::string body = root.print(true) + "\n";
  return std::string(kMagic) + " " + std::to_string(kTuningDbVersion) +
         " crc32c=" + formatCrc32c(crc32c(0, body.data(), body.size())) +
         " bytes=" + std::to_string(body.size()) + "\n" + body;
}

Status TuningDb::write(const std::string &path,
                       const std::function<void(uint64_t)> &progress) const {
  // The cache directory (~/.cache/kiln) may not exist yet: make it and its parent.
  std::string dir = parentDirectory(path);
  std::string parent = parentDirectory(dir);
  for (const std::string &d : {parent, dir})
    if (d != "." && d != "/" && ::mkdir(d.c_str(), 0755) != 0 && errno != EEXIST)
      return errnoError(d, "cannot create the directory");
  std::string text = serialize();
  return writeFileAtomically(path, [&](FileWriter &out) {
    constexpr size_t kChunk = 1 << 20;
    for (size_t at = 0; at < text.size(); at += kChunk) {
      if (Status s = out.write(std::string_view(text).substr(at, kChunk)); !s)
        return s;
      if (progress)
        progress(out.bytesWritten());
    }
    return Status::success();
  });
}

const TuningDevice *TuningDb::findDevice(const TuningKey &key) const {
  for (const TuningDevice &d : devices)
    if (d.key == key)
      return &d;
  return nullptr;
}

const TuningEntry *TuningDb::find(const TuningKey &key, std::string_view kind,
                                  std::string_view hash, std::string_view shape) const {
  const TuningDevice *device = findDevice(key);
  if (!device)
    return nullptr;
  for (const TuningEntry &e : device->entries)
    if (sameOp(e, kind, hash, shape))
      return &e;
  return nullptr;
}

void TuningDb::put(const TuningKey &key, TuningEntry entry) {
  TuningDevice *device = nullptr;
  for (TuningDevice &d : devices)
    if (d.key == key)
      device = &d;
  if (!device) {
    devices.push_back({key, {}});
    device = &devices.back();
  }
  for (TuningEntry &e : device->entries)
    if (sameOp(e, entry.kind, entry.hash, entry.shape)) {
      e = std::move(entry);
      return;
    }
  device->entries.push_back(std::move(entry));
}

size_t TuningDb::countOtherDevices(const TuningKey &key) const {
  size_t n = 0;
  for (const TuningDevice &d : devices)
    if (d.key != key)
      n += d.entries.size();
  return n;
}

std::string kiln::runtime::describeTuningUse(const TuningDb &db, const std::string &path,
                                             const TuningKey &key, size_t tuned, size_t defaults,
                                             const std::string &note) {
  std::string line = "tuning: " + std::to_string(tuned) + " ops from " + path + ", " +
                     std::to_string(defaults) + " defaults";
  if (!db.findDevice(key))
    line += " (no entries for this machine, " + key.describe() + "; the database holds " +
            std::to_string(db.countOtherDevices(key)) + " for others: run kiln-run tune here)";
  else if (!note.empty())
    line += " (" + note + ")";
  return line;
}

std::string kiln::runtime::defaultTuningDbPath() {
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"); xdg && *xdg == '/')
    return std::string(xdg) + "/kiln/tuning.db";
  if (const char *home = std::getenv("HOME"); home && *home)
    return std::string(home) + "/.cache/kiln/tuning.db";
  return "";
}

std::string kiln::runtime::hashSignature(std::string_view signature) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : signature) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ull;
  }
  unsigned char bytes[8];
  for (int i = 0; i < 8; ++i)
    bytes[i] = static_cast<unsigned char>(h >> (56 - 8 * i));
  return toHex(bytes, 8);
}

std::string kiln::runtime::gemmSignature(DType ab, DType c, bool transFirst, bool transSecond,
                                         const std::string &epilogue, bool bias, uint64_t m,
                                         uint64_t n, uint64_t k, int64_t batch,
                                         const int64_t strides[3], const int64_t *lds) {
  std::string s = std::string("gemm ab=") + dtypeName(ab) + " c=" + dtypeName(c) + " compute=F32" +
                  " ops=" + (transFirst ? "T" : "N") + (transSecond ? "T" : "N") +
                  " epilogue=" + epilogue + (bias ? "+bias" : "") + " m=" + std::to_string(m) +
                  " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                  " batch=" + std::to_string(batch);
  if (batch > 1)
    s += " strides=" + std::to_string(strides[0]) + "," + std::to_string(strides[1]) + "," +
         std::to_string(strides[2]);
  // The packed heights of the column-major first operand, second and result.
  int64_t packed[3] = {static_cast<int64_t>(transFirst ? k : n),
                       static_cast<int64_t>(transSecond ? m : k), static_cast<int64_t>(n)};
  if (lds && (lds[0] != packed[0] || lds[1] != packed[1] || lds[2] != packed[2]))
    s += " ld=" + std::to_string(lds[0]) + "," + std::to_string(lds[1]) + "," +
         std::to_string(lds[2]);
  return s;
}

std::string kiln::runtime::encodeLaunchShape(int64_t per, int64_t block) {
  return "per=" + std::to_string(per) + ",block=" + std::to_string(block);
}

bool kiln::runtime::decodeLaunchShape(std::string_view text, int64_t &per, int64_t &block) {
  auto number = [](std::string_view digits, int64_t &out) {
    if (digits.empty() || digits.size() > 12 ||
        digits.find_first_not_of("0123456789") != std::string_view::npos ||
        (digits.size() > 1 && digits[0] == '0'))
      return false;
    out = std::strtoll(std::string(digits).c_str(), nullptr, 10);
    return true;
  };
  size_t comma = text.find(',');
  if (text.compare(0, 4, "per=") != 0 || comma == std::string_view::npos ||
      text.compare(comma, 7, ",block=") != 0)
    return false;
  return number(text.substr(4, comma - 4), per) && number(text.substr(comma + 7), block) &&
         per >= 1 && block >= 1 && block <= 1024;
}

size_t kiln::runtime::chooseLaunchShape(const TuningEntry *entry,
                                        const std::vector<std::pair<int64_t, int64_t>> &shapes,
                                        std::string &note) {
  if (!entry)
    return 0;
  if (static_cast<size_t>(entry->candidates) != shapes.size() ||
      static_cast<size_t>(entry->choice) >= shapes.size()) {
    note = entry->label + ": tuned over " + std::to_string(entry->candidates) +
           " launch shapes, the artifact offers " + std::to_string(shapes.size()) +
           " (default kept)";
    return 0;
  }
  const auto &[per, block] = shapes[static_cast<size_t>(entry->choice)];
  if (entry->config != encodeLaunchShape(per, block)) {
    note = entry->label + ": tuned for " + entry->config + ", the artifact's shape " +
           std::to_string(entry->choice) + " is " + encodeLaunchShape(per, block) +
           " (default kept)";
    return 0;
  }
  return static_cast<size_t>(entry->choice);
}

std::string kiln::runtime::toHex(const void *data, size_t size) {
  static const char digits[] = "0123456789abcdef";
  const auto *p = static_cast<const unsigned char *>(data);
  std::string out;
  for (size_t i = 0; i < size; ++i) {
    out += digits[p[i] >> 4];
    out += digits[p[i] & 15];
  }
  return out;
}

bool kiln::runtime::fromHex(std::string_view hex, void *out, size_t size) {
  if (hex.size() != 2 * size)
    return false;
  auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  auto *p = static_cast<unsigned char *>(out);
  for (size_t i = 0; i < size; ++i) {
    int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    p[i] = static_cast<unsigned char>(hi * 16 + lo);
  }
  return true;
}

double kiln::runtime::median(std::vector<double> samples) {
  if (samples.empty())
    return 0;
  size_t mid = samples.size() / 2;
  std::nth_element(samples.begin(), samples.begin() + mid, samples.end());
  double upper = samples[mid];
  if (samples.size() % 2)
    return upper;
  double lower = *std::max_element(samples.begin(), samples.begin() + mid);
  return (lower + upper) / 2;
}

double kiln::runtime::numericsBound(DType dtype) {
  switch (dtype) {
  case DType::BF16: return 1e-2;
  case DType::F16: return 2e-3;
  case DType::F32: return 1e-5;
  case DType::F64: return 1e-12;
  default: return 0; // integers: exactly equal
  }
}

double kiln::runtime::relativeL2(const void *candidate, const void *reference, DType dtype,
                                 size_t count) {
  size_t size = dtypeSize(dtype);
  const auto *c = static_cast<const unsigned char *>(candidate);
  const auto *r = static_cast<const unsigned char *>(reference);
  double diff = 0, norm = 0;
  if (dtype == DType::BF16) {
    // The common case, and outputs of a billion elements (logits): no
    // per-element dispatch; NaN/Inf have an all-ones exponent.
    bool special = false;
    for (size_t i = 0; i < count && !special; ++i) {
      uint16_t rb = load16(r + 2 * i), cb = load16(c + 2 * i);
      if ((rb & 0x7f80) == 0x7f80 || (cb & 0x7f80) == 0x7f80) {
        special = true;
        break;
      }
      uint32_t ru = static_cast<uint32_t>(rb) << 16, cu = static_cast<uint32_t>(cb) << 16;
      float rf, cf;
      std::memcpy(&rf, &ru, 4);
      std::memcpy(&cf, &cu, 4);
      double d = static_cast<double>(cf) - rf;
      diff += d * d;
      norm += static_cast<double>(rf) * rf;
    }
    if (!special)
      return norm == 0 ? (diff == 0 ? 0 : INFINITY) : std::sqrt(diff / norm);
    diff = norm = 0; // the general loop below handles NaN and Inf
  }
  for (size_t i = 0; i < count; ++i) {
    double rv = elementValue(r + i * size, dtype), cv = elementValue(c + i * size, dtype);
    if (!std::isfinite(rv)) {
      // The default's own NaN/Inf: the candidate must reproduce it.
      if (std::isnan(rv) ? !std::isnan(cv) : cv != rv)
        return INFINITY;
      continue;
    }
    if (!std::isfinite(cv))
      return INFINITY;
    diff += (cv - rv) * (cv - rv);
    norm += rv * rv;
  }
  if (norm == 0)
    return diff == 0 ? 0 : INFINITY;
  return std::sqrt(diff / norm);
}

double kiln::runtime::tieTolerance(double ms, double margin, double floorMs) {
  return std::max(margin * ms, floorMs);
}

size_t kiln::runtime::chooseWinner(const std::vector<double> &ms, double margin, double floorMs) {
  if (ms.empty() || ms[0] < 0)
    return 0;
  size_t fastest = 0;
  for (size_t i = 1; i < ms.size(); ++i)
    if (ms[i] >= 0 && ms[i] < ms[fastest])
      fastest = i;
  double threshold = ms[0] - tieTolerance(ms[0], margin, floorMs);
  if (fastest == 0 || !(ms[fastest] < threshold))
    return 0; // a tie keeps the default
  double near = ms[fastest] + tieTolerance(ms[fastest], margin, floorMs);
  for (size_t i = 1; i < ms.size(); ++i)
    if (ms[i] >= 0 && ms[i] < threshold && ms[i] <= near)
      return i;
  return fastest;
}

std::vector<size_t> kiln::runtime::closeCallFinalists(const std::vector<double> &ms, double margin,
                                                      double band, double floorMs) {
  if (ms.empty() || ms[0] < 0)
    return {};
  size_t fastest = 0;
  for (size_t i = 1; i < ms.size(); ++i)
    if (ms[i] >= 0 && ms[i] < ms[fastest])
      fastest = i;
  if (fastest == 0)
    return {};
  double threshold = ms[0] - tieTolerance(ms[0], margin, floorMs);
  double near = ms[fastest] + tieTolerance(ms[fastest], margin, floorMs) + band * ms[fastest];
  std::vector<size_t> challengers;
  for (size_t i = 1; i < ms.size(); ++i)
    if (ms[i] >= 0 && ms[i] < threshold + band * ms[0] && ms[i] <= near)
      challengers.push_back(i);
  if (challengers.empty())
    return {}; // nothing comes near beating the default
  if (challengers.size() == 1 && ms[fastest] < threshold - band * ms[0])
    return {}; // one clear winner
  std::stable_sort(challengers.begin(), challengers.end(),
                   [&](size_t p, size_t q) { return ms[p] < ms[q]; });
  if (challengers.size() > kMaxFinalists - 1)
    challengers.resize(kMaxFinalists - 1);
  std::sort(challengers.begin(), challengers.end());
  challengers.insert(challengers.begin(), 0);
  return challengers;
}
