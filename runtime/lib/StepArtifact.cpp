//===- StepArtifact.cpp - The runtime's view of a .kiln artifact -*- C++
//-*-===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/runtime/StepArtifact.h"

#include <algorithm>
#include <cctype>
#include <set>

using namespace kiln::runtime;
using namespace kiln::artifact;

namespace {
constexpr const char *kKernelPrefix = "kernels/";
/// meta "format" of the artifacts kiln compile writes.
constexpr const char *kMetaFormat = "kiln-step";

/// "sm_90" / "sm_90a" / "compute_90" (after \p prefix) into an image.
bool parseArch(const std::string &text, const std::string &prefix, KernelImage &image) {
  if (text.compare(0, prefix.size(), prefix) != 0)
    return false;
  size_t pos = prefix.size(), digits = 0;
  int arch = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos])) && digits < 4) {
    arch = arch * 10 + (text[pos++] - '0');
    ++digits;
  }
  if (digits < 2)
    return false;
  image.arch = arch;
  image.archSpecific = pos < text.size() && text[pos] == 'a';
  if (image.archSpecific)
    ++pos;
  return pos == text.size();
}

std::string archName(const char *prefix, int arch, bool specific = false) {
  return prefix + std::to_string(arch) + (specific ? "a" : "");
}

Expected<std::vector<std::string>> stringList(const Json &meta, const char *key) {
  std::vector<std::string> out;
  const Json *list = meta.get(key);
  if (!list)
    return out;
  if (!list->isArray())
    return Error{std::string("meta \"") + key + "\" is not an array of strings"};
  for (const Json &item : list->getElements()) {
    if (!item.isString())
      return Error{std::string("meta \"") + key + "\" is not an array of strings"};
    out.push_back(item.getString());
  }
  return out;
}
} // namespace

Expected<StepArtifact> StepArtifact::open(const std::string &path) {
  Expected<Artifact> container = Artifact::open(path);
  if (!container)
    return container.takeError();
  return decode(std::move(*container), path);
}

