//===- StepProgram.cpp - Decode the step program JSON ---------------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//

#include "kiln/artifact/StepProgram.h"

#include <cmath>

#include "kiln/artifact/HopperAttention.h"
#include "kiln/artifact/Json.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <cmath>
#include <map>
#include <set>

using namespace kiln::artifact;

namespace {

struct Decoder {
  std::string origin;
  std::string error;
  size_t bufferCount = 0;
  int64_t version = 0; ///< the program's

  bool fail(const std::string &what) {
    if (error.empty())
      error = origin + ": " + what;
    return false;
  }
  const Json *member(const Json &object, const char *key, Json::Kind kind,
                     const std::string &where) {
    const Json *value = object.get(key);
    if (!value ||
        (value->getKind() != kind && !(kind == Json::Kind::Number && value->isNumber()))) {
      fail(where + ": missing or non-" + Json::kindName(kind) + " '" + key + "'");
      return nullptr;
    }
    return value;
  }
  bool string(const Json &o, const char *key, std::string &out, const std::string &where) {
    const Json *v = member(o, key, Json::Kind::String, where);
    if (v)
      out = v->getString();
    return v != nullptr;
  }
  bool integer(const Json &o, const char *key, int64_t &out, const std::string &where) {
    const Json *v = member(o, key, Json::Kind::Integer, where);
    if (v)
      out = v->getInteger();
    return v != nullptr;
  }
  bool buffer(const Json &o, const char *key, int &out, const std::string &where,
              bool optional = false) {
    const Json *v = o.get(key);
    if (!v && optional)
      return true;
    int64_t id;
    if (!integer(o, key, id, where))
      return false;
    if (id < 0 || static_cast<size_t>(id) >= bufferCount)
      return fail(where + ": buffer id " + std::to_string(id) + " out of range");
    out = static_cast<int>(id);
    return true;
  }
  bool expr(const Json &o, const char *key, std::optional<SizeExpr> &out,
            const std::string &where) {
    std::string text;
    if (!string(o, key, text, where))
      return false;
    Expected<SizeExpr> parsed = SizeExpr::parse(text);
    if (!parsed)
      return fail(where + ": '" + key + "': " + parsed.getError());
    out = std::move(*parsed);
    return true;
  }
};

bool hexBytes(const std::string &hex, std::string &out) {
  if (hex.size() % 2)
    return false;
  auto digit = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  out.resize(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) {
    int hi = digit(hex[2 * i]), lo = digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      return false;
    out[i] = static_cast<char>(hi * 16 + lo);
  }
  return true;
}

/// The fused LM head's buffers, dtypes, ranks and settings; the sizes the
/// shapes evaluate to are checked against each other when the executor
/// prepares the op.
bool decodeLinearCrossEntropy(Decoder &d, const Json &o, const std::string &where,
                              const std::vector<ProgramBuffer> &buffers, ProgramOp &op) {
  LinearCrossEntropy h;
  auto optional = [&](const char *key, int &out) {
    const Json *v = o.get(key);
    if (v && v->isInteger() && v->getInteger() == -1) {
      out = -1;
      return true;
    }
    return d.buffer(o, key, out, where);
  };
  if (!d.buffer(o, "hidden", h.hidden, where) || !d.buffer(o, "weight", h.weight, where) ||
      !d.buffer(o, "labels", h.labels, where) || !optional("grad", h.grad) ||
      !d.buffer(o, "loss", h.loss, where) || !optional("hidden_grad", h.hiddenGrad) ||
      !optional("weight_grad", h.weightGrad) || !d.buffer(o, "chunk", h.chunk, where) ||
      !d.buffer(o, "stats", h.stats, where) || !optional("weight_accum", h.weightAccum) ||
      !d.integer(o, "ignore_index", h.ignoreIndex, where) ||
      !d.integer(o, "chunk_tokens", h.chunkTokens, where))
    return false;
  const Json *transpose = d.member(o, "transpose_weight", Json::Kind::Bool, where);
  const Json *softcap = transpose ? d.member(o, "softcap", Json::Kind::Number, where) : nullptr;
  if (!softcap)
    return false;
  h.transposeWeight = transpose->getBool();
  h.softcap = softcap->getNumber();
  if (h.chunkTokens < 1)
    return d.fail(where + ": 'chunk_tokens' must be positive");
  if (!(h.softcap >= 0) || !std::isfinite(h.softcap))
    return d.fail(where + ": 'softcap' must be a finite number >= 0");
  auto is = [&](int id, std::initializer_list<DType> types, size_t rank) {
    if (id < 0)
      return true;
    const ProgramBuffer &b = buffers[id];
    return b.shape.size() == rank && std::find(types.begin(), types.end(), b.dtype) != types.end();
  };
  DType element = buffers[h.hidden].dtype;
  if (!is(h.hidden, {DType::F32, DType::BF16, DType::F16}, 2) || !is(h.weight, {element}, 2))
    return d.fail(where + ": hidden and weight must be 2-D F32, BF16 or F16 of one dtype");
  if (!is(h.labels, {DType::I64, DType::I32}, 1))
    return d.fail(where + ": labels must be 1-D I64 or I32");
  if (!is(h.loss, {DType::F32}, 0) || !is(h.grad, {DType::F32}, 0))
    return d.fail(where + ": loss and grad must be F32 scalars");
  if (!is(h.chunk, {DType::F32}, 2) || !is(h.stats, {DType::F32}, 1) ||
      !is(h.weightAccum, {DType::F32}, 2)) {
    // A bf16 head's chunk may be bf16 too (bf16 logits, fp32 statistics).
    if (element != DType::BF16 || !is(h.chunk, {DType::BF16}, 2) || !is(h.stats, {DType::F32}, 1) ||
        !is(h.weightAccum, {DType::F32}, 2))
      return d.fail(where + ": chunk, stats and weight_accum must be F32 (2-D, 1-D, 2-D); "
                            "a BF16 head's chunk may be BF16");
  }
  if (!is(h.hiddenGrad, {element}, 2) || !is(h.weightGrad, {element}, 2))
    return d.fail(where + ": hidden_grad and weight_grad must have hidden's dtype");
  if ((h.grad < 0) != (h.hiddenGrad < 0) || (h.weightGrad >= 0 && h.grad < 0))
    return d.fail(where + ": 'grad' and 'hidden_grad' come together, 'weight_grad' only with them");
  if ((h.weightAccum >= 0) != (h.weightGrad >= 0 && element != DType::F32))
    return d.fail(where + ": 'weight_accum' is needed exactly for a 16-bit 'weight_grad'");
  op.head = h;
  return true;
}

/// A launch's "variants": [{"per": P, "block": B}, ...], at most
/// kMaxLaunchVariants, each a valid launch shape other than the default's
/// and than each other.
bool decodeLaunchVariants(Decoder &d, const Json &variants, const std::string &where,
                          ProgramOp &op) {
  if (!variants.isArray() || variants.getElements().size() > ProgramOp::kMaxLaunchVariants)
    return d.fail(where + ": 'variants' must be an array of at most " +
                  std::to_string(ProgramOp::kMaxLaunchVariants) + " launch shapes");
  for (size_t i = 0; i < variants.getElements().size(); ++i) {
    const Json &v = variants.getElements()[i];
    std::string at = where + ": variant " + std::to_string(i);
    if (!v.isObject())
      return d.fail(at + " is not an object");
    ProgramOp::LaunchVariant variant;
    if (!d.integer(v, "per", variant.per, at) || !d.integer(v, "block", variant.block, at))
      return false;
    if (variant.per < 1 || variant.block < 1 || variant.block > 1024)
      return d.fail(at + ": bad per/block");
    bool repeated = variant.per == op.per && variant.block == op.block;
    for (const ProgramOp::LaunchVariant &other : op.variants)
      repeated |= other.per == variant.per && other.block == variant.block;
    if (repeated)
      return d.fail(at + " repeats a launch shape");
    op.variants.push_back(variant);
  }
  return true;
}

bool decodeAttention(Decoder &d, const Json &a, const std::string &where, ProgramOp &op) {
  std::string at = where + ": 'attention'";
  AttentionRoles roles;
  std::string direction;
  if (!a.isObject() || !d.string(a, "direction", direction, at))
    return d.error.empty() ? d.fail(at + " is not an object") : false;
  if (direction != "forward" && direction != "backward")
    return d.fail(at + ": direction '" + direction + "' is neither forward nor backward");
  roles.backward = direction == "backward";
  const Json *causal = d.member(a, "causal", Json::Kind::Bool, at);
  const Json *scale = causal ? d.member(a, "scale", Json::Kind::Number, at) : nullptr;
  if (!scale)
    return false;
  roles.causal = causal->getBool();
  roles.scale = scale->getNumber();
  if (const Json *masked = a.get("masked")) {
    if (!masked->isBool())
      return d.fail(at + ": 'masked' is not a boolean");
    roles.masked = masked->getBool();
  }
  if (!(roles.scale > 0) || !std::isfinite(roles.scale))
    return d.fail(at + ": scale must be a positive number");
  bool ok = d.buffer(a, "q", roles.q, at) && d.buffer(a, "k", roles.k, at) &&
            d.buffer(a, "v", roles.v, at) && d.buffer(a, "o", roles.o, at);
  if (ok && roles.backward)
    ok = d.buffer(a, "do", roles.dout, at) && d.buffer(a, "dq", roles.dq, at) &&
         d.buffer(a, "dk", roles.dk, at) && d.buffer(a, "dv", roles.dv, at);
  if (!ok)
    return false;
  if (const Json *seqMajor = a.get("seq_major")) {
    if (d.version < 5)
      return d.fail(at + ": 'seq_major' needs a version 5 program");
    if (!seqMajor->isArray())
      return d.fail(at + ": 'seq_major' is not an array of role names");
    for (const Json &r : seqMajor->getElements()) {
      unsigned bit = 0;
      for (unsigned b = 0; b < (roles.backward ? 8u : 4u) && !bit; ++b)
        if (r.isString() && r.getString() == attentionRoleName(b))
          bit = 1u << b;
      if (!bit)
        return d.fail(at + ": 'seq_major' entry " +
                      (r.isString() ? "'" + r.getString() + "'" : std::string("(not a string)")) +
                      " is not a role of this " + direction);
      if (roles.seqMajor & bit)
        return d.fail(at + ": 'seq_major' repeats '" + r.getString() + "'");
      roles.seqMajor |= bit;
    }
  }
  if (const Json *replaces = a.get("replaces")) {
    if (!replaces->isArray())
      return d.fail(at + ": 'replaces' is not an array");
    for (const Json &r : replaces->getElements()) {
      if (!r.isInteger() || r.getInteger() < 0)
        return d.fail(at + ": bad op index in 'replaces'");
      roles.replaces.push_back(static_cast<size_t>(r.getInteger()));
    }
  }
  op.attention = std::move(roles);
  return true;
}

bool bufferList(Decoder &d, const Json &o, const char *key, std::vector<int> &out,
                const std::string &where) {
  const Json *list = d.member(o, key, Json::Kind::Array, where);
  if (!list)
    return false;
  for (const Json &id : list->getElements()) {
    if (!id.isInteger() || id.getInteger() < 0 ||
        static_cast<size_t>(id.getInteger()) >= d.bufferCount)
      return d.fail(where + ": bad buffer id in '" + key + "'");
    out.push_back(static_cast<int>(id.getInteger()));
  }
  return true;
}

bool decodeAllReduce(Decoder &d, const Json &o, const std::string &where,
                     const std::vector<ProgramBuffer> &buffers, ProgramOp &op) {
  std::string reduce;
  if (!d.integer(o, "bucket", op.bucket, where) || !d.string(o, "reduce", reduce, where) ||
      !bufferList(d, o, "ins", op.ins, where) || !bufferList(d, o, "outs", op.outs, where))
    return false;
  if (op.bucket < 0)
    return d.fail(where + ": negative bucket");
  if (reduce != "avg")
    return d.fail(where + ": reduce '" + reduce + "' is not avg");
  if (op.ins.empty() || op.ins.size() != op.outs.size())
    return d.fail(where + ": 'ins' and 'outs' need the same non-zero number of buffers");
  for (size_t i = 0; i < op.ins.size(); ++i) {
    const ProgramBuffer &in = buffers[op.ins[i]], &out = buffers[op.outs[i]];
    if (in.dtype != DType::F32 && in.dtype != DType::F64 && in.dtype != DType::BF16 &&
        in.dtype != DType::F16)
      return d.fail(where + ": buffer " + std::to_string(op.ins[i]) + " is " + dtypeName(in.dtype) +
                    "; all_reduce averages F32, F64, BF16 or F16");
    bool same = in.dtype == out.dtype && in.shape.size() == out.shape.size();
    for (size_t k = 0; same && k < in.shape.size(); ++k)
      same = in.shape[k].getText() == out.shape[k].getText();
    if (!same)
      return d.fail(where + ": buffers " + std::to_string(op.ins[i]) + " and " +
                    std::to_string(op.outs[i]) + " differ in dtype or shape");
  }
  if (const Json *loss = o.get("loss")) {
    if (!loss->isBool())
      return d.fail(where + ": 'loss' is not a boolean");
    op.loss = loss->getBool();
  }
  return true;
}

/// The buffers an op reads or writes.
std::vector<int> touched(const ProgramOp &op) {
  switch (op.kind) {
  case ProgramOp::Kind::View: return {op.source};
  case ProgramOp::Kind::Fill: return {op.target};
  case ProgramOp::Kind::Copy: return {op.source, op.target};
  case ProgramOp::Kind::Launch:
  case ProgramOp::Kind::AllReduceWait: return op.args;
  case ProgramOp::Kind::Gemm: {
    std::vector<int> ids;
    for (int id : {op.a, op.b, op.bias, op.c})
      if (id >= 0)
        ids.push_back(id);
    return ids;
  }
  case ProgramOp::Kind::AllReduce: {
    std::vector<int> ids = op.ins;
    ids.insert(ids.end(), op.outs.begin(), op.outs.end());
    return ids;
  }
  default: return {};
  }
}

/// Every all_reduce bucket is unique and waited for once, after it, by an
/// all_reduce_wait naming exactly its buffers; no op in between touches its
/// outputs (the exchange writes them concurrently, on another stream).
std::string checkAllReduces(const StepProgram &p, const std::string &origin) {
  std::vector<int> root(p.buffers.size());
  for (size_t id = 0; id < root.size(); ++id)
    root[id] = static_cast<int>(id);
  for (const ProgramOp &op : p.ops)
    if (op.kind == ProgramOp::Kind::View)
      root[op.result] = root[op.source];
  std::map<int64_t, size_t> started; // bucket -> its all_reduce op, until waited
  std::set<int64_t> seen;
  std::map<int, int64_t> busy; // root -> bucket in flight
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const ProgramOp &op = p.ops[i];
    std::string where = origin + ": op " + std::to_string(i);
    if (op.kind == ProgramOp::Kind::AllReduceWait) {
      auto it = started.find(op.bucket);
      if (it == started.end())
        return where + " (all_reduce_wait): bucket " + std::to_string(op.bucket) +
               " has no all_reduce before it still to wait for";
      std::vector<int> expected = touched(p.ops[it->second]), got = op.args;
      std::sort(expected.begin(), expected.end());
      expected.erase(std::unique(expected.begin(), expected.end()), expected.end());
      std::sort(got.begin(), got.end());
      got.erase(std::unique(got.begin(), got.end()), got.end());
      if (expected != got)
        return where + " (all_reduce_wait): 'buffers' are not those of bucket " +
               std::to_string(op.bucket) + "'s all_reduce (op " + std::to_string(it->second) + ")";
      for (int id : got)
        busy.erase(root[id]);
      started.erase(it);
      continue;
    }
    for (int id : touched(op))
      if (auto b = busy.find(root[id]); b != busy.end())
        return where + ": touches buffer " + std::to_string(id) + " while all_reduce bucket " +
               std::to_string(b->second) + " is in flight (before its all_reduce_wait)";
    if (op.kind != ProgramOp::Kind::AllReduce)
      continue;
    if (!seen.insert(op.bucket).second)
      return where + " (all_reduce): bucket " + std::to_string(op.bucket) + " appears twice";
    started[op.bucket] = i;
    // The exchange writes the outputs; the compute stream may still read
    // the inputs of an out-of-place reduction (nothing writes them again).
    for (int id : op.outs)
      busy[root[id]] = op.bucket;
  }
  if (!started.empty())
    return origin + ": op " + std::to_string(started.begin()->second) + " (all_reduce): bucket " +
           std::to_string(started.begin()->first) + " is never waited for (no all_reduce_wait)";
  return "";
}

} // namespace

