//===- CudaPrinter.cpp - Print one kernel as CUDA C++ ---------------------===//
//
// A kernel is a loop over work items (elements, rows, query rows, ...) and
// the tensor ops of its body are computed per element at an index: `value(v,
// idx)` prints the statements that compute element idx of v and returns the
// C expression holding it. Index-mapping ops (broadcasts, transposes,
// slices, gathers, ...) only change the index handed to their operand, so
// nothing inside a kernel is ever materialized. The kind templates (row,
// scan, scatter, attention) decide where the loops and block reductions go.
//
//===----------------------------------------------------------------------===//

#include "kiln/Codegen/Cuda.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "kiln/Dialect/Kernel/FusionPolicy.h"
#include "kiln/Support/DynamicMap8.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace kiln::codegen {
namespace {

using Index = SmallVector<std::string, 4>;

/// Device helpers every source starts with (block reductions, atomics).
/// The fp16/bf16 headers are large: they are included only when used.
constexpr const char *kPrelude = R"CUDA(typedef long long int64_t;
#define KILN_INF __int_as_float(0x7f800000)

// Sum (or max) over the block; every thread gets the result. blockDim.x is a
// multiple of 32 and every thread of the block must call it.
__device__ __forceinline__ float kiln_block_reduce(float v, float *red, bool is_max) {
  for (int o = 16; o > 0; o >>= 1) {
    float w = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, w) : v + w;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int warps = (blockDim.x + 31) >> 5;
  __syncthreads(); // red may still be read by the previous reduction
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < warps ? red[lane] : (is_max ? -KILN_INF : 0.f);
    for (int o = 16; o > 0; o >>= 1) {
      float w = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, w) : v + w;
    }
    if (lane == 0) red[32] = v;
  }
  __syncthreads();
  return red[32];
}
__device__ __forceinline__ void kiln_atomic_add(float *p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void kiln_atomic_add(double *p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void kiln_atomic_add(int64_t *p, int64_t v) {
  atomicAdd(reinterpret_cast<unsigned long long *>(p), static_cast<unsigned long long>(v));
}
__device__ __forceinline__ void kiln_atomic_add(int *p, int v) { atomicAdd(p, v); }

// Philox4x32-10 (key = seed, counter = (index / 4, stream, 0)): word
// index % 4, top 24 bits scaled to [0, 1). Same draws as the interpreter.
__device__ __forceinline__ float kiln_philox_uniform(unsigned long long seed,
    unsigned long long stream, unsigned long long index) {
  const unsigned long long block = index / 4;
  unsigned int c0 = (unsigned int)block, c1 = (unsigned int)(block >> 32);
  unsigned int c2 = (unsigned int)stream, c3 = 0u;
  unsigned int k0 = (unsigned int)seed, k1 = (unsigned int)(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    const unsigned long long p0 = 0xD2511F53ull * c0, p1 = 0xCD9E8D57ull * c2;
    const unsigned int n0 = (unsigned int)(p1 >> 32) ^ c1 ^ k0, n1 = (unsigned int)p1;
    const unsigned int n2 = (unsigned int)(p0 >> 32) ^ c3 ^ k1, n3 = (unsigned int)p0;
    c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  const unsigned int word = index % 4 == 0 ? c0 : index % 4 == 1 ? c1 : index % 4 == 2 ? c2 : c3;
  return (float)(word >> 8) * (1.0f / 16777216.0f);
}

// QLoRA's NormalFloat4 code values.
__device__ const float kiln_nf4_values[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f,
    -0.28444138169288635f, -0.18477343022823334f, -0.09105003625154495f, 0.0f,
    0.07958029955625534f, 0.16093020141124725f, 0.24611230194568634f, 0.33791524171829224f,
    0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f};
// The nearest code (ties to the lower), midpoints in fp32 as on the host.
__device__ __forceinline__ unsigned int kiln_nf4_encode(float x) {
  unsigned int code = 0;
  for (unsigned int c = 1; c < 16; ++c)
    if (x > (kiln_nf4_values[c - 1] + kiln_nf4_values[c]) * 0.5f)
      code = c;
  return code;
}
)CUDA";

constexpr const char *kBf16Prelude = R"CUDA(#include <cuda_bf16.h>
__device__ __forceinline__ void kiln_atomic_add(__nv_bfloat16 *p, float v) { atomicAdd(p, __float2bfloat16(v)); }
)CUDA";

constexpr const char *kF16Prelude = R"CUDA(#include <cuda_fp16.h>
__device__ __forceinline__ void kiln_atomic_add(__half *p, float v) { atomicAdd(p, __float2half(v)); }
)CUDA";

RankedTensorType typeOf(Value v) { return cast<RankedTensorType>(v.getType()); }

bool isNarrowFloat(Type t) { return t.isBF16() || t.isF16(); }

/// bf16/f16 values are computed in float but must hold what the graph's type
/// holds, as the interpreter's values do: every bf16/f16 result inside a
/// fused kernel is rounded to its type, so fusion changes where values live,
/// never what they are. Loads are exact already.
/// Whether `expr` is exactly one call `fn(...)` (a load that widens).
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
  if (t.isBF16() && !isSingleCall(expr, "__bfloat162float("))
    return "__bfloat162float(__float2bfloat16(" + expr + "))";
  if (t.isF16() && !isSingleCall(expr, "__half2float("))
    return "__half2float(__float2half(" + expr + "))";
  return expr;
}

/// The C type values are computed in: bf16/f16 widen to float.
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
  case 8:
    return isUnsigned ? "unsigned char" : "signed char";
  case 16:
    return isUnsigned ? "unsigned short" : "short";
  case 32:
    return isUnsigned ? "unsigned int" : "int";
  default:
    return isUnsigned ? "unsigned long long" : "int64_t";
  }
}

struct Printer {
  const KernelPlan &plan;
  const NameTable &names;
  std::string body;
  std::string constants; // literal tables at the top of the kernel
  unsigned indent = 1;
  unsigned counter = 0;
  /// Computed elements, one map per open C scope: (value, index) -> name.
  std::vector<std::map<std::pair<void *, std::string>, std::string>> scopes{1};
  llvm::DenseMap<Value, std::string> literalTables;
  LogicalResult status = success();

  Printer(const KernelPlan &plan, const NameTable &names) : plan(plan), names(names) {}

