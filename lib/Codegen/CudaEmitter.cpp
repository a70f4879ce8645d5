//===- CudaEmitter.cpp - Printer plumbing: lines, indices, loads ----------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// Where the printed statements go (lines, C scopes and the elements computed
// in them), sizes and indices as C expressions, loads, stores, conversions
// and literals, and the kernel outputs.
//
//===----------------------------------------------------------------------===//

#include "CudaPrinter.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace kiln::codegen::detail {

bool isSingleCall(StringRef expr, StringRef fn) {
  if (!expr.starts_with(fn) || !expr.ends_with(")"))
    return false;
  int depth = 0;
  for (size_t i = fn.size() - 1; i < expr.size(); ++i) {
    depth += expr[i] == '(' ? 1 : expr[i] == ')' ? -1 : 0;
    if (depth == 0 && i + 1 != expr.size())
      return false;
  }
  return true;
}

std::string roundedToStorage(Type t, const std::string &expr) {
  if (t.isBF16() && !isSingleCall(expr, "__bfloat162float(") &&
      !isSingleCall(expr, "kiln_round_bf16("))
    return "kiln_round_bf16(" + expr + ")";
  if (t.isF16() && !isSingleCall(expr, "__half2float("))
    return "__half2float(__float2half(" + expr + "))";
  return expr;
}

std::string computeType(Type t) {
  if (t.isF64())
    return "double";
  if (isa<FloatType>(t))
    return "float";
  if (t.isInteger(1))
    return "bool";
  return "int64_t";
}

std::string storageType(Type t) {
  if (t.isF32())
    return "float";
  if (t.isF64())
    return "double";
  if (t.isBF16())
    return "__nv_bfloat16";
  if (t.isF16())
    return "__half";
  if (t.isInteger(1))
    return "bool";
  unsigned width = t.getIntOrFloatBitWidth();
  bool isUnsigned = t.isUnsignedInteger();
  switch (width) {
  case 8: return isUnsigned ? "unsigned char" : "signed char";
  case 16: return isUnsigned ? "unsigned short" : "short";
  case 32: return isUnsigned ? "unsigned int" : "int";
  default: return isUnsigned ? "unsigned long long" : "int64_t";
  }
}

void Printer::line(const Twine &text) {
  body.append(indent * 2, ' ');
  body += text.str();
  body += '\n';
}

void Printer::open(const Twine &header, bool laneUniform) {
  line(header + " {");
  ++indent;
  scopes.emplace_back();
  uniformScopes.push_back(laneUniform);
}

void Printer::close(StringRef tail) {
  --indent;
  scopes.pop_back();
  uniformScopes.pop_back();
  line(tail);
}

/// The index of a unit dimension is 0 whatever names it: broadcasts spell it
/// "0", a row kernel's delinearized rows a variable. Keyed alike, a value
/// bound at one spelling is found at the other.
std::string Printer::valueKey(Value v, ArrayRef<std::string> idx) {
  auto type = dyn_cast<RankedTensorType>(v.getType());
  if (!type || type.getRank() != (int64_t)idx.size())
    return key(idx);
  SmallVector<std::string> canonical(idx.begin(), idx.end());
  for (int64_t i = 0; i < type.getRank(); ++i)
    if (type.getDimSize(i) == 1)
      canonical[i] = "0";
  return key(canonical);
}

void Printer::remember(Value v, ArrayRef<std::string> idx, std::string name) {
  scopes.back()[{v.getAsOpaquePointer(), valueKey(v, idx)}] = std::move(name);
}

const std::string *Printer::recall(Value v, ArrayRef<std::string> idx) {
  auto k = std::make_pair(v.getAsOpaquePointer(), valueKey(v, idx));
  for (auto it = scopes.rbegin(); it != scopes.rend(); ++it)
    if (auto found = it->find(k); found != it->end())
      return &found->second;
  return nullptr;
}

void Printer::fail(Operation *op, const Twine &message) {
  if (succeeded(status))
    op->emitOpError(message);
  status = failure();
}

std::string Printer::dim(Dim d) {
  if (std::optional<int64_t> c = d.getConstantValue())
    return std::to_string(*c);
  std::string out;
  for (const SymTerm &term : d.getTerms()) {
    bool negative = term.coeff < 0;
    int64_t magnitude = negative ? -term.coeff : term.coeff;
    std::string t = magnitude != 1 || term.degree() == 0 ? std::to_string(magnitude) : "";
    for (unsigned i = 0; i < term.degree(); ++i) {
      std::string symbol = names.symbols.lookup(term.factors[i].getValue());
      t += (t.empty() ? "" : "*") + symbol;
    }
    if (out.empty())
      out = (negative ? "-" : "") + t;
    else
      out += (negative ? " - " : " + ") + t;
  }
  return d.getTerms().size() > 1 ? "(" + out + ")" : out;
}

