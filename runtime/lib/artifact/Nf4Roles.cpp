//===- Nf4Roles.cpp - Decode and check a launch's "nf4" roles -------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// The compiler marks NF4 dequantize launches whose output only GEMMs read
// (lib/ArtifactEmit/Nf4Roles.cpp); the runtime may then run a GEMM that
// reads the codes itself and skip the launch. Everything the runtime will
// index with is checked here, one line naming the op on a bad field.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/Json.h"
#include "kiln/artifact/StepProgram.h"

#include <algorithm>

using namespace kiln::artifact;

namespace {

bool idField(const Json &o, const char *key, size_t count, int &out, bool optional,
             const std::string &at, std::string &error) {
  const Json *v = o.get(key);
  if (!v && optional)
    return true;
  if (!v || !v->isInteger() || v->getInteger() < 0 ||
      static_cast<size_t>(v->getInteger()) >= count) {
    error = at + ": missing or bad buffer id '" + key + "'";
    return false;
  }
  out = static_cast<int>(v->getInteger());
  return true;
}

bool positiveField(const Json &o, const char *key, int64_t &out, bool optional,
                   const std::string &at, std::string &error) {
  const Json *v = o.get(key);
  if (!v && optional)
    return true;
  if (!v || !v->isInteger() || v->getInteger() < 1 || v->getInteger() > (int64_t(1) << 31)) {
    error = at + ": missing or bad '" + key + "' (a positive integer)";
    return false;
  }
  out = v->getInteger();
  return true;
}

} // namespace

bool kiln::artifact::decodeNf4Roles(const Json &json, const std::string &where,
                                    size_t bufferCount, Nf4Roles &out, std::string &error) {
  std::string at = where + ": 'nf4'";
  const Json *exclusive = json.isObject() ? json.get("exclusive") : nullptr;
  const Json *weights = json.isObject() ? json.get("weights") : nullptr;
  if (!exclusive || !exclusive->isBool() || !weights || !weights->isArray() ||
      weights->getElements().empty()) {
    error = at + " needs a boolean 'exclusive' and a non-empty array 'weights'";
    return false;
  }
  out.exclusive = exclusive->getBool();
  for (size_t i = 0; i < weights->getElements().size(); ++i) {
    const Json &w = weights->getElements()[i];
    std::string here = at + " weight " + std::to_string(i);
    Nf4Weight weight;
    if (!w.isObject()) {
      error = here + " is not an object";
      return false;
    }
    bool doubleQuant = w.get("absmax_codes") != nullptr;
    if (!idField(w, "weight", bufferCount, weight.weight, false, here, error) ||
        !idField(w, "codes", bufferCount, weight.codes, false, here, error) ||
        !positiveField(w, "rows", weight.rows, false, here, error) ||
        !positiveField(w, "cols", weight.cols, false, here, error) ||
        !positiveField(w, "block", weight.block, false, here, error))
      return false;
    if (doubleQuant) {
      if (w.get("absmax")) {
        error = here + ": both 'absmax' and 'absmax_codes'";
        return false;
      }
      if (!idField(w, "absmax_codes", bufferCount, weight.absmaxCodes, false, here, error) ||
          !idField(w, "absmax_scale", bufferCount, weight.absmaxScale, false, here, error) ||
          !idField(w, "absmax_offset", bufferCount, weight.absmaxOffset, false, here, error) ||
          !positiveField(w, "absmax_block", weight.absmaxBlock, false, here, error))
        return false;
    } else if (!idField(w, "absmax", bufferCount, weight.absmax, false, here, error)) {
      return false;
    }
    const Json *readers = w.get("readers");
    if (!readers || !readers->isArray() || readers->getElements().empty()) {
      error = here + " needs a non-empty array 'readers'";
      return false;
    }
    for (const Json &r : readers->getElements()) {
      if (!r.isInteger() || r.getInteger() < 0) {
        error = here + ": bad op index in 'readers'";
        return false;
      }
      weight.readers.push_back(static_cast<size_t>(r.getInteger()));
    }
    out.weights.push_back(std::move(weight));
  }
  return true;
}

std::string kiln::artifact::checkNf4Roles(const StepProgram &program, const std::string &origin) {
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const ProgramOp &op = program.ops[i];
    if (!op.nf4)
      continue;
    std::string at = origin + ": op " + std::to_string(i) + ": 'nf4'";
    auto isArg = [&](int id) {
      return id < 0 || std::find(op.args.begin(), op.args.end(), id) != op.args.end();
    };
    for (const Nf4Weight &w : op.nf4->weights) {
      for (int id : {w.weight, w.codes, w.absmax, w.absmaxCodes, w.absmaxScale, w.absmaxOffset})
        if (!isArg(id))
          return at + " names buffer " + std::to_string(id) + ", which the launch does not take";
      const ProgramBuffer &buffer = program.buffers[w.weight];
      auto constant = [](const SizeExpr &e) -> int64_t {
        Expected<int64_t> v = e.evaluate({});
        return e.getSymbols().empty() && v ? *v : -1;
      };
      if (buffer.shape.size() != 2 || constant(buffer.shape[0]) != w.rows ||
          constant(buffer.shape[1]) != w.cols)
        return at + ": the weight buffer is not [" + std::to_string(w.rows) + ", " +
               std::to_string(w.cols) + "]";
      if ((w.rows * w.cols) % w.block != 0 || w.block % 2 != 0)
        return at + ": block " + std::to_string(w.block) + " does not divide the weight in pairs";
      for (size_t r : w.readers) {
        const ProgramOp *gemm = r < program.ops.size() ? &program.ops[r] : nullptr;
        if (!gemm || r <= i || gemm->kind != ProgramOp::Kind::Gemm ||
            (gemm->a != w.weight && gemm->b != w.weight) || gemm->c == w.weight ||
            gemm->bias == w.weight)
          return at + ": reader op " + std::to_string(r) +
                 " is not a later GEMM reading the weight as A or B";
      }
    }
  }
  return {};
}
