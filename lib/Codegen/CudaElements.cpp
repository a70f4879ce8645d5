//===- CudaElements.cpp - The element of a value at an index --------------===//
//
// Part of the Kiln project.
//
//===----------------------------------------------------------------------===//
//
// `value(v, idx)` prints the statements that compute element idx of v and
// returns the C expression holding it; index-mapping ops only change the
// index handed to their operand.
//
//===----------------------------------------------------------------------===//

#include "CudaPrinter.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <regex>

using namespace mlir;
using namespace kiln;
using namespace kiln::kernel;

namespace kiln::codegen::detail {

std::string Printer::value(Value v, ArrayRef<std::string> idx) {
  if (const std::string *known = recall(v, idx))
    return *known;
  if (auto arg = dyn_cast<BlockArgument>(v))
    return let(v, idx, loadAt(arg, idx, dims(v)));
  Operation *op = v.getDefiningOp();
  Type element = typeOf(v).getElementType();
  std::string c = computeType(element);
  auto operandAt = [&](unsigned i) {
    return value(op->getOperand(i), broadcastIndex(op->getOperand(i), idx));
  };
  auto binary = [&](StringRef infix) {
    std::string a = operandAt(0), b = operandAt(1);
    return let(v, idx, "(" + a + " " + infix.str() + " " + b + ")");
  };
  auto unary = [&](auto make) { return let(v, idx, make(operandAt(0))); };
  // A quotient whose result is rounded to 16 bits next: the fast full-range
  // division (2 ulp of fp32 vanish in the rounding; docs/codegen.md).
  const bool narrow = isNarrowFloat(element);
  auto quotient = [&](const std::string &a, const std::string &b) {
    return narrow ? "kiln_div16(" + a + ", " + b + ")" : "(" + a + " / " + b + ")";
  };
  Type inElement = op->getNumOperands() ? typeOf(op->getOperand(0)).getElementType() : element;
  return llvm::TypeSwitch<Operation *, std::string>(op)
      .Case<kiln::ConstantOp>([&](kiln::ConstantOp k) { return constant(k, idx); })
      .Case<AddOp>([&](auto) { return binary("+"); })
      .Case<SubOp>([&](auto) { return binary("-"); })
      .Case<MulOp>([&](auto) { return binary("*"); })
      .Case<DivOp>([&](auto) { return let(v, idx, quotient(operandAt(0), operandAt(1))); })
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
      .Case<ExpOp>([&](auto) {
        return unary([&](std::string x) { return fn("exp", element) + "(" + x + ")"; });
      })
      .Case<LogOp>([&](auto) {
        return unary([&](std::string x) { return fn("log", element) + "(" + x + ")"; });
      })
      .Case<SqrtOp>([&](auto) {
        return unary([&](std::string x) { return fn("sqrt", element) + "(" + x + ")"; });
      })
      .Case<RsqrtOp>([&](auto) {
        return unary([&](std::string x) { return fn("rsqrt", element) + "(" + x + ")"; });
      })
      .Case<TanhOp>([&](auto) {
        return unary([&](std::string x) { return fn("tanh", element) + "(" + x + ")"; });
      })
      .Case<ErfOp>([&](auto) {
        return unary([&](std::string x) { return fn("erf", element) + "(" + x + ")"; });
      })
      .Case<SinOp>([&](auto) {
        return unary([&](std::string x) { return fn("sin", element) + "(" + x + ")"; });
      })
      .Case<CosOp>([&](auto) {
        return unary([&](std::string x) { return fn("cos", element) + "(" + x + ")"; });
      })
      .Case<ReciprocalOp>([&](auto) {
        return unary([&](std::string x) { return quotient(literal(1, element), x); });
      })
      .Case<SigmoidOp>([&](auto) {
        return unary([&](std::string x) {
          return quotient(literal(1, element),
                          "(" + literal(1, element) + " + " + fn("exp", element) + "(-" + x + "))");
        });
      })
      .Case<SiluOp>([&](auto) {
        return unary([&](std::string x) {
          return quotient(x,
                          "(" + literal(1, element) + " + " + fn("exp", element) + "(-" + x + "))");
        });
      })
      .Case<ReluOp>([&](auto) {
        return unary([&](std::string x) {
          return "(" + x + " > 0 ? " + x + " : " + literal(0, element) + ")";
        });
      })
      .Case<GeluOp>([&](GeluOp g) {
        return unary([&](std::string x) {
          if (g.getApproximate() == GeluApproximation::tanh)
            return "(0.5f * " + x + " * (1.0f + tanhf(0.7978845608f * (" + x + " + 0.044715f * " +
                   x + " * " + x + " * " + x + "))))";
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
          return let(v, idx, flat == "flat" ? load(arg, flat) : loadAt(arg, idx, dims(v)));
        // Leading dims both shapes share keep their indices: only the
        // trailing ones are re-split ([B, S, H*D] -> [B, S, H, D] divides by
        // the constant D, not by the symbolic S).
        SmallVector<std::string> outDims = dims(v), inDims = dims(r.getInput());
        size_t shared = 0;
        while (shared + 1 < outDims.size() && shared + 1 < inDims.size() &&
               outDims[shared] == inDims[shared])
          ++shared;
        if (shared == 0 || related("D", flat, inDims))
          return value(r.getInput(), delinearize(flat, inDims));
        Index in(idx.begin(), idx.begin() + shared);
        std::string rest = linear(ArrayRef(idx).drop_front(shared), ArrayRef(outDims).drop_front(shared));
        for (std::string &i : delinearize(rest, ArrayRef(inDims).drop_front(shared)))
          in.push_back(std::move(i));
        return value(r.getInput(), in);
      })
      .Case<SqueezeOp>([&](SqueezeOp s) {
        Index in;
        size_t next = 0;
        int64_t rank = typeOf(s.getInput()).getRank();
        for (int64_t i = 0; i < rank; ++i) {
          bool squeezed =
              llvm::any_of(s.getAxes(), [&](int64_t a) { return (a < 0 ? a + rank : a) == i; });
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
          // A lane index stays one past an aligned start.
          int64_t first;
          std::optional<std::string> x = step == 1 ? laneBase(idx[i]) : std::nullopt;
          if (x && !StringRef(st).getAsInteger(10, first) && first % laneWidth == 0)
            in.push_back(first == 0 ? idx[i] : laneIndex(plusOffset(*x, st)));
          else
            in.push_back(st == "0" ? scaled : "(" + st + " + " + scaled + ")");
        }
        return value(s.getInput(), in);
      })
      .Case<IotaOp>([&](IotaOp i) { return let(v, idx, "(" + c + ")" + idx[i.getDim()]); })
      .Case<TriluOp>([&](TriluOp t) {
        int64_t r = idx.size();
        std::string diff = "(" + idx[r - 1] + " - " + idx[r - 2] + ")";
        std::string keep =
            diff + (t.getUpper() ? " >= " : " <= ") + std::to_string(t.getDiagonal());
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
        return let(v, idx,
                   "(" + u + " >= " + literal(p, Float32Type::get(d.getContext())) + " ? (float)" +
                       x + " * " + literal(scale, Float32Type::get(d.getContext())) + " : 0.f)");
      })
      .Case<RandomUniformOp>([&](RandomUniformOp r) {
        float low = static_cast<float>(r.getLow().convertToDouble());
        float width = static_cast<float>(r.getHigh().convertToDouble()) - low;
        std::string seed = value(r.getSeed(), {});
        Type f32 = Float32Type::get(r.getContext());
        return let(v, idx,
                   literal(low, f32) + " + " + literal(width, f32) + " * kiln_philox_uniform(" +
                       seed + ", " + std::to_string(r.getStream()) + "ull, " +
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
        return let(v, idx,
                   "kiln_nf4_values[(" + i + " % 2 == 0 ? " + byte + " >> 4 : " + byte +
                       ") & 15] * (float)" + absmax);
      })
      .Default([&](Operation *other) {
        fail(other, "has no CUDA element emitter");
        return std::string("0");
      });
}

std::string Printer::constant(kiln::ConstantOp k, ArrayRef<std::string> idx) {
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

// A concat's side indexes its input at `i - offset`, and a slice of it at
// `start + i'`: RoPE's rotate-half takes the second half of x (a slice from
// D/2) into the first side of a concat and back. Printing `o + (i - o)` as
// `i` lets the load be recognized as the element's own (and both sides'
// loads match, so they merge).
std::string Printer::plusOffset(const std::string &i, const std::string &offset) {
  StringRef s(i);
  if (s.consume_front("(") && s.consume_back(" - " + offset + ")") && balanced(s))
    return s.str();
  return "(" + offset + " + " + i + ")";
}

std::string Printer::minusOffset(const std::string &i, const std::string &offset) {
  StringRef s(i);
  if (s.consume_front("(" + offset + " + ") && s.consume_back(")") && balanced(s))
    return s.str();
  return "(" + i + " - " + offset + ")";
}

bool Printer::balanced(StringRef s) {
  int depth = 0;
  for (char c : s) {
    depth += c == '(' ? 1 : c == ')' ? -1 : 0;
    if (depth < 0)
      return false;
  }
  return depth == 0;
}

std::string Printer::wrapIndex(const std::string &i, const std::string &size) {
  return "(" + i + " < 0 ? " + i + " + " + size + " : " + i + ")";
}

std::string Printer::concat(ConcatOp cat, ArrayRef<std::string> idx) {
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
  // On an aligned lane index (X + lane) with every boundary a multiple of
  // the width, the lanes pick the same input: branch on X, lane-uniform.
  std::optional<std::string> x = laneBase(idx[axis]);
  auto aligned = [&](Dim d) {
    std::optional<int64_t> c = d.getConstantValue();
    return c && *c % laneWidth == 0;
  };
  bool uniform = x.has_value();
  Dim end = offset;
  for (Value input : cat.getInputs())
    uniform = uniform && aligned(end = dimAdd(end, getDim(typeOf(input), axis)));
  size_t start = body.size();
  SmallVector<std::string> conds;
  SmallVector<size_t> sides;
  for (unsigned i = 0; i < n; ++i) {
    Value input = cat.getInputs()[i];
    Dim next = dimAdd(offset, getDim(typeOf(input), axis));
    std::string cond = (uniform ? *x : idx[axis]) + " < " + dim(next);
    conds.push_back(cond);
    sides.push_back(laneChunks.size());
    open(i == 0       ? "if (" + cond + ")"
         : i + 1 == n ? std::string("else")
                      : "else if (" + cond + ")",
         uniform);
    Index in(idx.begin(), idx.end());
    std::string off = dim(offset);
    if (off != "0")
      in[axis] = uniform ? laneIndex(minusOffset(*x, off)) : minusOffset(idx[axis], off);
    line(out + " = " + value(input, in) + ";");
    close();
    offset = next;
  }
  sides.push_back(laneChunks.size());
  if (uniform)
    mergeSideLoads(start, conds, sides);
  remember(cat.getResult(), idx, out);
  return out;
}

std::string Printer::pad(PadOp p, ArrayRef<std::string> idx) {
  Type element = typeOf(p.getResult()).getElementType();
  std::string out = fresh("v");
  line(computeType(element) + " " + out + " = " + literal(p.getValue().convertToDouble(), element) +
       ";");
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

std::string Printer::gather(GatherOp g, ArrayRef<std::string> idx) {
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

std::string Printer::gatherNd(GatherNdOp g, ArrayRef<std::string> idx) {
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

std::string Printer::reduce(Operation *r, ArrayRef<std::string> idx) {
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
    open("for (int64_t " + loopVar + " = 0; " + loopVar + " < " + sizes[i] + "; ++" + loopVar +
         ")");
    ++opened;
    in.push_back(loopVar);
    count += " * " + sizes[i];
  }
  std::string x = value(input, in);
  line(isMax ? acc + " = " + x + " > " + acc + " ? " + x + " : " + acc + ";"
             : acc + " += " + x + ";");
  while (opened--)
    close();
  if (isa<ReduceMeanOp>(r))
    line(acc + " /= (" + c + ")(" + count + ");");
  // The sum is a value of the result's type: a bf16 reduction rounds once
  // here, as the interpreter does (its users must not see the fp32 sum).
  return let(r->getResult(0), idx, acc);
}

} // namespace kiln::codegen::detail

namespace kiln::codegen::detail {

void Printer::mergeSideLoads(size_t start, ArrayRef<std::string> conds, ArrayRef<size_t> sides) {
  size_t n = sides.size() - 1, count = sides[1] - sides[0];
  if (n < 2 || count == 0)
    return;
  for (size_t s = 1; s < n; ++s) {
    if (sides[s + 1] - sides[s] != count)
      return;
    for (size_t j = 0; j < count; ++j)
      if (laneChunks[sides[s] + j].element != laneChunks[sides[0] + j].element)
        return;
  }
  // The loads move before the branches: their addresses may name only what
  // is declared there, not what a branch computes (an index split, a
  // gathered row).
  std::string text = body.substr(start);
  static const std::regex declaration(
      R"(^\s*(?:const\s+)?(?:unsigned\s+)?[A-Za-z_]\w*\s+\**([A-Za-z_]\w*)\s*(?:=|;|\[))");
  static const std::regex identifier(R"([A-Za-z_]\w*)");
  llvm::StringSet<> declared;
  for (StringRef rest = text; !rest.empty();) {
    auto [lineText, tail] = rest.split('\n');
    rest = tail;
    std::smatch m;
    std::string s = lineText.str();
    if (std::regex_search(s, m, declaration))
      declared.insert(m[1].str());
  }
  for (size_t k = sides[0]; k < sides[n]; ++k) {
    const std::string &a = laneChunks[k].address;
    for (auto it = std::sregex_iterator(a.begin(), a.end(), identifier);
         it != std::sregex_iterator(); ++it)
      if (declared.contains(it->str()))
        return;
  }
  for (size_t k = sides[0]; k < sides[n]; ++k)
    if (text.find(laneChunks[k].line) == std::string::npos)
      return;
  auto eraseLine = [&](const std::string &l) {
    size_t at = text.find(l);
    if (at == std::string::npos)
      return false;
    size_t from = text.rfind('\n', at);
    from = from == std::string::npos ? 0 : from + 1;
    text.erase(from, at + l.size() + 1 - from);
    return true;
  };
  std::string merged;
  for (size_t j = 0; j < count; ++j) {
    LaneChunk &first = laneChunks[sides[0] + j];
    std::string address = "(" + laneChunks[sides[n - 1] + j].address + ")";
    for (size_t s = n - 1; s-- > 0;)
      address = "(" + conds[s] + ") ? (" + laneChunks[sides[s] + j].address + ") : " + address;
    for (size_t s = 0; s < n; ++s) {
      LaneChunk &c = laneChunks[sides[s] + j];
      eraseLine(c.line);
      if (s > 0)
        for (size_t at; (at = text.find(c.reg + "[")) != std::string::npos;)
          text.replace(at, c.reg.size(), first.reg);
    }
    std::string type = vectorType(first.element, laneWidth);
    first.address = address;
    first.line = "if (lane == 0) *reinterpret_cast<" + type + " *>(" + first.reg +
                 ") = *reinterpret_cast<const " + type + " *>(" + address + ");";
    merged.append(indent * 2, ' ');
    merged += first.line + "\n";
  }
  laneChunks.erase(laneChunks.begin() + sides[1], laneChunks.begin() + sides[n]);
  body.resize(start);
  body += merged + text;
}

} // namespace kiln::codegen::detail