SmallVector<std::string> Printer::dims(Value v) {
  SmallVector<std::string> out;
  for (Dim d : getDims(typeOf(v)))
    out.push_back(dim(d));
  return out;
}

std::string Printer::numel(Value v) { return dim(dimProduct(getDims(typeOf(v)), v.getContext())); }

void Printer::relate(const std::string &flat, ArrayRef<std::string> idx,
                     ArrayRef<std::string> sizes) {
  std::string shape = llvm::join(sizes, ",");
  scopes.back()[{nullptr, "L|" + key(idx) + "|" + shape}] = flat;
  scopes.back()[{nullptr, "D|" + flat + "|" + shape}] = key(idx);
}

const std::string *Printer::related(StringRef kind, const std::string &what,
                                    ArrayRef<std::string> sizes) {
  auto k =
      std::make_pair((void *)nullptr, (kind + "|" + what + "|" + llvm::join(sizes, ",")).str());
  for (auto it = scopes.rbegin(); it != scopes.rend(); ++it)
    if (auto found = it->find(k); found != it->end())
      return &found->second;
  return nullptr;
}

std::string Printer::linear(ArrayRef<std::string> idx, ArrayRef<std::string> sizes) {
  if (idx.empty())
    return "0";
  if (const std::string *flat = related("L", key(idx), sizes))
    return *flat;
  // A lane index last, in a row of whole chunks: the chunk's first element
  // is aligned too, so the sum stays a lane index (a reshape's merged dims
  // keep the chunk loads of what they read).
  int64_t inner;
  if (std::optional<std::string> x = laneBase(idx.back());
      x && idx.size() > 1 && !StringRef(sizes.back()).getAsInteger(10, inner) &&
      inner % laneWidth == 0) {
    Index head(idx.begin(), idx.end());
    head.back() = *x;
    return laneIndex(linear(head, sizes));
  }
  // Horner form without the terms of zero indices and unit sizes.
  std::string out;
  bool isSum = false;
  for (size_t i = 0; i < idx.size(); ++i) {
    if (!out.empty() && sizes[i] != "1") {
      out = (isSum ? "(" + out + ")" : out) + " * " + sizes[i];
      isSum = false;
    }
    if (idx[i] == "0")
      continue;
    bool compound = idx[i].find_first_of("+-*/%?") != std::string::npos;
    std::string term = compound && !out.empty() ? "(" + idx[i] + ")" : idx[i];
    isSum = !out.empty() || compound;
    out = out.empty() ? term : out + " + " + term;
  }
  return out.empty() ? "0" : out;
}

Index Printer::delinearize(const std::string &flat, ArrayRef<std::string> sizes) {
  Index idx(sizes.size());
  if (sizes.empty())
    return idx;
  if (sizes.size() == 1) {
    idx[0] = flat;
    return idx;
  }
  if (const std::string *known = related("D", flat, sizes)) {
    SmallVector<StringRef> parts;
    StringRef(*known).split(parts, ',');
    for (auto [i, part] : llvm::enumerate(parts))
      idx[i] = part.str();
    return idx;
  }
  // In a vector loop's lanes an offset `X + lane` with X a multiple of the
  // width (`flat` is `base + lane`; an innermost index split from such an
  // X is one too): where the innermost size is a constant multiple of the
  // width, the lanes share every index but the innermost, which is X's
  // plus lane. Splitting X is lane-invariant (the unrolled lanes share one
  // division chain) where splitting the offset divides per lane, and a
  // 64-bit division by a symbolic size costs more than the lane's math.
  const std::string &inner = sizes.back();
  bool innerAligned = laneWidth > 1 && !inner.empty() && llvm::all_of(inner, llvm::isDigit) &&
                      std::stoll(inner) % laneWidth == 0;
  if (vectorLanes && innerAligned) {
    std::string aligned;
    if (flat == "flat")
      aligned = "base";
    else if (StringRef f(flat); f.consume_front("(") && f.consume_back(" + lane)") &&
                                laneAligned.contains(f))
      aligned = f.str();
    if (!aligned.empty()) {
      Index shared = delinearize(aligned, sizes);
      shared.back() = "(" + shared.back() + " + lane)";
      relate(flat, shared, sizes);
      return shared;
    }
  }
  // Element indices fit 32 bits (kiln-shape-guards checks every symbolic
  // element count against INT32_MAX at run time): the division chain runs
  // in unsigned 32-bit arithmetic, a few instructions per step where a
  // 64-bit division by a symbolic size is a call of ~70. A constant shape
  // past 2^32 elements (unguarded) keeps 64 bits.
  bool narrow = true;
  int64_t constant = 1;
  for (const std::string &size : sizes)
    if (!size.empty() && llvm::all_of(size, llvm::isDigit)) {
      int64_t v = std::stoll(size);
      narrow = narrow && v > 0 && constant <= (int64_t{1} << 32) / v;
      constant = narrow ? constant * v : constant;
    }
  auto divisor = [&](const std::string &size) {
    if (!narrow)
      return size;
    return llvm::all_of(size, llvm::isDigit) ? size + "u" : "(unsigned)(" + size + ")";
  };
  std::string rest = fresh("r");
  line((narrow ? "unsigned " + rest + " = (unsigned)(" + flat + ")"
               : "int64_t " + rest + " = " + flat) +
       ";");
  for (int64_t i = sizes.size() - 1; i >= 0; --i) {
    std::string name = fresh("ix");
    if (i == 0) {
      line("const int64_t " + name + " = " + rest + ";");
    } else {
      line("const int64_t " + name + " = " + rest + " % " + divisor(sizes[i]) + ";");
      line(rest + " /= " + divisor(sizes[i]) + ";");
    }
    idx[i] = name;
  }
  if (innerAligned && laneAligned.contains(flat))
    laneAligned.insert(idx.back());
  relate(flat, idx, sizes);
  return idx;
}

