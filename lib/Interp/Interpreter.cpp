//===- Interpreter.cpp - CPU reference interpreter driver -----------------===//
//
// Binds the size symbols from the input shapes, then runs the function body
// op by op. Each op family lives in its own file; this driver names the op in
// every error and cross-checks each result against its type evaluated with
// the bound symbols, so a kernel and the op's type inference cannot drift
// apart silently.
//
//===----------------------------------------------------------------------===//

#include "kiln/Interp/Interpreter.h"
#include "Common.h"

#include "absl/strings/str_cat.h"
#include "kiln/Dialect/Graph/GraphOps.h"
#include "kiln/Dialect/Graph/SymbolicShape.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/MathExtras.h"

#include <limits>
#include <sys/resource.h>
#include <unistd.h>

using namespace mlir;
using namespace kiln::interp;

namespace kiln {
namespace {

std::string locationString(Location loc) {
  if (isa<UnknownLoc>(loc))
    return "";
  std::string text;
  llvm::raw_string_ostream os(text);
  os << loc;
  StringRef s(text);
  if (s.consume_front("loc(") && s.consume_back(")"))
    return s.str();
  return text;
}

/// "kiln.gather at "model.onnx":3:7: " — the prefix of every op error.
std::string opPrefix(Operation *op) {
  std::string loc = locationString(op->getLoc());
  return absl::StrCat(op->getName().getStringRef().str(), loc.empty() ? "" : " at ", loc, ": ");
}

absl::Status withPrefix(const absl::Status &status, const std::string &prefix) {
  return absl::Status(status.code(), absl::StrCat(prefix, status.message()));
}

/// "input 1 (labels)": the name comes from a `kiln.name` argument attribute
/// or the argument's NameLoc, whichever is present.
std::string inputLabel(func::FuncOp func, unsigned i) {
  std::string label = absl::StrCat("input ", i);
  StringRef name;
  if (auto attr = func.getArgAttrOfType<StringAttr>(i, "kiln.name"))
    name = attr.getValue();
  else if (auto loc = dyn_cast<NameLoc>(func.getArgument(i).getLoc()))
    name = loc.getName().getValue();
  if (!name.empty())
    absl::StrAppend(&label, " (", name.str(), ")");
  return label;
}

/// Binds symbols from input dims and checks every dim of every input.
class SymbolBinder {
public:
  SymbolBinder(func::FuncOp func, std::map<std::string, int64_t> &symbols)
      : func(func), symbols(symbols) {}

  absl::Status bind(ArrayRef<HostTensor> inputs);

private:
  /// A dim whose expression is not a lone symbol (2*n, batch*seq): checked
  /// once its symbols are bound, or solved if it is linear in one unbound one.
  struct Pending {
    unsigned input, dim;
    Dim expr;
    int64_t size;
  };

  absl::Status checkInput(unsigned i, const HostTensor &input);
  /// Returns true when `p` was checked or solved (false: wait for symbols).
  absl::StatusOr<bool> resolve(const Pending &p);
  std::string describe(const Pending &p) const {
    return absl::StrCat(inputLabel(func, p.input), ": dim ", p.dim, " is ", p.size);
  }