Expected<StepArtifact> StepArtifact::decode(Artifact container, const std::string &origin) {
  StepArtifact step(std::move(container));
  step.origin = origin;
  auto fail = [&](const std::string &what) { return Error{origin + ": " + what}; };

  const Section *metaSection = step.container.find("meta");
  if (!metaSection)
    return fail("the artifact has no 'meta' section");
  Expected<Json> meta = Json::parse(step.container.contents(*metaSection));
  if (!meta)
    return fail("meta: " + meta.getError());
  if (!meta->isObject())
    return fail("meta: expected a JSON object");
  step.meta = std::move(*meta);
  Expected<std::vector<std::string>> targets = stringList(step.meta, "targets");
  if (!targets)
    return fail(targets.getError());
  step.targets = std::move(*targets);
  // What the file is: a runtime never guesses at another format.
  const Json *format = step.meta.get("format");
  if (!format || !format->isString() || format->getString() != kMetaFormat)
    return fail(std::string("meta \"format\" is ") +
                (!format              ? "missing"
                 : format->isString() ? "'" + format->getString() + "'"
                                      : std::string("not a string")) +
                ", not \"" + kMetaFormat + "\" (not a kiln compile step artifact)");
  Expected<std::vector<std::string>> symbols = stringList(step.meta, "symbols");
  if (!symbols)
    return fail(symbols.getError());
  step.symbols = std::move(*symbols);
  for (size_t i = 0; i < step.symbols.size(); ++i) {
    if (!isSizeSymbol(step.symbols[i]))
      return fail("meta \"symbols\" entry " + std::to_string(i) + " '" + step.symbols[i] +
                  "' is not a size symbol name");
    if (std::find(step.symbols.begin(), step.symbols.begin() + i, step.symbols[i]) !=
        step.symbols.begin() + i)
      return fail("meta \"symbols\" lists '" + step.symbols[i] + "' twice");
  }
  if (const Json *vocab = step.meta.get("vocab_size")) {
    if (!vocab->isInteger() || vocab->getInteger() < 1)
      return fail("meta \"vocab_size\" is not a positive integer");
    step.vocabSize = vocab->getInteger();
  }

  if (const Json *buckets = step.meta.get("buckets")) {
    if (!buckets->isArray())
      return fail("meta \"buckets\" is not an array");
    for (size_t i = 0; i < buckets->getElements().size(); ++i) {
      const Json &entry = buckets->getElements()[i];
      std::string where = "meta \"buckets\" entry " + std::to_string(i);
      const Json *function = entry.isObject() ? entry.get("function") : nullptr;
      const Json *section = entry.isObject() ? entry.get("section") : nullptr;
      const Json *values = entry.isObject() ? entry.get("values") : nullptr;
      if (!function || !function->isString() || function->getString().empty() || !section ||
          !section->isString() || !values || !values->isObject())
        return fail(where + ": expected {\"function\", \"section\", \"values\"}");
      where += " (" + function->getString() + ")";
      BucketSpec bucket;
      bucket.function = function->getString();
      bucket.section = section->getString();
      if (bucket.section.compare(0, 5, "step/") != 0)
        return fail(where + ": section '" + bucket.section + "' is not a step/<function> program");
      if (!step.container.find(bucket.section))
        return fail(where + ": no section '" + bucket.section + "' in the artifact");
      if (values->getMembers().empty())
        return fail(where + ": 'values' pins no symbol");
      for (const JsonMember &value : values->getMembers()) {
        if (std::find(step.symbols.begin(), step.symbols.end(), value.key) == step.symbols.end())
          return fail(where + ": '" + value.key +
                      "' is not a size symbol of the step (meta \"symbols\")");
        if (!value.value.isInteger() || value.value.getInteger() < 1)
          return fail(where + ": '" + value.key + "' must be a positive integer");
        bucket.values[value.key] = value.value.getInteger();
      }
      step.buckets.push_back(std::move(bucket));
    }
  }

  if (const Section *guards = step.container.find("guards")) {
    Expected<std::vector<Guard>> parsed = parseGuards(step.container.contents(*guards));
    if (!parsed)
      return fail(parsed.getError());
    step.guards = std::move(*parsed);
  }

  if (const Section *plan = step.container.find("memory_plan")) {
    Expected<StepMemoryPlan> parsed =
        decodeMemoryPlan(step.container.contents(*plan), "section 'memory_plan'");
    if (!parsed)
      return fail(parsed.getError());
    step.memoryPlan = std::move(*parsed);
  }

  if (const Section *params = step.container.find("params")) {
    // Entry by entry (a list of 10^5 parameters is never held as JSON).
    bool semantic = false; // an entry's error, already worded
    std::set<std::string> names;
    Status parsed = Json::forEachElement(
        step.container.contents(*params), [&](const Json &entry, size_t i) -> Status {
          semantic = true;
          std::string where = "params[" + std::to_string(i) + "]: ";
          const Json *name = entry.isObject() ? entry.get("name") : nullptr;
          const Json *dtype = entry.isObject() ? entry.get("dtype") : nullptr;
          const Json *shape = entry.isObject() ? entry.get("shape") : nullptr;
          if (!name || !name->isString() || !dtype || !dtype->isString() || !shape ||
              !shape->isArray())
            return fail(where + "expected {\"name\", \"dtype\", \"shape\", ...}");
          ParamSpec spec;
          spec.name = name->getString();
          if (spec.name.empty())
            return fail(where + "empty parameter name");
          if (!names.insert(spec.name).second)
            return fail(where + "parameter '" + spec.name + "' is listed twice");
          // Optional fields have one type each: "trainable": "yes" is damage,
          // not false.
          std::string wrongType;
          auto optional = [&](const char *key, Json::Kind kind) -> const Json * {
            const Json *value = entry.get(key);
            if (value && value->getKind() != kind) {
              if (wrongType.empty())
                wrongType = std::string("'") + key + "' must be " +
                            (kind == Json::Kind::Bool ? "true or false" : "a string");
              return nullptr;
            }
            return value;
          };
          const Json *source = optional("source", Json::Kind::String);
          const Json *trainable = optional("trainable", Json::Kind::Bool);
          const Json *init = optional("init", Json::Kind::Bool);
          const Json *folded = optional("folded_from", Json::Kind::String);
          const Json *foldedTransposed = optional("folded_transposed", Json::Kind::Bool);
          const Json *nonzero = optional("nonzero", Json::Kind::Bool);
          if (!wrongType.empty())
            return fail(where + wrongType);
          spec.source = source ? source->getString() : spec.name;
          if (spec.source.empty())
            return fail(where + "empty 'source'");
          std::optional<DType> parsed = parseDType(dtype->getString());
          if (!parsed)
            return fail(where + "unknown dtype '" + dtype->getString() + "'");
          spec.dtype = *parsed;
          // Elements times the dtype's size must fit int64 (a byte count).
          for (const Json &dim : shape->getElements()) {
            if (!dim.isInteger() || dim.getInteger() < 0)
              return fail(where + "shape entries must be integers >= 0");
            spec.shape.push_back(dim.getInteger());
          }
          int64_t bytes = static_cast<int64_t>(dtypeSize(spec.dtype)), count = 1;
          for (int64_t dim : spec.shape)
            if (__builtin_mul_overflow(count, dim, &count) ||
                __builtin_mul_overflow(bytes, dim, &bytes))
              return fail(where + describeTensorType(spec.dtype, spec.shape) +
                          " holds more bytes than int64 counts");
          spec.trainable = trainable && trainable->getBool();
          spec.fromInit = init && init->getBool();
          spec.nonzero = nonzero && nonzero->getBool();
          if (spec.nonzero && spec.trainable)
            return fail(where + "'nonzero' is for frozen weights only");
          if (folded)
            spec.foldedFrom = folded->getString();
          if (const Json *aliases = entry.get("aliases")) {
            if (!aliases->isArray() || aliases->getElements().empty())
              return fail(where + "'aliases' must be a non-empty list of names");
            for (const Json &alias : aliases->getElements()) {
              if (!alias.isString() || alias.getString().empty())
                return fail(where + "'aliases' must be a non-empty list of names");
              spec.aliases.push_back(alias.getString());
            }
          }
          if (foldedTransposed) {
            if (!folded || spec.shape.size() != 2)
              return fail(where + "'folded_transposed' needs 'folded_from' and a 2-D shape");
            spec.foldedTransposed = foldedTransposed->getBool();
          }
          if (const Json *value = entry.get("value")) {
            if (!value->isString() || !decodeHex(value->getString(), spec.value) ||
                spec.value.size() != static_cast<size_t>(bytes))
              return fail(where + "'value' must be hex of " + std::to_string(count) + " " +
                          dtypeName(spec.dtype) + " elements");
          }
          step.params.push_back(std::move(spec));
          semantic = false;
          return Status::success();
        });
    if (!parsed)
      return semantic ? parsed.takeError() : fail("params: " + parsed.getError());
  }

  for (const Section &section : step.container.getSections()) {
    if (section.name.compare(0, 8, kKernelPrefix) != 0)
      continue;
    size_t slash = section.name.rfind('/');
    if (slash <= 8)
      return fail("bad kernel section name '" + section.name + "'");
    std::string kernel = section.name.substr(8, slash - 8);
    std::string image = section.name.substr(slash + 1);
    KernelImages &images = step.kernels[kernel];
    KernelImage parsed;
    parsed.section = section.name;
    if (image == "source") {
      images.source = section.name;
    } else if (image.size() > 6 && image.compare(image.size() - 6, 6, ".cubin") == 0 &&
               parseArch(image.substr(0, image.size() - 6), "sm_", parsed)) {
      images.cubins.push_back(parsed);
    } else if (image.size() > 4 && image.compare(image.size() - 4, 4, ".ptx") == 0 &&
               parseArch(image.substr(0, image.size() - 4), "compute_", parsed)) {
      images.ptx.push_back(parsed);
    } else {
      return fail("unknown kernel image '" + section.name +
                  "' (expected sm_XY.cubin, compute_XY.ptx or source)");
    }
  }

  // The programs: decoded now, so a damaged one fails before any device
  // work (the executor runs these very objects).
  for (const Section &section : step.container.getSections()) {
    if (section.name != "step" && section.name != "init" && section.name != "accum" &&
        section.name != "apply" && section.name != "eval" &&
        section.name.compare(0, 5, "step/") != 0)
      continue;
    Expected<StepProgram> program =
        StepProgram::decode(step.container.contents(section), "section '" + section.name + "'");
    if (!program)
      return fail(program.getError());
    step.programs.emplace(section.name, std::move(*program));
  }
  // Then every section against the others.
  if (Status status = step.checkConsistency(); !status)
    return fail(status.getError());

  return step;
}