Index Printer::broadcastIndex(Value operand, ArrayRef<std::string> idx) {
  RankedTensorType type = typeOf(operand);
  int64_t offset = idx.size() - type.getRank();
  Index out;
  for (int64_t i = 0; i < type.getRank(); ++i)
    out.push_back(type.getDimSize(i) == 1 ? "0" : idx[offset + i]);
  return out;
}

std::string Printer::load(Value arg, const std::string &offset) {
  Type element = typeOf(arg).getElementType();
  std::string ptr = names.params.lookup(arg) + "[" + inIndex(arg, offset) + "]";
  if (vectorLanes && offset == "flat") {
    vectorInputs.insert(arg);
    ptr = names.params.lookup(arg) + "_v[lane]";
  }
  if (rowLanes && (offset == "flat" || offset == "col")) {
    (offset == "flat" ? rowFlatInputs : rowColInputs).insert(arg);
    ptr = names.params.lookup(arg) + (offset == "flat" ? "_v" : "_w") + "[c][lane]";
  }
  return widened(element, ptr);
}

std::string Printer::widened(Type element, const std::string &ptr) {
  if (element.isBF16())
    return "__bfloat162float(" + ptr + ")";
  if (element.isF16())
    return "__half2float(" + ptr + ")";
  std::string c = computeType(element);
  return storageType(element) == c ? ptr : "(" + c + ")" + ptr;
}

std::optional<std::string> Printer::laneBase(const std::string &i) {
  StringRef s(i);
  if (!vectorLanes || !s.consume_front("(") || !s.consume_back(" + lane)") ||
      !laneAligned.contains(s))
    return std::nullopt;
  return s.str();
}

std::string Printer::laneIndex(const std::string &x) {
  laneAligned.insert(x);
  return "(" + x + " + lane)";
}

std::optional<std::string> Printer::laneChunk(Value arg, ArrayRef<std::string> idx,
                                              ArrayRef<std::string> sizes) {
  if (!vectorLanes || !laneLoopDepth || idx.empty() || sizes.size() != idx.size())
    return std::nullopt;
  std::optional<std::string> x = laneBase(idx.back());
  int64_t inner;
  if (!x || StringRef(sizes.back()).getAsInteger(10, inner) || inner % laneWidth)
    return std::nullopt;
  // Lane 0 loads for all: every block opened in the lane loop must be taken
  // by all lanes alike, and none may be a loop (its iterations would
  // overwrite the registers before the next lane reads them).
  for (size_t s = laneLoopDepth; s < uniformScopes.size(); ++s)
    if (!uniformScopes[s])
      return std::nullopt;
  Index at(idx.begin(), idx.end());
  at.back() = *x;
  // X and the row's start are multiples of the width; the buffer starts
  // 16-byte aligned (as the `[chunk]` vector loads assume).
  std::string offset = inIndex(arg, linear(at, sizes));
  Type element = typeOf(arg).getElementType();
  std::string param = names.params.lookup(arg), reg = fresh(param + "_c");
  std::string type = vectorType(element, laneWidth), address = param + " + (" + offset + ")";
  std::string text = "if (lane == 0) *reinterpret_cast<" + type + " *>(" + reg +
                     ") = *reinterpret_cast<const " + type + " *>(" + address + ");";
  laneChunks.push_back({reg, element, address, text});
  line(text);
  return widened(element, reg + "[lane]");
}

std::string Printer::loadAt(Value arg, ArrayRef<std::string> idx, ArrayRef<std::string> sizes) {
  std::string offset = linear(idx, sizes);
  if (offset != "flat")
    if (std::optional<std::string> chunk = laneChunk(arg, idx, sizes))
      return *chunk;
  return load(arg, offset);
}