  func::FuncOp func;
  std::map<std::string, int64_t> &symbols;
  std::map<std::string, unsigned> boundBy; // symbol -> input that bound it
  std::vector<Pending> pending;
};

absl::Status SymbolBinder::bind(ArrayRef<HostTensor> inputs) {
  if (inputs.size() != func.getNumArguments())
    return absl::InvalidArgumentError(absl::StrCat("@", func.getSymName().str(), " takes ",
                                                   func.getNumArguments(), " inputs, got ",
                                                   inputs.size()));
  for (unsigned i = 0; i < inputs.size(); ++i)
    if (absl::Status s = checkInput(i, inputs[i]); !s.ok())
      return s;
  // Resolving one dim can bind the symbol another one waits for.
  for (bool progress = true; progress && !pending.empty();) {
    progress = false;
    for (size_t i = 0; i < pending.size();) {
      absl::StatusOr<bool> done = resolve(pending[i]);
      if (!done.ok())
        return done.status();
      if (*done) {
        pending.erase(pending.begin() + i);
        progress = true;
      } else {
        ++i;
      }
    }
  }
  if (!pending.empty())
    return absl::InvalidArgumentError(absl::StrCat(describe(pending.front()), " = ",
                                                   dimToString(pending.front().expr),
                                                   ", which does not determine its symbols"));
  return absl::OkStatus();
}

absl::Status SymbolBinder::checkInput(unsigned i, const HostTensor &input) {
  std::string label = inputLabel(func, i);
  auto type = dyn_cast<RankedTensorType>(func.getArgumentTypes()[i]);
  if (!type)
    return absl::InvalidArgumentError(
        absl::StrCat(label, ": argument type is not a ranked tensor"));
  if (absl::Status s = checkStorage(input); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", s.message()));
  absl::StatusOr<DType> dtype = dtypeOf(type);
  if (!dtype.ok())
    return absl::InvalidArgumentError(absl::StrCat(label, ": ", dtype.status().message()));
  if (*dtype != input.dtype || type.getRank() != static_cast<int64_t>(input.shape.size()))
    return absl::InvalidArgumentError(absl::StrCat(label, ": got ", dtypeName(input.dtype), " ",
                                                   input.shapeString(), ", expected ",
                                                   dtypeName(*dtype), " ", shapeToString(type)));
  DimList dims = getDims(type);
  for (unsigned d = 0; d < dims.size(); ++d) {
    Dim expr = dims[d];
    int64_t size = input.shape[d];
    if (!expr)
      continue; // `?`: any size
    if (std::optional<int64_t> c = expr.getConstantValue()) {
      if (*c != size)
        return absl::InvalidArgumentError(
            absl::StrCat(label, ": dim ", d, " is ", size, ", expected ", *c));
      continue;
    }
    ArrayRef<SymTerm> terms = expr.getTerms();
    if (terms.size() != 1 || terms[0].coeff != 1 || terms[0].degree() != 1) {
      pending.push_back({i, d, expr, size});
      continue;
    }
    std::string name = terms[0].factors[0].getValue().str();
    auto [it, inserted] = symbols.emplace(name, size);
    if (inserted) {
      boundBy[name] = i;
    } else if (it->second != size) {
      return absl::InvalidArgumentError(absl::StrCat(label, ": dim ", d, " is ", name, "=", size,
                                                     " but ", name, "=", it->second, " from input ",
                                                     boundBy[name]));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> SymbolBinder::resolve(const Pending &p) {
  // Linear in one unbound symbol means every term holding it is coeff*s.
  StringAttr unknown;
  for (const SymTerm &term : p.expr.getTerms()) {
    for (unsigned f = 0; f < term.degree(); ++f) {
      StringAttr s = term.factors[f];
      if (symbols.count(s.str()))
        continue;
      if ((unknown && s != unknown) || term.degree() != 1)
        return false; // wait for more symbols, or fail at the end
      unknown = s;
    }
  }
  // size = a * unknown + rest, where rest only has bound symbols.
  int64_t a = 0, rest = 0;
  for (const SymTerm &term : p.expr.getTerms()) {
    if (unknown && term.degree() == 1 && term.factors[0] == unknown) {
      a += term.coeff;
      continue;
    }
    int64_t value = term.coeff;
    for (unsigned f = 0; f < term.degree(); ++f)
      value *= symbols.at(term.factors[f].str());
    rest += value;
  }
  std::string expr = dimToString(p.expr);
  if (!unknown) {
    if (rest != p.size)
      return absl::InvalidArgumentError(
          absl::StrCat(describe(p), " but ", expr, " = ", rest, " with the bound symbols"));
    return true;
  }
  if (a == 0 || (p.size - rest) % a != 0 || (p.size - rest) / a < 0)
    return absl::InvalidArgumentError(
        absl::StrCat(describe(p), ", which ", expr, " cannot equal for any ", unknown.str()));
  symbols[unknown.str()] = (p.size - rest) / a;
  boundBy[unknown.str()] = p.input;
  return true;
}

/// Cross-checks a kernel's result against the op's result type.
absl::Status checkResult(unsigned index, Value value, const HostTensor &t, const Env &env) {
  if (absl::Status s = checkStorage(t); !s.ok())
    return absl::InternalError(absl::StrCat("result ", index, " is malformed: ", s.message()));
  absl::StatusOr<DType> dtype = dtypeOf(value.getType());
  if (!dtype.ok())
    return dtype.status();
  std::vector<std::optional<int64_t>> dims = env.evaluate(value.getType());
  bool ok = *dtype == t.dtype && dims.size() == t.shape.size();
  for (size_t d = 0; ok && d < dims.size(); ++d)
    ok = !dims[d] || *dims[d] == t.shape[d];
  if (ok)
    return absl::OkStatus();
  std::string evaluated;
  for (size_t d = 0; d < dims.size(); ++d)
    absl::StrAppend(&evaluated, d ? ", " : "", dims[d] ? std::to_string(*dims[d]) : "?");
  return absl::InternalError(
      absl::StrCat("result ", index, " is ", dtypeName(t.dtype), " ", t.shapeString(),
                   " but its type ", shapeToString(cast<RankedTensorType>(value.getType())),
                   " evaluates to ", dtypeName(*dtype), " [", evaluated, "]"));
}

absl::StatusOr<Tensors> runOp(Operation *op, Operands args, const Env &env, WeightSource &weights) {
  if (auto opaque = dyn_cast<OpaqueOp>(op)) {
    if (MaybeResults fallback = runFallback(opaque, args)) {
      if (!fallback->ok())
        return fallback->status();
      for (auto [i, r] : llvm::enumerate(op->getResults()))
        if (absl::Status s = checkResult(i, r, (**fallback)[i], env); !s.ok())
          return s;
      return std::move(**fallback);
    }
    return absl::InvalidArgumentError(absl::StrCat("no reference implementation for ONNX op ",
                                                   opaque.getOpType().str(), " (node ",
                                                   opaque.getNodeName().str(), ")"));
  }
  // The mean over the ranks of a run of one: the operands (kiln interp is
  // one rank).
  if (isa<AllReduceOp>(op)) {
    Tensors same;
    for (const HostTensor *arg : args)
      same.push_back(*arg);
    return same;
  }
  MaybeResults results = runSource(op, env, weights);
  if (!results)
    results = runElementwise(op, args);
  if (!results)
    results = runLinalg(op, args);
  if (!results)
    results = runReduction(op, args);
  if (!results)
    results = runIndexing(op, args);
  if (!results)
    results = runShape(op, args, env);
  if (!results)
    results = runBackward(op, args);
  if (!results)
    results = runLinearCrossEntropy(op, args);
  if (!results)
    results = runRandomQuant(op, args, env);
  if (!results)
    return absl::InvalidArgumentError("the interpreter does not support this op");
  return std::move(*results);
}

/// What the interpreter holds per element: a double or an int64.
constexpr uint64_t kBytesPerElement = 8;

/// Bytes a tensor's storage holds.
uint64_t storageBytes(const HostTensor &t) {
  return (t.floats.size() + t.ints.size()) * kBytesPerElement;
}

/// Checks, before an op runs, that the results whose types the bound
/// symbols determine can be counted in int64 and fit the memory budget
/// beside the `live` bytes. Results with undetermined dims are accounted
/// once they exist.
absl::Status checkResultsFit(Operation *op, const Env &env, uint64_t live, uint64_t budget) {
  uint64_t needed = 0;
  std::string largest;
  uint64_t largestBytes = 0;
  for (auto [i, value] : llvm::enumerate(op->getResults())) {
    auto type = dyn_cast<RankedTensorType>(value.getType());
    if (!type)
      continue;
    std::vector<std::optional<int64_t>> dims = env.evaluate(type);
    if (!llvm::all_of(dims, [](auto d) { return d && *d >= 0; }))
      continue;
    Shape shape;
    for (const std::optional<int64_t> &d : dims)
      shape.push_back(*d);
    absl::StatusOr<int64_t> count = checkedNumel(shape);
    if (!count.ok())
      return absl::InvalidArgumentError(absl::StrCat("result ", i, " ", shapeString(shape),
                                                     " has more elements than int64 can count"));
    // Saturating: a sum past 2^64 bytes fits no budget either.
    uint64_t bytes = llvm::SaturatingMultiply(static_cast<uint64_t>(*count), kBytesPerElement);
    needed = llvm::SaturatingAdd(needed, bytes);
    if (bytes >= largestBytes) {
      largestBytes = bytes;
      std::optional<DType> dtype = fromMlirType(type.getElementType());
      largest = absl::StrCat(dtype ? dtypeName(*dtype) : "?", " ", shapeString(shape));
    }
  }
  if (needed <= budget && live <= budget - needed)
    return absl::OkStatus();
  return absl::ResourceExhaustedError(
      absl::StrCat("needs ", needed, " bytes for its result", op->getNumResults() == 1 ? "" : "s",
                   " (", largest, ", 8 bytes per element), but ", live,
                   " bytes of live tensors leave ", live < budget ? budget - live : 0,
                   " of the interpreter's ", budget, "-byte memory budget (--memory-budget)"));
}

/// The first diagnostic the verifier emits, for the error message.
absl::Status verifyFunction(func::FuncOp func) {
  std::string first;
  ScopedDiagnosticHandler handler(func.getContext(), [&](Diagnostic &diag) {
    if (first.empty()) {
      std::string loc = locationString(diag.getLocation());
      first = absl::StrCat(loc, loc.empty() ? "" : ": ", diag.str());
    }
    return success();
  });
  if (failed(verify(func)))
    return absl::InvalidArgumentError(
        absl::StrCat("@", func.getSymName().str(), " fails verification: ", first));
  return absl::OkStatus();
}

} // namespace

uint64_t defaultMemoryBudget() {
  uint64_t limit = std::numeric_limits<uint64_t>::max();
  long pages = sysconf(_SC_PHYS_PAGES), pageSize = sysconf(_SC_PAGESIZE);
  if (pages > 0 && pageSize > 0)
    limit = static_cast<uint64_t>(pages) * static_cast<uint64_t>(pageSize);
  for (int resource : {RLIMIT_AS, RLIMIT_DATA}) {
    struct rlimit rl;
    if (getrlimit(resource, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
      limit = std::min<uint64_t>(limit, rl.rlim_cur);
  }
  // Half: kernels keep temporaries beside their results, and the process
  // itself (MLIR, the module) needs room too.
  return limit / 2;
}

absl::StatusOr<InterpreterResult> interpret(func::FuncOp func, ArrayRef<HostTensor> inputs,
                                            WeightSource &weights,
                                            const InterpreterOptions &options) {
  if (!func || func.isExternal())
    return absl::InvalidArgumentError("no function body to interpret");
  if (!func.getBody().hasOneBlock())
    return absl::InvalidArgumentError(
        absl::StrCat("@", func.getSymName().str(), " has more than one block"));
  if (absl::Status s = verifyFunction(func); !s.ok())
    return s;
  InterpreterResult result;
  if (absl::Status s = SymbolBinder(func, result.symbols).bind(inputs); !s.ok())
    return s;
  Env env(result.symbols);

  uint64_t budget = options.memoryBudget ? options.memoryBudget : defaultMemoryBudget();
  Block &body = func.getBody().front();
  llvm::DenseMap<Value, HostTensor> values;
  uint64_t live = 0; // storage bytes of `values`
  for (auto [arg, input] : llvm::zip(body.getArguments(), inputs)) {
    values[arg] = roundedToDType(input);
    live += storageBytes(values[arg]);
  }
  // Values are dropped after their last use so memory stays bounded by the
  // live set rather than the whole graph.
  llvm::DenseMap<Value, Operation *> lastUse;
  for (Operation &op : body)
    for (Value operand : op.getOperands())
      lastUse[operand] = &op;

  for (Operation &op : body) {
    std::string prefix = opPrefix(&op);
    SmallVector<const HostTensor *> args;
    for (auto [i, operand] : llvm::enumerate(op.getOperands())) {
      auto it = values.find(operand);
      if (it == values.end())
        return absl::InternalError(absl::StrCat(prefix, "operand ", i, " has no value"));
      args.push_back(&it->second);
    }
    if (isa<func::ReturnOp>(op)) {
      for (const HostTensor *t : args)
        result.outputs.push_back(*t);
      return result;
    }
    if (absl::Status s = checkResultsFit(&op, env, live, budget); !s.ok())
      return withPrefix(s, prefix);
    absl::StatusOr<Tensors> outs = runOp(&op, args, env, weights);
    if (!outs.ok())
      return withPrefix(outs.status(), prefix);
    if (outs->size() != op.getNumResults())
      return absl::InternalError(absl::StrCat(prefix, "produced ", outs->size(),
                                              " results, expected ", op.getNumResults()));
    for (auto [i, value] : llvm::enumerate(op.getResults())) {
      if (absl::Status s = checkResult(i, value, (*outs)[i], env); !s.ok())
        return withPrefix(s, prefix);
      live += storageBytes((*outs)[i]);
      values[value] = std::move((*outs)[i]);
    }
    for (Value operand : op.getOperands()) {
      if (lastUse.lookup(operand) != &op)
        continue;
      auto it = values.find(operand);
      if (it == values.end())
        continue; // An op using one value twice.
      live -= storageBytes(it->second);
      values.erase(it);
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("@", func.getSymName().str(), " has no func.return"));
}

} // namespace kiln