bool kiln::artifact::decodeHex(const std::string &hex, std::string &out) {
  return hexBytes(hex, out);
}

Expected<int64_t> StepProgram::elementCount(int id, const SymbolBindings &sizes) const {
  int64_t count = 1;
  for (const SizeExpr &dim : buffers[id].shape) {
    Expected<int64_t> value = dim.evaluate(sizes);
    if (!value)
      return value.takeError();
    if (*value < 0)
      return Error{"buffer " + std::to_string(id) + " has a negative size '" + dim.getText() + "'"};
    if (*value && count > INT64_MAX / *value)
      return Error{"buffer " + std::to_string(id) + " overflows int64"};
    count *= *value;
  }
  return count;
}

Expected<size_t> StepProgram::byteCount(int id, const SymbolBindings &sizes) const {
  Expected<int64_t> count = elementCount(id, sizes);
  if (!count)
    return count.takeError();
  size_t bytes;
  if (__builtin_mul_overflow(static_cast<size_t>(*count), dtypeSize(buffers[id].dtype), &bytes) ||
      bytes > static_cast<size_t>(INT64_MAX))
    return Error{"buffer " + std::to_string(id) + " overflows int64 bytes"};
  return bytes;
}

Expected<StepProgram> StepProgram::decode(std::string_view json, const std::string &origin) {
  Expected<Json> parsed = Json::parse(json);
  if (!parsed)
    return Error{origin + ": " + parsed.getError()};
  Decoder d{origin, {}, 0};
  StepProgram program;
  const Json &root = *parsed;
  std::string format;
  int64_t version = 0;
  if (!root.isObject() || !d.string(root, "format", format, "program") ||
      format != "kiln-step-program" || !d.integer(root, "version", version, "program") ||
      version < 1 || version > 6)
    return Error{origin + ": not a version 1 to 6 kiln-step-program"};
  d.version = version;
  if (const Json *lr = root.get("default_lr"); lr && lr->isNumber())
    program.defaultLr = lr->getNumber();

  const Json *buffers = d.member(root, "buffers", Json::Kind::Array, "program");
  if (!buffers)
    return Error{d.error};
  for (const Json &b : buffers->getElements()) {
    std::string where = "buffer " + std::to_string(program.buffers.size());
    ProgramBuffer buffer;
    std::string dtype;
    if (!b.isObject() || !d.string(b, "dtype", dtype, where))
      return Error{d.error.empty() ? origin + ": " + where + " is not an object" : d.error};
    std::optional<DType> parsedType = parseDType(dtype);
    if (!parsedType)
      return Error{origin + ": " + where + ": unknown dtype '" + dtype + "'"};
    buffer.dtype = *parsedType;
    const Json *shape = d.member(b, "shape", Json::Kind::Array, where);
    if (!shape)
      return Error{d.error};
    for (const Json &dim : shape->getElements()) {
      Expected<SizeExpr> e = dim.isString() ? SizeExpr::parse(dim.getString())
                                            : Expected<SizeExpr>(Error{"not a string"});
      if (!e)
        return Error{origin + ": " + where + ": bad dimension: " + e.getError()};
      buffer.shape.push_back(std::move(*e));
    }
    program.buffers.push_back(std::move(buffer));
  }
  d.bufferCount = program.buffers.size();

  for (auto [key, list] :
       {std::pair<const char *, std::vector<ProgramBinding> *>{"args", &program.args},
        {"results", &program.results}}) {
    const Json *bindings = d.member(root, key, Json::Kind::Array, "program");
    if (!bindings)
      return Error{d.error};
    for (const Json &b : bindings->getElements()) {
      std::string where = std::string(key) + " entry " + std::to_string(list->size());
      ProgramBinding binding;
      if (!b.isObject() || !d.string(b, "role", binding.role, where) ||
          !d.buffer(b, "buffer", binding.buffer, where))
        return Error{d.error.empty() ? origin + ": " + where + " is not an object" : d.error};
      if (const Json *name = b.get("name"); name && name->isString())
        binding.name = name->getString();
      list->push_back(std::move(binding));
    }
  }

  const Json *ops = d.member(root, "ops", Json::Kind::Array, "program");
  if (!ops)
    return Error{d.error};
  for (const Json &o : ops->getElements()) {
    std::string where = "op " + std::to_string(program.ops.size());
    ProgramOp op;
    std::string kind;
    if (!o.isObject() || !d.string(o, "op", kind, where))
      return Error{d.error.empty() ? origin + ": " + where + " is not an object" : d.error};
    where += " (" + kind + ")";
    bool ok = true;
    if (kind == "alloc") {
      op.kind = ProgramOp::Kind::Alloc;
      ok = d.buffer(o, "result", op.result, where);
    } else if (kind == "view") {
      op.kind = ProgramOp::Kind::View;
      ok = d.buffer(o, "source", op.source, where) && d.buffer(o, "result", op.result, where);
      // Version 3: a block of the source.
      for (auto [key, field] : {std::pair<const char *, std::optional<SizeExpr> *>{"offset", &op.offset},
                                {"row_stride", &op.rowStride}}) {
        if (!ok || !o.get(key))
          continue;
        if (version < 3)
          ok = d.fail(where + ": '" + key + "' needs a version 3 program");
        else
          ok = d.expr(o, key, *field, where);
      }
    } else if (kind == "weight") {
      op.kind = ProgramOp::Kind::Weight;
      ok = d.string(o, "name", op.name, where) && d.buffer(o, "result", op.result, where);
      // Version 4: the weight in the top-left block of a larger buffer.
      if (ok && o.get("padded_from")) {
        const Json *dims = d.member(o, "padded_from", Json::Kind::Array, where);
        ok = dims != nullptr;
        if (ok && version < 4)
          ok = d.fail(where + ": 'padded_from' needs a version 4 program");
        if (ok && dims->getElements().size() != 2)
          ok = d.fail(where + ": 'padded_from' needs two dims");
        for (size_t i = 0; ok && i < 2; ++i) {
          const Json &dim = dims->getElements()[i];
          if (!dim.isInteger() || dim.getInteger() <= 0)
            ok = d.fail(where + ": 'padded_from' dims are positive integers");
          else
            op.paddedFrom.push_back(dim.getInteger());
        }
      }
      // Version 6: frozen weights side by side in that block.
      if (ok && o.get("members")) {
        const Json *members = d.member(o, "members", Json::Kind::Array, where);
        ok = members != nullptr;
        if (ok && version < 6)
          ok = d.fail(where + ": 'members' needs a version 6 program");
        if (ok && op.paddedFrom.empty())
          ok = d.fail(where + ": 'members' needs 'padded_from'");
        if (ok && members->getElements().size() < 2)
          ok = d.fail(where + ": 'members' lists two or more weights");
        if (ok) {
          ok = d.integer(o, "member_axis", op.memberAxis, where);
          if (ok && op.memberAxis != 0 && op.memberAxis != 1)
            ok = d.fail(where + ": 'member_axis' is 0 or 1");
        }
        int64_t total = 0;
        for (size_t i = 0; ok && i < members->getElements().size(); ++i) {
          const Json &m = members->getElements()[i];
          WeightMember member;
          std::string at = where + ": member " + std::to_string(i);
          ok = m.getKind() == Json::Kind::Object ? d.string(m, "name", member.name, at) &&
                                                     d.integer(m, "size", member.size, at)
                                                 : d.fail(at + " is not an object");
          if (ok && (member.name.empty() || member.size <= 0 ||
                     __builtin_add_overflow(total, member.size, &total)))
            ok = d.fail(at + ": a name and a positive size");
          if (ok && i == 0 && member.name != op.name)
            ok = d.fail(at + ": the first member is the weight's 'name'");
          op.members.push_back(std::move(member));
        }
        if (ok && total != op.paddedFrom[op.memberAxis])
          ok = d.fail(where + ": the members' sizes add up to " + std::to_string(total) +
                      ", not 'padded_from' dim " + std::to_string(op.memberAxis));
      }
    } else if (kind == "constant") {
      op.kind = ProgramOp::Kind::Constant;
      std::string hex;
      ok = d.string(o, "bytes", hex, where) && d.buffer(o, "result", op.result, where);
      if (ok && !hexBytes(hex, op.bytes))
        ok = d.fail(where + ": 'bytes' is not hex");
    } else if (kind == "fill") {
      op.kind = ProgramOp::Kind::Fill;
      const Json *value = d.member(o, "value", Json::Kind::Number, where);
      ok = value && d.buffer(o, "target", op.target, where);
      if (ok)
        op.value = value->getNumber();
    } else if (kind == "copy") {
      op.kind = ProgramOp::Kind::Copy;
      ok = d.buffer(o, "source", op.source, where) && d.buffer(o, "target", op.target, where);
    } else if (kind == "launch") {
      op.kind = ProgramOp::Kind::Launch;
      ok = d.string(o, "kernel", op.name, where) && d.string(o, "module", op.module, where) &&
           d.expr(o, "items", op.items, where) && d.expr(o, "shared", op.shared, where) &&
           d.integer(o, "per", op.per, where) && d.integer(o, "block", op.block, where);
      if (ok && (op.per < 1 || op.block < 1 || op.block > 1024))
        ok = d.fail(where + ": bad per/block");
      const Json *args = ok ? d.member(o, "args", Json::Kind::Array, where) : nullptr;
      const Json *symbols = args ? d.member(o, "symbols", Json::Kind::Array, where) : nullptr;
      ok = symbols != nullptr;
      for (size_t i = 0; ok && i < args->getElements().size(); ++i) {
        const Json &id = args->getElements()[i];
        if (!id.isInteger() || id.getInteger() < 0 ||
            static_cast<size_t>(id.getInteger()) >= d.bufferCount)
          ok = d.fail(where + ": bad buffer id in 'args'");
        else
          op.args.push_back(static_cast<int>(id.getInteger()));
      }
      for (size_t i = 0; ok && i < symbols->getElements().size(); ++i) {
        const Json &s = symbols->getElements()[i];
        if (!s.isString())
          ok = d.fail(where + ": non-string symbol");
        else
          op.symbols.push_back(s.getString());
      }
      if (const Json *variants = o.get("variants"); ok && variants)
        ok = decodeLaunchVariants(d, *variants, where, op);
      if (const Json *attention = o.get("attention"); ok && attention)
        ok = decodeAttention(d, *attention, where, op);
      if (const Json *nf4 = o.get("nf4"); ok && nf4) {
        std::string bad;
        op.nf4.emplace();
        if (!decodeNf4Roles(*nf4, where, d.bufferCount, *op.nf4, bad))
          ok = d.fail(bad);
      }
      // Version 3: args indexed as columns of a wider buffer.
      if (const Json *strides = ok ? o.get("row_strides") : nullptr) {
        if (version < 3)
          ok = d.fail(where + ": 'row_strides' needs a version 3 program");
        else if (!strides->isArray() || strides->getElements().size() != op.args.size())
          ok = d.fail(where + ": 'row_strides' needs one integer per arg");
        for (size_t i = 0; ok && i < op.args.size(); ++i) {
          const Json &v = strides->getElements()[i];
          if (!v.isInteger() || v.getInteger() < 0)
            ok = d.fail(where + ": bad 'row_strides' entry");
          else
            op.rowStrides.push_back(v.getInteger());
        }
      }
    } else if (kind == "gemm") {
      op.kind = ProgramOp::Kind::Gemm;
      ok = d.buffer(o, "a", op.a, where) && d.buffer(o, "b", op.b, where) &&
           d.buffer(o, "c", op.c, where) && d.buffer(o, "bias", op.bias, where, true) &&
           d.expr(o, "m", op.m, where) && d.expr(o, "n", op.n, where) &&
           d.expr(o, "k", op.k, where) && d.expr(o, "batch", op.batch, where) &&
           d.string(o, "epilogue", op.epilogue, where);
      const Json *ta = ok ? d.member(o, "trans_a", Json::Kind::Bool, where) : nullptr;
      const Json *tb = ta ? d.member(o, "trans_b", Json::Kind::Bool, where) : nullptr;
      const Json *strides = tb ? d.member(o, "strides", Json::Kind::Array, where) : nullptr;
      ok = strides && strides->getElements().size() == 3;
      if (!ok)
        d.fail(where + ": 'strides' needs three expressions");
      for (size_t i = 0; ok && i < 3; ++i) {
        const Json &s = strides->getElements()[i];
        Expected<SizeExpr> e = s.isString() ? SizeExpr::parse(s.getString())
                                            : Expected<SizeExpr>(Error{"not a string"});
        if (!e)
          ok = d.fail(where + ": bad stride: " + e.getError());
        else
          op.strides.push_back(std::move(*e));
      }
      if (ok) {
        op.transA = ta->getBool();
        op.transB = tb->getBool();
      }
      // Version 2: alpha scales the product, beta = 1 adds C's contents.
      const Json *alpha = o.get("alpha"), *beta = o.get("beta");
      if (ok && (alpha || beta) && version < 2)
        ok = d.fail(where + ": 'alpha' and 'beta' need a version 2 program");
      if (ok && alpha) {
        if (!alpha->isNumber() || !std::isfinite(alpha->getNumber()))
          ok = d.fail(where + ": 'alpha' is not a finite number");
        else
          op.alpha = alpha->getNumber();
      }
      if (ok && beta) {
        if (!beta->isNumber() || (beta->getNumber() != 0 && beta->getNumber() != 1))
          ok = d.fail(where + ": 'beta' is neither 0 nor 1");
        else
          op.beta = beta->getNumber();
      }
      if (ok && op.beta != 0 && op.bias >= 0)
        ok = d.fail(where + ": a GEMM with 'beta' 1 has no 'bias'");
      // Version 3: the row strides of A, B and C as stored.
      if (const Json *ld = ok ? o.get("ld") : nullptr) {
        if (version < 3)
          ok = d.fail(where + ": 'ld' needs a version 3 program");
        else if (!ld->isArray() || ld->getElements().size() != 3)
          ok = d.fail(where + ": 'ld' needs three expressions");
        for (size_t i = 0; ok && i < 3; ++i) {
          const Json &e = ld->getElements()[i];
          Expected<SizeExpr> parsed = e.isString() ? SizeExpr::parse(e.getString())
                                                   : Expected<SizeExpr>(Error{"not a string"});
          if (!parsed)
            ok = d.fail(where + ": bad 'ld': " + parsed.getError());
          else
            op.lds.push_back(std::move(*parsed));
        }
      }
    } else if (kind == "linear_cross_entropy") {
      op.kind = ProgramOp::Kind::LinearCrossEntropy;
      ok = decodeLinearCrossEntropy(d, o, where, program.buffers, op);
    } else if (kind == "all_reduce") {
      op.kind = ProgramOp::Kind::AllReduce;
      ok = decodeAllReduce(d, o, where, program.buffers, op);
    } else if (kind == "all_reduce_wait") {
      op.kind = ProgramOp::Kind::AllReduceWait;
      ok = d.integer(o, "bucket", op.bucket, where) && bufferList(d, o, "buffers", op.args, where);
    } else {
      ok = d.fail(where + ": unknown op");
    }
    if (!ok)
      return Error{d.error};
    program.ops.push_back(std::move(op));
  }
  // What an attention launch replaces must be a fill or a launch of its own
  // outputs' narrowing, never the launch itself.
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const ProgramOp &op = program.ops[i];
    if (!op.attention)
      continue;
    for (size_t r : op.attention->replaces) {
      if (r >= program.ops.size() || r == i ||
          (program.ops[r].kind != ProgramOp::Kind::Fill &&
           program.ops[r].kind != ProgramOp::Kind::Launch))
        return Error{origin + ": op " + std::to_string(i) + ": 'attention' replaces op " +
                     std::to_string(r) + ", which is not a fill or launch of this program"};
    }
  }
  if (std::string bad = checkAllReduces(program, origin); !bad.empty())
    return Error{bad};
  if (std::string bad = checkNf4Roles(program, origin); !bad.empty())
    return Error{bad};
  return program;
}