std::string Printer::store(Type element, const std::string &value) {
  if (element.isBF16())
    return "__float2bfloat16(" + value + ")";
  if (element.isF16())
    return "__float2half(" + value + ")";
  return "(" + storageType(element) + ")(" + value + ")";
}

std::string Printer::convert(const std::string &value, Type from, Type to) {
  std::string cf = computeType(from), ct = computeType(to);
  if (to.isInteger(1))
    return "(" + value + " != 0)";
  if (cf == ct)
    return value;
  return "(" + ct + ")(" + value + ")";
}

std::string Printer::literal(double v, Type element) {
  std::string c = computeType(element);
  if (c == "bool")
    return v != 0 ? "true" : "false";
  if (c == "int64_t")
    return std::to_string((int64_t)v) + "LL";
  if (std::isinf(v))
    return v > 0 ? "KILN_INF" : "-KILN_INF";
  if (std::isnan(v))
    return "__int_as_float(0x7fc00000)";
  std::string s = llvm::formatv("{0:e9}", v).str();
  return c == "float" ? s + "f" : s;
}

std::string Printer::fn(StringRef name, Type element) {
  return computeType(element) == "double" ? name.str() : (name + "f").str();
}

std::string Printer::let(Value v, ArrayRef<std::string> idx, const std::string &expr) {
  std::string name = fresh("v");
  line("const " + computeType(typeOf(v).getElementType()) + " " + name + " = " +
       roundedToStorage(typeOf(v).getElementType(), expr) + ";");
  remember(v, idx, name);
  return name;
}

int Printer::outputIndex(Value v) {
  for (auto [i, out] : llvm::enumerate(plan.outputs))
    if (out == v)
      return i;
  return -1;
}

int Printer::accumulatorIndex(Value v) {
  for (auto [i, out] : llvm::enumerate(plan.outputs)) {
    if (out == v)
      return i;
    if (auto cast = out.getDefiningOp<kiln::CastOp>(); cast && cast.getInput() == v)
      return i;
  }
  return -1;
}

bool Printer::isAccumulator(unsigned i) { return outputInit(plan.outputs[i]) == OutputInit::Zero; }

void Printer::storeOutputs(const std::string &flat, Value shaped, ArrayRef<std::string> idx,
                           Dim space, llvm::function_ref<bool(unsigned)> skip) {
  for (auto [i, out] : llvm::enumerate(plan.outputs)) {
    if ((skip && skip(i)) || dimProduct(getDims(typeOf(out)), out.getContext()) != space)
      continue;
    Index at = typeOf(out).getShape() == typeOf(shaped).getShape() &&
                       getDims(typeOf(out)) == getDims(typeOf(shaped))
                   ? Index(idx.begin(), idx.end())
                   : delinearize(flat, dims(out));
    std::string target = vectorLanes || rowLanes ? outName(i) + "_v[lane]"
                                                 : outName(i) + "[" + outIndex(i, flat) + "]";
    if (rowLanes)
      rowStored.insert(i);
    line(target + " = " + store(elementOf(out), value(out, at)) + ";");
  }
}

} // namespace kiln::codegen::detail

namespace kiln::codegen::detail {

int64_t Printer::outRowStride(unsigned i) {
  auto strides = plan.kernel->getAttrOfType<DenseI64ArrayAttr>("kiln.out_row_strides");
  return strides && i < strides.size() ? strides[i] : 0;
}

/// The element at flat offset `flat` of a `width`-column block whose rows
/// start `stride` elements apart (the division in 32 bits, as
/// delinearize's; the offset in 64).
static std::string stridedIndex(const std::string &flat, int64_t width, int64_t stride) {
  std::string w = std::to_string(width) + "u", f = "(unsigned)(" + flat + ")";
  return "((int64_t)(" + f + " / " + w + ") * " + std::to_string(stride) + " + " + f + " % " + w +
         ")";
}

std::string Printer::outIndex(unsigned i, const std::string &flat) {
  int64_t stride = outRowStride(i);
  return stride ? stridedIndex(flat, typeOf(plan.outputs[i]).getShape().back(), stride) : flat;
}

int64_t Printer::inRowStride(Value arg) {
  auto strides = plan.kernel->getAttrOfType<DenseI64ArrayAttr>("kiln.in_row_strides");
  auto block = dyn_cast<BlockArgument>(arg);
  if (!strides || !block || block.getOwner() != &plan.kernel.getBody().front())
    return 0;
  unsigned i = block.getArgNumber();
  return i < strides.size() ? strides[i] : 0;
}

std::string Printer::inIndex(Value arg, const std::string &flat) {
  int64_t stride = inRowStride(arg);
  return stride ? stridedIndex(flat, typeOf(arg).getShape().back(), stride) : flat;
}

} // namespace kiln::codegen::detail