const StepProgram *StepArtifact::getProgram(const std::string &section) const {
  auto it = programs.find(section);
  return it == programs.end() ? nullptr : &it->second;
}

const BucketSpec *StepArtifact::selectBucket(const SymbolBindings &sizes) const {
  for (const BucketSpec &bucket : buckets) {
    bool matches = true;
    for (const auto &[symbol, value] : bucket.values) {
      auto it = sizes.find(symbol);
      matches = matches && it != sizes.end() && it->second == value;
    }
    if (matches)
      return &bucket;
  }
  return nullptr;
}

std::vector<std::string> ParamSpec::lookupNames() const {
  std::vector<std::string> names{source};
  if (!foldedFrom.empty())
    names.push_back(foldedFrom);
  names.insert(names.end(), aliases.begin(), aliases.end());
  return names;
}

/// Floating-point weights load into any floating-point parameter: the
/// executor converts them on upload (fp32 checkpoints for a bf16 step).
static bool convertible(DType found, DType expected) {
  auto isFloat = [](DType t) {
    return t == DType::F64 || t == DType::F32 || t == DType::F16 || t == DType::BF16;
  };
  return found == expected || (isFloat(found) && isFloat(expected));
}

Expected<WeightMatch> StepArtifact::matchWeight(const ParamSpec &param,
                                                const SafetensorsFile &weights) const {
  std::string expected = describeTensorType(param.dtype, param.shape);
  auto mismatch = [&](const TensorInfo &found, const std::string &extra) {
    return Error{weights.getPath() + ": weight '" + found.name + "' is " +
                 describeTensorType(found.dtype, found.shape) + ", but the artifact expects " +
                 expected + extra};
  };
  // A tied weight's other names stand in for the name it is read by.
  auto findTied = [&](const std::string &name) -> const TensorInfo * {
    if (const TensorInfo *found = weights.find(name))
      return found;
    for (const std::string &alias : param.aliases)
      if (const TensorInfo *found = weights.find(alias))
        return found;
    return nullptr;
  };
  if (const TensorInfo *found =
          param.foldedFrom.empty() ? findTied(param.source) : weights.find(param.source)) {
    if (!convertible(found->dtype, param.dtype) || found->shape != param.shape)
      return mismatch(*found, "");
    return WeightMatch{found, false, &weights};
  }
  if (!param.foldedFrom.empty())
    if (const TensorInfo *found = findTied(param.foldedFrom)) {
      std::vector<int64_t> transposed(param.shape.rbegin(), param.shape.rend());
      std::string extra = " (for '" + param.source + "', folded from it)";
      if (!convertible(found->dtype, param.dtype))
        return mismatch(*found, extra);
      bool square = param.shape.size() == 2 && param.shape[0] == param.shape[1];
      if (param.foldedTransposed) {
        // The compiler saw how the exporter read it (a linear layer's W^T).
        bool flip = *param.foldedTransposed;
        if (found->shape == (flip ? transposed : param.shape))
          return WeightMatch{found, flip, &weights};
        return Error{weights.getPath() + ": weight '" + found->name + "' is " +
                     describeTensorType(found->dtype, found->shape) + ", but the artifact's '" +
                     param.source + "' (" + expected + ") is " +
                     (flip
                          ? "its transpose: expected " + describeTensorType(param.dtype, transposed)
                          : "that weight itself")};
      }
      if (square && found->shape == param.shape)
        return Error{weights.getPath() + ": weight '" + found->name + "' is square, and the " +
                     "artifact does not record whether '" + param.source +
                     "' holds it or its transpose (compile it again with this Kiln)"};
      if (found->shape == param.shape)
        return WeightMatch{found, false, &weights};
      if (param.shape.size() == 2 && found->shape == transposed)
        return WeightMatch{found, true, &weights};
      return mismatch(*found, extra);
    }
  // The artifact's own value (a small inline initializer) stands in.
  if (param.trainable || param.fromInit || !param.value.empty())
    return WeightMatch{};
  // "(or 'F', which it was folded from; or its tied names 'A', 'B')"
  std::vector<std::string> others;
  if (!param.foldedFrom.empty())
    others.push_back("'" + param.foldedFrom + "', which it was folded from");
  if (!param.aliases.empty()) {
    std::string tied = param.aliases.size() == 1 ? "its tied name " : "its tied names ";
    for (size_t i = 0; i < param.aliases.size(); ++i)
      tied += (i ? ", '" : "'") + param.aliases[i] + "'";
    others.push_back(tied);
  }
  std::string alternatives;
  for (size_t i = 0; i < others.size(); ++i)
    alternatives += (i ? "; or " : " (or ") + others[i];
  if (!alternatives.empty())
    alternatives += ")";
  return Error{weights.getPath() + ": missing weight '" + param.source + "'" + alternatives +
               " (parameter '" + param.name + "', expected " + expected + ")"};
}