Expected<SizeExpr> StepProgram::byteSize(int id) const {
  return SizeExpr::product(buffers[id].shape, static_cast<int64_t>(dtypeSize(buffers[id].dtype)));
}

LiveRanges StepProgram::liveRanges() const {
  size_t n = buffers.size();
  LiveRanges live;
  // A view lives in its source's memory.
  live.root.resize(n);
  for (size_t id = 0; id < n; ++id)
    live.root[id] = static_cast<int>(id);
  live.allocAt.assign(n, -1);
  live.lastUse.assign(n, 0);
  auto touch = [&](int id, size_t at) {
    live.lastUse[live.root[id]] = std::max(live.lastUse[live.root[id]], at);
  };
  for (size_t i = 0; i < ops.size(); ++i) {
    const ProgramOp &op = ops[i];
    switch (op.kind) {
    case ProgramOp::Kind::Alloc:
      live.allocAt[op.result] = static_cast<int>(i);
      live.lastUse[op.result] = i;
      break;
    case ProgramOp::Kind::View:
      live.root[op.result] = live.root[op.source];
      touch(op.source, i);
      break;
    case ProgramOp::Kind::Fill: touch(op.target, i); break;
    case ProgramOp::Kind::Copy:
      touch(op.source, i);
      touch(op.target, i);
      break;
    case ProgramOp::Kind::Launch:
      for (int id : op.args)
        touch(id, i);
      break;
    case ProgramOp::Kind::Gemm:
      for (int id : {op.a, op.b, op.bias, op.c})
        if (id >= 0)
          touch(id, i);
      break;
    case ProgramOp::Kind::LinearCrossEntropy:
      for (int id : op.head->buffers())
        touch(id, i);
      break;
    case ProgramOp::Kind::AllReduce:
    case ProgramOp::Kind::AllReduceWait:
      // The exchange reads and writes them until its wait.
      for (int id : touched(op))
        touch(id, i);
      break;
    default: break;
    }
  }
  for (const ProgramBinding &result : results)
    touch(result.buffer, ops.size());
  return live;
}