  std::string fresh(StringRef prefix) { return (prefix + Twine(counter++)).str(); }
  void line(const Twine &text) {
    body.append(indent * 2, ' ');
    body += text.str();
    body += '\n';
  }
  void open(const Twine &header) {
    line(header + " {");
    ++indent;
    scopes.emplace_back();
  }
  void close(StringRef tail = "}") {
    --indent;
    scopes.pop_back();
    line(tail);
  }
  std::string key(ArrayRef<std::string> idx) { return llvm::join(idx, ","); }
  void remember(Value v, ArrayRef<std::string> idx, std::string name) {
    scopes.back()[{v.getAsOpaquePointer(), key(idx)}] = std::move(name);
  }
  const std::string *recall(Value v, ArrayRef<std::string> idx) {
    auto k = std::make_pair(v.getAsOpaquePointer(), key(idx));
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it)
      if (auto found = it->find(k); found != it->end())
        return &found->second;
    return nullptr;
  }
  void fail(Operation *op, const Twine &message) {
    if (succeeded(status))
      op->emitOpError(message);
    status = failure();
  }

  //===--------------------------------------------------------------------===//
  // Sizes and indices
  //===--------------------------------------------------------------------===//

  std::string dim(Dim d) {
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
  SmallVector<std::string> dims(Value v) {
    SmallVector<std::string> out;
    for (Dim d : getDims(typeOf(v)))
      out.push_back(dim(d));
    return out;
  }
  std::string numel(Value v) {
    return dim(dimProduct(getDims(typeOf(v)), v.getContext()));
  }
  /// Records that `idx` in a tensor of `sizes` is flat offset `flat`, so
  /// reshapes between shapes of one element count land on the same names
  /// (and on the elements already computed under them).
  void relate(const std::string &flat, ArrayRef<std::string> idx, ArrayRef<std::string> sizes) {
    std::string shape = llvm::join(sizes, ",");
    scopes.back()[{nullptr, "L|" + key(idx) + "|" + shape}] = flat;
    scopes.back()[{nullptr, "D|" + flat + "|" + shape}] = key(idx);
  }
  const std::string *related(StringRef kind, const std::string &what, ArrayRef<std::string> sizes) {
    auto k = std::make_pair((void *)nullptr, (kind + "|" + what + "|" + llvm::join(sizes, ",")).str());
    for (auto it = scopes.rbegin(); it != scopes.rend(); ++it)
      if (auto found = it->find(k); found != it->end())
        return &found->second;
    return nullptr;
  }
  /// Row-major offset of idx in a tensor with these dims.
  std::string linear(ArrayRef<std::string> idx, ArrayRef<std::string> sizes) {
    if (idx.empty())
      return "0";
    if (const std::string *flat = related("L", key(idx), sizes))
      return *flat;
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
  /// Splits a flat offset into indices (prints the divisions once).
  Index delinearize(const std::string &flat, ArrayRef<std::string> sizes) {
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
    std::string rest = fresh("r");
    line("int64_t " + rest + " = " + flat + ";");
    for (int64_t i = sizes.size() - 1; i >= 0; --i) {
      std::string name = fresh("ix");
      if (i == 0) {
        line("const int64_t " + name + " = " + rest + ";");
      } else {
        line("const int64_t " + name + " = " + rest + " % " + sizes[i] + ";");
        line(rest + " /= " + sizes[i] + ";");
      }
      idx[i] = name;
    }
    relate(flat, idx, sizes);
    return idx;
  }
  /// Numpy broadcasting: the index of `operand` when read at `idx` of a
  /// result of rank idx.size().
  Index broadcastIndex(Value operand, ArrayRef<std::string> idx) {
    RankedTensorType type = typeOf(operand);
    int64_t offset = idx.size() - type.getRank();
    Index out;
    for (int64_t i = 0; i < type.getRank(); ++i)
      out.push_back(type.getDimSize(i) == 1 ? "0" : idx[offset + i]);
    return out;
  }

  //===--------------------------------------------------------------------===//
  // Loads, stores, conversions
  //===--------------------------------------------------------------------===//

  /// Set while printing the lane loop of a vectorized loop kernel: loads
  /// at `flat` read the 16-byte chunk loaded before the loop.
  bool vectorLanes = false;
  llvm::SetVector<Value> vectorInputs;

  std::string load(Value arg, const std::string &offset) {
    Type element = typeOf(arg).getElementType();
    std::string ptr = names.params.lookup(arg) + "[" + offset + "]";
    if (vectorLanes && offset == "flat") {
      vectorInputs.insert(arg);
      ptr = names.params.lookup(arg) + "_v[lane]";
    }
    if (element.isBF16())
      return "__bfloat162float(" + ptr + ")";
    if (element.isF16())
      return "__half2float(" + ptr + ")";
    std::string c = computeType(element);
    return storageType(element) == c ? ptr : "(" + c + ")" + ptr;
  }
  std::string store(Type element, const std::string &value) {
    if (element.isBF16())
      return "__float2bfloat16(" + value + ")";
    if (element.isF16())
      return "__float2half(" + value + ")";
    return "(" + storageType(element) + ")(" + value + ")";
  }
  std::string convert(const std::string &value, Type from, Type to) {
    std::string cf = computeType(from), ct = computeType(to);
    if (to.isInteger(1))
      return "(" + value + " != 0)";
    if (cf == ct)
      return value;
    return "(" + ct + ")(" + value + ")";
  }
  std::string literal(double v, Type element) {
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
  std::string fn(StringRef name, Type element) {
    return computeType(element) == "double" ? name.str() : (name + "f").str();
  }

  /// Binds `name` as element idx of v (row outputs computed by a template).
  void bind(Value v, ArrayRef<std::string> idx, const std::string &name) { remember(v, idx, name); }

  /// Prints `T name = expr;` and remembers it.
  std::string let(Value v, ArrayRef<std::string> idx, const std::string &expr) {
    std::string name = fresh("v");
    line("const " + computeType(typeOf(v).getElementType()) + " " + name + " = " +
         roundedToStorage(typeOf(v).getElementType(), expr) + ";");
    remember(v, idx, name);
    return name;
  }

  //===--------------------------------------------------------------------===//
  // Element of a value at an index
  //===--------------------------------------------------------------------===//

  std::string value(Value v, ArrayRef<std::string> idx) {
    if (const std::string *known = recall(v, idx))
      return *known;
    if (auto arg = dyn_cast<BlockArgument>(v))
      return let(v, idx, load(arg, linear(idx, dims(v))));
    Operation *op = v.getDefiningOp();
    Type element = typeOf(v).getElementType();
    std::string c = computeType(element);
    auto operandAt = [&](unsigned i) { return value(op->getOperand(i), broadcastIndex(op->getOperand(i), idx)); };
    auto binary = [&](StringRef infix) {
      std::string a = operandAt(0), b = operandAt(1);
      return let(v, idx, "(" + a + " " + infix.str() + " " + b + ")");
    };
    auto unary = [&](auto make) { return let(v, idx, make(operandAt(0))); };
    Type inElement = op->getNumOperands() ? typeOf(op->getOperand(0)).getElementType() : element;
    return llvm::TypeSwitch<Operation *, std::string>(op)
        .Case<kiln::ConstantOp>([&](kiln::ConstantOp k) { return constant(k, idx); })
        .Case<AddOp>([&](auto) { return binary("+"); })
        .Case<SubOp>([&](auto) { return binary("-"); })
        .Case<MulOp>([&](auto) { return binary("*"); })
        .Case<DivOp>([&](auto) { return binary("/"); })
        .Case<EqOp>([&](auto) { return binary("=="); })
        .Case<NeOp>([&](auto) { return binary("!="); })
        .Case<LtOp>([&](auto) { return binary("<"); })
        .Case<LeOp>([&](auto) { return binary("<="); })
        .Case<GtOp>([&](auto) { return binary(">"); })
        .Case<GeOp>([&](auto) { return binary(">="); })
        .Case<AndOp>([&](auto) { return binary("&&"); })
        .Case<OrOp>([&](auto) { return binary("||"); })
        .Case<XorOp>([&](auto) { return binary("!="); })
        .Case<MaxOp, MinOp>([&](Operation *m) {
          std::string a = operandAt(0), b = operandAt(1);
          const char *cmp = isa<MaxOp>(m) ? " > " : " < ";
          return let(v, idx, "(" + a + cmp + b + " ? " + a + " : " + b + ")");
        })
        .Case<PowOp>([&](auto) {
          std::string a = operandAt(0), b = operandAt(1);
          if (c == "int64_t")
            return let(v, idx, "(int64_t)pow((double)" + a + ", (double)" + b + ")");
          return let(v, idx, fn("pow", element) + "(" + a + ", " + b + ")");
        })
        .Case<NegOp>([&](auto) { return unary([&](std::string x) { return "(-" + x + ")"; }); })
        .Case<AbsOp>([&](auto) {
          return unary([&](std::string x) { return "(" + x + " < 0 ? -" + x + " : " + x + ")"; });
        })
        .Case<ExpOp>([&](auto) { return unary([&](std::string x) { return fn("exp", element) + "(" + x + ")"; }); })
        .Case<LogOp>([&](auto) { return unary([&](std::string x) { return fn("log", element) + "(" + x + ")"; }); })
        .Case<SqrtOp>([&](auto) { return unary([&](std::string x) { return fn("sqrt", element) + "(" + x + ")"; }); })
        .Case<RsqrtOp>([&](auto) { return unary([&](std::string x) { return fn("rsqrt", element) + "(" + x + ")"; }); })
        .Case<TanhOp>([&](auto) { return unary([&](std::string x) { return fn("tanh", element) + "(" + x + ")"; }); })
        .Case<ErfOp>([&](auto) { return unary([&](std::string x) { return fn("erf", element) + "(" + x + ")"; }); })
        .Case<SinOp>([&](auto) { return unary([&](std::string x) { return fn("sin", element) + "(" + x + ")"; }); })
        .Case<CosOp>([&](auto) { return unary([&](std::string x) { return fn("cos", element) + "(" + x + ")"; }); })
        .Case<ReciprocalOp>([&](auto) { return unary([&](std::string x) { return "(" + literal(1, element) + " / " + x + ")"; }); })
        .Case<SigmoidOp>([&](auto) {
          return unary([&](std::string x) { return "(" + literal(1, element) + " / (" + literal(1, element) + " + " + fn("exp", element) + "(-" + x + ")))"; });
        })
        .Case<SiluOp>([&](auto) {
          return unary([&](std::string x) { return "(" + x + " / (" + literal(1, element) + " + " + fn("exp", element) + "(-" + x + ")))"; });
        })
        .Case<ReluOp>([&](auto) {
          return unary([&](std::string x) { return "(" + x + " > 0 ? " + x + " : " + literal(0, element) + ")"; });
        })
        .Case<GeluOp>([&](GeluOp g) {
          return unary([&](std::string x) {
            if (g.getApproximate() == GeluApproximation::tanh)
              return "(0.5f * " + x + " * (1.0f + tanhf(0.7978845608f * (" + x + " + 0.044715f * " + x + " * " + x + " * " + x + "))))";
            return "(0.5f * " + x + " * (1.0f + erff(" + x + " * 0.7071067812f)))";
          });
        })
        .Case<NotOp>([&](auto) { return unary([&](std::string x) { return "(!" + x + ")"; }); })
        .Case<IsNanOp>([&](auto) { return unary([&](std::string x) { return "isnan(" + x + ")"; }); })
        .Case<IsInfOp>([&](IsInfOp inf) {
          return unary([&](std::string x) {
            if (inf.getDetectPositive() && inf.getDetectNegative())
              return "isinf(" + x + ")";
            if (inf.getDetectPositive())
              return "(isinf(" + x + ") && " + x + " > 0)";
            if (inf.getDetectNegative())
              return "(isinf(" + x + ") && " + x + " < 0)";
            return std::string("false");
          });
        })
        .Case<StopGradientOp>([&](auto) { return operandAt(0); })
        .Case<CastOp>([&](auto) {
          std::string x = operandAt(0), converted = convert(x, inElement, element);
          // Widening bf16/f16 to f32 is exact: nothing to compute. Narrowing
          // goes through let(), which rounds to the narrow type.
          if (converted == x && !isNarrowFloat(element)) {
            remember(v, idx, x);
            return x;
          }
          return let(v, idx, converted);
        })
        .Case<SelectOp>([&](auto) {
          std::string p = operandAt(0), a = operandAt(1), b = operandAt(2);
          return let(v, idx, "(" + p + " ? " + a + " : " + b + ")");
        })
        .Case<ExpandOp>([&](auto) { return operandAt(0); })
        .Case<TransposeOp>([&](TransposeOp t) {
          Index in(idx.size());
          for (auto [i, p] : llvm::enumerate(t.getPerm()))
            in[p] = idx[i];
          return value(t.getInput(), in);
        })
        .Case<ReshapeOp>([&](ReshapeOp r) {
          std::string flat = linear(idx, dims(v));
          // Row-major data: an input is read at the same flat offset.
          if (auto arg = dyn_cast<BlockArgument>(r.getInput()); arg && !related("D", flat, dims(arg)))
            return let(v, idx, load(arg, flat));
          return value(r.getInput(), delinearize(flat, dims(r.getInput())));
        })
        .Case<SqueezeOp>([&](SqueezeOp s) {
          Index in;
          size_t next = 0;
          int64_t rank = typeOf(s.getInput()).getRank();
          for (int64_t i = 0; i < rank; ++i) {
            bool squeezed = llvm::any_of(s.getAxes(), [&](int64_t a) { return (a < 0 ? a + rank : a) == i; });
            in.push_back(squeezed ? "0" : idx[next++]);
          }
          return value(s.getInput(), in);
        })
        .Case<UnsqueezeOp>([&](UnsqueezeOp u) {
          Index in;
          int64_t rank = idx.size();
          for (int64_t i = 0; i < rank; ++i)
            if (!llvm::any_of(u.getAxes(), [&](int64_t a) { return (a < 0 ? a + rank : a) == i; }))
              in.push_back(idx[i]);
          return value(u.getInput(), in);
        })
        .Case<SliceOp>([&](SliceOp s) {
          Index in;
          for (auto [i, start] : llvm::enumerate(s.getStarts().getDims())) {
            int64_t step = s.getSteps()[i];
            std::string scaled = step == 1 ? idx[i] : idx[i] + " * " + std::to_string(step);
            std::string st = dim(start);
            in.push_back(st == "0" ? scaled : "(" + st + " + " + scaled + ")");
          }
          return value(s.getInput(), in);
        })
        .Case<IotaOp>([&](IotaOp i) { return let(v, idx, "(" + c + ")" + idx[i.getDim()]); })
        .Case<TriluOp>([&](TriluOp t) {
          int64_t r = idx.size();
          std::string diff = "(" + idx[r - 1] + " - " + idx[r - 2] + ")";
          std::string keep = diff + (t.getUpper() ? " >= " : " <= ") + std::to_string(t.getDiagonal());
          std::string x = value(t.getInput(), idx);
          return let(v, idx, "(" + keep + " ? " + x + " : " + literal(0, element) + ")");
        })
        .Case<ConcatOp>([&](ConcatOp cat) { return concat(cat, idx); })
        .Case<PadOp>([&](PadOp p) { return pad(p, idx); })
        .Case<GatherOp>([&](GatherOp g) { return gather(g, idx); })
        .Case<GatherElementsOp>([&](GatherElementsOp g) {
          int64_t axis = g.getAxis() < 0 ? g.getAxis() + idx.size() : g.getAxis();
          std::string at = wrapIndex(value(g.getIndices(), idx), dims(g.getData())[axis]);
          Index in(idx.begin(), idx.end());
          in[axis] = at;
          return value(g.getData(), in);
        })
        .Case<GatherNdOp>([&](GatherNdOp g) { return gatherNd(g, idx); })
        .Case<ReduceSumOp, ReduceMeanOp, ReduceMaxOp>([&](Operation *r) { return reduce(r, idx); })
        .Case<DropoutOp>([&](DropoutOp d) {
          // Drawn by the element's flat offset: recomputed, never stored.
          float p = static_cast<float>(d.getP().convertToDouble());
          float scale = 1.0f / (1.0f - p);
          std::string seed = value(d.getSeed(), {});
          std::string x = value(d.getInput(), idx);
          std::string u = "kiln_philox_uniform(" + seed + ", " + std::to_string(d.getStream()) +
                          "ull, " + linear(idx, dims(v)) + ")";
          return let(v, idx, "(" + u + " >= " + literal(p, Float32Type::get(d.getContext())) +
                                 " ? (float)" + x + " * " +
                                 literal(scale, Float32Type::get(d.getContext())) + " : 0.f)");
        })
        .Case<RandomUniformOp>([&](RandomUniformOp r) {
          float low = static_cast<float>(r.getLow().convertToDouble());
          float width = static_cast<float>(r.getHigh().convertToDouble()) - low;
          std::string seed = value(r.getSeed(), {});
          Type f32 = Float32Type::get(r.getContext());
          return let(v, idx, literal(low, f32) + " + " + literal(width, f32) +
                                 " * kiln_philox_uniform(" + seed + ", " +
                                 std::to_string(r.getStream()) + "ull, " +
                                 linear(idx, dims(v)) + ")");
        })
        .Case<DequantizeBlockwise8bitOp>([&](DequantizeBlockwise8bitOp q) {
          std::string i = fresh("q");
          line("const int64_t " + i + " = " + idx[0] + ";");
          std::string code = value(q.getCodes(), {i});
          std::string absmax = value(q.getAbsmax(), {i + " / " + std::to_string(q.getBlockSize())});
          return let(v, idx, "kiln_dynamic_map8[" + code + " & 255] * (float)" + absmax);
        })
        .Case<Nf4DequantizeOp>([&](Nf4DequantizeOp q) {
          std::string flat = linear(idx, dims(v));
          std::string i = fresh("q");
          line("const int64_t " + i + " = " + flat + ";");
          std::string byte = value(q.getCodes(), {i + " / 2"});
          std::string absmax = value(q.getAbsmax(), {i + " / " + std::to_string(q.getBlockSize())});
          return let(v, idx, "kiln_nf4_values[(" + i + " % 2 == 0 ? " + byte + " >> 4 : " + byte +
                                 ") & 15] * (float)" + absmax);
        })
        .Default([&](Operation *other) {
          fail(other, "has no CUDA element emitter");
          return std::string("0");
        });
  }

  std::string constant(kiln::ConstantOp k, ArrayRef<std::string> idx) {
    auto elements = cast<DenseElementsAttr>(k.getValue());
    Type element = elements.getElementType();
    auto at = [&](int64_t i) -> double {
      if (isa<FloatType>(element))
        return (*(elements.getValues<APFloat>().begin() + i)).convertToDouble();
      APInt v = *(elements.getValues<APInt>().begin() + i);
      return element.isInteger(1) ? (double)v.getBoolValue() : (double)v.getSExtValue();
    };
    if (elements.isSplat())
      return literal(at(0), element);
    std::string &table = literalTables[k.getResult()];
    if (table.empty()) {
      table = fresh("lit");
      SmallVector<std::string> items;
      for (int64_t i = 0, e = elements.getNumElements(); i < e; ++i)
        items.push_back(literal(at(i), element));
      constants += "  const " + computeType(element) + " " + table + "[] = {" +
                   llvm::join(items, ", ") + "};\n";
    }
    return table + "[" + linear(idx, dims(k.getResult())) + "]";
  }

  std::string wrapIndex(const std::string &i, const std::string &size) {
    return "(" + i + " < 0 ? " + i + " + " + size + " : " + i + ")";
  }

  std::string concat(ConcatOp cat, ArrayRef<std::string> idx) {
    int64_t axis = cat.getAxis() < 0 ? cat.getAxis() + idx.size() : cat.getAxis();
    Type element = typeOf(cat.getResult()).getElementType();
    // A literal index picks its input while printing.
    int64_t literalIndex;
    if (!StringRef(idx[axis]).getAsInteger(10, literalIndex)) {
      int64_t offset = 0;
      for (Value input : cat.getInputs()) {
        std::optional<int64_t> size = getDim(typeOf(input), axis).getConstantValue();
        if (!size)
          break;
        if (literalIndex < offset + *size) {
          Index in(idx.begin(), idx.end());
          in[axis] = std::to_string(literalIndex - offset);
          return value(input, in);
        }
        offset += *size;
      }
    }
    std::string out = fresh("v");
    line(computeType(element) + " " + out + ";");
    Dim offset = dimConst(cat.getContext(), 0);
    unsigned n = cat.getInputs().size();
    for (unsigned i = 0; i < n; ++i) {
      Value input = cat.getInputs()[i];
      Dim next = dimAdd(offset, getDim(typeOf(input), axis));
      std::string cond = idx[axis] + " < " + dim(next);
      open(i == 0 ? "if (" + cond + ")" : i + 1 == n ? std::string("else") : "else if (" + cond + ")");
      Index in(idx.begin(), idx.end());
      std::string off = dim(offset);
      if (off != "0")
        in[axis] = "(" + idx[axis] + " - " + off + ")";
      line(out + " = " + value(input, in) + ";");
      close();
      offset = next;
    }
    remember(cat.getResult(), idx, out);
    return out;
  }

  std::string pad(PadOp p, ArrayRef<std::string> idx) {
    Type element = typeOf(p.getResult()).getElementType();
    std::string out = fresh("v");
    line(computeType(element) + " " + out + " = " + literal(p.getValue().convertToDouble(), element) + ";");
    int64_t rank = idx.size();
    Index in;
    SmallVector<std::string> conds;
    SmallVector<std::string> sizes = dims(p.getInput());
    for (int64_t i = 0; i < rank; ++i) {
      int64_t low = p.getPads()[i];
      std::string j = low == 0 ? idx[i] : "(" + idx[i] + " - " + std::to_string(low) + ")";
      in.push_back(j);
      if (low != 0)
        conds.push_back(j + " >= 0");
      if (low != 0 || p.getPads()[rank + i] != 0)
        conds.push_back(j + " < " + sizes[i]);
    }
    open("if (" + (conds.empty() ? std::string("true") : llvm::join(conds, " && ")) + ")");
    line(out + " = " + value(p.getInput(), in) + ";");
    close();
    remember(p.getResult(), idx, out);
    return out;
  }

  std::string gather(GatherOp g, ArrayRef<std::string> idx) {
    int64_t dataRank = typeOf(g.getData()).getRank();
    int64_t axis = g.getAxis() < 0 ? g.getAxis() + dataRank : g.getAxis();
    int64_t indexRank = typeOf(g.getIndices()).getRank();
    Index at(idx.begin() + axis, idx.begin() + axis + indexRank);
    std::string i = wrapIndex(value(g.getIndices(), at), dims(g.getData())[axis]);
    Index in(idx.begin(), idx.begin() + axis);
    in.push_back(i);
    in.append(idx.begin() + axis + indexRank, idx.end());
    return value(g.getData(), in);
  }

  std::string gatherNd(GatherNdOp g, ArrayRef<std::string> idx) {
    RankedTensorType indices = typeOf(g.getIndices());
    int64_t b = g.getBatchDims(), q = indices.getRank() - 1;
    int64_t depth = indices.getDimSize(q);
    SmallVector<std::string> dataDims = dims(g.getData());
    Index in(idx.begin(), idx.begin() + b);
    for (int64_t k = 0; k < depth; ++k) {
      Index at(idx.begin(), idx.begin() + q);
      at.push_back(std::to_string(k));
      in.push_back(wrapIndex(value(g.getIndices(), at), dataDims[b + k]));
    }
    in.append(idx.begin() + q, idx.end());
    return value(g.getData(), in);
  }

  std::string reduce(Operation *r, ArrayRef<std::string> idx) {
    Value input = r->getOperand(0);
    ArrayRef<int64_t> axes = r->getAttrOfType<DenseI64ArrayAttr>("axes").asArrayRef();
    bool keepdim = r->hasAttr("keepdim");
    int64_t rank = typeOf(input).getRank();
    SmallVector<std::string> sizes = dims(input);
    Type element = typeOf(r->getResult(0)).getElementType();
    std::string c = computeType(element);
    bool isMax = isa<ReduceMaxOp>(r);
    std::string acc = fresh("acc");
    line(c + " " + acc + " = " + (isMax ? literal(-INFINITY, element) : literal(0, element)) + ";");
    Index in;
    size_t next = 0;
    unsigned opened = 0;
    std::string count = "1";
    for (int64_t i = 0; i < rank; ++i) {
      bool reduced = llvm::any_of(axes, [&](int64_t a) { return (a < 0 ? a + rank : a) == i; });
      if (!reduced) {
        in.push_back(idx[next++]);
        continue;
      }
      if (keepdim)
        ++next;
      std::string loopVar = fresh("k");
      open("for (int64_t " + loopVar + " = 0; " + loopVar + " < " + sizes[i] + "; ++" + loopVar + ")");
      ++opened;
      in.push_back(loopVar);
      count += " * " + sizes[i];
    }
    std::string x = value(input, in);
    line(isMax ? acc + " = " + x + " > " + acc + " ? " + x + " : " + acc + ";" : acc + " += " + x + ";");
    while (opened--)
      close();
    if (isa<ReduceMeanOp>(r))
      line(acc + " /= (" + c + ")(" + count + ");");
    // The sum is a value of the result's type: a bf16 reduction rounds once
    // here, as the interpreter does (its users must not see the fp32 sum).
    return let(r->getResult(0), idx, acc);
  }

  //===--------------------------------------------------------------------===//
  // Kernel templates
  //===--------------------------------------------------------------------===//

  int outputIndex(Value v) {
    for (auto [i, out] : llvm::enumerate(plan.outputs))
      if (out == v)
        return i;
    return -1;
  }
  /// The output an atomically accumulated value adds into: the value itself,
  /// or its fp32 widening (kiln-lower-to-step accumulates bf16/f16 results
  /// in fp32 and converts afterwards).
  int accumulatorIndex(Value v) {
    for (auto [i, out] : llvm::enumerate(plan.outputs)) {
      if (out == v)
        return i;
      if (auto cast = out.getDefiningOp<kiln::CastOp>(); cast && cast.getInput() == v)
        return i;
    }
    return -1;
  }
  bool isAccumulator(unsigned i) {
    return outputInit(plan.outputs[i]) == OutputInit::Zero;
  }
  std::string outName(unsigned i) { return "out" + std::to_string(i); }
  Type elementOf(Value v) { return typeOf(v).getElementType(); }

  /// Stores every output whose element count is `space` at flat offset
  /// `flat` (idx is the index of `shaped` at that offset).
  void storeOutputs(const std::string &flat, Value shaped, ArrayRef<std::string> idx,
                    Dim space, llvm::function_ref<bool(unsigned)> skip = nullptr) {
    for (auto [i, out] : llvm::enumerate(plan.outputs)) {
      if ((skip && skip(i)) || dimProduct(getDims(typeOf(out)), out.getContext()) != space)
        continue;
      Index at = typeOf(out).getShape() == typeOf(shaped).getShape() &&
                         getDims(typeOf(out)) == getDims(typeOf(shaped))
                     ? Index(idx.begin(), idx.end())
                     : delinearize(flat, dims(out));
      std::string target = vectorLanes ? outName(i) + "_v[lane]" : outName(i) + "[" + flat + "]";
      line(target + " = " + store(elementOf(out), value(out, at)) + ";");
    }
  }

  void loopKernel() {
    SmallVector<Dim> segments = loopSegments(plan.kernel.getBody().front());
    MLIRContext *ctx = plan.kernel.getContext();
    auto firstOf = [&](Dim segment) {
      for (Value out : plan.outputs)
        if (dimProduct(getDims(typeOf(out)), ctx) == segment)
          return out;
      return plan.outputs.front();
    };
    if (int64_t width = loopVectorWidth(plan.kernel.getBody().front()); width > 1)
      return vectorLoopKernel(width, segments.front());
    if (segments.size() == 1) {
      Value first = plan.outputs.front();
      line("const int64_t n = " + dim(segments.front()) + ";");
      open("for (int64_t flat = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; flat < n; "
           "flat += (int64_t)gridDim.x * blockDim.x)");
      Index idx = delinearize("flat", dims(first));
      storeOutputs("flat", first, idx, segments.front());
      close();
      return;
    }
    // Multi-tensor: one launch walks the segments back to back.
    Dim total = dimConst(ctx, 0);
    for (Dim segment : segments)
      total = dimAdd(total, segment);
    line("// " + std::to_string(segments.size()) + " segments, one per distinct element count");
    line("const int64_t n = " + dim(total) + ";");
    open("for (int64_t g = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; g < n; "
         "g += (int64_t)gridDim.x * blockDim.x)");
    Dim start = dimConst(ctx, 0);
    for (auto [i, segment] : llvm::enumerate(segments)) {
      Dim end = dimAdd(start, segment);
      std::string cond = "g < " + dim(end);
      open(i == 0 ? "if (" + cond + ")"
           : i + 1 == segments.size() ? std::string("else")
                                      : "else if (" + cond + ")");
      std::string offset = dim(start);
      line("const int64_t flat = " + (offset == "0" ? std::string("g") : "g - " + offset) + ";");
      Value first = firstOf(segment);
      Index idx = delinearize("flat", dims(first));
      storeOutputs("flat", first, idx, segment);
      close();
      start = end;
    }
    close();
  }

  /// `width` consecutive elements per thread: inputs read at the element's
  /// own offset and all outputs move as one 16-byte (or narrower) access;
  /// the lane loop is unrolled by the compiler.
  void vectorLoopKernel(int64_t width, Dim segment) {
    Value first = plan.outputs.front();
    std::string w = std::to_string(width);
    line("// " + w + " elements per thread, moved with vector accesses");
    line("const int64_t n = " + dim(dimDivExact(segment, width)) + ";");
    open("for (int64_t chunk = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; chunk < n; "
         "chunk += (int64_t)gridDim.x * blockDim.x)");
    // When the innermost dim is a multiple of the width, the lanes share
    // every index but the last: divide once per chunk, not once per lane
    // (64-bit division by a symbolic size costs more than the lane's math).
    SmallVector<std::string> firstDims = dims(first);
    std::optional<Index> chunkIndex;
    if (firstDims.size() >= 2) {
      int64_t inner = typeOf(first).getShape().back();
      if (!ShapedType::isDynamic(inner) && inner % width == 0) {
        line("const int64_t base = chunk * " + w + ";");
        chunkIndex = delinearize("base", firstDims);
      }
    }
    // Print the lane body first: it tells which inputs are read at `flat`.
    std::string outer = std::move(body);
    body.clear();
    vectorLanes = true;
    line("#pragma unroll");
    open("for (int lane = 0; lane < " + w + "; ++lane)");
    line("const int64_t flat = chunk * " + w + " + lane;");
    Index idx;
    if (chunkIndex) {
      idx = *chunkIndex;
      idx.back() = "(" + idx.back() + " + lane)";
      relate("flat", idx, firstDims);
    } else {
      idx = delinearize("flat", firstDims);
    }
    storeOutputs("flat", first, idx, segment);
    close();
    vectorLanes = false;
    std::string lanes = std::move(body);
    body = std::move(outer);
    auto vectorType = [&](Value v) {
      unsigned bits = typeOf(v).getElementType().getIntOrFloatBitWidth();
      int64_t bytes = (bits < 8 ? 1 : bits / 8) * width;
      return bytes == 16 ? "uint4" : bytes == 8 ? "uint2" : bytes == 4 ? "unsigned int"
                                                                       : "unsigned short";
    };
    for (Value arg : vectorInputs) {
      std::string name = names.params.lookup(arg), type = storageType(typeOf(arg).getElementType());
      line("__align__(16) " + type + " " + name + "_v[" + w + "];");
      line("*reinterpret_cast<" + std::string(vectorType(arg)) + " *>(" + name + "_v) = "
           "reinterpret_cast<const " + vectorType(arg) + " *>(" + name + ")[chunk];");
    }
    for (auto [i, out] : llvm::enumerate(plan.outputs))
      line("__align__(16) " + storageType(typeOf(out).getElementType()) + " " + outName(i) + "_v[" +
           w + "];");
    body += lanes;
    for (auto [i, out] : llvm::enumerate(plan.outputs))
      line("reinterpret_cast<" + std::string(vectorType(out)) + " *>(" + outName(i) + ")[chunk] = "
           "*reinterpret_cast<const " + vectorType(out) + " *>(" + outName(i) + "_v);");
    close();
  }

  /// Loops over the columns of the current row; `each` prints the body with
  /// the input index of this column.
  void forCols(const Index &lead, ArrayRef<std::string> trail,
               llvm::function_ref<void(const Index &)> each) {
    open("for (int64_t col = threadIdx.x; col < cols; col += blockDim.x)");
    Index idx(lead.begin(), lead.end());
    Index t = delinearize("col", trail);
    idx.append(t.begin(), t.end());
    each(idx);
    close();
  }
  std::string blockSum(const std::string &v) { return "kiln_block_reduce(" + v + ", red, false)"; }

  void rowKernel() {
    Operation *anchor = plan.anchor;
    Value x = anchor->getOperand(0);
    int64_t axis = rowAxis(anchor);
    SmallVector<std::string> sizes = dims(x);
    ArrayRef<std::string> leadDims = ArrayRef<std::string>(sizes).take_front(axis);
    ArrayRef<std::string> trail = ArrayRef<std::string>(sizes).drop_front(axis);
    DimList all = getDims(typeOf(x));
    MLIRContext *ctx = x.getContext();
    Dim rowsDim = dimProduct(ArrayRef<Dim>(all).take_front(axis), ctx);
    Dim colsDim = dimProduct(ArrayRef<Dim>(all).drop_front(axis), ctx);
    Dim space = dimMul(rowsDim, colsDim);
    line("__shared__ float red[33];");
    line("const int64_t rows = " + dim(rowsDim) + ";");
    line("const int64_t cols = " + dim(colsDim) + ";");
    // Cross entropy's mean divides by the rows whose label is counted.
    auto ce = dyn_cast<CrossEntropyOp>(anchor);
    CrossEntropyGradOp ceGrad;
    for (Operation &op : plan.kernel.getBody().front())
      if (auto g = dyn_cast<CrossEntropyGradOp>(op))
        ceGrad = g;
    if (!ce && ceGrad)
      anchor = ceGrad;
    if (ce || ceGrad) {
      Value labels = anchor->getOperand(1);
      int64_t ignore = ce ? ce.getIgnoreIndex() : ceGrad.getIgnoreIndex();
      line("float counted = 0.f;");
      open("for (int64_t j = threadIdx.x; j < rows; j += blockDim.x)");
      line("counted += " + value(labels, {"j"}) + " != " + std::to_string(ignore) + " ? 1.f : 0.f;");
      close();
      line("counted = " + blockSum("counted") + ";");
    }
    open("for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)");
    Index lead = delinearize("row", leadDims);
    auto flatOf = [&]() { return std::string("row * cols + col"); };
    auto finalLoop = [&](Value bound, llvm::function_ref<std::string(const Index &)> compute,
                         llvm::function_ref<bool(unsigned)> skip = nullptr) {
      forCols(lead, trail, [&](const Index &idx) {
        line("const int64_t flat = " + flatOf() + ";");
        relate("flat", idx, sizes);
        bind(bound, idx, compute(idx));
        storeOutputs("flat", x, idx, space, skip);
      });
    };
    auto weightAt = [&](Value w, const Index &idx) {
      return value(w, Index(idx.begin() + axis, idx.end()));
    };
    auto accumulateTo = [&](Value result, const Index &idx, const std::string &v) {
      int i = accumulatorIndex(result);
      if (i < 0)
        return;
      SmallVector<std::string> wd = dims(result);
      line("kiln_atomic_add(&" + outName(i) + "[" +
           linear(Index(idx.begin() + axis, idx.end()), wd) + "], " + v + ");");
    };
    // Mean (and the centred second moment) over the row.
    auto meanOf = [&](llvm::function_ref<std::string(const Index &)> term, StringRef name) {
      line("float " + name.str() + " = 0.f;");
      forCols(lead, trail, [&](const Index &idx) { line(name.str() + " += " + term(idx) + ";"); });
      line(name.str() + " = " + blockSum(name.str()) + " / (float)cols;");
    };
    llvm::TypeSwitch<Operation *>(anchor)
        .Case<SoftmaxOp, LogSoftmaxOp, CrossEntropyOp, CrossEntropyGradOp>([&](Operation *op) {
          line("float mx = -KILN_INF;");
          forCols(lead, trail, [&](const Index &idx) {
            std::string v = value(x, idx);
            line("mx = fmaxf(mx, " + v + ");");
          });
          line("mx = kiln_block_reduce(mx, red, true);");
          line("if (mx == -KILN_INF) mx = 0.f; // a fully masked row");
          line("float se = 0.f;");
          forCols(lead, trail, [&](const Index &idx) { line("se += expf(" + value(x, idx) + " - mx);"); });
          line("se = " + blockSum("se") + ";");
          if (isa<SoftmaxOp>(op))
            return finalLoop(op->getResult(0), [&](const Index &idx) {
              return let(op->getResult(0), idx, "expf(" + value(x, idx) + " - mx) / se");
            });
          if (isa<LogSoftmaxOp>(op))
            return finalLoop(op->getResult(0), [&](const Index &idx) {
              return let(op->getResult(0), idx, value(x, idx) + " - mx - logf(se)");
            });
          crossEntropy(ce, ceGrad, lead, trail, space, x);
        })
        .Case<SoftmaxGradOp, LogSoftmaxGradOp>([&](Operation *op) {
          Value y = op->getOperand(0), dy = op->getOperand(1);
          bool log = isa<LogSoftmaxGradOp>(op);
          line("float s = 0.f;");
          forCols(lead, trail, [&](const Index &idx) {
            line("s += " + (log ? value(dy, idx) : value(dy, idx) + " * " + value(y, idx)) + ";");
          });
          line("s = " + blockSum("s") + ";");
          finalLoop(op->getResult(0), [&](const Index &idx) {
            std::string yv = value(y, idx), g = value(dy, idx);
            return let(op->getResult(0), idx,
                       log ? g + " - expf(" + yv + ") * s" : yv + " * (" + g + " - s)");
          });
        })
        .Case<LayerNormOp>([&](LayerNormOp ln) {
          meanOf([&](const Index &idx) { return value(x, idx); }, "mean");
          meanOf([&](const Index &idx) {
            std::string v = value(x, idx);
            return "(" + v + " - mean) * (" + v + " - mean)";
          }, "var");
          line("const float rstd = rsqrtf(var + " + literal(ln.getEpsilon().convertToDouble(), Float32Type::get(ctx)) + ");");
          finalLoop(ln.getResult(), [&](const Index &idx) {
            std::string e = "(" + value(x, idx) + " - mean) * rstd * " + weightAt(ln.getWeight(), idx);
            if (ln.getBias())
              e += " + " + weightAt(ln.getBias(), idx);
            return let(ln.getResult(), idx, e);
          });
        })
        .Case<RmsNormOp>([&](RmsNormOp rn) {
          meanOf([&](const Index &idx) { std::string v = value(x, idx); return v + " * " + v; }, "ms");
          line("const float rstd = rsqrtf(ms + " + literal(rn.getEpsilon().convertToDouble(), Float32Type::get(ctx)) + ");");
          finalLoop(rn.getResult(), [&](const Index &idx) {
            return let(rn.getResult(), idx, value(x, idx) + " * rstd * " + weightAt(rn.getWeight(), idx));
          });
        })
        .Case<LayerNormGradOp>([&](LayerNormGradOp g) {
          Value w = g.getWeight(), dy = g.getGrad();
          meanOf([&](const Index &idx) { return value(x, idx); }, "mean");
          meanOf([&](const Index &idx) {
            std::string v = value(x, idx);
            return "(" + v + " - mean) * (" + v + " - mean)";
          }, "var");
          line("const float rstd = rsqrtf(var + " + literal(g.getEpsilon().convertToDouble(), Float32Type::get(ctx)) + ");");
          meanOf([&](const Index &idx) { return value(dy, idx) + " * " + weightAt(w, idx); }, "mg");
          meanOf([&](const Index &idx) {
            return value(dy, idx) + " * " + weightAt(w, idx) + " * (" + value(x, idx) + " - mean) * rstd";
          }, "mgx");
          finalLoop(g.getInputGrad(), [&](const Index &idx) {
            std::string xhat = fresh("xhat");
            line("const float " + xhat + " = (" + value(x, idx) + " - mean) * rstd;");
            std::string d = value(dy, idx);
            accumulateTo(g.getWeightGrad(), idx, d + " * " + xhat);
            accumulateTo(g.getBiasGrad(), idx, d);
            return let(g.getInputGrad(), idx,
                       "rstd * (" + d + " * " + weightAt(w, idx) + " - mg - " + xhat + " * mgx)");
          }, [&](unsigned i) { return isAccumulator(i); });
        })
        .Case<RmsNormGradOp>([&](RmsNormGradOp g) {
          Value w = g.getWeight(), dy = g.getGrad();
          meanOf([&](const Index &idx) { std::string v = value(x, idx); return v + " * " + v; }, "ms");
          line("const float rstd = rsqrtf(ms + " + literal(g.getEpsilon().convertToDouble(), Float32Type::get(ctx)) + ");");
          meanOf([&](const Index &idx) { return value(dy, idx) + " * " + weightAt(w, idx) + " * " + value(x, idx); }, "mgx");
          finalLoop(g.getInputGrad(), [&](const Index &idx) {
            std::string xv = value(x, idx), d = value(dy, idx);
            accumulateTo(g.getWeightGrad(), idx, d + " * " + xv + " * rstd");
            return let(g.getInputGrad(), idx,
                       "rstd * (" + d + " * " + weightAt(w, idx) + " - " + xv + " * rstd * rstd * mgx)");
          }, [&](unsigned i) { return isAccumulator(i); });
        });
    close();
  }

  void crossEntropy(CrossEntropyOp ce, CrossEntropyGradOp ceGrad, const Index &lead,
                    ArrayRef<std::string> trail, Dim space, Value x) {
    Operation *any = ce ? ce.getOperation() : ceGrad.getOperation();
    Value labels = any->getOperand(1);
    Reduction reduction = ce ? ce.getReduction() : ceGrad.getReduction();
    int64_t ignore = ce ? ce.getIgnoreIndex() : ceGrad.getIgnoreIndex();
    line("const int64_t label = " + value(labels, {"row"}) + ";");
    line("const bool counts = label != " + std::to_string(ignore) + ";");
    if (ce && accumulatorIndex(ce.getResult()) >= 0) {
      std::string out = outName(accumulatorIndex(ce.getResult()));
      open("if (threadIdx.x == 0)");
      line("float loss = 0.f;");
      open("if (counts)");
      line("loss = mx + logf(se) - " + value(x, {"row", "label"}) + ";");
      close();
      Type element = elementOf(ce.getResult());
      if (reduction == Reduction::none)
        line(out + "[row] = " + store(element, "loss") + ";");
      else
        line("kiln_atomic_add(" + out + ", " +
             (reduction == Reduction::mean ? std::string("loss / counted") : std::string("loss")) + ");");
      close();
    }
    if (!ceGrad)
      return;
    std::string g = reduction == Reduction::none ? value(ceGrad.getGrad(), {"row"})
                                                 : value(ceGrad.getGrad(), {});
    line("const float scale = counts ? " + g +
         (reduction == Reduction::mean ? std::string(" / counted") : std::string()) + " : 0.f;");
    forCols(lead, trail, [&](const Index &idx) {
      line("const int64_t flat = row * cols + col;");
      relate("flat", idx, dims(x));
      std::string p = "expf(" + value(x, idx) + " - mx) / se";
      bind(ceGrad.getResult(), idx,
           let(ceGrad.getResult(), idx, "(" + p + " - (col == label ? 1.f : 0.f)) * scale"));
      storeOutputs("flat", x, idx, space, [&](unsigned i) {
        return ce && plan.outputs[i] == ce.getResult();
      });
    });
  }

  void scanKernel() {
    auto scan = cast<CumsumOp>(plan.anchor);
    Value input = scan.getInput();
    int64_t rank = typeOf(input).getRank();
    int64_t axis = scan.getAxis() < 0 ? scan.getAxis() + rank : scan.getAxis();
    SmallVector<std::string> sizes = dims(input);
    SmallVector<std::string> outer(sizes);
    outer.erase(outer.begin() + axis);
    int out = outputIndex(scan.getResult());
    if (out < 0 || plan.outputs.size() != 1)
      return fail(scan, "scan kernels write exactly the cumsum");
    Type element = elementOf(scan.getResult());
    DimList outerDims = getDims(typeOf(input));
    outerDims.erase(outerDims.begin() + axis);
    line("const int64_t lines = " + dim(dimProduct(outerDims, input.getContext())) + ";");
    open("for (int64_t line = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; line < lines; "
         "line += (int64_t)gridDim.x * blockDim.x)");
    Index o = delinearize("line", outer);
    line(computeType(element) + " sum = " + literal(0, element) + ";");
    std::string n = sizes[axis];
    open(scan.getReverse() ? "for (int64_t s = " + n + " - 1; s >= 0; --s)"
                           : "for (int64_t s = 0; s < " + n + "; ++s)");
    Index idx(o.begin(), o.end());
    idx.insert(idx.begin() + axis, "s");
    std::string x = value(input, idx);
    std::string at = outName(out) + "[" + linear(idx, sizes) + "]";
    if (scan.getExclusive()) {
      line(at + " = " + store(element, "sum") + ";");
      line("sum += " + x + ";");
    } else {
      line("sum += " + x + ";");
      line(at + " = " + store(element, "sum") + ";");
    }
    close();
    close();
  }

  void scatterKernel() {
    auto scatter = cast<ScatterAddOp>(plan.anchor);
    int out = outputIndex(scatter.getResult());
    if (out < 0 || plan.outputs.size() != 1)
      return fail(scatter, "scatter kernels write exactly the scatter-add result");
    Value updates = scatter.getUpdates();
    int64_t rank = typeOf(scatter.getDest()).getRank();
    int64_t axis = scatter.getAxis() < 0 ? scatter.getAxis() + rank : scatter.getAxis();
    int64_t indexRank = typeOf(scatter.getIndices()).getRank();
    line("// The output already holds the destination (kiln_kernel.copy).");
    line("const int64_t n = " + numel(updates) + ";");
    open("for (int64_t flat = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; flat < n; "
         "flat += (int64_t)gridDim.x * blockDim.x)");
    Index u = delinearize("flat", dims(updates));
    SmallVector<std::string> destDims = dims(scatter.getDest());
    std::string j = wrapIndex(value(scatter.getIndices(),
                                    Index(u.begin() + axis, u.begin() + axis + indexRank)),
                              destDims[axis]);
    Index d(u.begin(), u.begin() + axis);
    d.push_back(j);
    d.append(u.begin() + axis + indexRank, u.end());
    line("kiln_atomic_add(&" + outName(out) + "[" + linear(d, destDims) + "], " + value(updates, u) + ");");
    close();
  }

  /// bf16/f16 attention: the tiled tensor-core kernels of FlashAttention.cpp
  /// read q, k, v (and dout) as dense kernel inputs; the mask (maybe a fused
  /// producer) and the result stores are lambdas.
  void flashAttentionKernel(bool backward) {
    Operation *op = plan.anchor;
    Value q = op->getOperand(0), k = op->getOperand(1), v = op->getOperand(2);
    Value mask = backward ? cast<AttentionGradOp>(op).getMask() : cast<AttentionOp>(op).getMask();
    bool causal = backward ? cast<AttentionGradOp>(op).getCausal() : cast<AttentionOp>(op).getCausal();
    std::optional<APFloat> scaleAttr =
        backward ? cast<AttentionGradOp>(op).getScale() : cast<AttentionOp>(op).getScale();
    SmallVector<Value> dense = {q, k, v};
    if (backward)
      dense.push_back(cast<AttentionGradOp>(op).getGrad());
    std::string pointers;
    for (Value operand : dense) {
      auto arg = dyn_cast<BlockArgument>(operand);
      if (!arg)
        return fail(op, "tiled attention reads q, k, v and the gradient from kernel inputs");
      pointers += names.params.lookup(arg) + ", ";
    }
    SmallVector<std::string> qd = dims(q), kd = dims(k);
    int64_t headDim = typeOf(q).getDimSize(3);
    double scale = scaleAttr ? scaleAttr->convertToDouble() : 1.0 / std::sqrt((double)headDim);
    std::string element = storageType(elementOf(q));
    line("extern __shared__ __align__(128) unsigned char kiln_flash_smem[];");
    if (!mask) {
      line("auto mask = [&](int64_t, int64_t, int64_t, int64_t) { return 0.f; };");
    } else {
      // value() may print statements: the accessor is a lambda body.
      open("auto mask = [&](int64_t b, int64_t h, int64_t i, int64_t j) -> float");
      std::string m = value(mask, broadcastIndex(mask, {"b", "h", "i", "j"}));
      line("return " +
           (elementOf(mask).isInteger(1) ? "(" + m + ") ? 0.f : -KILN_INF"
                                         : "(float)(" + m + ")") +
           ";");
      close("};");
    }
    std::string call = "kiln_flash::" + std::string(backward ? "backward" : "forward") + "<" +
                       element + ", " + std::to_string(headDim) + ">(" + pointers + qd[0] +
                       ", " + qd[1] + ", " + kd[1] + ", " + qd[2] + ", " + kd[2] + ", " +
                       literal(scale, Float32Type::get(q.getContext())) + ", " +
                       (causal ? "true" : "false");
    auto at = [&](int index, Value result) {
      return outName(index) + "[" + linear({"b", "h", "i", "d"}, dims(result)) + "]";
    };
    if (!backward) {
      line("auto storeO = [&](int64_t b, int64_t h, int64_t i, int64_t d, float x) { " +
           at(outputIndex(op->getResult(0)), op->getResult(0)) + " = " +
           store(elementOf(op->getResult(0)), "x") + "; };");
      line(call + ", mask, storeO, kiln_flash_smem);");
      return;
    }
    int dq = outputIndex(op->getResult(0)), dk = accumulatorIndex(op->getResult(1)),
        dv = accumulatorIndex(op->getResult(2));
    if (dq >= 0)
      line("auto storeDQ = [&](int64_t b, int64_t h, int64_t i, int64_t d, float x) { " +
           at(dq, op->getResult(0)) + " = " + store(elementOf(op->getResult(0)), "x") + "; };");
    else
      line("auto storeDQ = [&](int64_t, int64_t, int64_t, int64_t, float) {};");
    // dK and dV: four consecutive elements of an fp32 accumulator at once.
    auto adder = [&](const char *name, int index, Value result) {
      if (index < 0) {
        line(std::string("auto ") + name + " = [&](int64_t, int64_t, int64_t, int64_t, float4) {};");
        return;
      }
      std::string target = "&" + at(index, result);
      line(std::string("auto ") + name +
           " = [&](int64_t b, int64_t h, int64_t i, int64_t d, float4 x) { " +
           (typeOf(plan.outputs[index]).getElementType().isF32()
                ? "kiln_flash::atomicAdd4(" + target + ", x);"
                : "kiln_atomic_add(" + target + ", x.x); kiln_atomic_add(" + target +
                      " + 1, x.y); kiln_atomic_add(" + target + " + 2, x.z); kiln_atomic_add(" +
                      target + " + 3, x.w);") +
           " };");
    };
    adder("addDK", dk, op->getResult(1));
    adder("addDV", dv, op->getResult(2));
    line(call + ", mask, storeDQ, addDK, addDV, " + (dq >= 0 ? "true" : "false") + ", " +
         (dk >= 0 ? "true" : "false") + ", " + (dv >= 0 ? "true" : "false") +
         ", kiln_flash_smem);");
  }

  /// One block per (batch, head, query row); the score row lives in shared
  /// memory, so no S x S tensor exists.
  void attentionKernel(bool backward) {
    Operation *op = plan.anchor;
    if (isFlashAttention(op))
      return flashAttentionKernel(backward);
    Value q = op->getOperand(0), k = op->getOperand(1), v = op->getOperand(2);
    Value mask, dout;
    bool causal;
    std::optional<double> scaleAttr;
    if (auto a = dyn_cast<AttentionOp>(op)) {
      mask = a.getMask();
      causal = a.getCausal();
      if (a.getScale())
        scaleAttr = a.getScale()->convertToDouble();
    } else {
      auto g = cast<AttentionGradOp>(op);
      mask = g.getMask();
      dout = g.getGrad();
      causal = g.getCausal();
      if (g.getScale())
        scaleAttr = g.getScale()->convertToDouble();
    }
    SmallVector<std::string> qd = dims(q), kd = dims(k), vd = dims(v);
    RankedTensorType qt = typeOf(q);
    double scale = scaleAttr ? *scaleAttr : 1.0 / std::sqrt((double)qt.getDimSize(3));
    line("extern __shared__ float kiln_smem[];");
    line("__shared__ float red[33];");
    line("float *score = kiln_smem; // one row of probabilities");
    if (backward)
      line("float *dscore = kiln_smem + " + kd[2] + ";");
    line("const int64_t rows = " + qd[0] + " * " + qd[1] + " * " + qd[2] + ";");
    line("const int64_t group = " + qd[1] + " / " + kd[1] + "; // query heads per kv head");
    open("for (int64_t row = blockIdx.x; row < rows; row += gridDim.x)");
    line("const int64_t i = row % " + qd[2] + ";");
    line("const int64_t h = (row / " + qd[2] + ") % " + qd[1] + ";");
    line("const int64_t b = row / (" + qd[2] + " * " + qd[1] + ");");
    line("const int64_t hk = h / group;");
    open("for (int64_t j = threadIdx.x; j < " + kd[2] + "; j += blockDim.x)");
    line("float s = 0.f;");
    open("for (int64_t d = 0; d < " + qd[3] + "; ++d)");
    line("s += " + value(q, {"b", "h", "i", "d"}) + " * " + value(k, {"b", "hk", "j", "d"}) + ";");
    close();
    line("s *= " + literal(scale, Float32Type::get(q.getContext())) + ";");
    if (mask) {
      std::string m = value(mask, broadcastIndex(mask, {"b", "h", "i", "j"}));
      if (elementOf(mask).isInteger(1))
        line("if (!" + m + ") s = -KILN_INF;");
      else
        line("s += " + m + ";");
    }
    if (causal)
      line("if (j > i) s = -KILN_INF;");
    line("score[j] = s;");
    close();
    line("float mx = -KILN_INF;");
    open("for (int64_t j = threadIdx.x; j < " + kd[2] + "; j += blockDim.x)");
    line("mx = fmaxf(mx, score[j]);");
    close();
    line("mx = kiln_block_reduce(mx, red, true);");
    line("if (mx == -KILN_INF) mx = 0.f; // a fully masked row");
    line("float se = 0.f;");
    open("for (int64_t j = threadIdx.x; j < " + kd[2] + "; j += blockDim.x)");
    line("const float p = expf(score[j] - mx);");
    line("score[j] = p;");
    line("se += p;");
    close();
    line("se = " + blockSum("se") + ";");
    line("const float inv = se > 0.f ? 1.f / se : 0.f;");
    if (!backward) {
      int out = outputIndex(op->getResult(0));
      SmallVector<std::string> od = dims(op->getResult(0));
      line("__syncthreads();");
      open("for (int64_t e = threadIdx.x; e < " + vd[3] + "; e += blockDim.x)");
      line("float acc = 0.f;");
      open("for (int64_t j = 0; j < " + kd[2] + "; ++j)");
      line("acc += score[j] * " + value(v, {"b", "hk", "j", "e"}) + ";");
      close();
      line(outName(out) + "[" + linear({"b", "h", "i", "e"}, od) + "] = " +
           store(elementOf(op->getResult(0)), "acc * inv") + ";");
      close();
      line("__syncthreads(); // the next row reuses the score row");
      close();
      return;
    }
    // dP = dO v^T; dS = P * (dP - rowsum(P * dP)).
    line("float pdp = 0.f;");
    open("for (int64_t j = threadIdx.x; j < " + kd[2] + "; j += blockDim.x)");
    line("score[j] *= inv;");
    line("float dp = 0.f;");
    open("for (int64_t e = 0; e < " + vd[3] + "; ++e)");
    line("dp += " + value(dout, {"b", "h", "i", "e"}) + " * " + value(v, {"b", "hk", "j", "e"}) + ";");
    close();
    line("dscore[j] = dp;");
    line("pdp += score[j] * dp;");
    close();
    line("pdp = " + blockSum("pdp") + ";");
    open("for (int64_t j = threadIdx.x; j < " + kd[2] + "; j += blockDim.x)");
    line("dscore[j] = score[j] * (dscore[j] - pdp);");
    close();
    line("__syncthreads();");
    std::string sc = literal(scale, Float32Type::get(q.getContext()));
    int dq = outputIndex(op->getResult(0)), dk = accumulatorIndex(op->getResult(1)),
        dv = accumulatorIndex(op->getResult(2));
    if (dq >= 0) {
      open("for (int64_t d = threadIdx.x; d < " + qd[3] + "; d += blockDim.x)");
      line("float acc = 0.f;");
      open("for (int64_t j = 0; j < " + kd[2] + "; ++j)");
      line("acc += dscore[j] * " + value(k, {"b", "hk", "j", "d"}) + ";");
      close();
      line(outName(dq) + "[" + linear({"b", "h", "i", "d"}, dims(op->getResult(0))) + "] = " +
           store(elementOf(op->getResult(0)), "acc * " + sc) + ";");
      close();
    }
    // dK and dV sum over query rows and grouped heads: atomic adds.
    if (dk >= 0) {
      open("for (int64_t t = threadIdx.x; t < " + kd[2] + " * " + qd[3] + "; t += blockDim.x)");
      line("const int64_t j = t / " + qd[3] + ", d = t % " + qd[3] + ";");
      line("kiln_atomic_add(&" + outName(dk) + "[" + linear({"b", "hk", "j", "d"}, dims(op->getResult(1))) +
           "], dscore[j] * " + value(q, {"b", "h", "i", "d"}) + " * " + sc + ");");
      close();
    }
    if (dv >= 0) {
      open("for (int64_t t = threadIdx.x; t < " + kd[2] + " * " + vd[3] + "; t += blockDim.x)");
      line("const int64_t j = t / " + vd[3] + ", e = t % " + vd[3] + ";");
      line("kiln_atomic_add(&" + outName(dv) + "[" + linear({"b", "hk", "j", "e"}, dims(op->getResult(2))) +
           "], score[j] * " + value(dout, {"b", "h", "i", "e"}) + ");");
      close();
    }
    line("__syncthreads(); // the next row reuses the shared rows");
    close();
  }

  /// One block per NF4 block: absmax by a block reduction, then two codes
  /// per byte (the first in the high nibble).
  void quantizeKernel() {
    Operation *q = plan.anchor;
    Value x = q->getOperand(0);
    int codes = outputIndex(q->getResult(0)), absmax = outputIndex(q->getResult(1));
    if (codes < 0 || absmax < 0 || plan.outputs.size() != 2)
      return fail(q, "quantize kernels write exactly the codes and the absmax");
    std::string bs = std::to_string(q->getAttrOfType<IntegerAttr>("block_size").getInt());
    line("__shared__ float red[33];");
    line("const int64_t n = " + numel(x) + ";");
    line("const int64_t blocks = " + dim(getDim(typeOf(q->getResult(1)), 0)) + ";");
    open("for (int64_t row = blockIdx.x; row < blocks; row += gridDim.x)");
    line("const int64_t begin = row * " + bs + ";");
    line("float amax = 0.f;");
    open("for (int64_t i = begin + threadIdx.x; i < begin + " + bs + " && i < n; i += blockDim.x)");
    line("amax = fmaxf(amax, fabsf((float)" + value(x, delinearize("i", dims(x))) + "));");
    close();
    line("amax = kiln_block_reduce(amax, red, true);");
    line("if (threadIdx.x == 0) " + outName(absmax) + "[row] = amax;");
    line("const float inverse = amax > 0.f ? 1.f / amax : 0.f;");
    if (isa<QuantizeBlockwise8bitOp>(q)) {
      // One 8-bit code per element.
      open("for (int64_t i = begin + threadIdx.x; i < begin + " + bs + " && i < n; i += blockDim.x)");
      line(outName(codes) + "[i] = (unsigned char)kiln_dynamic_map8_encode((float)" +
           value(x, delinearize("i", dims(x))) + " * inverse);");
      close();
      close();
      return;
    }
    open("for (int64_t i = begin + 2 * threadIdx.x; i < begin + " + bs + " && i < n; i += 2 * blockDim.x)");
    line("const unsigned int high = kiln_nf4_encode((float)" + value(x, delinearize("i", dims(x))) +
         " * inverse);");
    line("unsigned int low = 0u; // an odd count pads the last low nibble");
    open("if (i + 1 < n)");
    line("const int64_t j = i + 1;");
    line("low = kiln_nf4_encode((float)" + value(x, delinearize("j", dims(x))) + " * inverse);");
    close();
    line(outName(codes) + "[i / 2] = (unsigned char)((high << 4) | low);");
    close();
    close();
  }

  std::string signature() {
    SmallVector<std::string> params;
    for (BlockArgument arg : plan.inputs)
      params.push_back("const " + storageType(typeOf(arg).getElementType()) +
                       " *__restrict__ " + names.params.lookup(arg));
    for (auto [i, out] : llvm::enumerate(plan.outputs))
      params.push_back(storageType(typeOf(out).getElementType()) + " *" + outName(i));
    for (const std::string &symbol : plan.symbols)
      params.push_back("int64_t " + names.symbols.lookup(symbol));
    std::string sig = "extern \"C\" __global__ void " + names.kernel + "(";
    for (auto [i, p] : llvm::enumerate(params))
      sig += (i ? ",\n    " : "\n    ") + p;
    return sig + ")";
  }

  std::string header() {
    std::string h = "// " + names.kernel + ": " + stringifyFusionKind(plan.kind).str() + " kernel, generated by kiln.\n";
    for (BlockArgument arg : plan.inputs)
      h += "//   " + names.params.lookup(arg) + ": " + shapeToString(typeOf(arg)) + "\n";
    for (auto [i, out] : llvm::enumerate(plan.outputs))
      h += "//   " + outName(i) + ": " + shapeToString(typeOf(out)) + " <- " +
           (out.getDefiningOp() ? out.getDefiningOp()->getName().getStringRef().str() : "input") + "\n";
    SmallVector<std::string> ops;
    for (Operation &op : plan.kernel.getBody().front().without_terminator())
      ops.push_back(op.getName().stripDialect().str());
    h += "//   fused ops: " + llvm::join(ops, " ") + "\n";
    return h;
  }

  FailureOr<CudaSource> print() {
    switch (plan.kind) {
    case FusionKind::loop:
      loopKernel();
      break;
    case FusionKind::row:
      rowKernel();
      break;
    case FusionKind::scan:
      scanKernel();
      break;
    case FusionKind::scatter:
      scatterKernel();
      break;
    case FusionKind::attention:
      attentionKernel(false);
      break;
    case FusionKind::attention_grad:
      attentionKernel(true);
      break;
    case FusionKind::quantize:
      quantizeKernel();
      break;
    }
    if (failed(status))
      return failure();
    CudaSource source;
    source.name = names.kernel;
    source.comment = header();
    source.body = signature() + " {\n" + constants + body + "}\n";
    plan.kernel.walk([&](Operation *op) {
      for (Type t : op->getResultTypes())
        if (auto tensor = dyn_cast<RankedTensorType>(t)) {
          source.bf16 |= tensor.getElementType().isBF16();
          source.f16 |= tensor.getElementType().isF16();
        }
    });
    plan.kernel.walk([&](Operation *op) {
      source.dynamicMap8 |= isa<DequantizeBlockwise8bitOp, QuantizeBlockwise8bitOp>(op);
    });
    source.flashAttention = plan.anchor && isFlashAttention(plan.anchor);
    for (BlockArgument arg : plan.inputs) {
      source.bf16 |= typeOf(arg).getElementType().isBF16();
      source.f16 |= typeOf(arg).getElementType().isF16();
    }
    return source;
  }
};

} // namespace

/// The 8-bit dynamic map of blockwise quantization, printed from the same
/// table the interpreter uses, and its nearest-code search.
static std::string dynamicMap8Prelude() {
  std::string text = "// bitsandbytes' 8-bit dynamic map (NF4 double quantization).\n"
                     "__device__ const float kiln_dynamic_map8[256] = {";
  for (int i = 0; i < 256; ++i)
    text += (i % 4 == 0 ? "\n    " : " ") + llvm::formatv("{0:e9}f", kDynamicMap8[i]).str() + ",";
  text += R"CUDA(};
// The nearest code (ties to the lower one), by binary search.
__device__ __forceinline__ unsigned int kiln_dynamic_map8_encode(float x) {
  int low = 0, high = 256; // first entry >= x
  while (low < high) {
    const int mid = (low + high) / 2;
    if (kiln_dynamic_map8[mid] < x) low = mid + 1; else high = mid;
  }
  if (low == 0) return 0u;
  if (low == 256) return 255u;
  return x - kiln_dynamic_map8[low - 1] <= kiln_dynamic_map8[low] - x ? low - 1 : low;
}
)CUDA";
  return text;
}

std::string cudaPrelude(bool bf16, bool f16, bool dynamicMap8, bool flashAttention) {
  std::string prelude;
  if (f16)
    prelude += kF16Prelude;
  if (bf16)
    prelude += kBf16Prelude;
  prelude += kPrelude;
  if (dynamicMap8)
    prelude += dynamicMap8Prelude();
  if (flashAttention)
    prelude += flashAttentionPrelude();
  return prelude;
}

std::string CudaSource::standalone() const {
  return comment + "\n" + cudaPrelude(bf16, f16, dynamicMap8, flashAttention) + "\n" + body;
}

FailureOr<CudaSource> printKernel(const KernelPlan &plan, const NameTable &names) {
  Printer printer(plan, names);
  return printer.print();
}

FailureOr<CudaSource> emitCudaKernel(KernelOp kernel) {
  FailureOr<KernelPlan> plan = prepareKernel(kernel);
  if (failed(plan))
    return failure();
  NameTable names = legalizeNames(*plan);
  return printKernel(*plan, names);
}

} // namespace kiln::codegen