Expected<WeightMatch> StepArtifact::matchWeight(const ParamSpec &param,
                                                const std::vector<SafetensorsFile> &shards) const {
  if (shards.empty())
    return Error{"no weights files"};
  for (const SafetensorsFile &shard : shards)
    for (const std::string &name : param.lookupNames())
      if (shard.find(name))
        return matchWeight(param, shard);
  // In no shard: allowed or missing, as for one file (named in full).
  Expected<WeightMatch> absent = matchWeight(param, shards.front());
  if (absent || shards.size() == 1)
    return absent;
  return Error{absent.getError() + " (in none of the " + std::to_string(shards.size()) +
               " weights files)"};
}

std::optional<int64_t> kiln::runtime::firstZeroElement(const std::string &bytes, DType dtype) {
  if (dtype != DType::F64 && dtype != DType::F32 && dtype != DType::BF16 && dtype != DType::F16)
    return std::nullopt;
  // A float is zero when every bit but the sign (the top one) is clear.
  size_t size = dtypeSize(dtype);
  for (size_t i = 0; i + size <= bytes.size(); i += size) {
    bool zero = (static_cast<unsigned char>(bytes[i + size - 1]) & 0x7f) == 0;
    for (size_t b = 0; zero && b + 1 < size; ++b)
      zero = bytes[i + b] == 0;
    if (zero)
      return static_cast<int64_t>(i / size);
  }
  return std::nullopt;
}