Expected<ArenaPlan> StepProgram::planArena(const SymbolBindings &sizes, size_t alignment) const {
  size_t n = buffers.size();
  ArenaPlan plan;
  plan.bytes.assign(n, 0);
  plan.offsets.assign(n, 0);
  plan.inArena.assign(n, false);
  plan.base.assign(n, -1);
  for (size_t id = 0; id < n; ++id) {
    Expected<size_t> bytes = byteCount(static_cast<int>(id), sizes);
    if (!bytes)
      return Error{"buffer " + std::to_string(id) + ": " + bytes.getError()};
    plan.bytes[id] = *bytes;
  }
  LiveRanges live = liveRanges();
  struct Placed {
    size_t begin, end, offset, size;
    int id;
  };
  std::vector<Placed> placed;
  for (size_t id = 0; id < n; ++id) {
    if (live.allocAt[id] < 0)
      continue;
    size_t begin = static_cast<size_t>(live.allocAt[id]), end = live.lastUse[id];
    size_t size = (std::max<size_t>(plan.bytes[id], 1) + alignment - 1) / alignment * alignment;
    struct Busy {
      size_t lo, hi;
      int id;
      bool operator<(const Busy &o) const { return lo != o.lo ? lo < o.lo : id < o.id; }
    };
    std::vector<Busy> busy;
    for (const Placed &q : placed)
      if (q.end >= begin && q.begin <= end)
        busy.push_back({q.offset, q.offset + q.size, q.id});
    std::sort(busy.begin(), busy.end());
    // First fit; the offset is always 0 or the end of the busy buffer that
    // pushed it up last, which becomes this buffer's base.
    size_t offset = 0;
    int base = -1;
    for (const Busy &b : busy) {
      if (offset + size <= b.lo)
        break;
      if (b.hi > offset) {
        offset = b.hi;
        base = b.id;
      }
    }
    // Buffers below 2^63 bytes each; the sum of live ones must still fit.
    if (size > static_cast<size_t>(INT64_MAX) || offset > static_cast<size_t>(INT64_MAX) - size)
      return Error{"buffer " + std::to_string(id) + ": the arena exceeds int64 bytes"};
    placed.push_back({begin, end, offset, size, static_cast<int>(id)});
    plan.offsets[id] = offset;
    plan.base[id] = base;
    plan.inArena[id] = true;
    plan.size = std::max(plan.size, offset + size);
  }
  return plan;
}

int64_t GemmMatrix::extent() const {
  if (rows <= 0 || cols <= 0 || batch <= 0)
    return 0;
  int64_t lastRow = 0, lastMatrix = 0, sum = 0;
  if (__builtin_mul_overflow(rows - 1, ld, &lastRow) ||
      __builtin_mul_overflow(batch - 1, stride, &lastMatrix) ||
      __builtin_add_overflow(lastRow, lastMatrix, &sum) || __builtin_add_overflow(sum, cols, &sum))
    return INT64_MAX;
  return sum;
}

Expected<std::vector<GemmMatrix>> kiln::artifact::gemmMatrices(const StepProgram &program,
                                                               const ProgramOp &op,
                                                               const SymbolBindings &sizes,
                                                               const std::vector<int64_t> &elements) {
  auto value = [&](const SizeExpr &e, const char *what) -> Expected<int64_t> {
    Expected<int64_t> v = e.evaluate(sizes);
    if (!v)
      return Error{std::string("'") + what + "': " + v.getError()};
    if (*v < 0)
      return Error{std::string("'") + what + "' is negative (" + std::to_string(*v) + ")"};
    return *v;
  };
  if (!op.m || !op.n || !op.k || !op.batch || op.strides.size() != 3 ||
      (!op.lds.empty() && op.lds.size() != 3))
    return Error{"the GEMM lacks its sizes"};
  int64_t v[4];
  const char *names[4] = {"m", "n", "k", "batch"};
  const SizeExpr *exprs[4] = {&*op.m, &*op.n, &*op.k, &*op.batch};
  for (int i = 0; i < 4; ++i) {
    Expected<int64_t> e = value(*exprs[i], names[i]);
    if (!e)
      return e.takeError();
    v[i] = *e;
  }
  int64_t m = v[0], n = v[1], k = v[2], batch = v[3];
  std::vector<GemmMatrix> matrices(3);
  matrices[0].rows = op.transA ? k : m;
  matrices[0].cols = op.transA ? m : k;
  matrices[1].rows = op.transB ? n : k;
  matrices[1].cols = op.transB ? k : n;
  matrices[2].rows = m;
  matrices[2].cols = n;
  const char *operand[3] = {"a", "b", "c"};
  int ids[3] = {op.a, op.b, op.c};
  for (int i = 0; i < 3; ++i) {
    GemmMatrix &x = matrices[i];
    x.batch = batch;
    Expected<int64_t> stride = value(op.strides[i], "strides");
    if (!stride)
      return stride.takeError();
    x.stride = *stride;
    x.ld = x.cols;
    if (!op.lds.empty()) {
      Expected<int64_t> ld = value(op.lds[i], "ld");
      if (!ld)
        return ld.takeError();
      if (*ld < x.cols)
        return Error{std::string("'ld' of ") + operand[i] + " is " + std::to_string(*ld) +
                     ", less than its width " + std::to_string(x.cols)};
      x.ld = *ld;
    }
    int id = ids[i];
    if (id < 0 || static_cast<size_t>(id) >= program.buffers.size() ||
        static_cast<size_t>(id) >= elements.size())
      return Error{std::string("bad buffer id for ") + operand[i]};
    if (x.extent() > elements[id])
      return Error{std::string(operand[i]) + " (" + std::to_string(x.rows) + "x" +
                   std::to_string(x.cols) + ", ld " + std::to_string(x.ld) +
                   (batch > 1 ? ", batch " + std::to_string(batch) : std::string()) +
                   ") reaches element " + std::to_string(x.extent()) + " of buffer " +
                   std::to_string(id) + ", which holds " + std::to_string(elements[id])};
  }
  return matrices;
}