Status kiln::runtime::checkNonzeroWeight(const ParamSpec &param, const std::string &bytes,
                                         DType dtype) {
  if (!param.nonzero)
    return Status::success();
  if (std::optional<int64_t> zero = firstZeroElement(bytes, dtype))
    return Error{"weight '" + param.source + "': element " + std::to_string(*zero) +
                 " is zero, but the step divides by it (the RMSNorm gradient from the norm's "
                 "output); recompile with --norm-grad-from-output=false"};
  return Status::success();
}

/// A nonzero parameter's values, as the file (or the artifact) holds them.
static Status checkNonzeroMatch(const ParamSpec &param, const WeightMatch &match) {
  if (!param.nonzero)
    return Status::success();
  if (!match.tensor)
    return checkNonzeroWeight(param, param.value, param.dtype);
  const unsigned char *data = match.file->data(*match.tensor);
  size_t bytes = match.tensor->getElementCount() * dtypeSize(match.tensor->dtype);
  return checkNonzeroWeight(param, std::string(reinterpret_cast<const char *>(data), bytes),
                            match.tensor->dtype);
}

Status StepArtifact::checkWeights(const std::vector<SafetensorsFile> &shards) const {
  for (const ParamSpec &param : params) {
    Expected<WeightMatch> match = matchWeight(param, shards);
    if (!match)
      return match.takeError();
    if (Status s = checkNonzeroMatch(param, *match); !s)
      return s;
  }
  return Status::success();
}

Status StepArtifact::checkWeights(const SafetensorsFile &weights) const {
  for (const ParamSpec &param : params) {
    Expected<WeightMatch> match = matchWeight(param, weights);
    if (!match)
      return match.takeError();
    if (Status s = checkNonzeroMatch(param, *match); !s)
      return s;
  }
  return Status::success();
}

Expected<KernelImageChoice> StepArtifact::selectImage(const std::string &kernel, int major,
                                                      int minor) const {
  auto it = kernels.find(kernel);
  if (it == kernels.end())
    return Error{origin + ": no kernel '" + kernel + "' in the artifact"};
  const KernelImages &images = it->second;
  int device = 10 * major + minor;
  // The newest compatible cubin: SASS runs on later minors of its major.
  const KernelImage *best = nullptr;
  for (const KernelImage &cubin : images.cubins) {
    bool fits = cubin.archSpecific ? cubin.arch == device
                                   : cubin.arch / 10 == major && cubin.arch <= device;
    if (fits && (!best || cubin.arch > best->arch))
      best = &cubin;
  }
  if (best)
    return KernelImageChoice{best->section, false};
  // PTX JIT-compiles for any newer device.
  for (const KernelImage &ptx : images.ptx)
    if ((ptx.archSpecific ? ptx.arch == device : ptx.arch <= device) &&
        (!best || ptx.arch > best->arch))
      best = &ptx;
  if (best)
    return KernelImageChoice{best->section, true};

  std::string have;
  for (const KernelImage &cubin : images.cubins)
    have += (have.empty() ? "" : ", ") + archName("sm_", cubin.arch, cubin.archSpecific);
  for (const KernelImage &ptx : images.ptx)
    have += (have.empty() ? "" : ", ") + archName("compute_", ptx.arch, ptx.archSpecific);
  return Error{origin + ": kernel '" + kernel + "' has no image for this " +
               archName("sm_", device) + " device (it has: " + (have.empty() ? "nothing" : have) +
               "); recompile with --target " + archName("sm_", device)};
}