Expected<std::vector<int64_t>> kiln::artifact::reachableElements(const StepProgram &program,
                                                                 const SymbolBindings &sizes) {
  std::vector<int64_t> elements(program.buffers.size());
  for (size_t id = 0; id < elements.size(); ++id) {
    Expected<int64_t> count = program.elementCount(static_cast<int>(id), sizes);
    if (!count)
      return count.takeError();
    elements[id] = *count;
  }
  for (const ProgramOp &op : program.ops) {
    if (op.kind != ProgramOp::Kind::View || op.result < 0 || op.source < 0)
      continue;
    int64_t offset = 0;
    if (op.offset) {
      Expected<int64_t> v = op.offset->evaluate(sizes);
      if (!v)
        return v.takeError();
      offset = *v;
    }
    elements[op.result] = std::max<int64_t>(0, elements[op.source] - offset);
  }
  return elements;
}

std::string kiln::artifact::weightKey(const StepProgram &program, const ProgramOp &op) {
  if (op.paddedFrom.empty() || op.result < 0 ||
      static_cast<size_t>(op.result) >= program.buffers.size())
    return op.name;
  std::string key = op.name + "#padded:";
  const std::vector<SizeExpr> &shape = program.buffers[op.result].shape;
  for (size_t i = 0; i < shape.size(); ++i)
    key += (i ? "x" : "") + shape[i].getText();
  for (size_t i = 1; i < op.members.size(); ++i)
    key += (i == 1 ? (op.memberAxis ? "|" : ";") : ",") + op.members[i].name;
  return key;
}

std::string kiln::artifact::groupWeightImage(const std::vector<std::string> &images,
                                             size_t elementSize, int64_t axis, int64_t rows,
                                             const std::vector<int64_t> &sizes) {
  std::string block;
  if (axis == 0) {
    for (const std::string &image : images)
      block += image;
    return block;
  }
  int64_t cols = 0;
  for (int64_t size : sizes)
    cols += size;
  block.resize(static_cast<size_t>(rows * cols) * elementSize);
  for (int64_t i = 0; i < rows; ++i) {
    size_t at = static_cast<size_t>(i * cols) * elementSize;
    for (size_t m = 0; m < images.size(); ++m) {
      size_t width = static_cast<size_t>(sizes[m]) * elementSize;
      std::memcpy(&block[at], &images[m][static_cast<size_t>(i) * width], width);
      at += width;
    }
  }
  return block;
}

std::string kiln::artifact::padWeightImage(const std::string &packed, size_t elementSize,
                                           int64_t rows, int64_t cols, int64_t paddedRows,
                                           int64_t paddedCols) {
  std::string padded(static_cast<size_t>(paddedRows * paddedCols) * elementSize, '\0');
  size_t row = static_cast<size_t>(cols) * elementSize;
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(&padded[static_cast<size_t>(i * paddedCols) * elementSize], &packed[i * row], row);
  return padded;
}

Status kiln::artifact::checkStridedViews(const StepProgram &program, const SymbolBindings &sizes,
                                         const std::vector<int64_t> &elements) {
  // Per buffer id: the row stride of a view whose rows are not packed.
  std::map<int, int64_t> strided;
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const ProgramOp &op = program.ops[i];
    if (op.kind != ProgramOp::Kind::View || (!op.offset && !op.rowStride))
      continue;
    std::string where = "op " + std::to_string(i) + " (view)";
    const std::vector<SizeExpr> &shape = program.buffers[op.result].shape;
    if (shape.empty())
      return Error{where + ": a view at an offset or row stride needs a rank of at least 1"};
    if (program.buffers[op.result].dtype != program.buffers[op.source].dtype)
      return Error{where + ": a view at an offset or row stride changes the dtype"};
    Expected<int64_t> width = shape.back().evaluate(sizes);
    Expected<int64_t> offset = op.offset ? op.offset->evaluate(sizes) : Expected<int64_t>(0);
    Expected<int64_t> stride = op.rowStride ? op.rowStride->evaluate(sizes) : width;
    if (!width || !offset || !stride)
      return Error{where + ": its offset, row stride or width does not evaluate"};
    if (*offset < 0 || *stride < *width)
      return Error{where + ": offset " + std::to_string(*offset) + " or row stride " +
                   std::to_string(*stride) + " is out of range (width " + std::to_string(*width) +
                   ")"};
    if (strided.count(op.source))
      return Error{where + ": views a block of columns (buffer " + std::to_string(op.source) +
                   ") again"};
    Expected<int64_t> count = program.elementCount(op.result, sizes);
    if (!count)
      return Error{where + ": " + count.getError()};
    GemmMatrix block;
    block.cols = *width;
    block.rows = *width ? *count / *width : 0;
    block.ld = *stride;
    int64_t extent = block.extent();
    if (extent > INT64_MAX - *offset || *offset + extent > elements[op.source])
      return Error{where + ": reaches element " + std::to_string(*offset + extent) +
                   " of buffer " + std::to_string(op.source) + ", which holds " +
                   std::to_string(elements[op.source])};
    if (*stride != *width)
      strided[op.result] = *stride;
  }
  for (size_t i = 0; i < program.ops.size(); ++i) {
    const ProgramOp &op = program.ops[i];
    std::string where = "op " + std::to_string(i);
    if (op.kind == ProgramOp::Kind::Gemm) {
      int ids[3] = {op.a, op.b, op.c};
      for (int s = 0; s < 3; ++s) {
        auto it = strided.find(ids[s]);
        if (it == strided.end())
          continue;
        Expected<int64_t> ld =
            op.lds.empty() ? Expected<int64_t>(Error{"packed"}) : op.lds[s].evaluate(sizes);
        if (!ld || *ld != it->second)
          return Error{where + " (gemm): reads buffer " + std::to_string(ids[s]) +
                       " (columns at row stride " + std::to_string(it->second) +
                       ") without that leading dimension"};
      }
      if (op.bias >= 0 && strided.count(op.bias))
        return Error{where + " (gemm): a bias is a block of columns"};
      continue;
    }
    if (op.kind == ProgramOp::Kind::Launch && !op.rowStrides.empty()) {
      // A kernel writes its strided args at exactly the view's stride, and
      // indexes nothing else that way (it would run past a packed buffer).
      for (size_t a = 0; a < op.args.size(); ++a) {
        auto it = strided.find(op.args[a]);
        int64_t want = it == strided.end() ? 0 : it->second, declared = op.rowStrides[a];
        // A row stride equal to the width is packed.
        const std::vector<SizeExpr> &shape = program.buffers[op.args[a]].shape;
        Expected<int64_t> width = shape.empty() ? Expected<int64_t>(1) : shape.back().evaluate(sizes);
        if (declared && width && declared == *width)
          declared = 0;
        if (declared != want)
          return Error{where + " (launch): indexes buffer " + std::to_string(op.args[a]) +
                       " at row stride " + std::to_string(op.rowStrides[a]) + "; it is " +
                       (want ? "columns at row stride " + std::to_string(want) : "packed")};
      }
      continue;
    }
    for (int id : touched(op))
      if (strided.count(id))
        return Error{where + ": indexes buffer " + std::to_string(id) + " (columns at row stride " +
                     std::to_string(strided[id]) + ") as packed; only GEMMs may read it"};
    if (op.kind == ProgramOp::Kind::LinearCrossEntropy)
      for (int id : op.head->buffers())
        if (strided.count(id))
          return Error{where + ": indexes buffer " + std::to_string(id) + " as packed"};
  }
  for (const ProgramBinding &result : program.results)
    if (strided.count(result.buffer))
      return Error{"result '" + result.name + "' is a block of columns"};
  return Status::success();
}
